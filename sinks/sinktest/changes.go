package sinktest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/sinks"
)

// Version is one version of a cell as the store holds it.
type Version struct {
	Value string
	Time  time.Time
}

func (v Version) String() string { return fmt.Sprintf("%q@%d", v.Value, v.Time.UnixMilli()) }

// ReadRow returns every version of every cell the store holds for key in
// the sink's own table and family (column → versions, newest first).
// Tombstones, and anything else a sink keeps beside the cells, are not cells.
type ReadRow func(key string) map[string][]Version

// NewChangeSink returns a fresh sink whose own table (a row naming no table
// and family) is written by a change mapping, over an empty store, and how
// to read that store.
type NewChangeSink func(t *testing.T) (sinks.Sink, ReadRow)

// RunChangeConformance runs what every sink that applies change rows
// (sinks.Change) must do, each as a subtest with its own sink: the table
// ends as the changes say in event-time order, whatever order they are
// written in and however often each is (docs/reference.md, "Changes").
// Every case writes its rows in every order, each row once and then again,
// each Write one message.
func RunChangeConformance(t *testing.T, newSink NewChangeSink) {
	t.Helper()
	for _, c := range changeCases {
		t.Run(c.name, func(t *testing.T) {
			s, read := newSink(t)
			defer closeSink(t, s)
			everyOrder(t, s, read, c.rows, c.want)
		})
	}
	t.Run("applied says what was superseded", func(t *testing.T) {
		s, read := newSink(t)
		defer closeSink(t, s)
		testApplied(t, s, read)
	})
	t.Run("a plain row and change rows of one key in one Write apply in order", func(t *testing.T) {
		s, read := newSink(t)
		defer closeSink(t, s)
		testMixedMessage(t, s, read)
	})
	t.Run("insert: a delete arriving after a dropped insert leaves the row empty", func(t *testing.T) {
		s, read := newSink(t)
		defer closeSink(t, s)
		rows := []sinks.Row{set(insert, 1, "a=1"), set(insert, 3, "a=3"), del(sinks.OpDelete, insert, 2)}
		for _, i := range []int{0, 2, 1} { // in event-time order: the second insert makes the row
			write(t, s, "in-order", rows[i])
		}
		checkCells(t, read, "in-order", cells("a=3@3"), "in event-time order")
		for _, r := range rows { // the second insert is dropped for good, then the delete comes
			write(t, s, "late-delete", r)
		}
		checkCells(t, read, "late-delete", cells(""), "the delete last")
	})
	for _, mode := range []sinks.Mode{sinks.ModeUpsert, sinks.ModeInsert, sinks.ModeReplaceIfNewer} {
		t.Run("random changes in random orders end as the model, "+mode.String(), func(t *testing.T) {
			s, read := newSink(t)
			defer closeSink(t, s)
			testRandomChanges(t, s, read, mode)
		})
	}
}

func closeSink(t *testing.T, s sinks.Sink) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// at is the time of second n of a fixed day, with digits below the
// millisecond that a sink keeping versions truncates.
func at(n int) time.Time { return time.Date(2026, 5, 6, 7, 0, n, 456_789, time.UTC) }

func ms(n int) time.Time { return at(n).Truncate(time.Millisecond) }

// set is a set row of mode at second n: cells "a=1", "b=2"; deletes the
// columns after "-".
func set(mode sinks.Mode, n int, cells string, deletes ...string) sinks.Row {
	r := sinks.Row{Timestamp: at(n), Change: sinks.Change{Op: sinks.OpSet, Mode: mode, Delete: deletes}}
	for _, kv := range strings.Fields(cells) {
		col, val, _ := strings.Cut(kv, "=")
		r.Cells = append(r.Cells, sinks.Cell{Column: col, Value: []byte(val)})
	}
	return r
}

func del(op sinks.Op, mode sinks.Mode, n int, columns ...string) sinks.Row {
	return sinks.Row{Timestamp: at(n), Change: sinks.Change{Op: op, Mode: mode, Delete: columns}}
}

// cells is a wanted row: "a=1@3" is column a, value 1, at second 3.
func cells(spec string) map[string]Version {
	out := map[string]Version{}
	for _, f := range strings.Fields(spec) {
		kv, n, _ := strings.Cut(f, "@")
		col, val, _ := strings.Cut(kv, "=")
		var sec int
		fmt.Sscan(n, &sec)
		out[col] = Version{Value: val, Time: ms(sec)}
	}
	return out
}

