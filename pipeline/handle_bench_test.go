package pipeline

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
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

func benchPipelineConfig(rowKey string, columns map[string]string) config.Pipeline {
	return config.Pipeline{
		Name: "bench", Mode: config.ModeAtLeastOnce,
		Source:    config.Source{IDAttribute: "id", TimestampAttribute: "ts", TimestampFormat: config.TimestampAuto},
		Watermark: config.Watermark{LateData: config.LateAccept},
		Sink:      config.Sink{RowKey: rowKey, Columns: columns, Timestamp: config.CellTimeEvent},
	}
}

// nopSink accepts every row at once.
type nopSink struct{}

func (nopSink) Write(context.Context, []sinks.Row) error { return nil }
func (nopSink) Close(context.Context) error              { return nil }
func (nopSink) Check(context.Context) error              { return nil }

// BenchmarkHandle is the pipeline's own per-message cost in at_least_once
// mode, around a sink that returns at once: metrics, the in-flight
// bookkeeping, decode, the stages' retry wrappers, finish. columns=skip
// maps two fields under on_missing: skip, every one filled: the common
// case of a pipeline whose columns the never-filled watch follows.
func BenchmarkHandle(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  config.Pipeline
	}{
		{"columns=payload", benchPipelineConfig("{attributes.id}", map[string]string{"data": "{data}"})},
		{"columns=skip", func() config.Pipeline {
			cfg := benchPipelineConfig("{attributes.id}", map[string]string{"customer": "{data.customer}", "currency": "{data.currency}"})
			cfg.Sink.OnMissing = config.MissingSkip
			return cfg
		}()},
	} {
		b.Run(c.name, func(b *testing.B) { benchmarkHandle(b, c.cfg) })
	}
}

func benchmarkHandle(b *testing.B, cfg config.Pipeline) {
	p, err := New(zap.NewNop(), cfg, Deps{Sink: nopSink{}, Metrics: metrics.New().Pipeline("bench")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if !p.Handle(ctx, &benchMessage) {
			b.Fatal("nacked")
		}
	}
}
