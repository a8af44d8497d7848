package mapping

import (
	"context"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// benchMessage is shaped like the bench command's messages: an id and an
// event-time attribute, a ~200-byte JSON payload.
var benchMessage = source.Message{
	ID: "17000000000000042",
	Data: []byte(`{"id":"m000000042","seq":42,"customer":"c-00042","amount":42.42,"currency":"EUR","items":1,` +
		`"note":"qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"}`),
	Attributes:  map[string]string{"id": "m000000042", "ts": "1767323045678", "customer_id": "c-00042"},
	PublishTime: time.Date(2026, 1, 2, 3, 4, 5, 700_000_000, time.UTC),
}

var benchLimits = sinks.Limits{MaxKeyBytes: 4096, MaxCellBytes: 100 << 20, MaxRowBytes: 256 << 20}

func benchConfig(rowKey string, columns map[string]string) config.Pipeline {
	return config.Pipeline{
		Name:   "bench",
		Source: config.Source{IDAttribute: "id", TimestampAttribute: "ts", TimestampFormat: config.TimestampAuto},
		Sink:   config.Sink{RowKey: rowKey, Columns: columns, Timestamp: config.CellTimeEvent},
	}
}

// BenchmarkMap is Map: event time, dedupe key, row key and cells, with the
// default mapping of the bench command (one column, the payload), with a
// row key and columns that read the payload's fields (the plain JSON path,
// as before the mapping was a part), and with a filter on an attribute and
// on a payload field (the expression path).
func BenchmarkMap(b *testing.B) {
	fields := map[string]string{"data": "{data}", "amount": "{data.amount}", "currency": "{data.currency}"}
	for _, c := range []struct {
		name string
		cfg  config.Pipeline
	}{
		{"default", benchConfig("{attributes.id}", map[string]string{"data": "{data}"})},
		{"fields", benchConfig("{attributes.customer_id}#{event_time:reverse}", fields)},
		{"attribute_filter", withFilter(benchConfig("{attributes.id}", map[string]string{"data": "{data}"}), "attributes.customer_id != 'c-1'")},
		{"field_filter", withFilter(benchConfig("{attributes.id}", map[string]string{"data": "{data}"}), "data.currency == 'EUR'")},
		// Change mappings: a fixed op with a column whose value is missing
		// and skipped (still the plain path: no expression), and an op
		// computed from an attribute (the expression path).
		{"change_skip", withChange(benchConfig("{attributes.id}", map[string]string{"data": "{data}", "gone": "{data.gone}"}), "set")},
		{"change_op", withChange(benchConfig("{attributes.id}", map[string]string{"data": "{data}"}), "attributes.customer_id == 'c-1' ? 'delete' : 'set'")},
	} {
		b.Run(c.name, func(b *testing.B) {
			m, err := New(c.cfg, nil, benchLimits)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			var r Result
			for b.Loop() {
				if err := m.Map(ctx, &benchMessage, &r); err != nil || r.Filtered {
					b.Fatal(err, r.Filtered)
				}
			}
		})
	}
}

func withFilter(c config.Pipeline, filter string) config.Pipeline {
	c.Filter = filter
	return c
}

func withChange(c config.Pipeline, op string) config.Pipeline {
	c.Sink.Op, c.Sink.OnMissing = op, config.MissingSkip
	return c
}