const (
	up      = sinks.ModeUpsert
	insert  = sinks.ModeInsert
	replace = sinks.ModeReplaceIfNewer
)

var changeCases = []struct {
	name string
	rows []sinks.Row
	want map[string]Version
}{
	{"upsert: per column the newest wins, one version each",
		[]sinks.Row{set(up, 1, "a=1 b=1"), set(up, 3, "a=3"), set(up, 2, "a=2 b=2")},
		cells("a=3@3 b=2@2")},
	{"upsert: a delete at T removes what is at T or before; an older set after it stays deleted",
		[]sinks.Row{set(up, 1, "a=1 b=1"), del(sinks.OpDelete, up, 2), set(up, 2, "a=x")},
		cells("")},
	{"upsert: a delete leaves what is newer than it",
		[]sinks.Row{set(up, 1, "a=1 b=1"), set(up, 3, "b=3"), del(sinks.OpDelete, up, 2)},
		cells("b=3@3")},
	{"upsert: a re-insert after a delete makes the row anew",
		[]sinks.Row{set(up, 1, "a=1 b=1"), del(sinks.OpDelete, up, 2), set(up, 3, "a=3")},
		cells("a=3@3")},
	{"upsert: delete_family as delete for the family",
		[]sinks.Row{set(up, 1, "a=1 b=1"), del(sinks.OpDeleteFamily, up, 2), set(up, 3, "b=3"), set(up, 2, "a=2")},
		cells("b=3@3")},
	{"upsert: delete_columns removes those columns at T or before",
		[]sinks.Row{set(up, 1, "a=1 b=1 c=1"), del(sinks.OpDeleteColumns, up, 2, "a", "c"), set(up, 3, "c=3"), set(up, 2, "a=2")},
		cells("b=1@1 c=3@3")},
	{"upsert: a missing value under delete removes the column at T or before",
		[]sinks.Row{set(up, 1, "a=1 b=1"), set(up, 2, "b=2", "a"), set(up, 1, "a=x")},
		cells("b=2@2")},
	{"insert: the earliest insert wins",
		[]sinks.Row{set(insert, 3, "a=3 b=3"), set(insert, 1, "a=1"), set(insert, 2, "b=2")},
		cells("a=1@1")},
	{"insert: after a delete, the earliest later insert makes the row",
		[]sinks.Row{set(insert, 1, "a=1"), del(sinks.OpDelete, insert, 2), set(insert, 4, "a=4"), set(insert, 3, "b=3")},
		cells("b=3@3")},
	{"insert: a missing value under delete does not cover an earlier insert",
		[]sinks.Row{set(insert, 1, "a=1 b=1 c=1"), set(insert, 2, "a=2", "b")},
		cells("a=1@1 b=1@1 c=1@1")},
	{"insert: an insert older than the delete changes nothing",
		[]sinks.Row{del(sinks.OpDelete, insert, 2), set(insert, 1, "a=1")},
		cells("")},
	{"replace_if_newer: the row becomes the newest change's cells",
		[]sinks.Row{set(replace, 1, "a=1 b=1"), set(replace, 3, "a=3"), set(replace, 2, "b=2 c=2")},
		cells("a=3@3")},
	{"replace_if_newer: a delete between keeps only what is newer",
		[]sinks.Row{set(replace, 1, "a=1 b=1"), del(sinks.OpDelete, replace, 2), set(replace, 3, "b=3")},
		cells("b=3@3")},
	{"replace_if_newer: a delete after the newest removes it all",
		[]sinks.Row{set(replace, 1, "a=1 b=1"), set(replace, 2, "b=2"), del(sinks.OpDelete, replace, 2)},
		cells("")},
	{"replace_if_newer: a column deleted after the newest change stays deleted",
		[]sinks.Row{set(replace, 1, "a=1 b=1"), set(replace, 2, "a=2 b=2"), del(sinks.OpDeleteColumns, replace, 3, "a")},
		cells("b=2@2")},
}

