package audit

// compare_test.go checks CompareRow's rules, each with a case that meets it
// and one that does not: a row's entries and the versions the table holds,
// and the findings (kind family:column@ms message) and counts expected.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Entries and versions of the row "r" of table "t", family "d" unless
// changed; timestamps in milliseconds.

func ms(t int64) int64 { return t * 1000 }

func win(col string, t int64, val, msg string) Entry {
	return Entry{Table: "t", Row: "r", Family: "d", Column: col, Timestamp: ms(t), Value: []byte(val),
		MessageID: msg, PublishTime: ms(t) + 7, Key: "k-" + msg, Role: Winner}
}

func rival(col string, t int64, val, msg string) Entry {
	e := win(col, t, val, msg)
	e.Role = Rival
	return e
}

func late(e Entry) Entry { e.MayBeLate = true; return e }

// as makes e a change mapping's set of mode, which deletes deletes.
func as(mode Mode, e Entry, deletes ...string) Entry { e.Mode, e.Delete = mode, deletes; return e }

// deletion is a winner's delete of op at t (delete_columns: of cols).
func deletion(op Op, t int64, msg string, cols ...string) Entry {
	e := win("", t, "", msg)
	e.Value, e.Op, e.Delete = nil, op, cols
	return e
}

func ver(t int64, val string) Version { return Version{Timestamp: ms(t), Value: []byte(val)} }

// tomb is the tombstone family's cells: qualifier → one version at t.
func tomb(q string, t int64) map[string][]Version { return map[string][]Version{q: {ver(t, "")}} }

type compareCase struct {
	name    string
	entries []Entry
	table   Row
	want    []string
	stats   RowStats
}

func runCompare(t *testing.T, cases []compareCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entries := slices.Clone(tc.entries)
			slices.SortStableFunc(entries, func(a, b Entry) int {
				return cmp.Or(cmp.Compare(a.Family, b.Family), cmp.Compare(a.Column, b.Column),
					cmp.Compare(a.Timestamp, b.Timestamp), cmp.Compare(a.MessageID, b.MessageID))
			})
			findings, stats := CompareRow(entries, tc.table, "tombstone", Span{From: ms(1), Until: ms(100)})
			var got []string
			for _, f := range findings {
				got = append(got, fmt.Sprintf("%s %s:%s@%d %s", f.Kind, f.Family, f.Column, f.Timestamp/1000, f.MessageID))
				if f.Detail == "" || f.Table != "t" || f.Row != "r" {
					t.Errorf("finding %+v: no detail, table or row", f)
				}
			}
			if !slices.Equal(got, tc.want) || stats != tc.stats {
				t.Errorf("got %q %+v\nwant %q %+v", got, stats, tc.want, tc.stats)
				for _, f := range findings {
					t.Logf("%s: %s", f.Kind, f.Detail)
				}
			}
		})
	}
}

