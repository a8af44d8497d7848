package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/pipeline"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/source"
)

// BenchmarkCallback puts, side by side in one process, what the bench
// command's two at-least-once connectors do per message between the Pub/Sub
// client and ApplyBulk: the naive connector's callback (tools/bench/naive.go:
// a mutation, a channel to a collector goroutine, the commit metrics) and
// pubsink's (the source's copy into a source.Message, Handle with the
// Bigtable sink and its batcher). Both are driven the way the Pub/Sub
// client drives a callback: one scheduler goroutine per message, which
// starts the callback in a goroutine of its own and waits for it, at most
// 1000 at once (the flow control). Both write through a real Bigtable
// client to an in-process server that accepts every row and keeps none,
// with the same batching (500 rows, 4 MiB, 20 ms, four calls in flight).
//
// What the Pub/Sub client costs (streams, decoding, acks) is left out, the
// same for both in the real bench; the fake server's CPU is in both. The
// difference of cpu-µs/msg between the two is what pubsink adds:
//
//	go test ./pipeline -run '^$' -bench Callback -benchtime 200000x -count 5
//
// grown/msg is the share of callbacks whose goroutine's stack had to grow
// (be copied to one twice its size), which costs about a microsecond when
// it happens deep in a call: the runtime starts each goroutine with the
// average stack size it last saw in use, 2 KiB or 4 KiB here, so the frames
// on the path of a message are kept small. GODEBUG=adaptivestackstart=0
// makes every goroutine start with 2 KiB, the worst case.
func BenchmarkCallback(b *testing.B) {
	b.Run("connector=naive", benchmarkNaiveCallback)
	b.Run("connector=at_least_once", func(b *testing.B) { benchmarkPipelineCallback(b, config.ModeAtLeastOnce) })
	b.Run("connector=exactly_once", func(b *testing.B) { benchmarkPipelineCallback(b, config.ModeExactlyOnce) })
}

// delivery is what the Pub/Sub client hands a callback (pubsub.Message's
// fields that the source copies).
type delivery struct {
	ID              string
	Data            []byte
	Attributes      map[string]string
	PublishTime     time.Time
	OrderingKey     string
	DeliveryAttempt *int
}

func deliveries(n int) []delivery {
	msgs := coreMessages(n)
	out := make([]delivery, n)
	for i, m := range msgs {
		out[i] = delivery{ID: m.ID, Data: m.Data, Attributes: m.Attributes, PublishTime: m.PublishTime}
	}
	return out
}

// deliver calls cb for every message as the Pub/Sub client's scheduler
// does (cloud.google.com/go/pubsub/v2, Subscriber.Receive): a goroutine per
// message, at most inFlight at once, each starting the callback in a
// goroutine of its own and waiting for it or for the shutdown.
func deliver(b *testing.B, msgs []delivery, cb func(*delivery)) {
	kill, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	var grown atomic.Int64
	runtime.GC() // the messages' garbage is not the connector's
	cpu := processCPU()
	b.ResetTimer()
	for i := range msgs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cbDone := make(chan struct{})
			go func() {
				defer close(cbDone)
				// A local's address changes when the stack is copied.
				var local byte
				at := uintptr(unsafe.Pointer(&local))
				cb(&msgs[i])
				if uintptr(unsafe.Pointer(&local)) != at {
					grown.Add(1)
				}
			}()
			select {
			case <-cbDone:
			case <-kill.Done():
			}
			<-sem
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu = processCPU() - cpu
	b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "cpu-µs/msg")
	b.ReportMetric(float64(grown.Load())/float64(b.N), "grown/msg")
}

// benchmarkPipelineCallback is pubsink's callback in mode: in exactly_once
// the dedupe catalog (alone: a batched claim per message) and the
// watermark tracker's bookkeeping are on the path too, the catalog on the
// same fake server as the sink (no tracking subscription: its reader is
// not on a message's path).
func benchmarkPipelineCallback(b *testing.B, mode string) {
	cfg, err := config.Parse(fmt.Appendf(nil, coreConfig, mode))
	if err != nil {
		b.Fatal(err)
	}
	pc := cfg.Pipelines[0]
	m := metrics.New().Pipeline(pc.Name)
	client := fakeBigtable(b)
	sink := btsink.New(client, zap.NewNop(), pc.Sink, &btsink.Metrics{WriteSeconds: m.SinkWrite, WriteErrors: m.SinkWriteErrors})
	defer sink.Close(context.Background())
	deps := pipeline.Deps{Sink: sink, Limits: btsink.Limits, Metrics: m}
	// The work context, as app makes it: it outlives the receive context.
	workCtx, cancel := context.WithCancel(context.WithoutCancel(context.Background()))
	defer cancel()
	if pc.ExactlyOnce() {
		exactlyOnce(b, workCtx, client, pc, &deps)
	}
	p, err := pipeline.New(zap.NewNop(), pc, deps)
	if err != nil {
		b.Fatal(err)
	}

	msgs := deliveries(b.N)
	var g generation
	b.ReportAllocs()
	deliver(b, msgs, func(pm *delivery) {
		// What the source's receive callback does (source/source.go).
		held := g.began(len(pm.Data))
		defer g.ended(held)
		m := &source.Message{
			ID:          pm.ID,
			Data:        pm.Data,
			Attributes:  pm.Attributes,
			PublishTime: pm.PublishTime,
			OrderingKey: pm.OrderingKey,
			ReceivedAt:  time.Now(),
		}
		if pm.DeliveryAttempt != nil {
			m.DeliveryAttempt = *pm.DeliveryAttempt
		}
		if !p.Handle(workCtx, m) {
			b.Error("nacked", m.ID)
		}
	})
	if got := metrics.Value(m.Committed); got != float64(b.N) {
		b.Fatalf("%.0f committed, want %d", got, b.N)
	}
}

