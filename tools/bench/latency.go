package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

const (
	// pollEvery is how often a probe's row is read until it is there.
	pollEvery = 2 * time.Millisecond
	// paceEvery is how often the steady publisher publishes what is due:
	// at 1,000 msg/s, 5 messages at a time.
	paceEvery = 5 * time.Millisecond
	// probePause bounds the random pause before each probe, so that the
	// probes do not fall in step with the connectors' batches (a probe
	// published as soon as the previous probe's row was written would
	// arrive at the same point of every batch). It is the batch delay.
	probePause = batchDelayMS * time.Millisecond
	// probeTimeout fails a run whose probe's row is not readable by then.
	probeTimeout = 10 * time.Second
)

// latencyRun runs connector k on a fresh topic with no backlog: it
// publishes at a steady -rate for -duration, probes among them, one at a
// time, and measures each probe's publish-confirmed → row-readable latency.
func (b *bench) latencyRun(ctx context.Context, k kind, round int, prof *profile) result {
	return b.runWith(ctx, k, round, prof, func(ctx context.Context, e *runEnv, res *result) (int, error) {
		if err := e.startAll(); err != nil {
			return 0, err
		}
		sh := b.o.shapes[k]
		pub := b.pubsub.Publisher("projects/" + project + "/topics/" + e.n.topic)
		pub.EnableMessageOrdering = sh.orderingKeys > 0
		defer pub.Stop()
		s := startSteady(ctx, pub, b.o.rate, func(i int) *pubsub.Message { return b.mustMessage(i, sh) }, b.o.duration)
		lat, err := b.probes(ctx, e, s, sh)
		published, took, pubErr := s.stop()
		res.p50, res.p99 = quantiles(lat)
		res.samples = len(lat)
		res.rate = float64(published) / took.Seconds()
		if err = errors.Join(err, pubErr); err != nil {
			return published, err
		}
		// Every message published must be committed (and written: runWith
		// counts the rows) before the processes are stopped.
		_, err = b.watch(ctx, e, published, nil, res)
		return published, err
	})
}

// probes probes until s ends: it publishes a probe message through s,
// waits for the publish to be confirmed, reads the probe's row every
// pollEvery until it is there, and after a random pause does the next. It
// returns the latencies, confirmed → readable, of the probes confirmed
// after the warm-up, which ends b.o.warmup after the first probe's row was
// read.
func (b *bench) probes(ctx context.Context, e *runEnv, s *steady, sh shape) ([]time.Duration, error) {
	table := b.data.Open(e.n.table)
	var lat []time.Duration
	var warm time.Time // the end of the warm-up; zero until a probe's row was read
	for time.Now().Before(s.end) {
		if err := sleep(ctx, rand.N(probePause)); err != nil {
			return lat, err
		}
		r, id := s.publish()
		if _, err := r.Get(ctx); err != nil {
			return lat, fmt.Errorf("publishing probe %s: %w", id, err)
		}
		confirmed := time.Now()
		readable, err := poll(ctx, e, confirmed, func(ctx context.Context) (bool, error) {
			row, err := table.ReadRow(ctx, sh.rowKey(id), keysOnly)
			return len(row) > 0, err
		})
		if err != nil {
			return lat, fmt.Errorf("probe %s: %w", id, err)
		}
		switch {
		case warm.IsZero():
			warm = readable.Add(b.o.warmup)
		case !confirmed.Before(warm):
			lat = append(lat, readable.Sub(confirmed))
		}
	}
	return lat, nil
}

// poll calls there every pollEvery until it reports true, and returns when
// the row became readable: halfway between the starts of the last read that
// missed it and of the read that found it (the start of that read if it
// was the first). It fails when there fails, when a process of e has
// exited, or probeTimeout after since.
func poll(ctx context.Context, e *runEnv, since time.Time, there func(context.Context) (bool, error)) (time.Time, error) {
	tk := time.NewTicker(pollEvery)
	defer tk.Stop()
	var prev time.Time
	for {
		start := time.Now()
		ok, err := there(ctx)
		switch {
		case err != nil:
			return start, err
		case ok && prev.IsZero():
			return start, nil
		case ok:
			return prev.Add(start.Sub(prev) / 2), nil
		}
		prev = start
		if c := e.exited(); c != nil {
			return start, fmt.Errorf("a connector process exited: %v (log %s)", c.err, c.log)
		}
		if start.Sub(since) > probeTimeout {
			return start, fmt.Errorf("row not readable %v after the publish was confirmed", probeTimeout)
		}
		select {
		case <-ctx.Done():
			return start, ctx.Err()
		case <-tk.C:
		}
	}
}

// steady publishes bench messages at a steady rate until end: every
// paceEvery, what brings the count, publish's included, up to rate × the
// time since it began.
type steady struct {
	ctx   context.Context // the run's
	pub   *pubsub.Publisher
	msg   func(i int) *pubsub.Message // message i
	begin time.Time
	end   time.Time

	next    atomic.Int64 // the index of the next message
	results chan *pubsub.PublishResult
	cancel  context.CancelFunc
	paced   chan struct{} // closed when the pacing stopped
	wg      sync.WaitGroup
	err     error // the first publish error, once wg is done
}

func startSteady(ctx context.Context, pub *pubsub.Publisher, rate float64, msg func(int) *pubsub.Message, d time.Duration) *steady {
	// Bundles of what one pace publishes, sent within a millisecond: the
	// client's default 10 ms delay would bunch the traffic up.
	pub.PublishSettings.CountThreshold = 1000
	pub.PublishSettings.DelayThreshold = time.Millisecond
	pub.PublishSettings.FlowControlSettings = pubsub.FlowControlSettings{
		MaxOutstandingMessages: 10_000,
		LimitExceededBehavior:  pubsub.FlowControlBlock,
	}
	s := &steady{ctx: ctx, pub: pub, msg: msg, begin: time.Now(), results: make(chan *pubsub.PublishResult, 10_000), paced: make(chan struct{})}
	s.end = s.begin.Add(d)
	s.wg.Go(func() {
		for r := range s.results {
			if _, err := r.Get(ctx); err != nil && s.err == nil {
				s.err = fmt.Errorf("publish: %w", err)
			}
		}
	})
	pctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	go func() {
		defer close(s.paced)
		tk := time.NewTicker(paceEvery)
		defer tk.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case now := <-tk.C:
				if !now.Before(s.end) {
					return
				}
				for due := int64(rate * now.Sub(s.begin).Seconds()); s.next.Load() < due; {
					r, _ := s.publish()
					s.results <- r
				}
			}
		}
	}()
	return s
}

// publish publishes the next message and returns its result and id.
func (s *steady) publish() (*pubsub.PublishResult, string) {
	m := s.msg(int(s.next.Add(1) - 1))
	return s.pub.Publish(s.ctx, m), m.Attributes["id"]
}

// stop stops the pacing (if end has not come yet), waits for every publish
// of the background traffic to be confirmed, and returns how many messages
// were published, probes included, over how long, and the first error.
func (s *steady) stop() (published int, took time.Duration, err error) {
	s.cancel()
	<-s.paced
	took = min(time.Since(s.begin), s.end.Sub(s.begin))
	close(s.results)
	s.wg.Wait()
	return int(s.next.Load()), took, s.err
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
