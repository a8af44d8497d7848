package source

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The watchdog: see doc.go, "Watchdog", for what it decides and why.

// Peeks are bounded: a Pull on a subscription with messages answers in
// milliseconds, on an empty one it waits for its deadline (the emulator
// answers empty after about a second). A short deadline keeps a peek from
// competing for long with the streams for a new message.
const maxPeekTimeout = 2 * time.Second

// nackTimeout bounds the nack of a peeked message; if it fails, the message
// comes back when its ack deadline expires.
const nackTimeout = 10 * time.Second

// WatchdogHooks tell the rest of the process what the watchdog does. Zero
// fields are left out.
type WatchdogHooks struct {
	// Streams is the StreamWatch installed on the Pub/Sub client, if any.
	// Each reopen is a break of the subscription's streams for it (the
	// messages a hung stream had leased stay leased to it, exactly as on a
	// broken one): it is marked when the watchdog ends the streams, and
	// again once the last of them has closed.
	Streams *StreamWatch
	// Reopened is called after each reopen (app counts them in
	// pubsink_source_stream_reopens_total).
	Reopened func()
}

// SetWatchdogHooks sets the hooks of the watchdog. Call it before Run.
func (s *Source) SetWatchdogHooks(h WatchdogHooks) { s.hooks = h }

// StallTimeout is how long the subscription may deliver nothing, with room
// in its flow control and messages waiting, before the watchdog reopens its
// streams; 0: no watchdog.
func (s *Source) StallTimeout() time.Duration { return s.stall }

// Stalled returns nil unless the watchdog found the subscription's streams
// hung (nothing delivered for the stall timeout, room in the flow control,
// messages waiting) and reopening them did not help: then an error naming
// the subscription and how long it has been silent, until a message is
// delivered again or Run returns.
func (s *Source) Stalled() error {
	if s == nil {
		return nil
	}
	return s.dog.stalled(time.Now())
}

// generation counts what the handlers of one Receive (one set of streams)
// hold, for the watchdog: a stream whose flow control is full pulls nothing
// by design.
type generation struct {
	start    time.Time
	received atomic.Int64 // unix ns of the last delivery; 0: none yet
	inFlight atomic.Int64 // handlers running
	bytes    atomic.Int64 // their bytes as the flow control counts them
}

// began counts a delivery of size bytes into a handler and returns the bytes
// the flow control counts for it (at most one stream's budget), for ended.
func (g *generation) began(s *Source, size int) int64 {
	n := min(int64(size), int64(s.settings.MaxOutstandingBytes))
	g.received.Store(time.Now().UnixNano())
	g.inFlight.Add(1)
	g.bytes.Add(n)
	for z := s.largest.Load(); n > z && !s.largest.CompareAndSwap(z, n); z = s.largest.Load() {
	}
	return n
}

func (g *generation) ended(n int64) {
	g.inFlight.Add(-1)
	g.bytes.Add(-n)
}

// hasRoom reports whether some stream's flow control certainly has room for
// another message of z bytes, given n handlers holding bytes in all, over
// streams streams that may hold perCount messages and perBytes bytes each.
// Which stream holds which message is unknown, so it takes the worst split:
// at most n/perCount streams can be full by count, and every other stream
// is blocked by bytes only if it holds more than perBytes-z. When no split
// can block every stream, one has room, and a silence is not the flow
// control's doing.
func hasRoom(n, bytes, z int64, streams int, perCount, perBytes int64) bool {
	all := int64(streams)
	full := min(all, n/max(perCount, 1))
	if full >= all {
		return false
	}
	z = min(z, perBytes)
	return bytes <= (all-full)*(perBytes-z)
}

// verdict is what one check of the watchdog found.
type verdict int

const (
	flowing   verdict = iota // delivered within the stall timeout
	busy                     // the flow control is full: silence by design
	idle                     // silent, but no message waits: an idle topic
	reopen                   // silent while messages wait: reopen the streams
	unhealthy                // the same after a reopen: reopen again, and fail /healthz
	recovered                // delivered again after a reopen
)

// watchdog is the decision of the watchdog, apart from the streams and the
// clock so that it can be tested with a fake one. Its methods are safe for
// concurrent use.
type watchdog struct {
	timeout time.Duration

	mu sync.Mutex
	// lastBusy is the last check that found the flow control full: silence
	// counts from then.
	lastBusy time.Time
	// since is when the silence that led to the first reopen began; zero
	// when there was no reopen since messages last flowed.
	since   time.Time
	reopens int // reopens since messages last flowed
	sick    bool
	sub     string
}

// check is one check at now of the generation that started at start, whose
// last delivery was at last (zero: none yet), with room saying whether the
// flow control has room. peek is called only when the silence has lasted
// the timeout with room, without the lock (it may take seconds, and
// Stalled, asked by /healthz, must not wait for it): it reports whether a
// message waits. Only one goroutine checks.
func (w *watchdog) check(now, start, last time.Time, room bool, peek func() bool) verdict {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !last.IsZero() {
		// This generation delivered: its streams work.
		v := flowing
		if !w.since.IsZero() {
			v = recovered
		}
		w.since, w.reopens, w.sick = time.Time{}, 0, false
		if now.Sub(last) < w.timeout {
			return v
		}
	}
	if !room {
		w.lastBusy = now
		return busy
	}
	active := latest(start, last, w.lastBusy)
	if now.Sub(active) < w.timeout {
		return flowing
	}
	w.mu.Unlock()
	waiting := peek()
	w.mu.Lock()
	if !waiting {
		return idle
	}
	if w.since.IsZero() {
		w.since = active
	}
	w.reopens++
	if w.reopens == 1 {
		return reopen
	}
	w.sick = true
	return unhealthy
}