// generation is the source watchdog's bookkeeping of a delivery
// (source/watchdog.go), which the source's callback does too.
type generation struct {
	received, inFlight, bytes, largest atomic.Int64
}

func (g *generation) began(size int) int64 {
	n := min(int64(size), 64<<20)
	g.received.Store(time.Now().UnixNano())
	g.inFlight.Add(1)
	g.bytes.Add(n)
	for z := g.largest.Load(); n > z && !g.largest.CompareAndSwap(z, n); z = g.largest.Load() {
	}
	return n
}

func (g *generation) ended(n int64) {
	g.inFlight.Add(-1)
	g.bytes.Add(-n)
}

func benchmarkNaiveCallback(b *testing.B) {
	m := metrics.New().Pipeline("core")
	w := &naiveWriter{table: fakeBigtable(b).Open("rows"), in: make(chan *naiveRow), slots: make(chan struct{}, 4)}
	collected := make(chan struct{})
	go func() { defer close(collected); w.collect() }()
	msgs := deliveries(b.N)
	b.ReportAllocs()
	// naiveRun's callback (tools/bench/naive.go).
	deliver(b, msgs, func(msg *delivery) {
		ts := msg.PublishTime
		if ms, err := strconv.ParseInt(msg.Attributes["ts"], 10, 64); err == nil {
			ts = time.UnixMilli(ms)
		}
		mut := cbt.NewMutation()
		mut.Set("d", "data", cbt.Timestamp(ts.UnixMicro()).TruncateToMilliseconds(), msg.Data)
		r := &naiveRow{key: msg.Attributes["id"], mut: mut, size: len(msg.Data), done: make(chan error, 1)}
		w.in <- r
		if err := <-r.done; err != nil {
			b.Error(err)
			return
		}
		m.Committed.Inc()
		m.CommitLatency.Observe(time.Since(msg.PublishTime).Seconds())
	})
	close(w.in)
	<-collected
}

// naiveRow and naiveWriter are tools/bench/naive.go's row and writer.
type naiveRow struct {
	key  string
	mut  *cbt.Mutation
	size int
	done chan error
}

type naiveWriter struct {
	table *cbt.Table
	in    chan *naiveRow
	slots chan struct{}
	wg    sync.WaitGroup
}

func (w *naiveWriter) collect() {
	var batch []*naiveRow
	bytes := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	send := func() {
		timer.Stop()
		w.slots <- struct{}{}
		w.wg.Add(1)
		go w.apply(batch)
		batch, bytes = nil, 0
	}
	for {
		select {
		case r, ok := <-w.in:
			if !ok {
				if len(batch) > 0 {
					send()
				}
				w.wg.Wait()
				return
			}
			if len(batch) == 0 {
				timer.Reset(20 * time.Millisecond)
			}
			batch = append(batch, r)
			bytes += r.size + len(r.key)
			if len(batch) >= 500 || bytes >= 4<<20 {
				send()
			}
		case <-timer.C:
			if len(batch) > 0 {
				send()
			}
		}
	}
}

func (w *naiveWriter) apply(batch []*naiveRow) {
	defer w.wg.Done()
	defer func() { <-w.slots }()
	keys := make([]string, len(batch))
	muts := make([]*cbt.Mutation, len(batch))
	for i, r := range batch {
		keys[i], muts[i] = r.key, r.mut
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs, err := w.table.ApplyBulk(ctx, keys, muts)
	for i, r := range batch {
		switch {
		case err != nil:
			r.done <- err
		case errs != nil:
			r.done <- errs[i]
		default:
			r.done <- nil
		}
	}
}

// fakeBigtable returns a data client on an in-process server whose
// MutateRows accepts every entry and keeps nothing, whose reads find no
// row, and whose MutateRow accepts the mutation. The server decodes no
// request (rawCodec): it counts a MutateRows request's entries and answers
// each with OK, so that the CPU it takes for a row is small and the same
// for a row of the sink and one of the dedupe catalog.
func fakeBigtable(b testing.TB) *cbt.Client {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(acceptAll))
	go srv.Serve(l)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	client, err := cbt.NewClientWithConfig(context.Background(), "bench", "bench",
		cbt.ClientConfig{MetricsProvider: cbt.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	return client
}

// acceptAll serves every Bigtable call on raw bytes: MutateRows answers
// each entry with OK, ReadRows sends no row, MutateRow an empty response.
func acceptAll(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	switch method {
	case "/google.bigtable.v2.Bigtable/MutateRows":
		// The response: an entry (field 1) {index (1), status (2): {}} per
		// request entry (field 2 of the request).
		var res []byte
		for i := 0; len(req) > 0; {
			num, typ, n := protowire.ConsumeTag(req)
			if n < 0 {
				return errors.New("bad request")
			}
			req = req[n:]
			n = protowire.ConsumeFieldValue(num, typ, req)
			if n < 0 {
				return errors.New("bad request")
			}
			req = req[n:]
			if num == 2 {
				entry := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(i))
				entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), nil)
				res = protowire.AppendBytes(protowire.AppendTag(res, 1, protowire.BytesType), entry)
				i++
			}
		}
		return stream.SendMsg(res)
	case "/google.bigtable.v2.Bigtable/ReadRows":
		return nil
	}
	return stream.SendMsg([]byte{})
}

// rawCodec passes a server's messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
