package mapping

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// Change mappings (change.go): ops, write modes and missing-value policies.

var changeTime = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// changeConfig is a JSON pipeline whose event time is the publish time and
// dedupe key the message ID, with mappings ms (or, with one mapping that
// is alone, the sink's single mapping).
func changeConfig(ms ...config.Mapping) config.Pipeline {
	cfg := config.Pipeline{
		Name:   "changes",
		Source: config.Source{TimestampFormat: config.TimestampAuto},
		Sink:   config.Sink{Table: "t", ColumnFamily: "d", Timestamp: config.CellTimeEvent, MaxRows: 100, Mappings: ms},
	}
	return cfg
}

// single is changeConfig with m as the sink's single mapping (sink.*).
func single(m config.Mapping) config.Pipeline {
	cfg := changeConfig()
	s := &cfg.Sink
	s.Mappings = nil
	s.RowKey, s.Columns, s.When, s.Each = m.RowKey, m.Columns, m.When, m.Each
	s.Op, s.WriteMode, s.OnMissing, s.OnMissingColumns, s.DeleteColumns = m.Op, m.WriteMode, m.OnMissing, m.OnMissingColumns, m.DeleteColumns
	if m.Timestamp != "" {
		s.Timestamp = m.Timestamp
	}
	return cfg
}

