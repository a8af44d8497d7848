package pipeline

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/retry"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/watermark"
)

// fakeSink records rows; fail, if set, decides the error of each row of
// write n (the first error fails the whole write, which records nothing).
type fakeSink struct {
	mu   sync.Mutex
	rows map[string]sinks.Row
	n    int
	fail func(n int, row *sinks.Row) error
}

func (s *fakeSink) Write(ctx context.Context, rows []sinks.Row) error {
	if len(rows) > 0 && rows[0].After != nil {
		if err := rows[0].After.Wait(ctx); err != nil {
			return err // as a sink must: nothing written
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.fail != nil {
		for i := range rows {
			if err := s.fail(s.n, &rows[i]); err != nil {
				return err
			}
		}
	}
	if s.rows == nil {
		s.rows = map[string]sinks.Row{}
	}
	for _, row := range rows {
		// A copy: a sink must not retain the rows it is given (the
		// pipeline reuses their memory for the next message).
		row.Cells = slices.Clone(row.Cells)
		for i := range row.Cells {
			row.Cells[i].Value = slices.Clone(row.Cells[i].Value)
		}
		s.rows[row.Key] = row
	}
	return nil
}

func (s *fakeSink) Close(context.Context) error { return nil }
func (s *fakeSink) Check(context.Context) error { return nil }

type sent struct {
	id     string
	reason deadletter.Reason
}

type fakeDeadLetter struct {
	mu       sync.Mutex
	sent     []sent
	err      error
	checkErr error // what Check answers
}

func (d *fakeDeadLetter) Send(_ context.Context, m *source.Message, reason deadletter.Reason, _ error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return d.err
	}
	d.sent = append(d.sent, sent{m.ID, reason})
	return nil
}

func (d *fakeDeadLetter) Close(context.Context) error { return nil }

func (d *fakeDeadLetter) Check(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checkErr
}

// receivingSource is a Source that is always receiving and delivers
// nothing.
type receivingSource struct{}

func (receivingSource) Run(context.Context, context.Context, source.Handler) error { return nil }
func (receivingSource) Receiving() bool                                            { return true }
func (receivingSource) Stalled() error                                             { return nil }

// fakeDedupe keeps committed keys in a map. It counts the Releases that
// ended a hold, as the real one would: a Release after Commit, or a second
// one, is not counted.
type fakeDedupe struct {
	mu        sync.Mutex
	committed map[string]bool
	held      map[string]uint64 // key → token of its hold
	tokens    uint64
	released  int
	commitErr error
	// commitFails, when positive, makes only the first that many Commits
	// fail with commitErr; 0: every Commit fails with it (when set).
	commitFails, failedCommits int
	claimErr                   error    // every Claim fails with it (the catalog unreadable)
	winners                    []string // the winners Claim was asked for
	// aheadErr, when set, is what the first ClaimAhead's Ready returns:
	// the claim queued ahead of the rows decided nothing.
	aheadErr error
}

// failedReady is a claim queued ahead whose write failed.
type failedReady struct{ err error }

func (r failedReady) Wait(context.Context) error { return r.err }

func (d *fakeDedupe) Claim(_ context.Context, key, winner string) (dedupe.Claim, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.winners = append(d.winners, winner)
	if d.claimErr != nil {
		return dedupe.Claim{}, false, d.claimErr
	}
	if d.committed[key] {
		return dedupe.Claim{}, true, nil
	}
	if d.held == nil {
		d.held = map[string]uint64{}
	}
	d.tokens++
	d.held[key] = d.tokens
	return dedupe.NewClaim(d, key, d.tokens), false, nil
}

// ClaimOnce is Claim: the fake records every commit.
// ClaimAhead is Claim (the fake has nothing to queue), but for the first
// one after aheadErr is set: its claim's Ready fails with aheadErr.
func (d *fakeDedupe) ClaimAhead(ctx context.Context, key, winner string) (dedupe.Claim, bool, error) {
	c, dup, err := d.Claim(ctx, key, winner)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil && !dup && d.aheadErr != nil {
		c = dedupe.NewClaimAhead(d, key, d.tokens, failedReady{d.aheadErr})
		d.aheadErr = nil
	}
	return c, dup, err
}

func (d *fakeDedupe) ClaimOnce(ctx context.Context, key, winner string) (dedupe.Claim, bool, error) {
	return d.Claim(ctx, key, winner)
}

// Resume answers a committed key as a duplicate and holds nothing else:
// the fake keeps no claims apart from commits.
func (d *fakeDedupe) Resume(_ context.Context, key, winner string) (dedupe.Claim, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.winners = append(d.winners, winner)
	if d.claimErr != nil {
		return dedupe.Claim{}, false, d.claimErr
	}
	return dedupe.Claim{}, d.committed[key], nil
}

func (d *fakeDedupe) Commit(_ context.Context, key string, token uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[key] != token {
		return errors.New("fake dedupe: commit of a key not held")
	}
	if d.commitErr != nil && (d.commitFails == 0 || d.failedCommits < d.commitFails) {
		d.failedCommits++
		return d.commitErr
	}
	if d.committed == nil {
		d.committed = map[string]bool{}
	}
	d.committed[key] = true
	delete(d.held, key)
	return nil
}

func (d *fakeDedupe) Release(key string, token uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[key] == token {
		delete(d.held, key)
		d.released++
	}
}

func (d *fakeDedupe) Run(context.Context) error   { return nil }
func (d *fakeDedupe) Close(context.Context) error { return nil }
func (d *fakeDedupe) Stats() dedupe.Stats         { return dedupe.Stats{} }

type fakeTracker struct {
	wm       time.Time
	mu       sync.Mutex
	finished []string
	oldest   func() (time.Time, bool)
}

func (t *fakeTracker) Watermark() time.Time { return t.wm }

func (t *fakeTracker) Stalled() error { return nil }

func (t *fakeTracker) WatchInFlight(oldest func() (time.Time, bool)) { t.oldest = oldest }

func (t *fakeTracker) Finished(_ context.Context, m *source.Message, _ time.Time) error {
	t.mu.Lock()
	t.finished = append(t.finished, m.ID)
	t.mu.Unlock()
	return nil
}

func (t *fakeTracker) Run(context.Context) error   { return nil }
func (t *fakeTracker) Close(context.Context) error { return nil }
func (t *fakeTracker) Stats() watermark.Stats      { return watermark.Stats{} }

var fastRetry = retry.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond}

