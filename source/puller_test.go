package source

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pullFaults is a unary interceptor for the tests: the next fail Pulls
// (long polls, not the immediate check of a timed-out one) fail with
// Unavailable, every one of them while failAll is set, and the next hang
// block until their deadline, as a Pull whose answer never comes.
type pullFaults struct {
	fail, hang atomic.Int64
	failAll    atomic.Bool
	hung       atomic.Int64 // Pulls that hung
	checks     atomic.Int64 // immediate Pulls
}

const pullMethod = "/google.pubsub.v1.Subscriber/Pull"

func (f *pullFaults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*pubsubpb.PullRequest); ok && method == pullMethod {
		//lint:ignore SA1019 the Puller's check of a timed-out Pull sets it
		if r.GetReturnImmediately() {
			f.checks.Add(1)
		} else if f.failAll.Load() || f.fail.Add(-1) >= 0 {
			return status.Error(codes.Unavailable, "injected: connection reset")
		} else if f.hang.Add(-1) >= 0 {
			f.hung.Add(1)
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// faultyFake is the fake with a client whose calls go through faults.
func faultyFake(t *testing.T, faults *pullFaults) (*fake, *pubsub.Client) {
	t.Helper()
	f := newFake(t)
	return f, f.clientVia(t, grpc.WithChainUnaryInterceptor(faults.intercept))
}

// seenSet records deliveries by message ID.
type seenSet struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *seenSet) add(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[id]++
	return s.n[id]
}

func (s *seenSet) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.n)
}

func (s *seenSet) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[id]
}

// runPuller runs p with h until the returned running is stopped.
func runPuller(p *Puller, h Handler) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx, context.Background(), h) }()
	return r
}

// acceptingPuller is a Puller of sub through client that accepts every
// message, running until stopped, with what it delivered and the errors
// it reported.
type acceptingPuller struct {
	*Puller
	seen seenSet
	errs errorCounts
	run  *running
}

func startAccepting(client *pubsub.Client, sub string, cfg PullerConfig) *acceptingPuller {
	a := &acceptingPuller{}
	cfg.OnError = a.errs.on
	a.Puller = NewPuller(client, zap.NewNop(), sub, cfg)
	a.run = runPuller(a.Puller, func(_ context.Context, m *Message) bool { a.seen.add(m.ID); return true })
	return a
}

// errorCounts counts PullerConfig.OnError's calls by method.
type errorCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *errorCounts) on(method string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[method]++
}

func (e *errorCounts) get(method string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[method]
}

// TestPullerDeliversEveryMessageOnceAndAcksIt: more messages than a
// batch, each handed to the handler once with its envelope, and each acked
// once (in pstest's own records); no break, and every loop open while it
// runs.
func TestPullerDeliversEveryMessageOnceAndAcksIt(t *testing.T) {
	f := newFake(t)
	const n = 2500
	first := f.srv.Publish(f.topic, []byte("payload"), map[string]string{"ts": "42"})
	for range n - 1 {
		f.srv.Publish(f.topic, []byte("x"), nil)
	}
	p := NewPuller(f.client, zap.NewNop(), f.sub, PullerConfig{Loops: 3})
	var seen seenSet
	r := runPuller(p, func(_ context.Context, m *Message) bool {
		if m.ID == first && (string(m.Data) != "payload" || m.Attributes["ts"] != "42" || m.PublishTime.IsZero() || m.ReceivedAt.IsZero()) {
			t.Errorf("envelope %+v does not carry the message", m)
		}
		seen.add(m.ID)
		return true
	})
	waitFor(t, "every message delivered", 20*time.Second, func() bool { return seen.distinct() == n })
	if st := p.State(); st.Open != 3 || !st.Broke.IsZero() {
		t.Errorf("state %+v while running; want 3 loops open and no break", st)
	}
	r.stop(t, 5*time.Second)
	if st := p.State(); st.Open != 0 {
		t.Errorf("state %+v after Run returned; want no loop open", st)
	}
	msgs := f.srv.Messages()
	if len(msgs) != n {
		t.Fatalf("%d messages on the server, want %d", len(msgs), n)
	}
	for _, m := range msgs {
		if m.Deliveries != 1 || m.Acks != 1 || seen.count(m.ID) != 1 {
			t.Fatalf("message %s: delivered %d times (handler: %d), acked %d times; want once each", m.ID, m.Deliveries, seen.count(m.ID), m.Acks)
		}
	}
}

