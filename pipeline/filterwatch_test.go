package pipeline

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/source"
)

// TestAFilterThatDropsEverythingIsAWarningUntilAMessagePasses: heartbeats
// only, for less than FilterWarnAfter, are no warning; one arriving after
// it is, on /status and logged once however many follow; a message that
// passes the filter clears it (logged once too), and the next episode
// starts afresh.
func TestAFilterThatDropsEverythingIsAWarningUntilAMessagePasses(t *testing.T) {
	ctx := context.Background()
	now := eventTime
	core, logs := observer.New(zapcore.InfoLevel)
	p, err := New(zap.New(core), batchConfig(), Deps{Sink: &fakeSink{}, Dedupe: &fakeDedupe{}, Metrics: metrics.New().Pipeline("orders"),
		Retry: fastRetry, WarnClock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	heartbeat := func() {
		t.Helper()
		if !p.Handle(ctx, &source.Message{ID: "hb", Data: []byte("{}"), Attributes: map[string]string{"type": "heartbeat"}, PublishTime: now}) {
			t.Fatal("want ack")
		}
	}
	warnings := func() []observer.LoggedEntry {
		return logs.FilterMessageSnippet("the filter has dropped every message").AllUntimed()
	}

	heartbeat()
	now = now.Add(DefaultFilterWarnAfter - time.Second)
	heartbeat()
	if w := p.Status().FilteredEverything; w != nil || len(warnings()) != 0 {
		t.Fatalf("before %v: warning %+v, logged %v", DefaultFilterWarnAfter, w, warnings())
	}
	now = now.Add(time.Second)
	for range 3 {
		heartbeat()
	}
	w := p.Status().FilteredEverything
	want := `the filter has dropped every message for 5m0s (5 since 2026-05-06T07:08:09Z, none passed): check filter "attributes.?type.orValue('') != 'heartbeat'" against the messages`
	if w == nil || w.Messages != 5 || !w.Since.Equal(eventTime) || w.Warning != want {
		t.Fatalf("after %v: warning %+v, want %q", DefaultFilterWarnAfter, w, want)
	}
	if got := warnings(); len(got) != 1 || got[0].Level != zapcore.WarnLevel || got[0].ContextMap()["filtered"] != int64(3) {
		t.Errorf("logged %v, want one warning, when the third heartbeat came", got)
	}

	if !p.Handle(ctx, order("o1", "c9", items(1, false))) {
		t.Fatal("want ack")
	}
	if w := p.Status().FilteredEverything; w != nil {
		t.Errorf("a message passed, the warning is still %+v", w)
	}
	if got := logs.FilterMessage("a message passed the filter again").Len(); got != 1 {
		t.Errorf("the end logged %d times, want once", got)
	}
	if !p.Handle(ctx, order("o2", "c9", items(1, false))) || logs.FilterMessage("a message passed the filter again").Len() != 1 {
		t.Errorf("a second message that passed logged the end again")
	}
	// A new episode counts from its own first heartbeat.
	heartbeat()
	now = now.Add(DefaultFilterWarnAfter / 2)
	heartbeat()
	if w := p.Status().FilteredEverything; w != nil || len(warnings()) != 1 {
		t.Errorf("a new episode warned early: %+v", w)
	}
}