func mustNew(t *testing.T, cfg config.Pipeline) *Mapper {
	t.Helper()
	m, err := New(cfg, nil, sinks.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mapJSON maps a message of payload data and attributes attrs.
func mapJSON(m *Mapper, data string, attrs map[string]string) (Result, error) {
	var r Result
	err := m.Map(context.Background(), &source.Message{ID: "m1", Data: []byte(data), Attributes: attrs, PublishTime: changeTime}, &r)
	return r, err
}

func badInput(t *testing.T, err error) *BadInput {
	t.Helper()
	var bad *BadInput
	if !errors.As(err, &bad) {
		t.Fatalf("error %v, want a BadInput", err)
	}
	return bad
}

func TestChangeFixedOps(t *testing.T) {
	absent := map[string]string{"a": "{data.absent}", "b": "{= data.absent}"} // a delete renders no column
	cfg := changeConfig(
		config.Mapping{RowKey: "plain", Columns: map[string]string{"v": "{data.v}"}},
		config.Mapping{RowKey: "set", Op: "set", Columns: map[string]string{"v": "{data.v}"}},
		config.Mapping{RowKey: "delete", Op: "delete", WriteMode: config.WriteInsert, Columns: absent},
		config.Mapping{RowKey: "family", Op: "delete_family", WriteMode: config.WriteReplaceIfNewer, Columns: absent},
		config.Mapping{RowKey: "columns", Op: "delete_columns", Columns: absent, Timestamp: config.CellTimePublish},
		config.Mapping{RowKey: "listed", Op: "delete_columns", Columns: absent, DeleteColumns: []string{"z", "a"}},
		config.Mapping{RowKey: "insert", WriteMode: config.WriteInsert, Columns: map[string]string{"v": "{data.v}"}},
		config.Mapping{RowKey: "upsert", WriteMode: config.WriteUpsert, Columns: map[string]string{"v": "{data.v}"}},
		config.Mapping{RowKey: "policy", OnMissingColumns: map[string]string{"v": config.MissingDelete}, Columns: map[string]string{"v": "{data.v}"}},
	)
	r, err := mapJSON(mustNew(t, cfg), `{"v": "x"}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := cells("v", "x")
	want := []sinks.Row{
		{Table: "t", Family: "d", Key: "plain", Cells: v, Timestamp: changeTime},
		{Table: "t", Family: "d", Key: "set", Cells: v, Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeUpsert}},
		{Table: "t", Family: "d", Key: "delete", Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpDelete, Mode: sinks.ModeInsert}},
		{Table: "t", Family: "d", Key: "family", Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpDeleteFamily, Mode: sinks.ModeReplaceIfNewer}},
		{Table: "t", Family: "d", Key: "columns", Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpDeleteColumns, Mode: sinks.ModeUpsert, Delete: []string{"a", "b"}}},
		{Table: "t", Family: "d", Key: "listed", Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpDeleteColumns, Mode: sinks.ModeUpsert, Delete: []string{"z", "a"}}},
		{Table: "t", Family: "d", Key: "insert", Cells: v, Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeInsert}},
		{Table: "t", Family: "d", Key: "upsert", Cells: v, Timestamp: changeTime}, // upsert alone is no change
		{Table: "t", Family: "d", Key: "policy", Cells: v, Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeUpsert}},
	}
	if !reflect.DeepEqual(r.Rows, want) {
		t.Errorf("rows\n%s\nwant\n%s", changeRowsText(r.Rows), changeRowsText(want))
	}
	if r.Missing != (Missing{}) {
		t.Errorf("missing %+v, want none", r.Missing)
	}
}

// changeRowsText is rowsText with each row's change.
func changeRowsText(rows []sinks.Row) string {
	s := ""
	for _, r := range rows {
		s += strings.TrimSuffix(rowsText([]sinks.Row{r}), "\n")
		s += fmt.Sprintf(" [%s %s delete=%q]\n", r.Change.Op, r.Change.Mode, r.Change.Delete)
	}
	return s
}

// TestChangeOpExpressionEveryFormat: an op computed from the payload, and
// an optional field that is absent (JSON), null (an Avro union's null) or
// unset (a proto3 optional field) under each policy, in every format.
func TestChangeOpExpressionEveryFormat(t *testing.T) {
	cfgFor := func(p config.Payload) config.Pipeline {
		return config.Pipeline{
			Name:    "changes",
			Payload: p,
			Source:  config.Source{IDTemplate: "{data.id}", TimestampTemplate: "{data.ts}", TimestampFormat: config.TimestampAuto},
			Sink: config.Sink{Table: "readings", ColumnFamily: "d", Timestamp: config.CellTimeEvent, MaxRows: 10,
				Mappings: []config.Mapping{
					{
						RowKey: "{data.sensor}#{data.id}",
						Op:     "data.kind == 'gone' ? 'delete' : (data.kind == 'cols' ? 'delete_columns' : 'set')",
						Columns: map[string]string{
							"site":     "{data.site}",
							"site_up":  "{= data.site.upperAscii()}",
							"site_or":  "{= data.?site.orValue(null)}",
							"site_opt": "{= data.?site}",
							"value":    "{data.value}",
						},
						OnMissing: "skip",
						OnMissingColumns: map[string]string{
							"site_up": "delete", "site_or": "empty", "site_opt": "empty",
						},
					},
					{Table: "ops", RowKey: "{data.id}", Op: "data.kind in ['delete_family', 'remove'] ? data.kind : 'set'", Columns: map[string]string{"v": "{data.value}"}},
				},
			},
		}
	}
	full := cells("site", "berlin", "site_opt", "berlin", "site_or", "berlin", "site_up", "BERLIN", "value", "12.5")
	for _, f := range formats() {
		t.Run(f.name, func(t *testing.T) {
			m, err := New(cfgFor(f.payload), topicSchemas(t), sinks.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			mapReading := func(rd reading) (Result, error) {
				var r Result
				err := m.Map(context.Background(), &source.Message{ID: "m1", Data: f.data(rd, t), Attributes: f.attrs, PublishTime: readingTime}, &r)
				return r, err
			}
			upsert := func(op sinks.Op, del ...string) sinks.Change {
				return sinks.Change{Op: op, Mode: sinks.ModeUpsert, Delete: del}
			}

			r, err := mapReading(reading{kind: "set", site: "berlin"})
			if err != nil {
				t.Fatal(err)
			}
			want := []sinks.Row{
				{Table: "readings", Family: "d", Key: "s1#r1", Cells: full, Timestamp: readingTime, Change: upsert(sinks.OpSet)},
				{Table: "ops", Family: "d", Key: "r1", Cells: cells("v", "12.5"), Timestamp: readingTime, Change: upsert(sinks.OpSet)},
			}
			if !reflect.DeepEqual(r.Rows, want) || r.Missing != (Missing{}) {
				t.Errorf("with a site: missing %+v, rows\n%s\nwant\n%s", r.Missing, changeRowsText(r.Rows), changeRowsText(want))
			}

			// Without the site: skipped, emptied, deleted.
			r, err = mapReading(reading{kind: "set"})
			if err != nil {
				t.Fatal(err)
			}
			want[0].Cells = cells("site_opt", "", "site_or", "", "value", "12.5")
			want[0].Change.Delete = []string{"site_up"}
			if !reflect.DeepEqual(r.Rows[0], want[0]) {
				t.Errorf("without a site:\n%s\nwant\n%s", changeRowsText(r.Rows[:1]), changeRowsText(want[:1]))
			}
			if r.Missing != (Missing{Skip: 1, Empty: 2, Delete: 1}) {
				t.Errorf("without a site: missing %+v, want skip 1, empty 2, delete 1", r.Missing)
			}

			// A delete: no cells, whatever is missing.
			r, err = mapReading(reading{kind: "gone"})
			if err != nil {
				t.Fatal(err)
			}
			want[0] = sinks.Row{Table: "readings", Family: "d", Key: "s1#r1", Timestamp: readingTime, Change: upsert(sinks.OpDelete)}
			if !reflect.DeepEqual(r.Rows[0], want[0]) || r.Missing != (Missing{}) {
				t.Errorf("gone: missing %+v\n%s\nwant\n%s", r.Missing, changeRowsText(r.Rows[:1]), changeRowsText(want[:1]))
			}
			r, err = mapReading(reading{kind: "cols"})
			if err != nil {
				t.Fatal(err)
			}
			want[0].Change = upsert(sinks.OpDeleteColumns, "site", "site_opt", "site_or", "site_up", "value")
			if !reflect.DeepEqual(r.Rows[0], want[0]) {
				t.Errorf("cols:\n%s\nwant\n%s", changeRowsText(r.Rows[:1]), changeRowsText(want[:1]))
			}

			// The op by name, and a value that is none.
			r, err = mapReading(reading{kind: "delete_family", site: "x"})
			if err != nil || len(r.Rows) != 2 || r.Rows[1].Change.Op != sinks.OpDeleteFamily || r.Rows[1].Cells != nil {
				t.Errorf("delete_family: %v\n%s", err, changeRowsText(r.Rows))
			}
			_, err = mapReading(reading{kind: "remove"})
			if bad := badInput(t, err); bad.Reason != deadletter.ExpressionFailed ||
				err.Error() != `expression_failed: sink.mappings[1].op gave "remove": not an operation (set, delete, delete_family, delete_columns)` {
				t.Errorf("remove: %v", err)
			}
		})
	}
}

// TestChangeMissingValues: what counts as a missing value, in a template's
// placeholders and in an expression, under each policy; and what does not
// (a failure of another kind is the message's whatever the policy).
func TestChangeMissingValues(t *testing.T) {
	columns := map[string]string{
		"attribute":   "{attributes.nope}",
		"field":       "{data.nope}",
		"null":        "{data.n}",
		"deep":        "{data.obj.nope}",
		"index":       "{data.list.5}",
		"mixed":       "x-{data.nope}-y",
		"expr_key":    "{= data.nope}",
		"expr_nested": "{= data.nope.deeper + 'x'}",
		"expr_null":   "{= data.n}",
		"expr_none":   "{= data.?nope}",
		"expr_index":  "{= data.list[5]}",
		"expr_field":  "{= string(data.obj.nope)}",
	}
	names := []string{"attribute", "deep", "expr_field", "expr_index", "expr_key", "expr_nested", "expr_none", "expr_null", "field", "index", "mixed", "null"}
	payload := `{"n": null, "obj": {}, "list": [1, 2], "v": "here"}`
	with := func(policy string, op string) config.Mapping {
		cols := map[string]string{"here": "{data.v}"}
		for k, v := range columns {
			cols[k] = v
		}
		return config.Mapping{RowKey: "k", Columns: cols, OnMissing: policy, Op: op}
	}

	t.Run("skip", func(t *testing.T) {
		r, err := mapJSON(mustNew(t, single(with(config.MissingSkip, ""))), payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Rows) != 1 || !reflect.DeepEqual(r.Rows[0].Cells, cells("here", "here")) || r.Rows[0].Change.IsChange() {
			t.Errorf("rows\n%s", changeRowsText(r.Rows))
		}
		if r.Missing != (Missing{Skip: len(columns)}) {
			t.Errorf("missing %+v, want skip %d", r.Missing, len(columns))
		}
	})
	t.Run("empty", func(t *testing.T) {
		r, err := mapJSON(mustNew(t, single(with(config.MissingEmpty, ""))), payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]string{}, names...)
		want = append(want[:9], append([]string{"here"}, want[9:]...)...) // sorted
		got := r.Rows[0].Cells
		if len(got) != len(want) {
			t.Fatalf("cells %v", got)
		}
		for i, c := range got {
			v := ""
			if c.Column == "here" {
				v = "here"
			}
			if c.Column != want[i] || string(c.Value) != v {
				t.Errorf("cell %d: %s=%q, want %s=%q", i, c.Column, c.Value, want[i], v)
			}
		}
		if r.Missing != (Missing{Empty: len(columns)}) {
			t.Errorf("missing %+v, want empty %d", r.Missing, len(columns))
		}
	})
	t.Run("delete", func(t *testing.T) {
		r, err := mapJSON(mustNew(t, single(with(config.MissingDelete, ""))), payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := sinks.Row{Table: "t", Family: "d", Key: "k", Cells: cells("here", "here"), Timestamp: changeTime,
			Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeUpsert, Delete: names}}
		if len(r.Rows) != 1 || !reflect.DeepEqual(r.Rows[0], want) {
			t.Errorf("rows\n%s\nwant\n%s", changeRowsText(r.Rows), changeRowsText([]sinks.Row{want}))
		}
		if r.Missing != (Missing{Delete: len(columns)}) {
			t.Errorf("missing %+v, want delete %d", r.Missing, len(columns))
		}
	})
	t.Run("dead_letter is as before", func(t *testing.T) {
		// Each column alone: the error of a plain mapping, of a change
		// mapping and of one whose policy is dead_letter by name are the
		// same, with today's reason (missing_field or expression_failed).
		for _, name := range names {
			col := map[string]string{name: columns[name]}
			plain := mustNew(t, single(config.Mapping{RowKey: "k", Columns: col}))
			_, want := mapJSON(plain, payload, nil)
			if want == nil {
				t.Fatalf("%s: no error", name)
			}
			reason := badInput(t, want).Reason
			if exprCol := strings.HasPrefix(name, "expr_") && name != "expr_null" && name != "expr_none"; exprCol != (reason == deadletter.ExpressionFailed) {
				t.Errorf("%s: reason %s", name, reason)
			}
			for _, m := range []config.Mapping{
				{RowKey: "k", Columns: col, Op: "'set'"},
				{RowKey: "k", Columns: col, OnMissing: config.MissingDeadLetter, WriteMode: config.WriteInsert},
				{RowKey: "k", Columns: col, OnMissing: config.MissingSkip, OnMissingColumns: map[string]string{name: config.MissingDeadLetter}},
			} {
				_, err := mapJSON(mustNew(t, single(m)), payload, nil)
				if err == nil || err.Error() != want.Error() || badInput(t, err).Reason != reason {
					t.Errorf("%s: %v, want %v", name, err, want)
				}
			}
		}
	})
	t.Run("not missing", func(t *testing.T) {
		// Failures that are not a missing value: the message's, whatever
		// the policy.
		for _, c := range []struct {
			payload, column string
			reason          deadletter.Reason
		}{
			{`{"z": 0}`, "{= 1 / int(data.z)}", deadletter.ExpressionFailed},
			{`{"s": "abc"}`, "{= int(data.s)}", deadletter.ExpressionFailed},
			{`{"s": "abc"}`, "{= data.s.x}", ""}, // see below
			{`{"s": "abc"}`, "{data.s.x}", deadletter.InvalidPayload},
			{`not json`, "{data.a}", deadletter.InvalidPayload},
			{`not json`, "{= data.a}", deadletter.InvalidPayload},
			{`{"l": [1]}`, "{data.l.x}", deadletter.InvalidPayload},
		} {
			for _, policy := range []string{config.MissingSkip, config.MissingEmpty, config.MissingDelete} {
				m := mustNew(t, single(config.Mapping{RowKey: "k", Columns: map[string]string{"c": c.column}, OnMissing: policy}))
				_, err := mapJSON(m, c.payload, nil)
				if c.reason == "" {
					// CEL fails to select a field of a string as it
					// fails on an absent key: missing (where the
					// template says invalid_payload).
					if err != nil {
						t.Errorf("%s under %s: %v", c.column, policy, err)
					}
					continue
				}
				if err == nil || badInput(t, err).Reason != c.reason {
					t.Errorf("%s on %s under %s: %v, want %s", c.column, c.payload, policy, err, c.reason)
				}
			}
		}
	})
	t.Run("row key and timestamp have no policy", func(t *testing.T) {
		for _, m := range []config.Mapping{
			{RowKey: "{data.nope}", Columns: map[string]string{"c": "{data.v}"}, OnMissing: config.MissingSkip},
			{RowKey: "k", Columns: map[string]string{"c": "{data.v}"}, OnMissing: config.MissingEmpty, Timestamp: "{data.nope}"},
			{RowKey: "k", Columns: map[string]string{"c": "{data.v}"}, OnMissing: config.MissingDelete, Op: "delete", Timestamp: "{data.nope}"},
		} {
			_, err := mapJSON(mustNew(t, single(m)), payload, nil)
			if err == nil || badInput(t, err).Reason != deadletter.MissingField {
				t.Errorf("%+v: %v, want missing_field", m, err)
			}
		}
	})
}

// TestChangeRowsWithoutCells: a plain mapping's row whose every column was
// skipped is not made (its columns count as skipped); a change mapping's
// row is made without cells. when and each are as before.
func TestChangeRowsWithoutCells(t *testing.T) {
	skip := map[string]string{"a": "{data.a}", "b": "{item.b}"}
	cfg := changeConfig(
		config.Mapping{RowKey: "plain", Columns: map[string]string{"a": "{data.a}"}, OnMissing: config.MissingSkip},
		config.Mapping{RowKey: "change", Op: "set", Columns: map[string]string{"a": "{data.a}"}, OnMissing: config.MissingSkip},
		config.Mapping{RowKey: "when", When: "data.w", Columns: map[string]string{"a": "{data.a}"}, OnMissing: config.MissingSkip},
		config.Mapping{RowKey: "each#{item.k}", Each: "data.items", Columns: skip, OnMissing: config.MissingSkip},
		config.Mapping{RowKey: "each_change#{item.k}", Each: "data.items", Columns: skip, OnMissing: config.MissingSkip, WriteMode: config.WriteReplaceIfNewer},
	)
	m := mustNew(t, cfg)
	r, err := mapJSON(m, `{"w": true, "items": [{"k": 1}, {"k": 2, "b": "x"}, {"k": 3}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, row := range r.Rows {
		keys = append(keys, fmt.Sprintf("%s:%d", row.Key, len(row.Cells)))
	}
	want := []string{"change:0", "each#2:1", "each_change#1:0", "each_change#2:1", "each_change#3:0"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("rows %q, want %q", keys, want)
	}
	// plain 1, change 1, when 1, each 3+2, each_change 3+2.
	if r.Missing != (Missing{Skip: 13}) {
		t.Errorf("missing %+v, want skip 13", r.Missing)
	}
	// Reused for a message whose values are all there: nothing missing.
	var r2 Result
	r2.Missing = Missing{Skip: 5}
	msg := &source.Message{ID: "m2", Data: []byte(`{"a": "x", "w": false, "items": []}`), PublishTime: changeTime}
	if err := m.Map(context.Background(), msg, &r2); err != nil || r2.Missing != (Missing{}) || len(r2.Rows) != 2 {
		t.Errorf("%v, missing %+v, rows\n%s", err, r2.Missing, changeRowsText(r2.Rows))
	}

	// The single mapping, on Map's plain path (no expression at all) and
	// on the decoded one (a filter).
	for _, filter := range []string{"", "true"} {
		cfg := single(config.Mapping{RowKey: "{attributes.k}", Columns: map[string]string{"a": "{data.a}", "b": "{attributes.b}"}, OnMissing: config.MissingSkip})
		cfg.Filter = filter
		m := mustNew(t, cfg)
		if (filter == "") == m.exprs {
			t.Fatalf("filter %q: exprs %v", filter, m.exprs)
		}
		r, err := mapJSON(m, `{}`, map[string]string{"k": "k1"})
		if err != nil || len(r.Rows) != 0 || r.Missing != (Missing{Skip: 2}) {
			t.Errorf("filter %q: %v, missing %+v, rows\n%s", filter, err, r.Missing, changeRowsText(r.Rows))
		}
		r, err = mapJSON(m, `{"a": 1}`, map[string]string{"k": "k1"})
		if err != nil || len(r.Rows) != 1 || !reflect.DeepEqual(r.Rows[0].Cells, cells("a", "1")) || r.Missing != (Missing{Skip: 1}) {
			t.Errorf("filter %q: %v, missing %+v, rows\n%s", filter, err, r.Missing, changeRowsText(r.Rows))
		}
	}
}

func TestChangeEachOp(t *testing.T) {
	cfg := single(config.Mapping{
		RowKey: "{item.id}", Each: "data.items",
		Op:      "has(item.op) && item.op == 'd' ? 'delete' : 'set'",
		Columns: map[string]string{"v": "{item.v}"},
	})
	r, err := mapJSON(mustNew(t, cfg), `{"items": [{"id": 1, "op": "d"}, {"id": 2, "op": "c", "v": "x"}, {"id": 3, "v": "y"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []sinks.Row{
		{Table: "t", Family: "d", Key: "1", Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpDelete, Mode: sinks.ModeUpsert}},
		{Table: "t", Family: "d", Key: "2", Cells: cells("v", "x"), Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeUpsert}},
		{Table: "t", Family: "d", Key: "3", Cells: cells("v", "y"), Timestamp: changeTime, Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeUpsert}},
	}
	if !reflect.DeepEqual(r.Rows, want) {
		t.Errorf("rows\n%s\nwant\n%s", changeRowsText(r.Rows), changeRowsText(want))
	}
}

func TestChangeOpErrors(t *testing.T) {
	long := strings.Repeat("x", 63) + "é" + strings.Repeat("y", 40) // é is cut at byte 64
	for _, c := range []struct {
		op, payload string
		reason      deadletter.Reason
		want        string // the whole error text
	}{
		{"data.op", `{}`, deadletter.ExpressionFailed, `expression_failed: sink.op: expression failed: no such key: op`},
		{"data.op", `{"op": 1}`, deadletter.ExpressionFailed, `expression_failed: sink.op: expression failed: the result is of type double, want string`},
		{"data.op", `{"op": null}`, deadletter.ExpressionFailed, `expression_failed: sink.op: expression failed: the result is of type null_type, want string`},
		{"data.op", `{"op": "remove"}`, deadletter.ExpressionFailed, `expression_failed: sink.op gave "remove": not an operation (set, delete, delete_family, delete_columns)`},
		{"data.op", `{"op": "Delete"}`, deadletter.ExpressionFailed, `expression_failed: sink.op gave "Delete": not an operation (set, delete, delete_family, delete_columns)`},
		{"data.op", `{"op": ""}`, deadletter.ExpressionFailed, `expression_failed: sink.op gave "": not an operation (set, delete, delete_family, delete_columns)`},
		{"data.op", `{"op": "a\nb"}`, deadletter.ExpressionFailed, `expression_failed: sink.op gave "a\nb": not an operation (set, delete, delete_family, delete_columns)`},
		{"data.op", fmt.Sprintf(`{"op": %q}`, long), deadletter.ExpressionFailed,
			`expression_failed: sink.op gave "` + strings.Repeat("x", 63) + `"… (105 bytes): not an operation (set, delete, delete_family, delete_columns)`},
		{"data.op", `not json`, deadletter.InvalidPayload, ""},
		{"data.op == 'd' ? 'delete' : 'set'", `{}`, deadletter.ExpressionFailed, `expression_failed: sink.op: expression failed: no such key: op`},
	} {
		m := mustNew(t, single(config.Mapping{RowKey: "k", Op: c.op, Columns: map[string]string{"v": "x"}}))
		_, err := mapJSON(m, c.payload, nil)
		if err == nil {
			t.Errorf("%s on %s: no error", c.op, c.payload)
			continue
		}
		if bad := badInput(t, err); bad.Reason != c.reason || c.want != "" && err.Error() != c.want {
			t.Errorf("%s on %s:\n got %v\nwant %s", c.op, c.payload, err, c.want)
		}
	}
}

func TestChangeCompileProblems(t *testing.T) {
	ops := "(the operations: set, delete, delete_family, delete_columns)"
	for _, c := range []struct {
		m          config.Mapping
		path, want string
	}{
		{config.Mapping{Op: "delet"}, "sink.mappings[1].op", `1:1: undeclared reference to 'delet'; did you mean delete? ` + ops},
		{config.Mapping{Op: "Delete"}, "sink.mappings[1].op", `1:1: undeclared reference to 'Delete'; did you mean delete? ` + ops},
		{config.Mapping{Op: "delete-family"}, "sink.mappings[1].op", `1:1: undeclared reference to 'delete'; 1:8: undeclared reference to 'family'; did you mean delete_family? ` + ops},
		{config.Mapping{Op: "deleteColumns"}, "sink.mappings[1].op", `1:1: undeclared reference to 'deleteColumns'; did you mean delete_columns? ` + ops},
		{config.Mapping{Op: " sett "}, "sink.mappings[1].op", `1:2: undeclared reference to 'sett'; did you mean set? ` + ops},
		{config.Mapping{Op: "remove"}, "sink.mappings[1].op", `1:1: undeclared reference to 'remove'; the operations are set, delete, delete_family, delete_columns`},
		{config.Mapping{Op: "1 + 2"}, "sink.mappings[1].op", `the expression is of type int; want string (one of set, delete, delete_family, delete_columns)`},
		{config.Mapping{Op: "data.kind == 'd'"}, "sink.mappings[1].op", `the expression is of type bool; want string (one of set, delete, delete_family, delete_columns)`},
		{config.Mapping{Op: "data.?kind"}, "sink.mappings[1].op", `the expression is of type optional_type(dyn); want string (one of set, delete, delete_family, delete_columns)`},
		{config.Mapping{Op: "data.op == 'd' ? 'delete' : 'upsert'"}, "sink.mappings[1].op", `the expression can give "upsert", which is not an operation; the operations are set, delete, delete_family, delete_columns`},
		{config.Mapping{Op: "data.op == 'd' ? 'delet' : data.op"}, "sink.mappings[1].op", `the expression can give "delet", which is not an operation; did you mean delete? ` + ops},
		{config.Mapping{Op: "data.op == 'd' ? 'delete' : (data.op == 'f' ? 'delete-family' : 'set')"}, "sink.mappings[1].op", `the expression can give "delete-family", which is not an operation; did you mean delete_family? ` + ops},
		{config.Mapping{Op: "'Set'"}, "sink.mappings[1].op", `the expression can give "Set", which is not an operation; did you mean set? ` + ops},
		{config.Mapping{Op: "dead_letter"}, "sink.mappings[1].op", `dead_letter is a value an op expression gives for the messages it refuses`},
		{config.Mapping{Op: "dta.op"}, "sink.mappings[1].op", `1:1: undeclared reference to 'dta' (did you mean 'data'?)`},
		{config.Mapping{Op: "item.op"}, "sink.mappings[1].op", `1:1: undeclared reference to 'item'`},
		{config.Mapping{Op: "data.op =="}, "sink.mappings[1].op", "1:11: Syntax error: mismatched input '<EOF>' expecting"},
		{config.Mapping{WriteMode: "upsrt"}, "sink.mappings[1].write_mode", `"upsrt" is not one of upsert, insert, replace_if_newer`},
		{config.Mapping{OnMissing: "ignore"}, "sink.mappings[1].on_missing", `"ignore" is not one of dead_letter, skip, empty, delete`},
		{config.Mapping{OnMissingColumns: map[string]string{"v": "nope"}}, "sink.mappings[1].on_missing_columns.v", `"nope" is not one of dead_letter, skip, empty, delete`},
	} {
		m := c.m
		m.RowKey, m.Columns = "k", map[string]string{"v": "{data.v}", "w": "{data.w}"}
		_, err := New(changeConfig(config.Mapping{RowKey: "k", Columns: map[string]string{"v": "x"}}, m), nil, sinks.Limits{})
		var ps config.Problems
		if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Path != c.path || !strings.HasPrefix(ps[0].Message, c.want) {
			t.Errorf("%+v:\n got %v\nwant %s: %s", c.m, err, c.path, c.want)
		}
	}

	// Both of the literals are reported; a literal that is no
	// result (a comparison's) is none, and a result that is not a literal
	// stays a check per message.
	_, err := New(changeConfig(config.Mapping{RowKey: "k", Columns: map[string]string{"v": "x"}},
		config.Mapping{RowKey: "k", Columns: map[string]string{"v": "{data.v}"}, Op: "data.op == 'd' ? 'remove' : 'upsert'"}), nil, sinks.Limits{})
	if ps := (config.Problems)(nil); !errors.As(err, &ps) || len(ps) != 2 || !strings.Contains(ps[0].Message, `"remove"`) || !strings.Contains(ps[1].Message, `"upsert"`) {
		t.Errorf("remove and upsert: %v", err)
	}
	for _, op := range []string{"data.op == 'remove' ? 'delete' : 'set'", "data.op == 'd' ? 'delete' : data.op", "data.op", "data.op == 't' ? 'dead_letter' : 'set'"} {
		if _, err := New(changeConfig(config.Mapping{RowKey: "k", Columns: map[string]string{"v": "x"}},
			config.Mapping{RowKey: "k", Columns: map[string]string{"v": "{data.v}"}, Op: op}), nil, sinks.Limits{}); err != nil {
			t.Errorf("%s: %v", op, err)
		}
	}

	// The single mapping's op is at sink.op; item is declared with each.
	_, err = New(single(config.Mapping{RowKey: "k", Columns: map[string]string{"v": "x"}, Op: "1"}), nil, sinks.Limits{})
	var ps config.Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Path != "sink.op" {
		t.Errorf("single mapping: %v", err)
	}
	if _, err := New(single(config.Mapping{RowKey: "k", Each: "data.l", Columns: map[string]string{"v": "x"}, Op: "item.op"}), nil, sinks.Limits{}); err != nil {
		t.Errorf("item with each: %v", err)
	}
	// A fixed op compiles no expression: the plain path stays.
	m := mustNew(t, single(config.Mapping{RowKey: "k", Columns: map[string]string{"v": "{data.v}"}, Op: "delete"}))
	if m.exprs || m.usesDecode {
		t.Errorf("a fixed op: exprs %v, usesDecode %v", m.exprs, m.usesDecode)
	}
}

// TestMissingColumnsNameEachColumnMissedByItsPolicy: Columns lists every
// column with its key, template and policy, and a message's MissingColumns
// indexes those whose value was missing under a policy other than
// dead_letter, once per row of an each mapping: what pubsink try counts
// and what the run-time warning of a column never filled watches.
func TestMissingColumnsNameEachColumnMissedByItsPolicy(t *testing.T) {
	cfg := changeConfig(
		config.Mapping{RowKey: "{data.id}", OnMissing: config.MissingSkip, Columns: map[string]string{"last_name": "{data.lastname}", "first_name": "{data.first_name}"}},
		config.Mapping{Table: "u", RowKey: "{item.id}", Each: "data.items", OnMissingColumns: map[string]string{"v": config.MissingEmpty}, Columns: map[string]string{"v": "{item.v}"}},
	)
	m := mustNew(t, cfg)
	var got []string
	for _, c := range m.Columns() {
		got = append(got, c.Key+" "+c.Table+" "+c.Name+" "+c.Template+" "+c.OnMissing)
	}
	want := []string{
		"sink.mappings[0].columns.first_name t first_name {data.first_name} skip",
		"sink.mappings[0].columns.last_name t last_name {data.lastname} skip",
		"sink.mappings[1].columns.v u v {item.v} empty",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Columns()\n%q\nwant\n%q", got, want)
	}
	for _, c := range []struct {
		data   string
		want   []uint16
		filled []int // Filled of each column: an emptied cell is no value
	}{
		{`{"id": 1, "first_name": "Ada", "last_name": "L", "items": [{"id": 1, "v": "x"}]}`, []uint16{1}, []int{1, 0, 1}},
		{`{"id": 1, "first_name": null, "last_name": "L", "items": [{"id": 1}, {"id": 2, "v": "y"}, {"id": 3}]}`, []uint16{0, 1, 2, 2}, []int{0, 0, 1}},
		{`{"id": 1, "first_name": "Ada", "lastname": "L", "items": []}`, nil, []int{1, 1, 0}},
	} {
		r, err := mapJSON(m, c.data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.MissingColumns, c.want) {
			t.Errorf("%s: MissingColumns %v, want %v", c.data, r.MissingColumns, c.want)
		}
		for i, col := range m.Columns() {
			if got := r.Filled(i, col); got != c.filled[i] {
				t.Errorf("%s: Filled(%s) = %d, want %d", c.data, col.Key, got, c.filled[i])
			}
		}
	}
}

// TestAnOpOfDeadLetterDeadLettersTheChangeAsUnsupported: an op expression
// that gives dead_letter dead-letters its message as unsupported_change,
// also when the change has no row key (a Debezium truncate: before and
// after are null), and when one element of an each list gives it (none of
// the message's rows is written). Every other outcome is unchanged: a row
// key that is missing on a change the op applies is still missing_field.
func TestAnOpOfDeadLetterDeadLettersTheChangeAsUnsupported(t *testing.T) {
	debezium := single(config.Mapping{
		RowKey:    "{= data.op == 'd' ? data.before.id : data.after.id}",
		Op:        "data.op == 'd' ? 'delete' : data.op in ['c', 'u', 'r'] ? 'set' : 'dead_letter'",
		WriteMode: config.WriteReplaceIfNewer, OnMissing: config.MissingSkip,
		Columns: map[string]string{"email": "{data.after.email}"},
	})
	m := mustNew(t, debezium)
	for _, c := range []struct {
		payload string
		reason  deadletter.Reason
		want    string
	}{
		{`{"op": "t", "before": null, "after": null}`, deadletter.UnsupportedChange, `unsupported_change: sink.op gave "dead_letter": the mapping does not apply this change`},
		{`{"op": "m", "before": null, "after": {"id": 1}}`, deadletter.UnsupportedChange, `unsupported_change: sink.op gave "dead_letter": the mapping does not apply this change`},
		{`{"op": "c", "before": null, "after": null}`, deadletter.ExpressionFailed, ""},
		{`{"op": "c", "before": null, "after": {"id": ""}}`, deadletter.MissingField, "missing_field: sink.row_key rendered empty"},
	} {
		_, err := mapJSON(m, c.payload, nil)
		if bad := badInput(t, err); bad.Reason != c.reason || c.want != "" && err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s %s", c.payload, err, c.reason, c.want)
		}
	}
	if r, err := mapJSON(m, `{"op": "u", "before": null, "after": {"id": 7, "email": "a@b"}}`, nil); err != nil || len(r.Rows) != 1 || r.Rows[0].Key != "7" {
		t.Errorf("an update: %v %+v", err, r.Rows)
	}

	each := single(config.Mapping{
		RowKey: "{item.id}", Each: "data.items",
		Op:      "item.op == 'x' ? 'dead_letter' : 'set'",
		Columns: map[string]string{"v": "{item.v}"},
	})
	_, err := mapJSON(mustNew(t, each), `{"items": [{"id": 1, "op": "c", "v": "a"}, {"id": 2, "op": "x", "v": "b"}]}`, nil)
	if bad := badInput(t, err); bad.Reason != deadletter.UnsupportedChange {
		t.Errorf("an element that gives dead_letter: %v, want unsupported_change", err)
	}
}

// TestMissingValueErrorsSayWhatToDo: the dead-letter texts of the issue's
// Debezium mistakes say what was missing and what to do: a column's
// missing value under on_missing: dead_letter names on_missing; a delete
// whose row key reads after (null on a delete) says that a delete's key
// comes from before; an expression that reads a field of a null (before
// on a create) says which path was null, not only "no such key: id".
func TestMissingValueErrorsSayWhatToDo(t *testing.T) {
	for _, c := range []struct {
		m       config.Mapping
		payload string
		want    string
	}{
		{config.Mapping{RowKey: "{data.after.id}", Columns: map[string]string{"email": "{data.after.email}"}},
			`{"op": "u", "after": {"id": 1, "email": null}}`,
			"missing_field: sink.columns.email: {data.after.email}: missing field: data.after.email is null (if the value may be null or absent, set on_missing or on_missing_columns to skip, empty or delete)"},
		{config.Mapping{RowKey: "{data.after.id}", Op: "data.op == 'd' ? 'delete' : 'set'", OnMissing: config.MissingSkip, Columns: map[string]string{"email": "{data.after.email}"}},
			`{"op": "d", "before": {"id": 1}, "after": null}`,
			"missing_field: sink.row_key: {data.after.id}: missing field: data.after is null (this row's op is delete: a delete's key must come from what it carries, such as Debezium's before: {= data.op == 'd' ? data.before.id : data.after.id})"},
		{config.Mapping{RowKey: "{data.after.id}", Op: "data.op == 'd' ? 'delete' : 'set'", OnMissing: config.MissingSkip, Columns: map[string]string{"email": "{data.after.email}"}},
			`{"op": "c", "before": null, "after": null}`,
			"missing_field: sink.row_key: {data.after.id}: missing field: data.after is null"},
		{config.Mapping{RowKey: "{= data.op == 'd' ? data.before.id : data.after.id}", Op: "data.op == 'd' ? 'delete' : 'set'", Columns: map[string]string{"email": "{data.after.email}"}},
			`{"op": "d", "before": null, "after": null}`,
			"expression_failed: sink.row_key: {= data.op == 'd' ? data.before.id : data.after.id}: expression failed: no such key: id (data.before is null)"},
		{config.Mapping{RowKey: "{= data.op == 'd' ? data.before.id : data.after.id}", Columns: map[string]string{"email": "{data.after.email}"}},
			`{"op": "c", "before": null, "after": {"name": "x"}}`,
			"expression_failed: sink.row_key: {= data.op == 'd' ? data.before.id : data.after.id}: expression failed: no such key: id (data.after.id is absent)"},
	} {
		_, err := mapJSON(mustNew(t, single(c.m)), c.payload, nil)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s on %s:\n got %v\nwant %s", c.m.RowKey, c.payload, err, c.want)
		}
	}
}

// TestMoreColumnsThanMissingColumnsCanIndexIsAProblem: a pipeline's
// columns are indexed by a uint16 in MissingColumns; one more is a
// compile problem at its key, never a wrapped index.
func TestMoreColumnsThanMissingColumnsCanIndexIsAProblem(t *testing.T) {
	columns := make(map[string]string, maxColumns+1)
	for i := range maxColumns + 1 {
		columns[fmt.Sprintf("c%05d", i)] = "x"
	}
	_, err := New(single(config.Mapping{RowKey: "k", Columns: columns}), nil, sinks.Limits{})
	var ps config.Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Path != "sink.columns.c65535" || !strings.Contains(ps[0].Message, "more than 65535 columns") {
		t.Errorf("%d columns: %v", maxColumns+1, err)
	}
}