// TestPullerNacksWhatTheHandlerRefuses: a refused message is released at
// once (ModifyAckDeadline 0), not after the subscription's ack deadline (10
// minutes here), and acked when accepted.
func TestPullerNacksWhatTheHandlerRefuses(t *testing.T) {
	f := newFake(t)
	sub := f.sub + "-long"
	if _, err := f.client.SubscriptionAdminClient.CreateSubscription(context.Background(), &pubsubpb.Subscription{Name: sub, Topic: f.topic, AckDeadlineSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	refused := f.srv.Publish(f.topic, []byte("no"), nil)
	f.srv.Publish(f.topic, []byte("yes"), nil)
	p := NewPuller(f.client, zap.NewNop(), sub, PullerConfig{})
	var seen seenSet
	r := runPuller(p, func(_ context.Context, m *Message) bool {
		return seen.add(m.ID) > 1 || m.ID != refused
	})
	waitFor(t, "the refused message redelivered", 10*time.Second, func() bool { return seen.count(refused) >= 2 })
	r.stop(t, 5*time.Second)
	for _, m := range f.srv.Messages() {
		if m.ID != refused {
			continue
		}
		if len(m.Modacks) == 0 || m.Modacks[0].AckDeadline != 0 || m.Acks != 1 {
			t.Errorf("refused message: modacks %+v, acks %d; want a ModifyAckDeadline 0, then one ack", m.Modacks, m.Acks)
		}
	}
	if st := p.State(); !st.Broke.IsZero() {
		t.Errorf("state %+v: a nack that was sent is no break", st)
	}
}

// TestPullerMarksAFailedPullAsABreakAndRecovers: each failed Pull is seen
// (the client's own retries are off: one error each), marks a break, and
// the loop pulls again and delivers everything.
func TestPullerMarksAFailedPullAsABreakAndRecovers(t *testing.T) {
	faults := &pullFaults{}
	faults.fail.Store(3)
	f, client := faultyFake(t, faults)
	for range 5 {
		f.srv.Publish(f.topic, []byte("x"), nil)
	}
	before := time.Now()
	p := startAccepting(client, f.sub, PullerConfig{Loops: 1})
	waitFor(t, "every message delivered", 10*time.Second, func() bool { return p.seen.distinct() == 5 })
	st := p.State()
	p.run.stop(t, 5*time.Second)
	if st.Broke.Before(before) || st.Open != 1 {
		t.Errorf("state %+v after 3 failed pulls and a good one; want a break since %v and the loop open again", st, before)
	}
	if got := p.errs.get("Pull"); got != 3 {
		t.Errorf("%d failed pulls counted, want 3 (one per failed call: the client must not retry a Pull itself)", got)
	}
}

// TestPullerTakesAPullThatHungWhileMessagesWaitedForABreak: a Pull that
// gets no answer until its deadline while old messages wait is a hung
// call, not an idle subscription: what it may have leased is lost, so it
// is a break; the immediate check delivers the messages.
func TestPullerTakesAPullThatHungWhileMessagesWaitedForABreak(t *testing.T) {
	faults := &pullFaults{}
	faults.hang.Store(1)
	f, client := faultyFake(t, faults)
	for range 3 {
		f.srv.Publish(f.topic, []byte("x"), nil)
	}
	time.Sleep(confirmSlack + 100*time.Millisecond) // the messages must be older than the Pull by the slack
	p := startAccepting(client, f.sub, PullerConfig{Loops: 1, PullTimeout: 300 * time.Millisecond})
	waitFor(t, "every message delivered", 10*time.Second, func() bool { return p.seen.distinct() == 3 })
	st := p.State()
	p.run.stop(t, 5*time.Second)
	if faults.hung.Load() != 1 || faults.checks.Load() < 1 {
		t.Fatalf("%d pulls hung, %d checks: the fault was not injected", faults.hung.Load(), faults.checks.Load())
	}
	if st.Broke.IsZero() || p.errs.get("Pull") != 1 {
		t.Errorf("state %+v, %d failed pulls counted; want a break, and one", st, p.errs.get("Pull"))
	}
}

// TestPullerTakesATimeoutOnAnIdleSubscriptionForNoBreak: on Pub/Sub an idle
// Pull ends only at its deadline. When the immediate check finds nothing,
// the subscription was idle: no break, no error, not stalled; a message
// published next is delivered.
func TestPullerTakesATimeoutOnAnIdleSubscriptionForNoBreak(t *testing.T) {
	faults := &pullFaults{}
	faults.hang.Store(2)
	f, client := faultyFake(t, faults)
	p := startAccepting(client, f.sub, PullerConfig{Loops: 1, PullTimeout: 200 * time.Millisecond, StallTimeout: time.Second})
	waitFor(t, "two pulls timed out and were checked", 10*time.Second, func() bool { return faults.hung.Load() == 2 && faults.checks.Load() >= 2 })
	id := f.srv.Publish(f.topic, []byte("x"), nil)
	waitFor(t, "the new message delivered", 10*time.Second, func() bool { return p.seen.count(id) == 1 })
	st, stalled := p.State(), p.Stalled()
	p.run.stop(t, 5*time.Second)
	if !st.Broke.IsZero() || st.Open != 1 || p.errs.get("Pull") != 0 || stalled != nil {
		t.Errorf("state %+v, %d failed pulls, stalled %v; want no break, the loop open, no error, not stalled", st, p.errs.get("Pull"), stalled)
	}
}

// TestPullerIsStalledWhileNoPullIsAnswered: with every Pull failing for
// longer than the stall timeout, Stalled names the subscription and the
// error; once pulls are answered again it is nil, and after Run too.
func TestPullerIsStalledWhileNoPullIsAnswered(t *testing.T) {
	faults := &pullFaults{}
	faults.failAll.Store(true)
	f, client := faultyFake(t, faults)
	p := startAccepting(client, f.sub, PullerConfig{StallTimeout: 300 * time.Millisecond})
	r := p.run
	waitFor(t, "stalled", 10*time.Second, func() bool { return p.Stalled() != nil })
	if err := p.Stalled(); !strings.Contains(err.Error(), f.sub) || !strings.Contains(err.Error(), "injected: connection reset") {
		t.Errorf("Stalled = %v; want the subscription and the last error named", err)
	}
	if st := p.State(); st.Open != 0 || st.Broke.IsZero() {
		t.Errorf("state %+v while every pull fails; want no loop open and a break", st)
	}
	faults.failAll.Store(false)
	waitFor(t, "not stalled once pulls are answered", 15*time.Second, func() bool { return p.Stalled() == nil && p.State().Open == DefaultPullLoops })
	r.stop(t, 5*time.Second)
	faults.failAll.Store(true)
	time.Sleep(400 * time.Millisecond)
	if err := p.Stalled(); err != nil {
		t.Errorf("Stalled after Run returned = %v, want nil", err)
	}
}

// TestPullerRunFailsWhenTheSubscriptionIsGone: a permanent error ends Run
// with an error naming the subscription.
func TestPullerRunFailsWhenTheSubscriptionIsGone(t *testing.T) {
	f := newFake(t)
	if err := f.client.SubscriptionAdminClient.DeleteSubscription(context.Background(), &pubsubpb.DeleteSubscriptionRequest{Subscription: f.sub}); err != nil {
		t.Fatal(err)
	}
	p := NewPuller(f.client, zap.NewNop(), f.sub, PullerConfig{})
	done := make(chan error, 1)
	go func() {
		done <- p.Run(context.Background(), context.Background(), func(context.Context, *Message) bool { return true })
	}()
	select {
	case err := <-done:
		if err == nil || status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), f.sub) {
			t.Fatalf("Run = %v; want NotFound naming the subscription", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running with the subscription gone")
	}
}

// TestPullHealthStalled drives the stall rule with a fake clock.
func TestPullHealthStalled(t *testing.T) {
	const timeout = time.Minute
	t0 := time.Unix(1000, 0)
	var h pullHealth
	var healthy bool
	if err := h.stalled(t0.Add(time.Hour), timeout, "s"); err != nil {
		t.Fatalf("not running: %v", err)
	}
	h.begin(t0)
	h.joined(&healthy)
	if err := h.stalled(t0.Add(timeout-time.Second), timeout, "s"); err != nil {
		t.Fatalf("within the timeout of the start: %v", err)
	}
	if err := h.stalled(t0.Add(timeout), timeout, "s"); err == nil || !strings.Contains(err.Error(), "still waiting") {
		t.Fatalf("a timeout after the start with no answer: %v", err)
	}
	if err := h.stalled(t0.Add(timeout), 0, "s"); err != nil {
		t.Fatalf("no stall timeout: %v", err)
	}
	h.failed(t0.Add(time.Second), errors.New("boom"), &healthy)
	if err := h.stalled(t0.Add(2*timeout), timeout, "s"); err == nil || !strings.Contains(err.Error(), "1 pulls failed, the last with: boom") {
		t.Fatalf("after a failure: %v", err)
	}
	h.handlingBegan()
	if err := h.stalled(t0.Add(3*timeout), timeout, "s"); err != nil {
		t.Fatalf("a loop in its handlers (back-pressure): %v", err)
	}
	t1 := t0.Add(3 * timeout)
	h.handlingEnded(t1)
	if err := h.stalled(t1.Add(timeout-time.Second), timeout, "s"); err != nil {
		t.Fatalf("within the timeout of the handlers' end: %v", err)
	}
	if st := h.state(); st.Open != 0 || !st.Broke.Equal(t0.Add(time.Second)) {
		t.Fatalf("state %+v after a failure", st)
	}
	if n := h.pulled(t1.Add(timeout), &healthy); n != 1 {
		t.Fatalf("pulled recovered from %d failures, want 1", n)
	}
	if err := h.stalled(t1.Add(2*timeout-time.Second), timeout, "s"); err != nil {
		t.Fatalf("within the timeout of an answer: %v", err)
	}
	if st := h.state(); st.Open != 1 {
		t.Fatalf("state %+v after an answer: the loop is open again", st)
	}
	h.end()
	if err := h.stalled(t1.Add(time.Hour), timeout, "s"); err != nil {
		t.Fatalf("after Run: %v", err)
	}
}

func TestAckChunksStayUnderTheRequestLimit(t *testing.T) {
	sizes := func(ids []string) (n []int) {
		for c := range ackChunks(ids) {
			n = append(n, len(c))
		}
		return n
	}
	short := make([]string, 2500)
	for i := range short {
		short[i] = "projects/p/subscriptions/s:123456"
	}
	if got := sizes(short); len(got) != 3 || got[0] != maxAckIDs || got[1] != maxAckIDs || got[2] != 500 {
		t.Errorf("2500 short IDs in chunks of %v, want 1000, 1000, 500", got)
	}
	long := strings.Repeat("a", 150<<10)
	if got := sizes([]string{long, long, long, long}); len(got) != 2 || got[0] != 2 || got[1] != 2 {
		t.Errorf("four 150 KiB IDs in chunks of %v, want two of two (400 KiB each at most)", got)
	}
	huge := strings.Repeat("a", 600<<10)
	if got := sizes([]string{"x", huge, "y"}); len(got) != 3 {
		t.Errorf("an ID over the limit: chunks of %v, want it alone in its own", got)
	}
	if got := sizes(nil); len(got) != 0 {
		t.Errorf("no IDs: chunks %v", got)
	}
}