func testConfig() config.Pipeline {
	return config.Pipeline{
		Name: "orders",
		Mode: config.ModeExactlyOnce,
		Source: config.Source{
			IDAttribute:        "order_id",
			TimestampAttribute: "event_ts",
			TimestampFormat:    config.TimestampAuto,
		},
		Watermark: config.Watermark{LateData: config.LateAccept},
		Sink: config.Sink{
			RowKey:    "{attributes.customer_id}#{attributes.order_id}",
			Columns:   map[string]string{"data": "{data}", "amount": "{data.amount}"},
			Timestamp: config.CellTimeEvent,
		},
	}
}

func newTestPipeline(t *testing.T, cfg config.Pipeline, deps Deps) (*Pipeline, *metrics.Pipeline) {
	t.Helper()
	deps.Metrics = metrics.New().Pipeline(cfg.Name)
	deps.Retry = fastRetry
	p, err := New(zap.NewNop(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return p, deps.Metrics
}

var eventTime = time.Date(2026, 5, 6, 7, 8, 9, 123_000_000, time.UTC)

func order(id, customer, data string) *source.Message {
	return &source.Message{
		ID:          "m-" + id,
		Data:        []byte(data),
		Attributes:  map[string]string{"order_id": id, "customer_id": customer, "event_ts": "1778051289123"},
		PublishTime: eventTime.Add(time.Second),
	}
}

func TestCommittedRowHasTemplatedKeyCellsAndEventTime(t *testing.T) {
	sink := &fakeSink{}
	p, m := newTestPipeline(t, testConfig(), Deps{Sink: sink, Dedupe: &fakeDedupe{}})
	if !p.Handle(context.Background(), order("o1", "c9", `{"amount": 12.5}`)) {
		t.Fatal("Handle returned nack for a good message")
	}
	row, ok := sink.rows["c9#o1"]
	if !ok {
		t.Fatalf("row c9#o1 not written; rows: %v", sink.rows)
	}
	if !row.Timestamp.Equal(eventTime) {
		t.Errorf("timestamp %v, want the event time %v", row.Timestamp, eventTime)
	}
	cells := map[string]string{}
	for _, c := range row.Cells {
		cells[c.Column] = string(c.Value)
	}
	if cells["amount"] != "12.5" || cells["data"] != `{"amount": 12.5}` {
		t.Errorf("cells %v", cells)
	}
	if got := metrics.Value(m.Committed); got != 1 {
		t.Errorf("committed = %v, want 1", got)
	}
}

// TestAClaimQueuedAheadThatDecidedNothingIsMadeAgain: the claim of a
// message's key goes ahead of its rows, which the sink writes only once it
// is durable; when it decided nothing (its write failed, or it lost the
// key), no row is written for it, and the pipeline gives the key up,
// claims it again, waiting, and then writes and commits.
func TestAClaimQueuedAheadThatDecidedNothingIsMadeAgain(t *testing.T) {
	sink := &fakeSink{}
	dd := &fakeDedupe{aheadErr: errors.New("the claim's write failed")}
	p, m := newTestPipeline(t, testConfig(), Deps{Sink: sink, Dedupe: dd})
	if !p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("nacked")
	}
	if sink.n != 1 || len(sink.rows) != 1 {
		t.Fatalf("%d writes past their After, rows %v; want one (the first refused for its claim, the second written)", sink.n, sink.rows)
	}
	if len(dd.winners) != 2 || dd.released != 1 || !dd.committed["c9#o1"] && !dd.committed["o1"] {
		t.Fatalf("claims %v, released %d, committed %v; want the key claimed twice, the first given up, the second committed", dd.winners, dd.released, dd.committed)
	}
	if got := metrics.Value(m.Committed); got != 1 {
		t.Fatalf("committed %v, want 1", got)
	}
}

func TestDuplicateIsAckedWithoutWrite(t *testing.T) {
	sink := &fakeSink{}
	p, m := newTestPipeline(t, testConfig(), Deps{Sink: sink, Dedupe: &fakeDedupe{}})
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	dup := order("o1", "c9", `{"amount": 2}`)
	dup.ID = "m-other"
	if !p.Handle(context.Background(), dup) {
		t.Fatal("a duplicate must be acked")
	}
	if sink.n != 1 || string(sink.rows["c9#o1"].Cells[0].Value) != "1" {
		t.Errorf("writes = %d, row %v: the first payload must stay", sink.n, sink.rows["c9#o1"])
	}
	if got := metrics.Value(m.Duplicate); got != 1 {
		t.Errorf("duplicate = %v, want 1", got)
	}
}

func TestTransientSinkErrorsAreRetriedNeverDeadLettered(t *testing.T) {
	sink := &fakeSink{fail: func(n int, _ *sinks.Row) error {
		if n <= 5 {
			return status.Error(codes.Unavailable, "tablet server restarting")
		}
		return nil
	}}
	dl := &fakeDeadLetter{}
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: sink, DeadLetter: dl})
	if !p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("want ack once the sink recovers")
	}
	if sink.n != 6 || len(sink.rows) != 1 || len(dl.sent) != 0 {
		t.Errorf("writes=%d rows=%d dead-lettered=%d; want 6 1 0", sink.n, len(sink.rows), len(dl.sent))
	}
}

