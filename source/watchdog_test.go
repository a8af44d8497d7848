package source

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsink/pubsink/config"
)

// The decision, on a fake clock.

// dogClock drives a watchdog the way watch does: a check every quarter of
// the timeout, of the current generation.
type dogClock struct {
	t     *testing.T
	w     *watchdog
	now   time.Time
	start time.Time // of the current generation
	last  time.Time // its last delivery; zero: none
	room  bool
	// waiting is what the peek finds; peeks counts the peeks.
	waiting bool
	peeks   int
}

func newDogClock(t *testing.T) *dogClock {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	return &dogClock{t: t, w: &watchdog{timeout: 4 * time.Second, sub: "projects/p/subscriptions/s"}, now: now, start: now, room: true}
}

// tick advances the clock by a quarter of the timeout and checks.
func (c *dogClock) tick() verdict {
	c.now = c.now.Add(c.w.timeout / 4)
	v := c.w.check(c.now, c.start, c.last, c.room, func() bool { c.peeks++; return c.waiting })
	if v == reopen || v == unhealthy {
		c.start, c.last = c.now, time.Time{} // a new generation
	}
	return v
}

// ticks checks n times and returns the verdicts.
func (c *dogClock) ticks(n int) []verdict {
	var vs []verdict
	for range n {
		vs = append(vs, c.tick())
	}
	return vs
}

func (c *dogClock) deliver() { c.last = c.now }

func count(vs []verdict, v verdict) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}

func TestWatchdogLeavesAFlowingSubscriptionAlone(t *testing.T) {
	c := newDogClock(t)
	c.waiting = true // a backlog: what a working stream keeps delivering
	for range 40 {
		c.deliver()
		if v := c.tick(); v != flowing {
			t.Fatalf("a subscription delivering every check: %v", v)
		}
	}
	if c.peeks != 0 {
		t.Errorf("%d peeks at a subscription that delivers", c.peeks)
	}
	// A delivery every 3/4 of the timeout is still no silence.
	for range 10 {
		c.deliver()
		if vs := c.ticks(3); count(vs, flowing) != 3 {
			t.Fatalf("delivering every 3/4 of the timeout: %v", vs)
		}
	}
	if c.peeks != 0 || c.w.stalled(c.now) != nil {
		t.Errorf("peeks %d, stalled %v", c.peeks, c.w.stalled(c.now))
	}
}

func TestWatchdogTakesAFullFlowControlForBusy(t *testing.T) {
	c := newDogClock(t)
	c.waiting = true // messages wait, but every slot is held (a Bigtable stall)
	c.room = false
	vs := c.ticks(40) // ten timeouts of silence
	if count(vs, busy) != 40 || c.peeks != 0 {
		t.Fatalf("verdicts %v, %d peeks; want busy every time and no peek", vs, c.peeks)
	}
	// The stall ends and the slots free up: the silence counts from the
	// last busy check, so the next timeout is left to the streams.
	c.room = true
	if vs := c.ticks(3); count(vs, flowing) != 3 {
		t.Fatalf("just after a busy spell: %v", vs)
	}
	c.deliver()
	if vs := c.ticks(3); count(vs, flowing) != 3 || c.peeks != 0 {
		t.Fatalf("delivering after a busy spell: %v, %d peeks", vs, c.peeks)
	}
}

func TestWatchdogTakesSilenceWithoutEvidenceForAnIdleTopic(t *testing.T) {
	c := newDogClock(t)
	vs := c.ticks(40)
	if count(vs, reopen)+count(vs, unhealthy) != 0 {
		t.Fatalf("an idle topic: %v", vs)
	}
	if count(vs, idle) == 0 || c.peeks != count(vs, idle) {
		t.Fatalf("an idle topic is peeked at once the silence lasted the timeout: %v, %d peeks", vs, c.peeks)
	}
	if vs[2] != flowing || vs[3] != idle {
		t.Errorf("the first peek at %v, want at the timeout: %v", vs, vs)
	}
	if err := c.w.stalled(c.now); err != nil {
		t.Errorf("stalled on an idle topic: %v", err)
	}
}

