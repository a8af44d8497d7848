package main

import (
	"context"
	"errors"
	"flag"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/server"
)

// runNaive is `bench naive`: the baseline connector, the way one would
// write it without pubsink. A raw Pub/Sub v2 subscriber hands each message
// to a collector goroutine that groups rows into ApplyBulk calls (500 rows,
// 4 MiB or 20 ms, at most four calls in flight, like pubsink's defaults);
// the callback waits for its row's result and acks (or nacks) the message.
// No dedupe, no watermark, no dead letter, no retry beyond the client's.
//
// It keeps pubsink's committed counter, commit-latency histogram and
// Bigtable mutation counter in the same registry, served the same way, so
// that the bench scrapes every connector alike. The minimal connector
// (minimal.go) is this without them: the same subscriber, writer and row.
func runNaive(args []string) int { return runBaseline("naive", args, naiveRun) }

// runBaseline is a baseline connector's subcommand (naive, minimal): the
// flags both take, then run with the profiles started.
func runBaseline(name string, args []string, run func(ctx context.Context, proj, sub, inst, table, family string, streams int, addr string) error) int {
	var proj, sub, inst, table, family, addr *string
	var streams *int
	return subcommand(name, args, func(fs *flag.FlagSet) {
		proj = fs.String("project", project, "project")
		sub = fs.String("subscription", "", "full subscription name")
		inst = fs.String("instance", instance, "Bigtable instance")
		table = fs.String("table", "", "sink table")
		family = fs.String("family", "d", "column family")
		streams = fs.Int("streams", 10, "StreamingPull streams (0: the client's default)")
		addr = fs.String("http", "127.0.0.1:0", "address of its /metrics")
	}, func(ctx context.Context, pf *profileFlags) error {
		stopProfiles, err := pf.start()
		if err != nil {
			return err
		}
		err = run(ctx, *proj, *sub, *inst, *table, *family, *streams, *addr)
		return errors.Join(err, stopProfiles())
	})
}

func naiveRun(ctx context.Context, proj, sub, inst, table, family string, streams int, addr string) error {
	ps, err := pubsub.NewClient(context.WithoutCancel(ctx), proj)
	if err != nil {
		return err
	}
	defer ps.Close()
	// Its Bigtable client counts its writes as pubsink's do
	// (pubsink_bigtable_mutations_total), so that the bench reads its sink
	// writes per message the same way; it writes no state.
	reg := metrics.New()
	counted, err := reg.BigtableClientOptions()
	if err != nil {
		return err
	}
	bt, err := bigtable.NewClient(context.WithoutCancel(ctx), proj, inst, counted...)
	if err != nil {
		return err
	}
	defer bt.Close()

	m := reg.Pipeline(pipelineName)
	srv, err := server.Listen(zap.NewNop(), addr, reg.Registry, server.Probes{
		Ready:  func(context.Context) error { return nil },
		Status: func() any { return struct{}{} },
	})
	if err != nil {
		return err
	}
	go srv.Serve()
	defer srv.Shutdown(context.Background())

	w := &writer{table: bt.Open(table), in: make(chan *row), slots: make(chan struct{}, flushesInFlight)}
	return receiveRows(ctx, ps.Subscriber(sub), streams, family, w, func(msg *pubsub.Message) {
		m.Committed.Inc()
		m.CommitLatency.Observe(time.Since(msg.PublishTime).Seconds())
		msg.Ack()
	})
}

// receiveRows is a baseline connector's subscriber (naive, minimal): the
// bench's streams and flow control, each message's row handed to w, and
// written (then the message is the done callback's to ack) or nacked.
// It returns once Receive has, with its error, and every row written.
func receiveRows(ctx context.Context, s *pubsub.Subscriber, streams int, family string, w *writer, written func(*pubsub.Message)) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.collect() }()
	if streams > 0 {
		s.ReceiveSettings.NumGoroutines = streams
	}
	s.ReceiveSettings.MaxOutstandingMessages = maxOutstanding
	err := s.Receive(ctx, func(_ context.Context, msg *pubsub.Message) {
		r := newRow(msg, family)
		w.in <- r
		if err := <-r.done; err != nil {
			msg.Nack()
			return
		}
		written(msg)
	})
	close(w.in) // every callback returned: nothing more comes
	wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// row is one message's write, waiting for its batch.
type row struct {
	key  string
	mut  *bigtable.Mutation
	size int
	done chan error
}

// newRow is the row of a message, as the naive and minimal connectors
// write it: key = the id attribute, one cell d:data (family:data) holding
// the payload, at the event time of the ts attribute (Unix ms; the publish
// time without it).
func newRow(msg *pubsub.Message, family string) *row {
	ts := msg.PublishTime
	if ms, err := strconv.ParseInt(msg.Attributes["ts"], 10, 64); err == nil {
		ts = time.UnixMilli(ms)
	}
	mut := bigtable.NewMutation()
	mut.Set(family, "data", bigtable.Timestamp(ts.UnixMicro()).TruncateToMilliseconds(), msg.Data)
	return &row{key: msg.Attributes["id"], mut: mut, size: len(msg.Data), done: make(chan error, 1)}
}

// writer groups rows into ApplyBulk calls. It is the naive and minimal
// connectors' (the Bigtable client alone, nothing of pubsink).
type writer struct {
	table *bigtable.Table
	in    chan *row
	slots chan struct{} // one per ApplyBulk in flight
	wg    sync.WaitGroup
	// sent, if set, is told the rows of each ApplyBulk call as it is made
	// (the minimal connector's count of its writes).
	sent func(rows int)
}

// collect batches the rows of w.in until it is closed, then waits for the
// calls in flight.
func (w *writer) collect() {
	var batch []*row
	bytes := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	send := func() {
		timer.Stop()
		w.slots <- struct{}{} // blocks while four calls are in flight
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
				timer.Reset(batchDelayMS * time.Millisecond)
			}
			batch = append(batch, r)
			bytes += r.size + len(r.key)
			if len(batch) >= batchMessages || bytes >= batchBytes {
				send()
			}
		case <-timer.C:
			if len(batch) > 0 {
				send()
			}
		}
	}
}

func (w *writer) apply(batch []*row) {
	defer w.wg.Done()
	defer func() { <-w.slots }()
	keys := make([]string, len(batch))
	muts := make([]*bigtable.Mutation, len(batch))
	for i, r := range batch {
		keys[i], muts[i] = r.key, r.mut
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w.sent != nil {
		w.sent(len(keys))
	}
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
