package mapping

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// ordersConfig is the pipeline tests' mapping: the dedupe key and the event
// time from attributes, a row key from two of them, the payload and one of
// its JSON fields as cells.
func ordersConfig() config.Pipeline {
	return config.Pipeline{
		Name: "orders",
		Source: config.Source{
			IDAttribute:        "order_id",
			TimestampAttribute: "event_ts",
			TimestampFormat:    config.TimestampAuto,
		},
		Sink: config.Sink{
			RowKey:    "{attributes.customer_id}#{attributes.order_id}",
			Columns:   map[string]string{"data": "{data}", "amount": "{data.amount}"},
			Timestamp: config.CellTimeEvent,
		},
	}
}

// FuzzMap runs the orders mapping, one with a filter, a computed value
// and one row per element, and change mappings (ops computed from the
// payload and from each element, missing-value policies), over arbitrary
// payloads and attribute values. Every message ends in rows or in one of
// the bad-input reasons (never a panic, never another error); a row has a
// key within the limits, its cells in the configured order within the
// limits, and a timestamp never before 1970; a plain mapping's row is no
// change, a change mapping's row has its mode, and its op's cells and
// deleted columns, with its missing values counted.
// Run: go test -fuzz=FuzzMap ./mapping
func FuzzMap(f *testing.F) {
	f.Add([]byte(`{"amount": 12.5, "items": [{"n": 1}]}`), "o1", "c9", "1780272007123")
	f.Add([]byte(`{"amount": {"x": [1, 2]}}`), "o2", "c9", "2026-06-01T00:00:00Z")
	f.Add([]byte(`[[[[[[`), "o3", "", "-5")
	f.Add([]byte("not json"), "", "c1", "yesterday")
	f.Add([]byte(`{"amount": null, "items": []}`), "o4", "c2", "0")
	f.Add([]byte(`{"op": "d", "amount": 1, "currency": "EUR", "items": []}`), "o5", "c3", "1780272007123")
	f.Add([]byte(`{"op": "delete_columns", "items": [{"n": 1, "op": "delete_family"}, {"n": 2, "op": "delete_columns"}, {"n": 3}]}`), "o6", "c3", "1780272007123")
	f.Add([]byte(`{"currency": null, "items": [{"n": 1, "op": "remove"}, {"op": "set"}]}`), "o7", "c4", "1780272007123")
	f.Add([]byte(`{"amount": 2, "currency": null, "items": [{"n": 1, "op": "set"}, {"n": "x"}]}`), "o8", "c4", "1780272007123")
	limits := sinks.Limits{MaxKeyBytes: 64, MaxCellBytes: 256, MaxRowBytes: 512}
	plain, err := New(ordersConfig(), nil, limits)
	if err != nil {
		f.Fatal(err)
	}
	cfg := ordersConfig()
	cfg.Filter = "!has(data.skip)"
	cfg.Sink.MaxRows = 20
	cfg.Sink.Mappings = []config.Mapping{
		{RowKey: cfg.Sink.RowKey, Columns: map[string]string{"amount": "{= string(data.amount)}"}},
		{Each: "data.items", RowKey: "{attributes.order_id}#{item.n}", Columns: map[string]string{"item": "{item}"}},
	}
	cfg.Sink.RowKey, cfg.Sink.Columns = "", nil
	rich, err := New(cfg, nil, limits)
	if err != nil {
		f.Fatal(err)
	}
	change := ordersConfig()
	change.Sink.Table, change.Sink.MaxRows, change.Sink.OnMissing = "orders", 20, config.MissingSkip
	change.Sink.Mappings = []config.Mapping{
		{RowKey: change.Sink.RowKey, Op: "has(data.op) && data.op == 'd' ? 'delete' : (has(data.op) ? string(data.op) : 'set')",
			Columns:          map[string]string{"amount": "{data.amount}", "cur": "{= data.currency}", "first": "{data.items.0.n}"},
			OnMissingColumns: map[string]string{"cur": config.MissingEmpty, "first": config.MissingDelete}},
		{Table: "items", Each: "data.items", RowKey: "{attributes.order_id}#{item.n}", Op: "has(item.op) ? string(item.op) : 'set'",
			WriteMode: config.WriteReplaceIfNewer, Columns: map[string]string{"item": "{item}", "n": "{= item.n}"}},
	}
	change.Sink.RowKey, change.Sink.Columns = "", nil
	changes, err := New(change, nil, limits)
	if err != nil {
		f.Fatal(err)
	}
	changeColumns := map[string][]string{"orders": {"amount", "cur", "first"}, "items": {"item", "n"}}
	changeModes := map[string]sinks.Mode{"orders": sinks.ModeUpsert, "items": sinks.ModeReplaceIfNewer}
	reasons := map[deadletter.Reason]bool{deadletter.InvalidPayload: true, deadletter.MissingField: true,
		deadletter.BadEventTime: true, deadletter.TooLarge: true, deadletter.ExpressionFailed: true, deadletter.TooManyRows: true}
	f.Fuzz(func(t *testing.T, data []byte, orderID, customerID, ts string) {
		m := &source.Message{ID: "17000000000001", Data: data, PublishTime: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
			Attributes: map[string]string{"order_id": orderID, "customer_id": customerID, "event_ts": ts}}
		for _, mp := range []*Mapper{plain, rich, changes} {
			var r Result
			err := mp.Map(context.Background(), m, &r)
			if err != nil {
				var bad *BadInput
				if !errors.As(err, &bad) || !reasons[bad.Reason] {
					t.Fatalf("map error %v is not a bad-input reason", err)
				}
				continue
			}
			if r.Filtered {
				continue
			}
			if r.Key != orderID || len(r.Rows) > 20 {
				t.Fatalf("dedupe key %q, %d rows", r.Key, len(r.Rows))
			}
			for _, row := range r.Rows {
				if len(row.Key) == 0 || len(row.Key) > limits.MaxKeyBytes {
					t.Fatalf("row key %q (%d bytes)", row.Key, len(row.Key))
				}
				size := len(row.Key)
				for i, c := range row.Cells {
					if i > 0 && c.Column < row.Cells[i-1].Column || len(c.Value) > limits.MaxCellBytes {
						t.Fatalf("cell %d: %q, %d bytes", i, c.Column, len(c.Value))
					}
					size += len(c.Column) + len(c.Value)
				}
				if size > limits.MaxRowBytes {
					t.Fatalf("row of %d bytes passed a limit of %d", size, limits.MaxRowBytes)
				}
				if !row.Timestamp.Equal(r.EventTime) || r.EventTime.Before(time.Unix(0, 0)) {
					t.Fatalf("timestamp %v, event time %v", row.Timestamp, r.EventTime)
				}
				if mp != changes && (row.Change.IsChange() || row.Change.Delete != nil) {
					t.Fatalf("a plain mapping's row is a change: %+v", row.Change)
				}
			}
			if mp == changes {
				checkChangeRows(t, &r, changeColumns, changeModes)
			} else if r.Missing != (Missing{}) {
				t.Fatalf("a mapping without policies counted missing values: %+v", r.Missing)
			}
		}
	})
}