func TestTransientErrorUntilShutdownNacks(t *testing.T) {
	sink := &fakeSink{fail: func(int, *sinks.Row) error { return status.Error(codes.Unavailable, "down") }}
	dedupe := &fakeDedupe{}
	dl := &fakeDeadLetter{}
	tracker := &fakeTracker{}
	p, m := newTestPipeline(t, testConfig(), Deps{Sink: sink, Dedupe: dedupe, DeadLetter: dl, Tracker: tracker})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if p.Handle(ctx, order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("want nack when the work context ends during an outage")
	}
	if len(dl.sent) != 0 || dedupe.released != 1 || len(dedupe.committed) != 0 {
		t.Errorf("dead-lettered=%d released=%d committed=%d; want 0 1 0", len(dl.sent), dedupe.released, len(dedupe.committed))
	}
	if len(tracker.finished) != 0 {
		t.Errorf("a nacked message is not finished; tracker got %v", tracker.finished)
	}
	if got := metrics.Value(m.Retried); got != 1 {
		t.Errorf("retried = %v, want 1", got)
	}
}

func TestRejectedRowIsDeadLettered(t *testing.T) {
	sink := &fakeSink{fail: func(int, *sinks.Row) error {
		return &sinks.RejectedError{Err: status.Error(codes.InvalidArgument, "family not found")}
	}}
	dl := &fakeDeadLetter{}
	dedupe := &fakeDedupe{}
	p, m := newTestPipeline(t, testConfig(), Deps{Sink: sink, DeadLetter: dl, Dedupe: dedupe})
	if !p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("want ack after the dead-letter copy")
	}
	if len(dl.sent) != 1 || dl.sent[0].reason != deadletter.SinkRejected {
		t.Fatalf("dead letters %v, want one sink_rejected", dl.sent)
	}
	if sink.n != 1 || dedupe.released != 1 {
		t.Errorf("writes=%d released=%d; a rejection is not retried here and frees the key", sink.n, dedupe.released)
	}
	if got := metrics.Value(m.DeadLettered("sink_rejected")); got != 1 {
		t.Errorf("dead_lettered{sink_rejected} = %v, want 1", got)
	}
}