// everyOrder writes rows in every order, each under a key of its own, each
// row once and then all of them again, and checks that each key ends as
// want.
func everyOrder(t *testing.T, s sinks.Sink, read ReadRow, rows []sinks.Row, want map[string]Version) {
	t.Helper()
	for n, order := range permutations(len(rows)) {
		key := fmt.Sprintf("order-%d", n)
		for range 2 {
			for _, i := range order {
				write(t, s, key, rows[i])
			}
		}
		checkCells(t, read, key, want, fmt.Sprintf("order %v", order))
	}
}

func write(t *testing.T, s sinks.Sink, key string, r sinks.Row) sinks.Row {
	t.Helper()
	r.Key = key
	r.Cells = slices.Clone(r.Cells)
	rows := []sinks.Row{r}
	if err := s.Write(context.Background(), rows); err != nil {
		t.Fatalf("Write %s %s@%d: %v", r.Change.Op, r.Change.Mode, r.Timestamp.Unix(), err)
	}
	return rows[0]
}

func checkCells(t *testing.T, read ReadRow, key string, want map[string]Version, what string) {
	t.Helper()
	got := read(key)
	var diffs []string
	for _, col := range slices.Sorted(maps.Keys(got)) {
		vs := got[col]
		w, ok := want[col]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: %v, want no cell", col, vs))
		case len(vs) != 1 || vs[0] != w:
			diffs = append(diffs, fmt.Sprintf("%s: %v, want [%v]", col, vs, w))
		}
	}
	for _, col := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[col]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: no cell, want %v", col, want[col]))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("key %s (%s):\n  %s", key, what, strings.Join(diffs, "\n  "))
	}
}

// permutations are the orders of n items.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

func testApplied(t *testing.T, s sinks.Sink, _ ReadRow) {
	cases := []struct {
		name    string
		before  []sinks.Row
		row     sinks.Row
		applied sinks.Applied
	}{
		{"upsert, nothing newer", nil, set(up, 2, "a=2 b=2"), sinks.Applied{}},
		{"upsert, one column newer", []sinks.Row{set(up, 3, "a=3")}, set(up, 2, "a=2 b=2"), sinks.Applied{SkippedCells: 1}},
		{"upsert, under a delete", []sinks.Row{del(sinks.OpDelete, up, 3)}, set(up, 2, "a=2 b=2"), sinks.Applied{Superseded: true, SkippedCells: 2}},
		{"upsert, a column under its tombstone", []sinks.Row{del(sinks.OpDeleteColumns, up, 3, "b")}, set(up, 2, "a=2 b=2"), sinks.Applied{SkippedCells: 1}},
		{"insert, an earlier row", []sinks.Row{set(insert, 1, "a=1")}, set(insert, 2, "b=2"), sinks.Applied{Superseded: true, SkippedCells: 1}},
		{"insert, a later row", []sinks.Row{set(insert, 3, "a=3")}, set(insert, 2, "b=2"), sinks.Applied{}},
		{"replace, a newer row", []sinks.Row{set(replace, 3, "a=3")}, set(replace, 2, "a=2 b=2"), sinks.Applied{Superseded: true, SkippedCells: 2}},
		{"replace, an older row", []sinks.Row{set(replace, 1, "a=1")}, set(replace, 2, "a=2 b=2"), sinks.Applied{}},
		{"replace, the same row again", []sinks.Row{set(replace, 2, "a=2 b=2")}, set(replace, 2, "a=2 b=2"), sinks.Applied{}},
	}
	for n, c := range cases {
		key := fmt.Sprintf("applied-%d", n)
		for _, r := range c.before {
			write(t, s, key, r)
		}
		if got := write(t, s, key, c.row).Change.Applied; got != c.applied {
			t.Errorf("%s: Applied %+v, want %+v", c.name, got, c.applied)
		}
	}
}

// testMixedMessage writes, in one message, a delete of a row and then a set
// of it at the same time: the set is covered by the delete (T or before),
// whichever order the sink would like; and a plain row beside a change row.
func testMixedMessage(t *testing.T, s sinks.Sink, read ReadRow) {
	t.Helper()
	plain := sinks.Row{Timestamp: at(3), Cells: []sinks.Cell{{Column: "c", Value: []byte("3")}}}
	rows := []sinks.Row{set(up, 1, "a=1 b=1"), del(sinks.OpDelete, up, 2), set(up, 2, "a=2"), plain}
	for i := range rows {
		rows[i].Key = "mixed"
	}
	if err := s.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	checkCells(t, read, "mixed", cells("c=3@3"), "one message")
	if !rows[2].Change.Applied.Superseded {
		t.Errorf("the set under the delete of the same message: Applied %+v, want superseded", rows[2].Change.Applied)
	}
}