// checkChangeRows checks the rows of FuzzMap's change mappings: by table,
// their columns (sorted) and mode. A delete has no cell, and delete_columns
// deletes every column; a set's columns are each a cell, deleted or
// skipped, and what was deleted or skipped is counted in r.Missing (an
// empty cell may be a value that is empty).
func checkChangeRows(t *testing.T, r *Result, columns map[string][]string, modes map[string]sinks.Mode) {
	t.Helper()
	var skipped, deleted, empty int
	for _, row := range r.Rows {
		cols := columns[row.Table]
		if row.Change.Mode != modes[row.Table] || !row.Change.IsChange() {
			t.Fatalf("row of %s: mode %s", row.Table, row.Change.Mode)
		}
		switch row.Change.Op {
		case sinks.OpDelete, sinks.OpDeleteFamily:
			if row.Cells != nil || row.Change.Delete != nil {
				t.Fatalf("a %s row with cells %v, deleting %q", row.Change.Op, row.Cells, row.Change.Delete)
			}
		case sinks.OpDeleteColumns:
			if row.Cells != nil || !slices.Equal(row.Change.Delete, cols) {
				t.Fatalf("a delete_columns row with cells %v, deleting %q", row.Cells, row.Change.Delete)
			}
		case sinks.OpSet:
			made := map[string]bool{}
			for _, c := range row.Cells {
				made[c.Column] = true
				if len(c.Value) == 0 {
					empty++
				}
			}
			for _, d := range row.Change.Delete {
				if made[d] || d != "first" {
					t.Fatalf("deleted %q of a row with cells %v", row.Change.Delete, row.Cells)
				}
				made[d] = true
			}
			for _, c := range cols {
				if !made[c] {
					skipped++
				}
			}
			deleted += len(row.Change.Delete)
		default:
			t.Fatalf("op %d", row.Change.Op)
		}
	}
	if r.Missing.Skip != skipped || r.Missing.Delete != deleted || r.Missing.Empty > empty {
		t.Fatalf("missing %+v; skipped %d, deleted %d, %d empty cells", r.Missing, skipped, deleted, empty)
	}
}