func TestComparePlain(t *testing.T) {
	runCompare(t, []compareCase{
		{name: "winner there", entries: []Entry{win("a", 1, "x", "m1")},
			table: Row{"d": {"a": {ver(1, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "winner missing", entries: []Entry{win("a", 1, "x", "m1")},
			table: Row{"d": {"a": {ver(2, "x")}}}, want: []string{"missing d:a@1 m1", "doubled d:a@2 "}},
		{name: "missing row", entries: []Entry{win("a", 1, "x", "m1"), win("b", 1, "y", "m1")},
			table: Row{}, want: []string{"missing d:a@1 m1", "missing d:b@1 m1"}},
		{name: "may be late, absent", entries: []Entry{late(win("a", 1, "x", "m1"))},
			table: Row{}, stats: RowStats{LateDropped: 1}},
		{name: "may be late, there", entries: []Entry{late(win("a", 1, "x", "m1"))},
			table: Row{"d": {"a": {ver(1, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "other bytes", entries: []Entry{win("a", 1, "x", "m1")},
			table: Row{"d": {"a": {ver(1, "old")}}}, want: []string{"different d:a@1 m1"}},
		{name: "publisher duplicate", entries: []Entry{win("a", 1, "x", "m1"), rival("a", 1, "x", "m2")},
			table: Row{"d": {"a": {ver(1, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "rival at another timestamp", entries: []Entry{win("a", 1, "x", "m1"), rival("a", 2, "x", "m2")},
			table: Row{"d": {"a": {ver(2, "x"), ver(1, "x")}}}, want: []string{"doubled d:a@2 m2"}, stats: RowStats{Checked: 1}},
		{name: "rival at another timestamp, not written", entries: []Entry{win("a", 1, "x", "m1"), rival("a", 2, "x", "m2")},
			table: Row{"d": {"a": {ver(1, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "rival's bytes won the winner's cell", entries: []Entry{win("a", 1, "x", "m1"), rival("a", 1, "y", "m2")},
			table: Row{"d": {"a": {ver(1, "y")}}}, want: []string{"doubled d:a@1 m2"}},
		{name: "rival of other bytes elsewhere in the cell", entries: []Entry{win("a", 1, "x", "m1"), rival("a", 2, "y", "m2")},
			table: Row{"d": {"a": {ver(2, "z"), ver(1, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "second version inside the span", entries: []Entry{win("a", 1, "x", "m1")},
			table: Row{"d": {"a": {ver(5, "z"), ver(1, "x")}}}, want: []string{"doubled d:a@5 "}, stats: RowStats{Checked: 1}},
		{name: "second version outside the span", entries: []Entry{win("a", 1, "x", "m1")},
			table: Row{"d": {"a": {ver(200, "z"), ver(1, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "time series of two winners", entries: []Entry{win("a", 1, "x", "m1"), win("a", 2, "y", "m2")},
			table: Row{"d": {"a": {ver(2, "y"), ver(1, "x")}}}, stats: RowStats{Checked: 2}},
		{name: "two winners of one millisecond overwrite each other", entries: []Entry{win("a", 1, "x", "m1"), win("a", 1, "y", "m2")},
			table: Row{"d": {"a": {ver(1, "y")}}}, want: []string{"different d:a@1 m1"}, stats: RowStats{Checked: 1}},
		{name: "redelivery listed twice, there", entries: []Entry{win("a", 1, "x", "m1"), win("a", 1, "x", "m1")},
			table: Row{"d": {"a": {ver(1, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "redelivery listed twice, missing", entries: []Entry{win("a", 1, "x", "m1"), win("a", 1, "x", "m1")},
			table: Row{}, want: []string{"missing d:a@1 m1"}},
		{name: "columns and families with no entry", entries: []Entry{win("a", 1, "x", "m1")},
			table: Row{"d": {"a": {ver(1, "x")}, "b": {ver(3, "q"), ver(2, "q")}}, "e": {"a": {ver(4, "q")}}},
			stats: RowStats{Checked: 1}},
		{name: "a rival alone", entries: []Entry{rival("a", 3, "y", "m2")},
			table: Row{"d": {"a": {ver(3, "y"), ver(2, "old")}}}, want: []string{"doubled d:a@3 m2"}},
	})
}

func TestCompareFindingFields(t *testing.T) {
	findings, _ := CompareRow([]Entry{win("a", 1, "x", "m1"), rival("a", 1, "y", "m2")},
		Row{"d": {"a": {ver(1, "y")}}}, "tombstone", Span{From: ms(1), Until: ms(9)})
	want := Finding{Kind: Doubled, Table: "t", Row: "r", Family: "d", Column: "a", Timestamp: ms(1),
		Expected: []byte("x"), Found: []byte("y"), MessageID: "m2", PublishTime: ms(1) + 7, Key: "k-m2",
		Detail: `a rival's value, over the winner's: the live pipeline's catalog names another message for key "k-m2"`}
	if len(findings) != 1 || fmt.Sprintf("%+v", findings[0]) != fmt.Sprintf("%+v", want) {
		t.Errorf("got %+v\nwant [%+v]", findings, want)
	}
}

func TestCompareChanges(t *testing.T) {
	up, rep, ins := ModeUpsert, ModeReplaceIfNewer, ModeInsert
	runCompare(t, []compareCase{
		{name: "upsert there", entries: []Entry{as(up, win("a", 2, "x", "m1"))},
			table: Row{"d": {"a": {ver(2, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "upsert of other bytes", entries: []Entry{as(up, win("a", 2, "x", "m1"))},
			table: Row{"d": {"a": {ver(2, "old")}}}, want: []string{"different d:a@2 m1"}},
		{name: "upsert missing", entries: []Entry{as(up, win("a", 2, "x", "m1"))},
			table: Row{"d": {"a": {ver(1, "old")}}}, want: []string{"missing d:a@2 m1"}},
		{name: "upsert may be late, absent", entries: []Entry{late(as(up, win("a", 2, "x", "m1")))},
			table: Row{}, stats: RowStats{LateDropped: 1}},
		{name: "upsert superseded by a newer version", entries: []Entry{as(up, win("a", 2, "x", "m1"))},
			table: Row{"d": {"a": {ver(300, "new")}}}, stats: RowStats{Superseded: 1}},
		{name: "upsert's newest of two in the range", entries: []Entry{as(up, win("a", 2, "x", "m1")), as(up, win("a", 3, "y", "m2"))},
			table: Row{"d": {"a": {ver(3, "y")}}}, stats: RowStats{Checked: 1}},
		{name: "two versions of an upsert cell", entries: []Entry{as(up, win("a", 2, "x", "m1")), as(up, win("a", 3, "y", "m2"))},
			table: Row{"d": {"a": {ver(3, "y"), ver(2, "x")}}}, want: []string{"doubled d:a@2 m1"}, stats: RowStats{Checked: 1}},
		{name: "a delete outside the range after the set", entries: []Entry{as(up, win("a", 2, "x", "m1"))},
			table: Row{"tombstone": tomb("*", 300)}, stats: RowStats{Superseded: 1}},
		{name: "a column delete outside the range, older than the set", entries: []Entry{as(up, win("a", 2, "x", "m1"))},
			table: Row{"tombstone": tomb("d:a", 1)}, want: []string{"missing d:a@2 m1"}},
		{name: "a delete in the range after the set", entries: []Entry{as(up, win("a", 2, "x", "m1")), deletion(OpDelete, 3, "m2")},
			table: Row{"tombstone": tomb("*", 3)}},
		{name: "a delete in the range with a stale cell left", entries: []Entry{as(up, win("a", 2, "x", "m1")), deletion(OpDelete, 3, "m2")},
			table: Row{"d": {"a": {ver(2, "x")}}, "tombstone": tomb("*", 3)}, want: []string{"different d:a@2 m2"}},
		{name: "a row delete leaves another change family's stale cell", entries: []Entry{deletion(OpDelete, 3, "m2")},
			table: Row{"e": {"b": {ver(400, "new"), ver(1, "old")}}}, want: []string{"different e:b@1 m2"}},
		{name: "a row delete does not judge another family's newer versions", entries: []Entry{deletion(OpDelete, 3, "m2")},
			table: Row{"e": {"b": {ver(400, "new"), ver(300, "older")}}}},
		{name: "a delete at the set's millisecond wins", entries: []Entry{as(up, win("a", 2, "x", "m1")), deletion(OpDeleteFamily, 2, "m2")},
			table: Row{"d": {"a": {ver(2, "x")}}}, want: []string{"different d:a@2 m2"}},
		{name: "a set after the delete", entries: []Entry{deletion(OpDeleteFamily, 2, "m1"), as(up, win("a", 3, "x", "m2"))},
			table: Row{"d": {"a": {ver(3, "x")}}, "tombstone": tomb("d", 2)}, stats: RowStats{Checked: 1}},
		{name: "delete_columns leaves the others", entries: []Entry{as(up, win("a", 1, "x", "m1")), as(up, win("b", 1, "y", "m1")), deletion(OpDeleteColumns, 2, "m2", "b")},
			table: Row{"d": {"a": {ver(1, "x")}, "b": {ver(1, "y")}}}, want: []string{"different d:b@1 m2"}, stats: RowStats{Checked: 1}},
		{name: "an upsert's missing value deletes its column", entries: []Entry{as(up, win("a", 1, "x", "m1")), as(up, win("b", 2, "y", "m2"), "a")},
			table: Row{"d": {"a": {ver(1, "x")}, "b": {ver(2, "y")}}}, want: []string{"different d:a@1 m2"}, stats: RowStats{Checked: 1}},
		{name: "replace_if_newer removed the column it lacks", entries: []Entry{as(rep, win("a", 1, "x", "m1")), as(rep, win("b", 1, "y", "m1")), as(rep, win("a", 3, "z", "m2"))},
			table: Row{"d": {"a": {ver(3, "z")}}, "tombstone": tomb("d", 2)}, stats: RowStats{Checked: 1}},
		{name: "replace_if_newer's lacking column still there", entries: []Entry{as(rep, win("a", 1, "x", "m1")), as(rep, win("b", 1, "y", "m1")), as(rep, win("a", 3, "z", "m2"))},
			table: Row{"d": {"a": {ver(3, "z")}, "b": {ver(1, "y")}}}, want: []string{"different d:b@1 m2"}, stats: RowStats{Checked: 1}},
		{name: "replace_if_newer's column the table alone holds", entries: []Entry{as(rep, win("a", 3, "z", "m2"))},
			table: Row{"d": {"a": {ver(3, "z")}, "c": {ver(2, "w")}}}, want: []string{"different d:c@2 m2"}, stats: RowStats{Checked: 1}},
		{name: "insert there", entries: []Entry{as(ins, win("a", 2, "x", "m1"))},
			table: Row{"d": {"a": {ver(2, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "insert missing", entries: []Entry{as(ins, win("a", 2, "x", "m1"))},
			table: Row{}, want: []string{"missing d:a@2 m1"}},
		{name: "insert deleted later", entries: []Entry{as(ins, win("a", 2, "x", "m1"))},
			table: Row{"tombstone": tomb("d", 300)}, stats: RowStats{Superseded: 1}},
		{name: "insert won by an earlier insert outside the range", entries: []Entry{as(ins, win("a", 2, "x", "m1"))},
			table: Row{"d": {"b": {ver(1, "old")}}}, stats: RowStats{Superseded: 1}},
		{name: "insert won by an earlier insert, its cells left", entries: []Entry{as(ins, win("a", 2, "x", "m1"))},
			table: Row{"d": {"a": {ver(2, "x")}, "b": {ver(1, "old")}}}, want: []string{"doubled d:a@2 m1"}, stats: RowStats{Superseded: 1}},
		{name: "the earlier of two inserts in the range", entries: []Entry{as(ins, win("a", 2, "x", "m1")), as(ins, win("a", 3, "y", "m2"))},
			table: Row{"d": {"a": {ver(2, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "a later insert's cells", entries: []Entry{as(ins, win("a", 2, "x", "m1")), as(ins, win("a", 3, "y", "m2")), as(ins, win("b", 3, "y", "m2"))},
			table: Row{"d": {"a": {ver(3, "y"), ver(2, "x")}, "b": {ver(3, "y")}}}, want: []string{"doubled d:a@3 m2", "doubled d:b@3 m2"}, stats: RowStats{Checked: 1}},
		{name: "an insert after a delete of the row", entries: []Entry{as(ins, win("a", 2, "x", "m1")), deletion(OpDelete, 3, "m2"), as(ins, win("a", 4, "y", "m3"))},
			table: Row{"d": {"a": {ver(4, "y")}}, "tombstone": tomb("*", 3)}, stats: RowStats{Checked: 1}},
		{name: "a rival's change applied", entries: []Entry{as(up, win("a", 2, "x", "m1")), as(up, rival("a", 4, "y", "m2"))},
			table: Row{"d": {"a": {ver(4, "y")}}}, want: []string{"doubled d:a@4 m2"}, stats: RowStats{Superseded: 1}},
		{name: "a rival's change over the winner's", entries: []Entry{as(up, win("a", 2, "x", "m1")), as(up, rival("a", 2, "y", "m2"))},
			table: Row{"d": {"a": {ver(2, "y")}}}, want: []string{"doubled d:a@2 m2"}},
		{name: "a rival's change, a publisher duplicate", entries: []Entry{as(up, win("a", 2, "x", "m1")), as(up, rival("a", 2, "x", "m2"))},
			table: Row{"d": {"a": {ver(2, "x")}}}, stats: RowStats{Checked: 1}},
		{name: "replaces of one millisecond: the one applied last stays", entries: []Entry{as(rep, win("a", 3, "x", "m1")), as(rep, win("b", 3, "y", "m2"))},
			table: Row{"d": {"b": {ver(3, "y")}}, "tombstone": tomb("d", 2)}, stats: RowStats{Checked: 1, Superseded: 1}},
		{name: "a delete of one millisecond wins over a replace", entries: []Entry{as(rep, win("a", 3, "x", "m1")), as(rep, win("b", 3, "y", "m2")), func() Entry {
			e := deletion(OpDelete, 3, "m3")
			e.Family = "e"
			return e
		}()}, table: Row{"d": {"a": {ver(3, "x")}}, "tombstone": tomb("*", 3)}, want: []string{"different d:a@3 m3"}},
		{name: "the earliest insert, listed after a later one", entries: []Entry{as(ins, win("a", 3, "x", "m2")), as(ins, win("b", 2, "y", "m1"))},
			table: Row{"d": {"b": {ver(2, "y")}}}, stats: RowStats{Checked: 1}},
		{name: "tombstone cells are no findings", entries: []Entry{deletion(OpDelete, 3, "m1")},
			table: Row{"tombstone": {"*": {ver(3, ""), ver(2, "")}, "d": {ver(1, "")}}}},
	})
}

func TestCompareWinnersOfOneMillisecond(t *testing.T) {
	findings, _ := CompareRow([]Entry{win("a", 1, "x", "m1"), win("a", 1, "y", "m2")},
		Row{"d": {"a": {ver(1, "y")}}}, "tombstone", Span{From: ms(1), Until: ms(9)})
	if len(findings) != 1 || !strings.Contains(findings[0].Detail, "m2 writes the same cell at the same millisecond") {
		t.Errorf("got %+v, want one finding naming m2, which overwrote m1", findings)
	}
}
