package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/sinks"
)

// watermarkBand is the estimation band of these tests: short, so that they
// run in seconds, and long against the emulator's delivery latency.
const watermarkBand = 2 * time.Second

// watermarkYAML is the default test pipeline with the tracking subscription
// and a watermark section; extra is appended to the pipeline.
func (e *env) watermarkYAML(lateData, extra string) string {
	y := e.configYAML(config.ModeExactlyOnce,
		fmt.Sprintf("    watermark: {estimation_band: %s, allowed_lateness: 0s, late_data: %s}\n", watermarkBand, lateData)+extra)
	sub := "      subscription: " + e.sub + "\n"
	if !strings.Contains(y, sub) {
		e.t.Fatalf("the harness's YAML changed; no %q in\n%s", sub, y)
	}
	return strings.Replace(y, sub, sub+"      tracking_subscription: "+e.tracking+"\n", 1)
}

// stamp is the value of the ts attribute (timestamp_format unix_us).
func stamp(t time.Time) string { return fmt.Sprint(t.UnixMicro()) }

// written records the rows the sink made durable, and the event time of
// every message published so far, so that the watermark can be checked
// against the messages not yet finished. A row is marked only after the
// sink's Write returned, and the pipeline finishes a message only after
// that: a row not marked is a message not finished.
type written struct {
	mu     sync.Mutex
	events map[string]time.Time // row key (attribute id): event time
	done   map[string]bool
}

func newWritten() *written {
	return &written{events: map[string]time.Time{}, done: map[string]bool{}}
}

// recordingSink marks written rows in w; while stall is set, its writes
// wait (a sink that stopped answering), so that a backlog builds up.
type recordingSink struct {
	sinks.Sink
	w     *written
	stall *atomic.Bool
}

func (s recordingSink) Write(ctx context.Context, rows []sinks.Row) error {
	for s.stall != nil && s.stall.Load() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	err := s.Sink.Write(ctx, rows)
	if err == nil {
		s.w.mu.Lock()
		for i := range rows {
			s.w.done[rows[i].Key] = true
		}
		s.w.mu.Unlock()
	}
	return err
}

// publishEvents publishes one message per key with the given event time,
// registering each in w before it is published.
func (e *env) publishEvents(pub *pubsub.Publisher, w *written, keys []string, events []time.Time) {
	e.t.Helper()
	ctx := context.Background()
	results := make([]*pubsub.PublishResult, len(keys))
	for i, k := range keys {
		w.mu.Lock()
		w.events[k] = events[i]
		w.mu.Unlock()
		results[i] = pub.Publish(ctx, &pubsub.Message{
			Data:       []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Attributes: map[string]string{"id": k, "ts": stamp(events[i])},
		})
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			e.t.Errorf("publish: %v", err)
		}
	}
}

// sample is one reading of the watermark; wm is zero while unknown.
type sample struct {
	at, wm time.Time
	phase  string
}