func TestWatchdogReopensThenFailsThenRecovers(t *testing.T) {
	c := newDogClock(t)
	c.ticks(2)
	c.deliver()
	lastDelivery := c.now
	c.waiting = true // the stream hangs with a backlog
	vs := c.ticks(5)
	if want := []verdict{flowing, flowing, flowing, reopen, flowing}; !equal(vs, want) {
		t.Fatalf("hung stream: %v, want %v (reopen a timeout after the last delivery)", vs, want)
	}
	if err := c.w.stalled(c.now); err != nil {
		t.Fatalf("unhealthy after the first reopen: %v", err)
	}
	// The new streams hang too: unhealthy a timeout after the reopen, and
	// reopened again every timeout.
	vs = c.ticks(8)
	if want := []verdict{flowing, flowing, unhealthy, flowing, flowing, flowing, unhealthy, flowing}; !equal(vs, want) {
		t.Fatalf("after the reopen: %v, want %v", vs, want)
	}
	err := c.w.stalled(c.now)
	if err == nil || !strings.Contains(err.Error(), c.w.sub) || !strings.Contains(err.Error(), "reopening its streams did not help") {
		t.Fatalf("stalled = %v, want an error naming the subscription", err)
	}
	// Silent since the last delivery: the error says how long.
	if silent := c.now.Sub(lastDelivery); !strings.Contains(err.Error(), "for "+silent.String()+" ") {
		t.Errorf("stalled = %v, want silent for %v", err, silent)
	}
	// Messages flow again.
	c.deliver()
	if v := c.tick(); v != recovered {
		t.Fatalf("first delivery after the reopens: %v", v)
	}
	if err := c.w.stalled(c.now); err != nil {
		t.Fatalf("stalled after the recovery: %v", err)
	}
	// A later hang starts from scratch: one reopen first.
	vs = c.ticks(4)
	if count(vs, reopen) != 1 || count(vs, unhealthy) != 0 {
		t.Fatalf("a second hang: %v", vs)
	}
}

func TestWatchdogNeedsEvidenceAfterTheReopenToo(t *testing.T) {
	c := newDogClock(t)
	c.waiting = true
	if vs := c.ticks(4); count(vs, reopen) != 1 {
		t.Fatalf("%v", vs)
	}
	// The backlog went elsewhere (another process drained it): the
	// silence is an idle topic's, not a failure.
	c.waiting = false
	if vs := c.ticks(20); count(vs, unhealthy) != 0 || c.w.stalled(c.now) != nil {
		t.Fatalf("no evidence after the reopen: %v", vs)
	}
	// Messages wait again and the streams still deliver nothing: the
	// reopen did not help.
	c.waiting = true
	if v := c.tick(); v != unhealthy {
		t.Fatalf("evidence again: %v", v)
	}
	c.w.reset()
	if err := c.w.stalled(c.now); err != nil {
		t.Fatalf("stalled after reset: %v", err)
	}
}

func TestWatchdogBusyAfterTheReopenIsNoFailure(t *testing.T) {
	c := newDogClock(t)
	c.waiting = true
	c.ticks(4)
	c.room = false
	if vs := c.ticks(12); count(vs, busy) != 12 || c.w.stalled(c.now) != nil {
		t.Fatalf("full flow control after a reopen: %v", vs)
	}
}

// TestWatchdogAnswersStalledDuringAPeek: a peek may take seconds; Stalled,
// which /healthz asks, must not wait for it.
func TestWatchdogAnswersStalledDuringAPeek(t *testing.T) {
	w := &watchdog{timeout: time.Second, sub: "projects/p/subscriptions/s"}
	start := time.Now()
	answered := make(chan error, 1)
	w.check(start.Add(2*time.Second), start, time.Time{}, true, func() bool {
		go func() { answered <- w.stalled(time.Now()) }()
		select {
		case <-answered:
		case <-time.After(5 * time.Second):
			t.Error("Stalled waited for the peek")
		}
		return true
	})
}