// stalled is the error of Stalled, or nil.
func (w *watchdog) stalled(now time.Time) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sick {
		return nil
	}
	return fmt.Errorf("subscription %s has delivered nothing for %v (since %s) though messages wait in it and its flow control has room; "+
		"reopening its streams did not help (%d reopens)",
		w.sub, now.Sub(w.since).Round(time.Second), w.since.UTC().Format(time.RFC3339), w.reopens)
}

// silentFor is how long the silence of the current stall has lasted.
func (w *watchdog) silentFor(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Sub(w.since)
}

// reset forgets everything: Run ended, or is starting.
func (w *watchdog) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastBusy, w.since, w.reopens, w.sick = time.Time{}, time.Time{}, 0, false
}

func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// runGenerations runs Receive until receiveCtx ends or it fails. With a
// watchdog, a Receive whose streams hang is ended and a new one started at
// once; the old one's handlers go on with workCtx and ack or nack as usual,
// and it returns once they all have. runGenerations returns after every
// Receive returned.
func (s *Source) runGenerations(receiveCtx, workCtx context.Context, h Handler) error {
	if s.stall <= 0 {
		return s.receive(receiveCtx, workCtx, h, &generation{start: time.Now()})
	}
	s.dog.reset()
	defer s.dog.reset()
	var old sync.WaitGroup
	defer old.Wait()
	for {
		g := &generation{start: time.Now()}
		gctx, cancel := context.WithCancel(receiveCtx)
		done := make(chan error, 1)
		go func() { done <- s.receive(gctx, workCtx, h, g) }()
		again, err := s.watch(receiveCtx, g, done)
		if !again {
			cancel()
			return err
		}
		// End this Receive: it stops pulling and its streams close once
		// its handlers have returned (the library waits for them). A new
		// Receive, with new streams, starts at once.
		s.hooks.Streams.MarkBroken(s.subscription)
		cancel()
		if s.hooks.Reopened != nil {
			s.hooks.Reopened()
		}
		old.Add(1)
		go func() {
			defer old.Done()
			if err := <-done; err != nil {
				s.log.Warn("the reopened receive ended with an error", zap.Error(err))
			}
			s.hooks.Streams.MarkBroken(s.subscription) // its streams have closed now
		}()
	}
}

// watch checks the generation g every quarter of the stall timeout until
// receiveCtx ends or its Receive returns (then it returns false and what
// Receive returned), or until its streams must be reopened (true).
func (s *Source) watch(receiveCtx context.Context, g *generation, done <-chan error) (bool, error) {
	tk := time.NewTicker(s.stall / 4)
	defer tk.Stop()
	for {
		select {
		case <-receiveCtx.Done():
			return false, <-done
		case err := <-done:
			return false, err
		case <-tk.C:
		}
		now := time.Now()
		var last time.Time
		if ns := g.received.Load(); ns != 0 {
			last = time.Unix(0, ns)
		}
		n := g.inFlight.Load()
		room := hasRoom(n, g.bytes.Load(), s.largest.Load(), s.settings.NumGoroutines,
			int64(s.settings.MaxOutstandingMessages), int64(s.settings.MaxOutstandingBytes))
		v := s.dog.check(now, g.start, last, room, func() bool { return s.peekWaiting(receiveCtx) })
		switch v {
		case recovered:
			s.log.Info("the subscription delivers again after its streams were reopened")
		case reopen:
			s.log.Warn("the subscription has delivered nothing while messages wait in it and its flow control has room; reopening its streams",
				zap.Duration("silent_for", s.dog.silentFor(now).Round(time.Millisecond)), zap.Int64("in_flight", n))
			return true, nil
		case unhealthy:
			s.log.Error("the subscription still delivers nothing after its streams were reopened; /healthz fails until it delivers again, and the streams are reopened once more",
				zap.Duration("silent_for", s.dog.silentFor(now).Round(time.Millisecond)), zap.Int64("in_flight", n))
			return true, nil
		}
	}
}

// peekWaiting reports whether a message waits in the subscription: one
// unary Pull of at most one message, nacked at once (the redelivery is
// harmless: dedupe and at-least-once make it so). Only a message published
// at least a quarter of the stall timeout ago counts: a working stream
// would have had it long since, while a fresh one may just have gone to the
// peek instead of a stream. A peek that fails or finds nothing is no
// evidence.
func (s *Source) peekWaiting(ctx context.Context) bool {
	if s.peek != nil {
		return s.peek(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, min(s.stall/4, maxPeekTimeout))
	defer cancel()
	resp, err := s.client.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: s.subscription, MaxMessages: 1})
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
			s.log.Warn("the watchdog cannot peek at the subscription", zap.Error(err))
		}
		return false
	}
	waiting := false
	var ackIDs []string
	for _, m := range resp.GetReceivedMessages() {
		ackIDs = append(ackIDs, m.GetAckId())
		if time.Since(m.GetMessage().GetPublishTime().AsTime()) >= s.stall/4 {
			waiting = true
		}
	}
	if len(ackIDs) > 0 {
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nackTimeout)
		defer cancel()
		if err := s.client.SubscriptionAdminClient.ModifyAckDeadline(nctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription: s.subscription, AckIds: ackIDs, AckDeadlineSeconds: 0,
		}); err != nil {
			s.log.Warn("the watchdog could not release the message it peeked at; it comes back when its ack deadline expires", zap.Error(err))
		}
	}
	return waiting
}
