package watermark

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/source"
)

// The benchmarks of the per-message path: the tracking subscription's
// handler (event-time parsing included) and Finished, as a stream of 10,000
// messages a second, with a tick every 2,000 messages (200ms of that stream)
// so that buckets retire as in production and the tick's cost is included.

const benchIDs = 1 << 16

func benchTracker(b *testing.B) (*Tracker, []source.Message) {
	b.Helper()
	cfg := Config{Pipeline: "bench", TimestampAttribute: "ts", TimestampFormat: "auto", Band: 10 * time.Second,
		Metrics: metrics.New().Pipeline("bench")}
	tr, err := NewTracker(nil, nil, zap.NewNop(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	tr.est.Load().begin(t0)
	msgs := make([]source.Message, benchIDs)
	for i := range msgs {
		msgs[i] = source.Message{
			ID:         fmt.Sprintf("%016d", 17_000_000_000_000+i),
			Attributes: map[string]string{"ts": strconv.FormatInt(t0.UnixMilli(), 10)},
		}
	}
	return tr, msgs
}

// next prepares message i of the stream: a new publish time every 100µs.
func next(msgs []source.Message, i int) *source.Message {
	m := &msgs[i%benchIDs]
	m.PublishTime = t0.Add(time.Duration(i) * 100 * time.Microsecond)
	return m
}

func tickEvery(tr *Tracker, i int) {
	if i%2000 == 0 {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		tr.est.Load().tick(now, inputs{probed: now.UnixNano()})
	}
}

func BenchmarkTrackingHandler(b *testing.B) {
	tr, msgs := benchTracker(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.receive(ctx, next(msgs, i))
		tickEvery(tr, i)
		i++
	}
}

func BenchmarkFinished(b *testing.B) {
	tr, msgs := benchTracker(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := next(msgs, i)
		tr.Finished(ctx, m, m.PublishTime)
		tickEvery(tr, i)
		i++
	}
}

// BenchmarkPerMessage is the whole bookkeeping of one message: the tracker
// receives it, the pipeline finishes it.
func BenchmarkPerMessage(b *testing.B) {
	tr, msgs := benchTracker(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := next(msgs, i)
		tr.receive(ctx, m)
		tr.Finished(ctx, m, m.PublishTime)
		tickEvery(tr, i)
		i++
	}
}

// BenchmarkPerMessageParallel is BenchmarkPerMessage from GOMAXPROCS
// goroutines at once (the streams and the handlers).
func BenchmarkPerMessageParallel(b *testing.B) {
	tr, _ := benchTracker(b)
	ctx := context.Background()
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		_, msgs := benchTracker(b) // each goroutine its own envelopes
		for pb.Next() {
			i := int(seq.Add(1))
			m := next(msgs, i)
			tr.receive(ctx, m)
			tr.Finished(ctx, m, m.PublishTime)
			tickEvery(tr, i)
		}
	})
}

// BenchmarkWatermark is the pipeline's late check.
func BenchmarkWatermark(b *testing.B) {
	tr, _ := benchTracker(b)
	tr.publish(t0.UnixNano())
	b.ReportAllocs()
	for b.Loop() {
		if tr.Watermark().IsZero() {
			b.Fatal("zero")
		}
	}
}