func TestBadInputGoesToDeadLetterWithItsReason(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(m *source.Message)
		reason deadletter.Reason
	}{
		{"unparsable event time", func(m *source.Message) { m.Attributes["event_ts"] = "noon" }, deadletter.BadEventTime},
		{"missing event time", func(m *source.Message) { delete(m.Attributes, "event_ts") }, deadletter.BadEventTime},
		{"missing dedupe attribute", func(m *source.Message) { delete(m.Attributes, "order_id") }, deadletter.MissingField},
		{"missing row-key attribute", func(m *source.Message) { delete(m.Attributes, "customer_id") }, deadletter.MissingField},
		{"payload not JSON", func(m *source.Message) { m.Data = []byte("amount=1") }, deadletter.InvalidPayload},
		{"missing JSON field", func(m *source.Message) { m.Data = []byte(`{"total": 1}`) }, deadletter.MissingField},
		{"row key too large", func(m *source.Message) { m.Attributes["customer_id"] = string(make([]byte, 5000)) }, deadletter.TooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sink := &fakeSink{}
			dl := &fakeDeadLetter{}
			p, _ := newTestPipeline(t, testConfig(), Deps{Sink: sink, DeadLetter: dl, Limits: sinks.Limits{MaxKeyBytes: 4096}})
			m := order("o1", "c9", `{"amount": 1}`)
			c.mutate(m)
			if !p.Handle(context.Background(), m) {
				t.Fatal("want ack after the dead-letter copy")
			}
			if len(dl.sent) != 1 || dl.sent[0].reason != c.reason {
				t.Fatalf("dead letters %v, want one %s", dl.sent, c.reason)
			}
			if sink.n != 0 {
				t.Fatalf("bad input reached the sink")
			}
		})
	}
}

func TestFailingDeadLetterOutputNacks(t *testing.T) {
	dl := &fakeDeadLetter{err: status.Error(codes.Unavailable, "dead-letter topic unreachable")}
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{}, DeadLetter: dl})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	m := order("o1", "c9", "not json")
	if p.Handle(ctx, m) {
		t.Fatal("a message whose dead-letter copy was not confirmed must be nacked")
	}
}

// TestAFailingDeadLetterOutputHoldsAMessageOnlySoLong: while the output
// fails, the message waits (counted as held) for DeadLetterWait, then is
// nacked and counted as given up, even though its context has no end: a
// held message must not keep its flow-control slot for the life of the
// process.
func TestAFailingDeadLetterOutputHoldsAMessageOnlySoLong(t *testing.T) {
	dl := &fakeDeadLetter{err: status.Error(codes.Unavailable, "dead-letter topic unreachable")}
	p, m := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{}, DeadLetter: dl, DeadLetterWait: 300 * time.Millisecond})
	done := make(chan bool)
	start := time.Now()
	go func() { done <- p.Handle(context.Background(), order("o1", "c9", "not json")) }()
	held := false
	for !held && time.Since(start) < 250*time.Millisecond {
		held = metrics.Value(m.DeadLetterHeld) == 1
		time.Sleep(5 * time.Millisecond)
	}
	if !held {
		t.Fatal("a message retrying a failing dead-letter output is not counted as held")
	}
	select {
	case ack := <-done:
		if ack {
			t.Fatal("acked without a confirmed copy")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the message is still held 5s after a wait of 300ms")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("gave up after %v, before the wait of 300ms", took)
	}
	if metrics.Value(m.DeadLetterHeld) != 0 || metrics.Value(m.DeadLetterGaveUp) != 1 {
		t.Fatalf("held %v, gave up %v; want 0 and 1", metrics.Value(m.DeadLetterHeld), metrics.Value(m.DeadLetterGaveUp))
	}
	if n := metrics.Value(m.DeadLetterErrors("Unavailable")); n < 2 {
		t.Errorf("dead_letter_errors_total{code=Unavailable} = %v, want every failed send counted (at least 2 in 300ms)", n)
	}
}

// TestReadyAsksTheDeadLetterOutput: an output that can tell it is unusable
// (a topic that lost its subscription holds every copy) makes the pipeline
// not ready, and the answer names it.
func TestReadyAsksTheDeadLetterOutput(t *testing.T) {
	dl := &fakeDeadLetter{}
	p, _ := newTestPipeline(t, testConfig(), Deps{Source: receivingSource{}, Sink: &fakeSink{}, DeadLetter: dl})
	if err := p.Ready(context.Background()); err != nil {
		t.Fatalf("Ready with a usable output: %v", err)
	}
	dl.mu.Lock()
	dl.checkErr = errors.New("dead-letter topic projects/p/topics/dlq has no subscription")
	dl.mu.Unlock()
	err := p.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "dead_letter") || !strings.Contains(err.Error(), "projects/p/topics/dlq has no subscription") {
		t.Fatalf("Ready = %v; want the dead-letter output's failure named", err)
	}
}