// testRandomChanges writes random changes of mode to a few keys, each
// sequence in several random orders with redeliveries, and compares each
// key with the model: the changes applied in event-time order.
func testRandomChanges(t *testing.T, s sinks.Sink, read ReadRow, mode sinks.Mode) {
	rng := rand.New(rand.NewPCG(uint64(mode), 27))
	const sequences, orders, length = 10, 6, 7
	columns := []string{"a", "b", "c"}
	for seq := range sequences {
		var rows []sinks.Row
		for _, sec := range rng.Perm(40)[:length] {
			sec++ // distinct times: ties are order-dependent by design
			switch k := rng.IntN(10); {
			case k < 6 || mode == insert:
				// Inserts without deletes: an insert dropped because an
				// earlier one was there is dropped for good, so a delete
				// between the two arriving after both leaves the row
				// empty (the reference says so; see "insert: a delete
				// after a dropped insert" above).
				var spec []string
				var deletes []string
				for _, c := range columns {
					switch rng.IntN(4) {
					case 0, 1:
						spec = append(spec, fmt.Sprintf("%s=%d", c, sec))
					case 2:
						deletes = append(deletes, c)
					}
				}
				rows = append(rows, set(mode, sec, strings.Join(spec, " "), deletes...))
			case k < 8:
				rows = append(rows, del(sinks.OpDelete, mode, sec))
			case k < 9:
				rows = append(rows, del(sinks.OpDeleteFamily, mode, sec))
			default:
				rows = append(rows, del(sinks.OpDeleteColumns, mode, sec, columns[rng.IntN(3)]))
			}
		}
		want := model(rows)
		for o := range orders {
			key := fmt.Sprintf("random-%d-%d", seq, o)
			var deliveries []int
			for i := range rows {
				deliveries = append(deliveries, i)
				if rng.IntN(3) == 0 {
					deliveries = append(deliveries, i) // a redelivery
				}
			}
			rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
			for _, i := range deliveries {
				write(t, s, key, rows[i])
			}
			checkCells(t, read, key, want, describeRows(rows, deliveries))
		}
	}
}

// model is what rows make of a row applied in event-time order (their
// times are distinct).
func model(rows []sinks.Row) map[string]Version {
	sorted := slices.Clone(rows)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Timestamp.Before(sorted[j].Timestamp) })
	state := map[string]Version{}
	for _, r := range sorted {
		t := r.Timestamp.Truncate(time.Millisecond)
		switch r.Change.Op {
		case sinks.OpDelete, sinks.OpDeleteFamily:
			clear(state)
		case sinks.OpDeleteColumns:
			for _, c := range r.Change.Delete {
				delete(state, c)
			}
		case sinks.OpSet:
			switch r.Change.Mode {
			case sinks.ModeInsert:
				if len(state) > 0 || len(r.Cells) == 0 {
					continue
				}
			case sinks.ModeReplaceIfNewer:
				clear(state)
			}
			for _, c := range r.Cells {
				state[c.Column] = Version{Value: string(c.Value), Time: t}
			}
			for _, c := range r.Change.Delete {
				delete(state, c)
			}
		}
	}
	return state
}

func describeRows(rows []sinks.Row, deliveries []int) string {
	var b strings.Builder
	b.WriteString("deliveries:")
	for _, i := range deliveries {
		r := rows[i]
		fmt.Fprintf(&b, " %s@%d", r.Change.Op, r.Timestamp.Unix()%60)
		if r.Change.Op == sinks.OpSet {
			b.WriteString("{")
			for j, c := range r.Cells {
				if j > 0 {
					b.WriteString(",")
				}
				b.WriteString(c.Column)
			}
			if len(r.Change.Delete) > 0 {
				fmt.Fprintf(&b, " -%s", strings.Join(r.Change.Delete, ","))
			}
			b.WriteString("}")
		} else if len(r.Change.Delete) > 0 {
			fmt.Fprintf(&b, "{%s}", strings.Join(r.Change.Delete, ","))
		}
	}
	return b.String()
}
