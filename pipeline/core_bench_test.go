package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/watermark"
)

// The pipeline core without any Pub/Sub client: messages from memory go
// through Handle (decode, dedupe, late check, write, commit, finish) as the
// source would hand them over, with the concurrency of the default flow
// control (1000 messages in flight). The sink batches rows as the Bigtable
// sink does (internal/batch with the default 500 rows / 4 MiB / 20 ms, the
// values copied into one buffer per row) and discards each batch; in
// exactly_once mode the dedupe catalog is on bttest (in this process, so
// its CPU counts), and the watermark tracker is told of every finished
// message. The figure is messages per second on this machine, with the
// emulators and the network out of the way:
//
//	go test ./pipeline -run '^$' -bench Core -benchtime 400000x
//
// The target is 100,000 msg/s in exactly_once mode on 2 cores. The
// machine is shared, so the benchmark also reports the process's CPU time
// per message and the rate that makes at full use of GOMAXPROCS cores.

const coreConfig = `
project: bench
state: {instance: bench, table: state}
pipelines:
  - name: core
    mode: %s
    source:
      subscription: core-sub
      id_attribute: id
      timestamp_attribute: ts
    sink:
      table: rows
`

// inFlight is the default max_outstanding_messages: how many handlers the
// source runs at once.
const inFlight = 1000

func BenchmarkCore(b *testing.B) {
	for _, mode := range []string{config.ModeExactlyOnce, config.ModeAtLeastOnce} {
		b.Run("mode="+mode, func(b *testing.B) { benchmarkCore(b, mode) })
	}
}

func benchmarkCore(b *testing.B, mode string) {
	cfg, err := config.Parse(fmt.Appendf(nil, coreConfig, mode))
	if err != nil {
		b.Fatal(err)
	}
	pc := cfg.Pipelines[0]
	m := metrics.New().Pipeline(pc.Name)
	sink := newDiscardSink(pc.Sink.Batch)
	deps := pipeline.Deps{Sink: sink, Metrics: m}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if pc.ExactlyOnce() {
		exactlyOnce(b, ctx, pipeline.BttestClient(b), pc, &deps)
	}
	p, err := pipeline.New(zap.NewNop(), pc, deps)
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close(context.Background())

	msgs := coreMessages(b.N)
	var next atomic.Int64
	b.SetParallelism((inFlight + 1) / 2) // × GOMAXPROCS handlers; 1000 on 2 cores
	b.ReportAllocs()
	runtime.GC() // the messages' garbage is not the pipeline's
	cpu := processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := &msgs[next.Add(1)-1]
			if !p.Handle(ctx, m) {
				b.Error("nacked", m.ID)
				return
			}
		}
	})
	b.StopTimer()
	cpu = processCPU() - cpu
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	// On a shared machine msg/s depends on what else runs; the CPU time of
	// the process per message (pipeline, bttest and the Go runtime alike)
	// does much less, and GOMAXPROCS cores divided by it is the rate the
	// machine would reach on its own.
	b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "cpu-µs/msg")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0))*float64(b.N)/cpu.Seconds(), "msg/s-at-full-cpu")
	if got := metrics.Value(m.Committed); got != float64(b.N) {
		b.Fatalf("%.0f committed, want %d", got, b.N)
	}
}

// exactlyOnce sets the dedupe part (its catalog in table "state" of
// client, alone, its filters rebuilt) and the watermark tracker (no
// tracking subscription: its bookkeeping only) of deps, as app does for an
// exactly_once pipeline. They run until ctx ends; the dedupe part is closed
// at the end of the benchmark.
func exactlyOnce(b *testing.B, ctx context.Context, client *cbt.Client, pc config.Pipeline, deps *pipeline.Deps) {
	d := dedupe.New(client, zap.NewNop(), dedupe.Config{Pipeline: pc.Name, Table: "state", Window: pc.Dedupe.Window, Metrics: deps.Metrics})
	ran := make(chan struct{})
	go func() { defer close(ran); d.Run(ctx) }()
	b.Cleanup(func() { <-ran; d.Close(context.Background()) })
	// Claims read the catalog until the filters are rebuilt.
	for !d.Stats().Rebuilt {
		time.Sleep(time.Millisecond)
	}
	tr, err := watermark.NewTracker(nil, nil, zap.NewNop(), watermark.Config{
		Pipeline: pc.Name, TimestampAttribute: pc.Source.TimestampAttribute, TimestampFormat: pc.Source.TimestampFormat,
		Band: pc.Watermark.EstimationBand, Metrics: deps.Metrics,
	})
	if err != nil {
		b.Fatal(err)
	}
	deps.Dedupe, deps.Tracker = d, tr
}

// coreMessages are n distinct messages shaped like the bench command's:
// an id and an event-time attribute, a ~200-byte JSON payload, published
// over the last second.
func coreMessages(n int) []source.Message {
	now := time.Now()
	msgs := make([]source.Message, n)
	for i := range msgs {
		id := fmt.Sprintf("m%09d", i)
		pub := now.Add(-time.Second + time.Duration(i)*time.Second/time.Duration(n))
		data := fmt.Appendf(nil, `{"id":%q,"seq":%d,"customer":"c-%05d","amount":%d.%02d,"currency":"EUR","items":%d,"note":"`,
			id, i, i%50_000, i%1000, i%100, 1+i%7)
		for len(data) < 198 {
			data = append(data, byte('a'+i%26))
		}
		msgs[i] = source.Message{
			ID:          strconv.Itoa(17_000_000_000_000_000 + i),
			Data:        append(data, `"}`...),
			Attributes:  map[string]string{"id": id, "ts": strconv.FormatInt(pub.UnixMilli(), 10)},
			PublishTime: pub,
			ReceivedAt:  now,
		}
	}
	return msgs
}

// discardSink batches rows as the Bigtable sink does, and drops each
// batch instead of applying it.
type discardSink struct {
	batcher *batch.Batcher[discardEntry]
}

// discardEntry is what the Bigtable sink keeps of a message: its first
// row's key and one copy of its rows' values.
type discardEntry struct {
	key    string
	values []byte
}

func newDiscardSink(cfg config.Batch) *discardSink {
	return &discardSink{batcher: batch.New(batch.Config{
		MaxItems: cfg.MaxMessages, MaxBytes: int(cfg.MaxBytes), MaxDelay: cfg.MaxDelay,
	}, func(context.Context, []discardEntry) []error { return nil })}
}

func (s *discardSink) Write(ctx context.Context, rows []sinks.Row) error {
	if len(rows) == 0 {
		return nil
	}
	n, size := 0, 0
	for i := range rows {
		for _, c := range rows[i].Cells {
			n += len(c.Value)
		}
		size += rows[i].Size()
	}
	buf := make([]byte, 0, n)
	for i := range rows {
		for _, c := range rows[i].Cells {
			buf = append(buf, c.Value...)
		}
	}
	return s.batcher.AddN(ctx, discardEntry{key: rows[0].Key, values: buf}, len(rows), size)
}

func (s *discardSink) Close(ctx context.Context) error { return s.batcher.Close(ctx) }
func (s *discardSink) Check(context.Context) error     { return nil }

// processCPU is the user and system time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}