// stallingSource is a receivingSource whose watchdog answers stalled.
type stallingSource struct {
	receivingSource
	mu      sync.Mutex
	stalled error
}

func (s *stallingSource) Stalled() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled
}

// stallingTracker is a fakeTracker whose tracking subscription's watchdog
// answers stalled.
type stallingTracker struct {
	fakeTracker
	stalled error
}

func (t *stallingTracker) Stalled() error { return t.stalled }

// TestStalledNamesThePipelineAndFailsReadiness: a source or tracker whose
// streams hung and could not be reopened makes the pipeline stalled (the
// process unhealthy) and not ready, naming the pipeline and the part's
// reason; /status says it, with the reopens the metric counts.
func TestStalledNamesThePipelineAndFailsReadiness(t *testing.T) {
	src := &stallingSource{}
	tr := &stallingTracker{}
	p, m := newTestPipeline(t, testConfig(), Deps{Source: src, Sink: &fakeSink{}, Tracker: tr})
	if err := p.Stalled(); err != nil {
		t.Fatalf("Stalled = %v while the parts are not", err)
	}
	if err := p.Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	if st := p.Status(); st.Stalled != "" || st.StreamReopens != 0 {
		t.Fatalf("status %+v", st)
	}
	m.StreamReopens.Add(2)
	src.mu.Lock()
	src.stalled = errors.New("subscription projects/p/subscriptions/s has delivered nothing for 4m0s")
	src.mu.Unlock()
	want := "pipeline orders: subscription projects/p/subscriptions/s has delivered nothing for 4m0s"
	if err := p.Stalled(); err == nil || err.Error() != want {
		t.Fatalf("Stalled = %v, want %q", err, want)
	}
	if err := p.Ready(context.Background()); err == nil || err.Error() != want {
		t.Fatalf("Ready = %v, want %q", err, want)
	}
	if st := p.Status(); st.Stalled != want || st.StreamReopens != 2 {
		t.Fatalf("status: stalled %q, stream_reopens %d; want %q and 2", st.Stalled, st.StreamReopens, want)
	}
	src.mu.Lock()
	src.stalled = nil
	src.mu.Unlock()
	tr.stalled = errors.New("subscription projects/p/subscriptions/tracking has delivered nothing")
	if err := p.Stalled(); err == nil || !strings.Contains(err.Error(), "pipeline orders: subscription projects/p/subscriptions/tracking") {
		t.Fatalf("Stalled = %v, want the tracking subscription named", err)
	}
}

func TestWithoutDeadLetterOutputBadInputIsNacked(t *testing.T) {
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{}})
	if p.Handle(context.Background(), order("o1", "c9", "not json")) {
		t.Fatal("bad input with no dead-letter output must be nacked, never acked")
	}
}

