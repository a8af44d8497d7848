package pipeline

import (
	"errors"
	"testing"
	"time"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// FuzzDecode runs the test pipeline's decoder over arbitrary payloads and
// attribute values. Every message ends in a record or in one of the bad
// input reasons (never a panic, never another error); a record has a row
// key within the limits, its cells in the configured order within the
// limits, and the event time as its timestamp, never before 1970.
// Run: go test -fuzz=FuzzDecode ./pipeline
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"amount": 12.5}`), "o1", "c9", "1780272007123")
	f.Add([]byte(`{"amount": {"x": [1, 2]}}`), "o2", "c9", "2026-06-01T00:00:00Z")
	f.Add([]byte(`[[[[[[`), "o3", "", "-5")
	f.Add([]byte("not json"), "", "c1", "yesterday")
	f.Add([]byte(`{"amount": null}`), "o4", "c2", "0")
	limits := sinks.Limits{MaxKeyBytes: 64, MaxCellBytes: 256, MaxRowBytes: 512}
	d, err := newDecoder(testConfig(), limits)
	if err != nil {
		f.Fatal(err)
	}
	reasons := map[deadletter.Reason]bool{deadletter.InvalidPayload: true, deadletter.MissingField: true,
		deadletter.BadEventTime: true, deadletter.TooLarge: true}
	f.Fuzz(func(t *testing.T, data []byte, orderID, customerID, ts string) {
		m := &source.Message{ID: "17000000000001", Data: data, PublishTime: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
			Attributes: map[string]string{"order_id": orderID, "customer_id": customerID, "event_ts": ts}}
		var r record
		err := d.decode(m, &r)
		if err != nil {
			var bad *badInput
			if !errors.As(err, &bad) || !reasons[bad.reason] {
				t.Fatalf("decode error %v is not a bad-input reason", err)
			}
			return
		}
		if len(r.row.Key) == 0 || len(r.row.Key) > limits.MaxKeyBytes || r.key != orderID {
			t.Fatalf("row key %q (%d bytes), dedupe key %q", r.row.Key, len(r.row.Key), r.key)
		}
		size := len(r.row.Key)
		for i, c := range r.row.Cells {
			if c.Column != d.columns[i].name || len(c.Value) > limits.MaxCellBytes {
				t.Fatalf("cell %d: %q, %d bytes", i, c.Column, len(c.Value))
			}
			size += len(c.Column) + len(c.Value)
		}
		if size > limits.MaxRowBytes {
			t.Fatalf("row of %d bytes passed a limit of %d", size, limits.MaxRowBytes)
		}
		if !r.row.Timestamp.Equal(r.eventTime) || r.eventTime.Before(time.Unix(0, 0)) {
			t.Fatalf("timestamp %v, event time %v", r.row.Timestamp, r.eventTime)
		}
	})
}
