package mapping

import (
	"context"
	"errors"
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

// FuzzMap runs the orders mapping, and one with a filter, a computed value
// and one row per element, over arbitrary payloads and attribute values.
// Every message ends in rows or in one of the bad-input reasons (never a
// panic, never another error); a row has a key within the limits, its
// cells in the configured order within the limits, and a timestamp never
// before 1970.
// Run: go test -fuzz=FuzzMap ./mapping
func FuzzMap(f *testing.F) {
	f.Add([]byte(`{"amount": 12.5, "items": [{"n": 1}]}`), "o1", "c9", "1780272007123")
	f.Add([]byte(`{"amount": {"x": [1, 2]}}`), "o2", "c9", "2026-06-01T00:00:00Z")
	f.Add([]byte(`[[[[[[`), "o3", "", "-5")
	f.Add([]byte("not json"), "", "c1", "yesterday")
	f.Add([]byte(`{"amount": null, "items": []}`), "o4", "c2", "0")
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
	reasons := map[deadletter.Reason]bool{deadletter.InvalidPayload: true, deadletter.MissingField: true,
		deadletter.BadEventTime: true, deadletter.TooLarge: true, deadletter.ExpressionFailed: true, deadletter.TooManyRows: true}
	f.Fuzz(func(t *testing.T, data []byte, orderID, customerID, ts string) {
		m := &source.Message{ID: "17000000000001", Data: data, PublishTime: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
			Attributes: map[string]string{"order_id": orderID, "customer_id": customerID, "event_ts": ts}}
		for _, mp := range []*Mapper{plain, rich} {
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
			}
		}
	})
}
