package reprocess

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/pubsink/pubsink/source"
)

// scripted delivers its messages to the handler, once each, then waits
// for the receive context; nacked ones are delivered once more.
type scripted struct {
	msgs  []*source.Message
	acked map[string]int
}

func (s *scripted) Run(receiveCtx, workCtx context.Context, h source.Handler) error {
	s.acked = map[string]int{}
	queue := append([]*source.Message(nil), s.msgs...)
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if h(workCtx, m) {
			s.acked[m.ID]++
		} else {
			queue = append(queue, m)
		}
	}
	<-receiveCtx.Done()
	return nil
}
func (s *scripted) Receiving() bool { return true }
func (s *scripted) Stalled() error  { return nil }

// TestTheGateProcessesTheRangeAndAcksWhatFollowsIt: messages published up
// to Until reach the pipeline (a nack comes back and is processed again);
// those after are acked unprocessed; the range is done an idle period after
// the last message of the range, not before, and the progress says how far.
func TestTheGateProcessesTheRangeAndAcksWhatFollowsIt(t *testing.T) {
	clk := &clock{}
	from := clk.now().Add(-time.Hour)
	until := from.Add(30 * time.Minute)
	var msgs []*source.Message
	for i := range 6 {
		msgs = append(msgs, &source.Message{ID: fmt.Sprint(i), PublishTime: from.Add(time.Duration(i) * 10 * time.Minute)})
	}
	// 0..3 are in the range (3 at Until itself), 4 and 5 after it.
	src := &scripted{msgs: msgs}
	g := NewGate(from, until, clk.now)
	if g.Done(time.Second) {
		t.Fatal("done before receiving")
	}
	var handled []string
	nacked := false
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- g.Wrap(src).Run(ctx, context.Background(), func(_ context.Context, m *source.Message) bool {
			handled = append(handled, m.ID)
			if m.ID == "1" && !nacked {
				nacked = true
				return false // a transient failure: nacked, redelivered
			}
			return true
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for g.Progress().Done+g.Progress().Beyond < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("progress %+v", g.Progress())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if want := "[0 1 2 3 1]"; fmt.Sprint(handled) != want {
		t.Errorf("the pipeline handled %v, want %s", handled, want)
	}
	for _, id := range []string{"0", "1", "2", "3", "4", "5"} {
		if src.acked[id] != 1 {
			t.Errorf("message %s acked %d times", id, src.acked[id])
		}
	}
	p := g.Progress()
	if p.Done != 4 || p.Beyond != 2 || p.InFlight != 0 || p.Fraction != 1 || !p.Frontier.Equal(until) {
		t.Errorf("progress %+v", p)
	}
	if g.Done(time.Minute) {
		t.Error("done before an idle period passed")
	}
	clk.advance(time.Minute)
	if !g.Done(time.Minute) {
		t.Error("not done an idle period after the last message of the range")
	}
	if p := g.Progress(); p.Quiet < time.Minute || !strings.HasSuffix(p.Line(), "; none of the range for 1m0s") {
		t.Errorf("quiet %v, line %q", p.Quiet, p.Line())
	}
}

// TestProgressEstimatesTheTimeLeftFromTheFrontier: half the range's span
// done in ten seconds leaves about ten seconds.
func TestProgressEstimatesTheTimeLeftFromTheFrontier(t *testing.T) {
	clk := &clock{}
	from := clk.now().Add(-time.Hour)
	until := from.Add(time.Hour)
	g := NewGate(from, until, clk.now)
	g.started = clk.now()
	g.finished(from.Add(time.Minute)) // the frontier's first move
	clk.advance(10 * time.Second)
	g.finished(from.Add(30 * time.Minute))
	for range 98 {
		g.finished(from)
	}
	p := g.Progress()
	if p.Fraction < 0.49 || p.Fraction > 0.51 {
		t.Errorf("fraction %v, want 0.5", p.Fraction)
	}
	if p.Left < 9*time.Second || p.Left > 11*time.Second {
		t.Errorf("time left %v, want about 10s", p.Left)
	}
	if p.Rate < 9 || p.Rate > 11 {
		t.Errorf("rate %v/s, want 10", p.Rate)
	}
	if line := p.Line(); !strings.Contains(line, "100 messages done (50% of the range") || !strings.Contains(line, "about 10s left") {
		t.Errorf("progress line %q", line)
	}
}

// TestProgressCountsTheRangeFromItsFirstMessage: a --from long before the
// first message does not count the empty stretch as done.
func TestProgressCountsTheRangeFromItsFirstMessage(t *testing.T) {
	clk := &clock{}
	until := clk.now()
	g := NewGate(until.Add(-time.Hour), until, clk.now)
	first := until.Add(-10 * time.Minute)
	g.arrived(first)
	g.finished(first.Add(time.Minute))
	if p := g.Progress(); !p.From.Equal(first) || p.Fraction < 0.09 || p.Fraction > 0.11 {
		t.Errorf("progress from %v, fraction %v; want from the first message, 0.1", p.From, p.Fraction)
	}
}

// TestALimitedGateHoldsAMessageInFlightUntilItsToken: behind a gate limited
// to one message and (practically) no refill, the first message of the
// range goes on and the second waits for its token, counted in flight, so
// that the range is not done however long it waits; stopped meanwhile, it
// is nacked unprocessed (it comes again). Messages after the range take no
// token.
func TestALimitedGateHoldsAMessageInFlightUntilItsToken(t *testing.T) {
	clk := &clock{}
	from := clk.now().Add(-time.Hour)
	until := from.Add(30 * time.Minute)
	g := NewGate(from, until, clk.now)
	g.Limit(rate.NewLimiter(rate.Limit(1e-9), 1))
	handler := func(_ context.Context, m *source.Message) bool { return true }
	run := func(ctx context.Context, m *source.Message) bool {
		var ack bool
		src := &oneShot{m: m, ack: &ack}
		if err := g.Wrap(src).Run(ctx, ctx, handler); err != nil {
			t.Fatal(err)
		}
		return ack
	}
	if !run(context.Background(), &source.Message{ID: "beyond", PublishTime: until.Add(time.Minute)}) {
		t.Fatal("a message after the range was not acked")
	}
	if !run(context.Background(), &source.Message{ID: "first", PublishTime: from}) {
		t.Fatal("the first message of the range, within the burst, was not acked")
	}
	ctx, cancel := context.WithCancel(context.Background())
	acked := make(chan bool)
	go func() { acked <- run(ctx, &source.Message{ID: "second", PublishTime: from.Add(time.Minute)}) }()
	deadline := time.Now().Add(5 * time.Second)
	for g.Progress().InFlight != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("progress %+v, want the second message in flight", g.Progress())
		}
		time.Sleep(time.Millisecond)
	}
	clk.advance(time.Hour)
	if g.Done(time.Minute) {
		t.Error("done while a message of the range waits for its token")
	}
	cancel()
	if <-acked {
		t.Error("the waiting message was acked unprocessed")
	}
	if p := g.Progress(); p.Done != 1 || p.InFlight != 0 || p.Beyond != 1 {
		t.Errorf("progress %+v, want 1 done, 0 in flight, 1 beyond", p)
	}
}

// oneShot hands its one message to the handler and records the answer.
type oneShot struct {
	m   *source.Message
	ack *bool
}

func (s *oneShot) Run(_, workCtx context.Context, h source.Handler) error {
	*s.ack = h(workCtx, s.m)
	return nil
}
func (s *oneShot) Receiving() bool { return true }
func (s *oneShot) Stalled() error  { return nil }