func TestLateDataPolicies(t *testing.T) {
	for _, c := range []struct {
		policy  string
		ack     bool
		written bool
		dl      bool
	}{
		{config.LateAccept, true, true, false},
		{config.LateDeadLetter, true, false, true},
		{config.LateDrop, true, false, false},
	} {
		t.Run(c.policy, func(t *testing.T) {
			cfg := testConfig()
			cfg.Watermark.LateData = c.policy
			cfg.Watermark.AllowedLateness = time.Minute
			sink, dl := &fakeSink{}, &fakeDeadLetter{}
			tracker := &fakeTracker{wm: eventTime.Add(time.Minute + time.Millisecond)}
			p, m := newTestPipeline(t, cfg, Deps{Sink: sink, DeadLetter: dl, Tracker: tracker})
			if got := p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`)); got != c.ack {
				t.Fatalf("ack = %v, want %v", got, c.ack)
			}
			if (len(sink.rows) == 1) != c.written || (len(dl.sent) == 1) != c.dl {
				t.Fatalf("written=%d dead-lettered=%v", len(sink.rows), dl.sent)
			}
			if metrics.Value(m.Late) != 1 || len(tracker.finished) != 1 {
				t.Fatalf("late=%v finished=%v, want 1 and the message", metrics.Value(m.Late), tracker.finished)
			}
		})
	}
}

func TestOnTimeWithinAllowedLatenessIsNotLate(t *testing.T) {
	cfg := testConfig()
	cfg.Watermark.LateData = config.LateDrop
	cfg.Watermark.AllowedLateness = time.Minute
	sink := &fakeSink{}
	tracker := &fakeTracker{wm: eventTime.Add(time.Minute)}
	p, m := newTestPipeline(t, cfg, Deps{Sink: sink, Tracker: tracker})
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	if len(sink.rows) != 1 || metrics.Value(m.Late) != 0 {
		t.Fatalf("an event exactly at watermark - allowed_lateness is on time")
	}
}

func TestPublishTimeCellTimestamp(t *testing.T) {
	cfg := testConfig()
	cfg.Sink.Timestamp = config.CellTimePublish
	sink := &fakeSink{}
	p, _ := newTestPipeline(t, cfg, Deps{Sink: sink})
	m := order("o1", "c9", `{"amount": 1}`)
	p.Handle(context.Background(), m)
	if got := sink.rows["c9#o1"].Timestamp; !got.Equal(m.PublishTime) {
		t.Fatalf("timestamp %v, want the publish time %v", got, m.PublishTime)
	}
}

func TestStatusAgreesWithMetrics(t *testing.T) {
	dl := &fakeDeadLetter{}
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{}, DeadLetter: dl, Dedupe: &fakeDedupe{}})
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	p.Handle(context.Background(), order("o2", "c9", `nope`))
	st := p.Status()
	if st.Received != 3 || st.Committed != 1 || st.Duplicate != 1 || st.DeadLettered["invalid_payload"] != 1 || st.InFlight != 0 {
		t.Fatalf("status %+v", st)
	}
	if st.OldestInFlight != nil {
		t.Fatalf("nothing is in flight, status says %v", st.OldestInFlight)
	}
}

func TestTrackerReadsTheOldestPublishTimeInFlight(t *testing.T) {
	tracker := &fakeTracker{}
	m := order("o1", "c9", `{"amount": 1}`)
	var during time.Time
	var held bool
	sink := &fakeSink{fail: func(int, *sinks.Row) error {
		during, held = tracker.oldest()
		return nil
	}}
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: sink, Tracker: tracker})
	if tracker.oldest == nil {
		t.Fatal("New did not hand the tracker the in-flight bookkeeping")
	}
	if _, ok := tracker.oldest(); ok {
		t.Fatal("in flight before any message")
	}
	p.Handle(context.Background(), m)
	if !held || !during.Equal(m.PublishTime.Truncate(time.Second)) {
		t.Errorf("while writing: oldest %v, %v; want the publish second %v", during, held, m.PublishTime.Truncate(time.Second))
	}
	if _, ok := tracker.oldest(); ok {
		t.Error("in flight after the message finished")
	}
}

func TestNewRejectsBadTemplates(t *testing.T) {
	cfg := testConfig()
	cfg.Sink.RowKey = "{atributes.x}"
	_, err := New(zap.NewNop(), cfg, Deps{Sink: &fakeSink{}, Metrics: metrics.New().Pipeline("x")})
	if err == nil {
		t.Fatal("want an error for an unknown placeholder")
	}
	var dummy *mapping.BadInput
	if errors.As(err, &dummy) {
		t.Fatal("a config error is not bad input")
	}
}

func TestLateRedeliveryOfACommittedMessageIsADuplicate(t *testing.T) {
	cfg := testConfig()
	cfg.Watermark.LateData = config.LateDeadLetter
	sink, dl, dedupe := &fakeSink{}, &fakeDeadLetter{}, &fakeDedupe{}
	tracker := &fakeTracker{}
	p, m := newTestPipeline(t, cfg, Deps{Sink: sink, DeadLetter: dl, Dedupe: dedupe, Tracker: tracker})
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	tracker.wm = eventTime.Add(time.Hour) // the watermark moved on
	if !p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("want ack")
	}
	if len(dl.sent) != 0 || metrics.Value(m.Duplicate) != 1 || metrics.Value(m.Late) != 0 {
		t.Fatalf("dead-lettered %v, duplicate %v, late %v; want a duplicate, not a late message",
			dl.sent, metrics.Value(m.Duplicate), metrics.Value(m.Late))
	}
}

// TestALateMessageClaimsNothing: lateness is judged before the claim, so
// a late message under late_data drop only looks whether its key was
// decided (Resume), and holds nothing.
func TestALateMessageClaimsNothing(t *testing.T) {
	cfg := testConfig()
	cfg.Watermark.LateData = config.LateDrop
	dedupe := &fakeDedupe{}
	tracker := &fakeTracker{wm: eventTime.Add(time.Hour)}
	sink := &fakeSink{}
	p, m := newTestPipeline(t, cfg, Deps{Sink: sink, Dedupe: dedupe, Tracker: tracker})
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	if dedupe.tokens != 0 || len(dedupe.committed) != 0 || len(sink.rows) != 0 || metrics.Value(m.Dropped) != 1 {
		t.Fatalf("claims %d, committed %v, rows %v, dropped %v; want a drop that claims nothing", dedupe.tokens, dedupe.committed, sink.rows, metrics.Value(m.Dropped))
	}
}

// TestATransientCommitFailureIsRetried: a key's record (message-ID keys,
// ClaimOnce) that fails once is written on the retry, and the message is
// acked, not nacked for a redelivery.
func TestATransientCommitFailureIsRetried(t *testing.T) {
	cfg := testConfig()
	cfg.Source.IDAttribute = "" // the key is the message ID: ClaimOnce, whose Commit writes
	sink := &fakeSink{}
	dedupe := &fakeDedupe{commitErr: status.Error(codes.Unavailable, "catalog blip"), commitFails: 1}
	p, m := newTestPipeline(t, cfg, Deps{Sink: sink, Dedupe: dedupe})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !p.Handle(ctx, order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("a message whose record failed once was nacked")
	}
	if len(dedupe.committed) != 1 || metrics.Value(m.Committed) != 1 {
		t.Fatalf("committed keys %v, committed %v; want the key recorded on the retry", dedupe.committed, metrics.Value(m.Committed))
	}
}

func TestCommitFailingUntilShutdownReleasesTheKeyAndNacks(t *testing.T) {
	sink := &fakeSink{}
	dedupe := &fakeDedupe{commitErr: status.Error(codes.Unavailable, "catalog unavailable")}
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: sink, Dedupe: dedupe})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if p.Handle(ctx, order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("a message whose key could not be recorded must be nacked")
	}
	if len(sink.rows) != 1 || dedupe.released != 1 {
		t.Fatalf("rows=%d released=%d; want the row written and the key released", len(sink.rows), dedupe.released)
	}
}

// TestEveryOutcomeEndsTheHold: process holds a claimed key from the Claim
// to its return, whatever the outcome, and only a committed row records it.
func TestEveryOutcomeEndsTheHold(t *testing.T) {
	rejected := func(int, *sinks.Row) error {
		return &sinks.RejectedError{Err: status.Error(codes.InvalidArgument, "bad row")}
	}
	unavailable := func(int, *sinks.Row) error { return status.Error(codes.Unavailable, "down") }
	cases := []struct {
		name      string
		fail      func(int, *sinks.Row) error
		watermark time.Time
		ack       bool
		committed int
		released  int
	}{
		{"committed: recorded, not released", nil, time.Time{}, true, 1, 0},
		{"sink rejection: dead-lettered, its row's key released, its copy's recorded", rejected, time.Time{}, true, 1, 1},
		{"outage until shutdown: nacked and released", unavailable, time.Time{}, false, 0, 1},
		{"late: dropped, nothing claimed", nil, eventTime.Add(time.Hour), true, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Watermark.LateData = config.LateDrop
			d := &fakeDedupe{}
			deps := Deps{Sink: &fakeSink{fail: c.fail}, Dedupe: d, DeadLetter: &fakeDeadLetter{}}
			if !c.watermark.IsZero() {
				deps.Tracker = &fakeTracker{wm: c.watermark}
			}
			p, _ := newTestPipeline(t, cfg, deps)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			if got := p.Handle(ctx, order("o1", "c9", `{"amount": 1}`)); got != c.ack {
				t.Fatalf("ack = %v, want %v", got, c.ack)
			}
			if len(d.held) != 0 || len(d.committed) != c.committed || d.released != c.released {
				t.Fatalf("held %v, committed %v, released %d; want none held, %d committed, %d released",
					d.held, d.committed, d.released, c.committed, c.released)
			}
		})
	}
}

// TestAFailingClaimIsRetriedNeverWritten: a dedupe lookup that keeps
// failing must not be taken for a new key: nothing is written, the
// delivery is nacked when the work context ends, and the claim names the
// delivery's message ID.
func TestAFailingClaimIsRetriedNeverWritten(t *testing.T) {
	sink := &fakeSink{}
	d := &fakeDedupe{claimErr: status.Error(codes.Unavailable, "catalog down")}
	p, m := newTestPipeline(t, testConfig(), Deps{Sink: sink, Dedupe: d, DeadLetter: &fakeDeadLetter{}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	msg := order("o1", "c9", `{"amount": 1}`)
	if p.Handle(ctx, msg) {
		t.Fatal("acked although the dedupe lookup never succeeded")
	}
	if sink.n != 0 {
		t.Fatalf("%d writes; a failed lookup must not be taken for a new key", sink.n)
	}
	if len(d.winners) < 2 || d.winners[0] != msg.ID {
		t.Fatalf("claims named %v; want retries naming the message ID %s", d.winners, msg.ID)
	}
	if got := metrics.Value(m.Retried); got != 1 {
		t.Errorf("retried = %v, want 1", got)
	}
}

// TestARedeliveryOfADeadLetteredMessageMakesNoSecondCopy: in exactly_once
// mode the copy is claimed under a key of its own, naming the delivery, and
// recorded once confirmed: a redelivery of the message (Pub/Sub's
// at-least-once delivery, a lost ack) is acked as a duplicate without a
// second copy, for bad input (no row key claimed) and for a rejected row
// alike; a new message with the same id_attribute (a replay) gets its own
// copy.
func TestARedeliveryOfADeadLetteredMessageMakesNoSecondCopy(t *testing.T) {
	rejected := func(int, *sinks.Row) error {
		return &sinks.RejectedError{Err: status.Error(codes.InvalidArgument, "bad row")}
	}
	for _, c := range []struct {
		name   string
		data   string
		fail   func(int, *sinks.Row) error
		reason deadletter.Reason
	}{
		{"invalid payload", "amount=1", nil, deadletter.InvalidPayload},
		{"sink rejection", `{"amount": 1}`, rejected, deadletter.SinkRejected},
	} {
		t.Run(c.name, func(t *testing.T) {
			dl := &fakeDeadLetter{}
			d := &fakeDedupe{}
			p, m := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{fail: c.fail}, Dedupe: d, DeadLetter: dl})
			first := order("o1", "c9", c.data)
			for i := range 3 {
				redelivery := *first
				if !p.Handle(context.Background(), &redelivery) {
					t.Fatalf("delivery %d nacked", i+1)
				}
			}
			if len(dl.sent) != 1 || dl.sent[0].reason != c.reason {
				t.Fatalf("dead letters %v after 3 deliveries of one message; want one %s", dl.sent, c.reason)
			}
			if got := metrics.Value(m.Duplicate); got != 2 {
				t.Errorf("duplicates = %v, want 2 (the redeliveries)", got)
			}
			replayed := order("o1", "c9", c.data)
			replayed.ID = "m-replayed"
			if !p.Handle(context.Background(), replayed) {
				t.Fatal("replayed message nacked")
			}
			if len(dl.sent) != 2 || dl.sent[1].id != "m-replayed" {
				t.Fatalf("dead letters %v; the replay (same order_id, new message ID) must get its own copy", dl.sent)
			}
			if len(d.held) != 0 {
				t.Fatalf("keys still held: %v", d.held)
			}
		})
	}
}

// TestADeadLetterCopyIsRecordedOnlyOnceConfirmed: while the output fails,
// the copy's key is released, not recorded, so that the redelivery makes
// the copy; and a failing catalog nacks the message without a copy.
func TestADeadLetterCopyIsRecordedOnlyOnceConfirmed(t *testing.T) {
	dl := &fakeDeadLetter{err: status.Error(codes.Unavailable, "output down")}
	d := &fakeDedupe{}
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{}, Dedupe: d, DeadLetter: dl, DeadLetterWait: 20 * time.Millisecond})
	msg := order("o1", "c9", "amount=1")
	if p.Handle(context.Background(), msg) {
		t.Fatal("acked without a confirmed copy")
	}
	if len(d.committed) != 0 || len(d.held) != 0 || d.released != 1 {
		t.Fatalf("committed %v, held %v, released %d; want the copy's key released, not recorded", d.committed, d.held, d.released)
	}
	dl.mu.Lock()
	dl.err = nil
	dl.mu.Unlock()
	if !p.Handle(context.Background(), msg) || len(dl.sent) != 1 {
		t.Fatalf("redelivery after the output recovered: %d copies, want 1", len(dl.sent))
	}

	down := &fakeDedupe{claimErr: status.Error(codes.Unavailable, "catalog down")}
	dl2 := &fakeDeadLetter{}
	p2, _ := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{}, Dedupe: down, DeadLetter: dl2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if p2.Handle(ctx, order("o1", "c9", "amount=1")) || len(dl2.sent) != 0 {
		t.Fatalf("catalog down: acked or copied (%d copies); want a nack and no copy", len(dl2.sent))
	}
}

func TestDeadLetterKeysCannotBeMessageKeys(t *testing.T) {
	if k := deadLetterKey("123"); utf8.ValidString(k) {
		t.Fatalf("dead-letter key %q is valid UTF-8: a message ID or attribute could equal it", k)
	}
}
