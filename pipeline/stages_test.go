package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/sinks"
)

// slowSink is a fakeSink whose writes take delay.
type slowSink struct {
	fakeSink
	delay time.Duration
}

func (s *slowSink) Write(ctx context.Context, rows []sinks.Row) error {
	time.Sleep(s.delay)
	return s.fakeSink.Write(ctx, rows)
}

// stageSeries gathers pubsink_stage_seconds from m: per stage, its count
// and sum.
func stageSeries(t *testing.T, m *metrics.Metrics) map[string]*dto.Histogram {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.Histogram{}
	for _, f := range families {
		if f.GetName() != "pubsink_stage_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "stage" {
					got[l.GetValue()] = s.GetHistogram()
				}
			}
		}
	}
	return got
}

// timedPipeline is a pipeline of cfg on deps, as New makes it, with the
// metrics it exports to.
func timedPipeline(t *testing.T, cfg config.Pipeline, deps Deps) (*Pipeline, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	deps.Metrics, deps.Retry = m.Pipeline(cfg.Name), fastRetry
	p, err := New(zap.NewNop(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return p, m
}

// TestEveryStageOfACommittedMessageIsTimed: an exactly_once message with a
// tracker is observed once in each of the five stages, and the time of a
// slow sink shows in write and nowhere else.
func TestEveryStageOfACommittedMessageIsTimed(t *testing.T) {
	const delay = 30 * time.Millisecond
	p, m := timedPipeline(t, testConfig(), Deps{Sink: &slowSink{delay: delay}, Dedupe: &fakeDedupe{}, Tracker: &fakeTracker{}})
	p.sampler.every = 1 // every message timed
	if !p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("nack for a good message")
	}
	got := stageSeries(t, m)
	for _, s := range stageNames {
		h := got[s]
		if h == nil || h.GetSampleCount() != 1 {
			t.Errorf("stage %s: %v, want one observation", s, h)
			continue
		}
		sum := time.Duration(h.GetSampleSum() * float64(time.Second))
		if s == "write" && sum < delay {
			t.Errorf("write took %v, want at least the sink's %v", sum, delay)
		}
		if s != "write" && sum >= delay {
			t.Errorf("stage %s took %v: the sink's time belongs to write", s, sum)
		}
	}
}

// TestAStageAPipelineDoesNotHaveExportsNothing: at_least_once without a
// tracking subscription has map and write only.
func TestAStageAPipelineDoesNotHaveExportsNothing(t *testing.T) {
	cfg := testConfig()
	cfg.Mode = config.ModeAtLeastOnce
	p, m := timedPipeline(t, cfg, Deps{Sink: &fakeSink{}})
	p.sampler.every = 1
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	got := stageSeries(t, m)
	if len(got) != 2 || got["map"].GetSampleCount() != 1 || got["write"].GetSampleCount() != 1 {
		t.Errorf("stages %v, want map and write, one observation each", got)
	}
}

// TestADuplicateIsTimedUpToItsClaim: a duplicate passes map and dedupe,
// and is not counted as written.
func TestADuplicateIsTimedUpToItsClaim(t *testing.T) {
	p, m := timedPipeline(t, testConfig(), Deps{Sink: &fakeSink{}, Dedupe: &fakeDedupe{}})
	p.sampler.every = 1
	p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`))
	dup := order("o1", "c9", `{"amount": 2}`)
	dup.ID = "m-other"
	p.Handle(context.Background(), dup)
	got := stageSeries(t, m)
	for s, want := range map[string]uint64{"map": 2, "dedupe": 2, "write": 1, "commit": 1} {
		if got[s].GetSampleCount() != want {
			t.Errorf("stage %s: %d observations, want %d", s, got[s].GetSampleCount(), want)
		}
	}
	if _, ok := got["report"]; ok {
		t.Error("a report stage without a tracker")
	}
}

// TestOneMessageInSixteenIsTimed: the stages of a sample are observed, at
// the rate New sets, and the others' cost no observation.
func TestOneMessageInSixteenIsTimed(t *testing.T) {
	cfg := testConfig()
	cfg.Mode = config.ModeAtLeastOnce
	p, m := timedPipeline(t, cfg, Deps{Sink: &fakeSink{}})
	for i := range 3 * stageSampleEvery {
		p.Handle(context.Background(), order(fmt.Sprint(i), "c9", `{"amount": 1}`))
	}
	got := stageSeries(t, m)
	if got["map"].GetSampleCount() != 3 || got["write"].GetSampleCount() != 3 {
		t.Errorf("stages %v after %d messages, want 3 observations each", got, 3*stageSampleEvery)
	}
}