// TestWatermarkNeverPassesAnUnfinishedEventAndReachesMaxEventMinusBand runs
// the app in process on the emulators through five phases, sampling the
// watermark every 50ms:
//
//   - backlog: 5,000 messages published 8s before the start (a restart
//     after a short outage) drain;
//   - stream: a live stream of 250 messages a second, caught up;
//   - stalled: the sink blocks for 5s while the stream goes on, so a backlog
//     builds up on the main subscription (the tracker keeps up);
//   - draining: the sink is released and the backlog drains under the
//     stream;
//   - idle: nothing is published.
//
// At every sample the watermark must not have decreased nor passed the
// event time of a message whose row is not written yet; once idle it must
// reach the last event time minus the band; the state table must hold the
// final value. It logs the lag (now - watermark) of each phase: the figures
// of the issue.
func TestWatermarkNeverPassesAnUnfinishedEventAndReachesMaxEventMinusBand(t *testing.T) {
	const backlog = 5000
	e := newEnv(t)
	_, cfg := e.writeConfig(e.watermarkYAML(config.LateAccept, ""))
	w := newWritten()
	var rmu sync.Mutex
	r := rand.New(rand.NewPCG(4, 2))
	// Event times up to half a band before the publication: out of order
	// within the band.
	jitter := func() time.Time {
		rmu.Lock()
		defer rmu.Unlock()
		return time.Now().Add(-time.Duration(r.Int64N(int64(watermarkBand / 2))))
	}

	pub := e.pubsub.Publisher(e.topic)
	defer pub.Stop()
	keys := make([]string, backlog)
	events := make([]time.Time, backlog)
	for i := range keys {
		keys[i], events[i] = fmt.Sprintf("b%06d", i), jitter()
	}
	e.publishEvents(pub, w, keys, events)
	time.Sleep(8 * time.Second)

	var stall atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.Open(ctx, nopLogger(), cfg, app.Options{
		PubSub: e.pubsub, Bigtable: e.bigtableFor, HTTPAddr: "-",
		WrapSink: func(_ string, s sinks.Sink) sinks.Sink { return recordingSink{s, w, &stall} },
	})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	p := a.Pipelines()[0]

	var (
		phaseMu sync.Mutex
		phase   = "backlog"
		samples []sample
	)
	setPhase := func(s string) { phaseMu.Lock(); phase = s; phaseMu.Unlock() }
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		var last time.Time
		violations := 0
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
			}
			w.mu.Lock()
			st := p.Status()
			var oldestKey string
			var oldest time.Time
			for k, ev := range w.events {
				if !w.done[k] && (oldest.IsZero() || ev.Before(oldest)) {
					oldestKey, oldest = k, ev
				}
			}
			w.mu.Unlock()
			s := sample{at: time.Now()}
			if st.Watermark != nil {
				wm := *st.Watermark
				s.wm = wm
				if wm.Before(last) {
					t.Errorf("the watermark went back from %v to %v", last, wm)
				}
				last = wm
				if !oldest.IsZero() && wm.After(oldest) && violations < 5 {
					violations++
					t.Errorf("watermark %v passed the event time %v of %s, whose row is not written", wm, oldest, oldestKey)
				}
				if st.WatermarkLagSeconds == nil {
					t.Errorf("/status has a watermark but no watermark_lag_seconds")
				}
			}
			phaseMu.Lock()
			s.phase = phase
			samples = append(samples, s)
			phaseMu.Unlock()
		}
	}()

	start := time.Now()
	waitPipeline(t, p, "the backlog is committed", 2*time.Minute, func(st pipeline.Status) bool { return st.Committed >= backlog })
	drained := time.Since(start)

	// A live stream: 25 messages every 100ms, for at least 3s of warm-up
	// and until the watermark is known (the startup guard holds it for
	// lease + transit + idle, 18s, after the start), 3s caught up, 5s with
	// the sink stalled, and 6s more while the backlog drains.
	setPhase("warm-up")
	var maxEvent time.Time
	warm := 0
	for ; warm < 30 || p.Status().Watermark == nil; warm++ {
		if warm == 600 {
			t.Fatal("the watermark is still unknown after a minute of live traffic")
		}
		keys, events := make([]string, 25), make([]time.Time, 25)
		for i := range keys {
			keys[i], events[i] = fmt.Sprintf("w%03d-%02d", warm, i), jitter()
			if events[i].After(maxEvent) {
				maxEvent = events[i]
			}
		}
		e.publishEvents(pub, w, keys, events)
		time.Sleep(100 * time.Millisecond)
	}
	const ticks = 140
	for tick := range ticks {
		switch tick {
		case 0:
			setPhase("stream")
		case 30:
			setPhase("stalled")
			stall.Store(true)
		case 80:
			setPhase("draining")
			stall.Store(false)
		}
		keys, events := make([]string, 25), make([]time.Time, 25)
		for i := range keys {
			keys[i], events[i] = fmt.Sprintf("s%03d-%02d", tick, i), jitter()
			if events[i].After(maxEvent) {
				maxEvent = events[i]
			}
		}
		e.publishEvents(pub, w, keys, events)
		time.Sleep(100 * time.Millisecond)
	}
	setPhase("last rows")
	waitPipeline(t, p, "the stream is committed", time.Minute, func(st pipeline.Status) bool { return st.Committed >= int64(backlog+(warm+ticks)*25) })

	// Silence: the watermark reaches the last event time minus the band.
	setPhase("idle")
	want := maxEvent.Add(-watermarkBand)
	idleStart := time.Now()
	waitPipeline(t, p, fmt.Sprintf("the watermark reaches max event time - band = %v", want), 30*time.Second, func(st pipeline.Status) bool {
		return st.Watermark != nil && !st.Watermark.Before(want)
	})
	reached := time.Since(idleStart)
	time.Sleep(3 * time.Second)
	close(stopSampling)
	<-sampled

	cancel()
	if err := <-runDone; err != nil {
		t.Fatalf("Run: %v", err)
	}
	final := *p.Status().Watermark
	stored := e.storedWatermark(cfg)
	if !stored.Equal(final.Truncate(time.Millisecond)) {
		t.Errorf("stored watermark %v, want the final %v truncated to milliseconds", stored, final)
	}

	phaseMu.Lock()
	defer phaseMu.Unlock()
	t.Logf("backlog of %d messages published 8s before the start, drained in %v", backlog, drained.Round(time.Millisecond))
	for _, ph := range []string{"backlog", "stream", "stalled", "draining", "idle"} {
		var lags []time.Duration
		unknown := 0
		for _, s := range samples {
			switch {
			case s.phase != ph:
			case s.wm.IsZero():
				unknown++
			default:
				lags = append(lags, s.at.Sub(s.wm))
			}
		}
		if len(lags) == 0 {
			t.Logf("%-8s: no samples with a known watermark (%d unknown)", ph, unknown)
			continue
		}
		slices.Sort(lags)
		t.Logf("%-8s: watermark lag (now - watermark) median %v, p90 %v, min %v, max %v; %d samples, %d more before it was known (band %v)", ph,
			lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)*9/10].Round(time.Millisecond),
			lags[0].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond), len(lags), unknown, watermarkBand)
	}
	t.Logf("idle: the watermark reached max event time - band %v after the last row was committed", reached.Round(time.Millisecond))
}