func equal(a, b []verdict) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestHasRoom(t *testing.T) {
	const kib = 1024
	for _, tc := range []struct {
		name               string
		n, bytes, z        int64
		streams            int
		perCount, perBytes int64
		want               bool
	}{
		{"nothing held", 0, 0, 0, 4, 250, 64 * kib, true},
		{"nothing held, a message as large as a stream's budget seen", 0, 0, 64 * kib, 4, 250, 64 * kib, true},
		{"every slot held", 1000, 1000, 1, 4, 250, 64 * kib, false},
		{"one slot short of full", 999, 999, 1, 4, 250, 64 * kib, true},
		{"one stream's share short of full, by count", 750, 750, 1, 4, 250, 64 * kib, true},
		{"one stream's worth of bytes left", 3, 3 * 64 * kib, 1, 4, 250, 64 * kib, true},
		{"bytes could block every stream", 4, 4*64*kib - 4, 8, 4, 250, 64 * kib, false},
		// Three streams full by count, the fourth possibly full by bytes.
		{"mixed: count and bytes", 751, 64 * kib, kib, 4, 250, 64 * kib, false},
		{"mixed, with room", 751, 32 * kib, kib, 4, 250, 64 * kib, true},
		{"one stream", 999, 0, 0, 1, 1000, 64 * kib, true},
		{"one stream, full", 1000, 0, 0, 1, 1000, 64 * kib, false},
		{"one stream, too little byte room for the largest message", 1, 60 * kib, 8 * kib, 1, 1000, 64 * kib, false},
	} {
		if got := hasRoom(tc.n, tc.bytes, tc.z, tc.streams, tc.perCount, tc.perBytes); got != tc.want {
			t.Errorf("%s: hasRoom = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The watchdog of a running Source, on the Pub/Sub fake. hangs makes
// StreamingPull streams hang without an error.

// hangs is a stream interceptor for the tests: the first blackhole streams
// of the subscription (all of them while all is set) are swallowed, as by a
// proxy that lost them: their requests never reach the server, which never
// serves them, and RecvMsg blocks until the stream's context ends. After
// freeze, the streams opened so far stop returning what the server sends
// (it stays leased to them), and block likewise.
type hangs struct {
	sub        string
	blackhole  int
	all        atomic.Bool
	opened     atomic.Int64
	swallowed  atomic.Int64
	frozenUpTo atomic.Int64 // streams 1..frozenUpTo are frozen
}

// freeze freezes every stream of the subscription opened so far.
func (hs *hangs) freeze() { hs.frozenUpTo.Store(hs.opened.Load()) }

func (hs *hangs) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != streamingPull {
		return cs, err
	}
	return &hangStream{ClientStream: cs, hs: hs, ctx: ctx}, nil
}

type hangStream struct {
	grpc.ClientStream
	hs      *hangs
	ctx     context.Context
	decided bool
	index   int64 // 1 for the first stream of the subscription; 0: another subscription's
	lost    bool
}

func (s *hangStream) SendMsg(m any) error {
	if !s.decided {
		s.decided = true
		if req, ok := m.(*pubsubpb.StreamingPullRequest); ok && req.GetSubscription() == s.hs.sub {
			s.index = s.hs.opened.Add(1)
			s.lost = s.index <= int64(s.hs.blackhole) || s.hs.all.Load()
			if s.lost {
				s.hs.swallowed.Add(1)
			}
		}
	}
	if s.lost {
		return nil
	}
	return s.ClientStream.SendMsg(m)
}

func (s *hangStream) CloseSend() error {
	if s.lost {
		return nil
	}
	return s.ClientStream.CloseSend()
}

func (s *hangStream) RecvMsg(m any) error {
	if !s.lost && !s.frozen() {
		err := s.ClientStream.RecvMsg(m)
		if err != nil || !s.frozen() {
			return err
		}
	}
	<-s.ctx.Done()
	return s.ctx.Err()
}

func (s *hangStream) frozen() bool { return s.index > 0 && s.index <= s.hs.frozenUpTo.Load() }

// watchedFake is the fake with a client whose streams go through a
// StreamWatch, then hs.
func watchedFake(t *testing.T, hs *hangs) (*fake, *pubsub.Client, *StreamWatch) {
	t.Helper()
	f := newFake(t)
	hs.sub = f.sub
	w := NewStreamWatch()
	return f, f.clientVia(t, grpc.WithChainStreamInterceptor(w.Interceptor, hs.intercept)), w
}

// clientVia is a client of f's server on a connection of its own, dialled
// with opts (the tests' interceptors).
func (f *fake) clientVia(t *testing.T, opts ...grpc.DialOption) *pubsub.Client {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+f.srv.Addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	client, err := pubsub.NewClient(context.Background(), project, option.WithGRPCConn(conn), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// running is a Source's Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func runSource(s *Source, work context.Context, h Handler) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx, work, h) }()
	return r
}

func (r *running) stop(t *testing.T, within time.Duration) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("Run did not return within %v of the stop", within)
	}
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const testStall = 400 * time.Millisecond

func watchedSource(client *pubsub.Client, sub string, w *StreamWatch, reopens *atomic.Int64) *Source {
	s := New(client, zap.NewNop(), sub, config.Source{Streams: 2, MaxOutstandingMessages: 100, StallTimeout: testStall}, 1<<20)
	s.SetWatchdogHooks(WatchdogHooks{Streams: w, Reopened: func() { reopens.Add(1) }})
	return s
}

// TestWatchdogReopensHungStreams: the first set of streams is lost (the
// server never serves it), with messages waiting. The watchdog sees them by
// its peek, reopens, and every message is delivered by the new streams;
// the stream watch counts the reopen as a break; the source is never
// stalled.
func TestWatchdogReopensHungStreams(t *testing.T) {
	hs := &hangs{blackhole: 2}
	f, client, w := watchedFake(t, hs)
	const n = 20
	for i := range n {
		f.srv.Publish(f.topic, []byte{byte(i)}, nil)
	}
	time.Sleep(testStall / 4) // the peek counts only messages that waited a while
	var reopens atomic.Int64
	s := watchedSource(client, f.sub, w, &reopens)
	var mu sync.Mutex
	got := map[string]bool{}
	var stalled atomic.Value
	r := runSource(s, context.Background(), func(_ context.Context, m *Message) bool {
		mu.Lock()
		got[m.ID] = true
		mu.Unlock()
		return true
	})
	start := time.Now()
	waitFor(t, "every message delivered", 10*testStall, func() bool {
		if err := s.Stalled(); err != nil {
			stalled.Store(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	})
	took := time.Since(start)
	if hs.swallowed.Load() != 2 {
		t.Errorf("%d streams lost, want the first 2", hs.swallowed.Load())
	}
	if reopens.Load() != 1 {
		t.Errorf("%d reopens, want 1", reopens.Load())
	}
	if took < testStall {
		t.Errorf("delivered after %v, before the stall timeout: the first streams were not hung", took)
	}
	if st := w.State(f.sub); st.Broke.IsZero() || st.Broke.Before(start) {
		t.Errorf("stream state %+v: the reopen is no break", st)
	}
	if err := stalled.Load(); err != nil {
		t.Errorf("stalled while a reopen helped: %v", err)
	}
	r.stop(t, 5*time.Second)
	if st := w.State(f.sub); st.Open != 0 {
		t.Errorf("%d streams still open after Run returned", st.Open)
	}
}

// TestWatchdogFailsWhenReopeningDoesNotHelp: every stream is lost. After
// the reopen and another stall timeout Stalled names the subscription; the
// streams are reopened every stall timeout meanwhile, and once new streams
// work the first delivery clears it. A stop while hung is prompt.
func TestWatchdogFailsWhenReopeningDoesNotHelp(t *testing.T) {
	hs := &hangs{}
	hs.all.Store(true)
	f, client, w := watchedFake(t, hs)
	f.srv.Publish(f.topic, []byte("waiting"), nil)
	time.Sleep(testStall / 4)
	var reopens atomic.Int64
	s := watchedSource(client, f.sub, w, &reopens)
	var delivered atomic.Int64
	r := runSource(s, context.Background(), func(context.Context, *Message) bool { delivered.Add(1); return true })
	start := time.Now()
	waitFor(t, "stalled", 10*testStall, func() bool { return s.Stalled() != nil })
	if took := time.Since(start); took < 2*testStall {
		t.Errorf("stalled after %v, before two stall timeouts", took)
	}
	err := s.Stalled()
	if !strings.Contains(err.Error(), f.sub) || !strings.Contains(err.Error(), "did not help") {
		t.Errorf("Stalled = %v, want it to name the subscription", err)
	}
	if reopens.Load() < 2 || delivered.Load() != 0 {
		t.Fatalf("%d reopens, %d delivered; want at least 2 and none", reopens.Load(), delivered.Load())
	}
	// New streams work again: the next reopen brings the message.
	hs.all.Store(false)
	waitFor(t, "recovery", 10*testStall, func() bool { return delivered.Load() > 0 && s.Stalled() == nil })
	hs.all.Store(true)
	r.stop(t, 5*time.Second)
	if err := s.Stalled(); err != nil {
		t.Errorf("stalled after Run returned: %v", err)
	}
}

// TestWatchdogStopsPromptlyWhileHung: a stop while every stream hangs
// returns at once, not stuck on the lost streams.
func TestWatchdogStopsPromptlyWhileHung(t *testing.T) {
	hs := &hangs{}
	hs.all.Store(true)
	f, client, w := watchedFake(t, hs)
	f.srv.Publish(f.topic, []byte("waiting"), nil)
	var reopens atomic.Int64
	s := watchedSource(client, f.sub, w, &reopens)
	r := runSource(s, context.Background(), func(context.Context, *Message) bool { return true })
	waitFor(t, "a reopen", 10*testStall, func() bool { return reopens.Load() > 0 })
	r.stop(t, 2*time.Second)
}

// TestWatchdogReopenKeepsTheOldHandlersOutcome: a message is in its
// handler when the streams freeze (they stop returning what the server
// sends). The watchdog reopens; the handler still runs, with its work
// context alive, and its ack reaches the server after the reopen; a message
// published afterwards comes through the new streams; Run returns only
// after the old handler did.
func TestWatchdogReopenKeepsTheOldHandlersOutcome(t *testing.T) {
	hs := &hangs{}
	f, client, w := watchedFake(t, hs)
	var reopens atomic.Int64
	s := watchedSource(client, f.sub, w, &reopens)
	s.peek = func(context.Context) bool { return true } // messages wait (the fake pushes them onto the frozen streams)
	first := f.srv.Publish(f.topic, []byte("first"), nil)
	inHandler, release := make(chan struct{}), make(chan struct{})
	var handlerCtxErr atomic.Value
	got := make(chan string, 10)
	work, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	r := runSource(s, work, func(ctx context.Context, m *Message) bool {
		if m.ID == first {
			close(inHandler)
			<-release
			if err := ctx.Err(); err != nil {
				handlerCtxErr.Store(err)
			}
		}
		got <- m.ID
		return true
	})
	<-inHandler
	hs.freeze()
	waitFor(t, "a reopen", 10*testStall, func() bool { return reopens.Load() == 1 })
	close(release)
	if id := <-got; id != first {
		t.Fatalf("got %s first", id)
	}
	if err := handlerCtxErr.Load(); err != nil {
		t.Fatalf("the old handler's context ended with the reopen: %v", err)
	}
	waitFor(t, "the old handler's ack", 5*time.Second, func() bool { return f.srv.Message(first).Acks == 1 })
	second := f.srv.Publish(f.topic, []byte("second"), nil)
	select {
	case id := <-got:
		if id != second {
			t.Fatalf("got %s, want the second message", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second message was not delivered after the reopen")
	}
	if d := f.srv.Message(first).Deliveries; d != 1 {
		t.Errorf("the first message was delivered %d times: its outcome was lost", d)
	}
	r.stop(t, 5*time.Second)
}

// TestWatchdogLeavesABusyPipelineAlone: the handlers hold every slot of the
// flow control, messages wait, and nothing is delivered for many stall
// timeouts: no reopen, never stalled. Then the handlers finish, and
// everything is delivered.
func TestWatchdogLeavesABusyPipelineAlone(t *testing.T) {
	hs := &hangs{}
	f, client, w := watchedFake(t, hs)
	var reopens atomic.Int64
	s := New(client, zap.NewNop(), f.sub, config.Source{Streams: 2, MaxOutstandingMessages: 4, StallTimeout: testStall}, 1<<20)
	s.SetWatchdogHooks(WatchdogHooks{Streams: w, Reopened: func() { reopens.Add(1) }})
	var peeks atomic.Int64
	s.peek = func(context.Context) bool { peeks.Add(1); return true } // messages wait
	const n = 12
	for i := range n {
		f.srv.Publish(f.topic, []byte{byte(i)}, nil)
	}
	release := make(chan struct{})
	var held, delivered atomic.Int64
	r := runSource(s, context.Background(), func(context.Context, *Message) bool {
		held.Add(1)
		<-release
		delivered.Add(1)
		return true
	})
	waitFor(t, "every slot held", 5*time.Second, func() bool { return held.Load() == 4 })
	time.Sleep(6 * testStall)
	if reopens.Load() != 0 || peeks.Load() != 0 || s.Stalled() != nil {
		t.Fatalf("busy pipeline: %d reopens, %d peeks, stalled %v", reopens.Load(), peeks.Load(), s.Stalled())
	}
	close(release)
	waitFor(t, "every message delivered", 5*time.Second, func() bool { return delivered.Load() == n })
	if reopens.Load() != 0 {
		t.Errorf("%d reopens after the busy spell", reopens.Load())
	}
	r.stop(t, 5*time.Second)
}

// TestWatchdogLeavesAnIdleSubscriptionAlone: nothing published; the real
// peek finds nothing; no reopen.
func TestWatchdogLeavesAnIdleSubscriptionAlone(t *testing.T) {
	hs := &hangs{}
	f, client, w := watchedFake(t, hs)
	var reopens atomic.Int64
	s := watchedSource(client, f.sub, w, &reopens)
	r := runSource(s, context.Background(), func(context.Context, *Message) bool { return true })
	time.Sleep(5 * testStall)
	if reopens.Load() != 0 || s.Stalled() != nil {
		t.Fatalf("idle subscription: %d reopens, stalled %v", reopens.Load(), s.Stalled())
	}
	r.stop(t, 5*time.Second)
}

// TestPeekSeesAWaitingMessageAndLeavesIt: the peek finds a message that
// waited long enough and nacks it (it is delivered again at once), and
// does not count one that was just published.
func TestPeekSeesAWaitingMessageAndLeavesIt(t *testing.T) {
	f := newFake(t)
	s := New(f.client, zap.NewNop(), f.sub, config.Source{Streams: 1, MaxOutstandingMessages: 10, StallTimeout: testStall}, 1<<20)
	ctx := context.Background()
	if s.peekWaiting(ctx) {
		t.Fatal("a peek at an empty subscription found a message")
	}
	id := f.srv.Publish(f.topic, []byte("fresh"), nil)
	if s.peekWaiting(ctx) {
		t.Fatal("a message published just now counts as waiting")
	}
	time.Sleep(testStall / 4)
	if !s.peekWaiting(ctx) {
		t.Fatal("the peek did not see a message that waited")
	}
	// Nacked: a Pull gets it at once.
	resp, err := f.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
	if err != nil || len(resp.GetReceivedMessages()) != 1 || resp.GetReceivedMessages()[0].GetMessage().GetMessageId() != id {
		t.Fatalf("after the peeks: %v, %v; want the message, released", resp, err)
	}
	if f.srv.Message(id).Acks != 0 {
		t.Error("the peek acked the message")
	}
}