// waitPipeline polls the in-process pipeline's status until cond holds.
func waitPipeline(t *testing.T, p *pipeline.Pipeline, what string, timeout time.Duration, cond func(pipeline.Status) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for st := p.Status(); !cond(st); st = p.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v, not yet: %s; status %+v", timeout, what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storedWatermark reads the stored watermark of pipeline e2e from the
// state table, as an outside reader would.
func (e *env) storedWatermark(cfg *config.Config) time.Time {
	e.t.Helper()
	row, err := e.bigtable.Open(cfg.State.Table).ReadRow(context.Background(), state.WatermarkRow("e2e"),
		bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		e.t.Fatalf("read the stored watermark: %v", err)
	}
	for _, c := range row[state.FamilyMeta] {
		if c.Column == state.FamilyMeta+":"+state.WatermarkColumn {
			t, err := time.Parse(state.WatermarkFormat, string(c.Value))
			if err != nil || !strings.HasSuffix(string(c.Value), "Z") || len(c.Value) != len("2006-01-02T15:04:05.000Z") {
				e.t.Fatalf("stored watermark %q is not RFC 3339 UTC with milliseconds", c.Value)
			}
			return t
		}
	}
	e.t.Fatalf("no m:watermark in row %s of %s", state.WatermarkRow("e2e"), cfg.State.Table)
	return time.Time{}
}

// TestLateDataPolicies publishes on-time messages until the watermark is
// known, then a message whose event time is an hour old, and checks what
// each late_data policy does with it: accept writes and counts it;
// dead_letter sends it to the dead-letter topic with reason late; drop acks
// it unwritten and counts it. It is never silent: late counts it each time.
func TestLateDataPolicies(t *testing.T) {
	for _, policy := range []string{config.LateAccept, config.LateDeadLetter, config.LateDrop} {
		t.Run(policy, func(t *testing.T) {
			e := newEnv(t)
			extra := ""
			if policy == config.LateDeadLetter {
				extra = e.deadLetterYAML(deadletter.KindTopic)
			}
			_, cfg := e.writeConfig(e.watermarkYAML(policy, extra))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a, err := app.Open(ctx, nopLogger(), cfg, app.Options{PubSub: e.pubsub, Bigtable: e.bigtableFor, HTTPAddr: "-"})
			if err != nil {
				t.Fatal(err)
			}
			runDone := make(chan error, 1)
			go func() { runDone <- a.Run(ctx) }()
			p := a.Pipelines()[0]

			pub := e.pubsub.Publisher(e.topic)
			defer pub.Stop()
			w := newWritten()
			const onTime = 20
			for i := range onTime {
				e.publishEvents(pub, w, []string{fmt.Sprintf("ok%02d", i)}, []time.Time{time.Now()})
				time.Sleep(20 * time.Millisecond)
			}
			lateEvent := time.Now().Add(-time.Hour)
			waitPipeline(t, p, "the watermark is known and past the late event", time.Minute, func(st pipeline.Status) bool {
				return st.Committed >= onTime && st.Watermark != nil && st.Watermark.After(lateEvent)
			})
			lateID := e.publishOne(`{"n":-1}`, map[string]string{"id": "late", "ts": stamp(lateEvent)})
			waitPipeline(t, p, "the late message is finished", time.Minute, func(st pipeline.Status) bool {
				return st.Late >= 1 && st.InFlight == 0 &&
					st.Committed+st.Dropped+st.DeadLettered[string(deadletter.Late)] >= onTime+1
			})
			cancel()
			if err := <-runDone; err != nil {
				t.Fatalf("Run: %v", err)
			}
			st := p.Status()
			if st.Late != 1 {
				t.Errorf("late = %d, want 1", st.Late)
			}
			if got := gaugeValue(t, a, "pubsink_messages_late_total"); got != 1 {
				t.Errorf("pubsink_messages_late_total = %v, want 1", got)
			}
			if got := gaugeValue(t, a, "pubsink_watermark_timestamp_seconds"); got < float64(lateEvent.Unix()) {
				t.Errorf("pubsink_watermark_timestamp_seconds = %v, want past the late event", got)
			}
			_, lateWritten := e.readTable(e.table)["late"]
			switch policy {
			case config.LateAccept:
				if !lateWritten || st.Committed != onTime+1 {
					t.Errorf("accept: late row written %v, committed %d; want it written and committed", lateWritten, st.Committed)
				}
			case config.LateDeadLetter:
				_, dlSub, _ := e.deadLetterNames()
				msgs := e.pull(dlSub, 1, time.Minute)
				if len(msgs) != 1 || msgs[0].Attributes[deadletter.AttrReason] != string(deadletter.Late) ||
					msgs[0].Attributes[deadletter.AttrMessageID] != lateID {
					t.Errorf("dead letters %v, want the late message with reason late", attrsOf(msgs))
				}
				if lateWritten || st.DeadLettered[string(deadletter.Late)] != 1 {
					t.Errorf("dead_letter: late row written %v, dead_lettered{late} %d; want unwritten, 1", lateWritten, st.DeadLettered[string(deadletter.Late)])
				}
			case config.LateDrop:
				if lateWritten || st.Dropped != 1 {
					t.Errorf("drop: late row written %v, dropped %d; want unwritten, 1", lateWritten, st.Dropped)
				}
			}
			// Acked in every case: nothing is left on the main subscription.
			if left := e.pull(e.sub, 0, 10*time.Second); len(left) != 0 {
				t.Errorf("%d messages left unacked on the main subscription: %v", len(left), attrsOf(left))
			}
		})
	}
}

func attrsOf(msgs []*pubsubpb.PubsubMessage) []map[string]string {
	var out []map[string]string
	for _, m := range msgs {
		out = append(out, m.Attributes)
	}
	return out
}

// gaugeValue reads a metric of pipeline e2e from the app's registry.
func gaugeValue(t *testing.T, a *app.App, name string) float64 {
	t.Helper()
	families, err := a.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pipeline" && l.GetValue() == "e2e" {
					if m.Counter != nil {
						return m.Counter.GetValue()
					}
					return m.Gauge.GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{pipeline=e2e}", name)
	return 0
}

// TestRestartedBinaryStartsFromTheStoredWatermark stops the binary with
// SIGTERM after it advanced the watermark, and restarts it: /status shows
// at least the stored value as soon as it is ready, and the watermark goes
// on from there.
func TestRestartedBinaryStartsFromTheStoredWatermark(t *testing.T) {
	e := newEnv(t)
	path, cfg := e.writeConfig(e.watermarkYAML(config.LateAccept, ""))
	pub := e.pubsub.Publisher(e.topic)
	defer pub.Stop()
	w := newWritten()

	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	for i := range 50 {
		e.publishEvents(pub, w, []string{fmt.Sprintf("a%02d", i)}, []time.Time{time.Now()})
		time.Sleep(20 * time.Millisecond)
	}
	waitStatus(t, c, func(st map[string]any) bool { return st["committed"].(float64) >= 50 && st["watermark"] != nil }, time.Minute)
	time.Sleep(2 * time.Second) // let it advance and store
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	stored := e.storedWatermark(cfg)

	c = e.start(path, cfg)
	c.waitReady(30 * time.Second)
	st := c.status()
	wmText, _ := st["watermark"].(string)
	wm, err := time.Parse(time.RFC3339Nano, wmText)
	if err != nil || wm.Before(stored) {
		t.Fatalf("restarted: /status watermark %q, want at least the stored %v", wmText, stored)
	}
	// Idle: after the startup quiet period it moves on with real time.
	waitStatus(t, c, func(st map[string]any) bool {
		s, _ := st["watermark"].(string)
		wm, err := time.Parse(time.RFC3339Nano, s)
		return err == nil && wm.After(stored.Add(time.Second))
	}, 30*time.Second)
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}

// TestTrackingSubscriptionOnAnotherTopicIsRefusedAtStart recreates the
// tracking subscription on a different topic after setup (setup itself
// refuses such a subscription): Open must refuse to start, saying why.
func TestTrackingSubscriptionOnAnotherTopicIsRefusedAtStart(t *testing.T) {
	e := newEnv(t)
	_, cfg := e.writeConfig(e.watermarkYAML(config.LateAccept, ""))
	ctx := context.Background()
	tracking := "projects/" + project + "/subscriptions/" + e.tracking
	other := "projects/" + project + "/topics/other-" + e.topic
	if err := e.pubsub.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: tracking}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pubsub.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: other}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pubsub.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: tracking, Topic: other}); err != nil {
		t.Fatal(err)
	}
	a, err := app.Open(ctx, nopLogger(), cfg, app.Options{PubSub: e.pubsub, Bigtable: e.bigtableFor, HTTPAddr: "-"})
	if err == nil {
		a.Run(canceled())
		t.Fatal("Open accepted a tracking subscription on another topic")
	}
	if !strings.Contains(err.Error(), "tracking_subscription") || !strings.Contains(err.Error(), "same topic") {
		t.Fatalf("Open: %v; want an error naming tracking_subscription and the same-topic rule", err)
	}
	t.Logf("Open: %v", err)
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
