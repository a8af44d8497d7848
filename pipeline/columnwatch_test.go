package pipeline

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
)

// columnWatchConfig maps customers (when the change is no delete) with a
// misspelt last_name under on_missing: skip and an id under dead_letter,
// and tags (each) under on_missing: empty.
func columnWatchConfig() config.Pipeline {
	cfg := testConfig()
	cfg.Mode = config.ModeAtLeastOnce
	cfg.Sink = config.Sink{
		Timestamp: config.CellTimeEvent,
		Mappings: []config.Mapping{
			{Table: "customers", When: "data.op != 'd'", RowKey: "{attributes.order_id}", OnMissing: config.MissingSkip,
				OnMissingColumns: map[string]string{"id": config.MissingDeadLetter},
				Columns:          map[string]string{"first_name": "{data.first_name}", "last_name": "{data.lastname}", "id": "{data.id}"}},
			{Table: "tags", Each: "data.tags", RowKey: "{attributes.order_id}#{item.n}", OnMissing: config.MissingEmpty,
				Columns: map[string]string{"tag": "{item.tag}"}},
		},
	}
	return cfg
}

// TestAColumnMissingInEveryCommittedMessageIsAWarningUntilOneFillsIt: a
// column whose value every committed message missed for less than
// ColumnWarnAfter is no warning; one more after it is, on /status, its
// gauge and logged once however many follow. A message that made no row of
// the column's mapping (a delete, for which when is false) and one that
// was dead-lettered neither end nor count in the episode; a message that
// fills the column ends it (logged once), and the next episode starts
// afresh. A column of an each mapping missed in one row and filled in
// another is filled; a dead_letter column is not followed.
func TestAColumnMissingInEveryCommittedMessageIsAWarningUntilOneFillsIt(t *testing.T) {
	ctx := context.Background()
	now := eventTime
	core, logs := observer.New(zapcore.InfoLevel)
	reg := metrics.New()
	m := reg.Pipeline("orders")
	dl := &fakeDeadLetter{}
	p, err := New(zap.New(core), columnWatchConfig(), Deps{Sink: &fakeSink{}, DeadLetter: dl, Metrics: m,
		Retry: fastRetry, WarnClock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	handle := func(data string) {
		t.Helper()
		n++
		if !p.Handle(ctx, order("o"+string(rune('a'+n)), "c9", data)) {
			t.Fatalf("%s: want ack", data)
		}
	}
	const (
		key      = "sink.mappings[0].columns.last_name"
		tagKey   = "sink.mappings[1].columns.tag"
		misspelt = `{"id": 1, "op": "u", "first_name": "Ada", "last_name": "L", "tags": [{"n": 1, "tag": "x"}]}`
	)
	warnings := func() []observer.LoggedEntry {
		return logs.FilterMessageSnippet("has been missing in every committed message").AllUntimed()
	}
	gauge := func(column string) float64 { return metrics.Value(m.ColumnNeverFilled(column)) }

	handle(misspelt)
	now = now.Add(DefaultColumnWarnAfter - time.Second)
	handle(misspelt)
	if w := p.Status().ColumnsNeverFilled; w != nil || len(warnings()) != 0 || gauge(key) != 0 {
		t.Fatalf("before %v: warnings %+v, logged %v, gauge %v", DefaultColumnWarnAfter, w, warnings(), gauge(key))
	}
	now = now.Add(time.Second)
	// A delete makes no customers row: when is false. A message whose id
	// is missing (dead_letter) is dead-lettered, not committed.
	handle(`{"id": 1, "op": "d", "tags": []}`)
	handle(`{"op": "u", "first_name": "Ada", "tags": []}`)
	if w := p.Status().ColumnsNeverFilled; w != nil || len(warnings()) != 0 || len(dl.sent) != 1 {
		t.Fatalf("a delete and a dead-lettered message: warnings %+v, logged %v, dead-lettered %d", w, warnings(), len(dl.sent))
	}
	for range 3 {
		handle(misspelt)
	}
	w := p.Status().ColumnsNeverFilled
	want := `column sink.mappings[0].columns.last_name has been missing in every committed message for 5m0s (5 since 2026-05-06T07:08:09Z, on_missing: skip): check its template "{data.lastname}" against the messages`
	if len(w) != 1 || w[0].Column != key || w[0].Template != "{data.lastname}" || w[0].OnMissing != "skip" ||
		w[0].Messages != 5 || !w[0].Since.Equal(eventTime) || w[0].Warning != want {
		t.Fatalf("after %v: warnings %+v, want one: %q", DefaultColumnWarnAfter, w, want)
	}
	got := warnings()
	if len(got) != 1 || got[0].Level != zapcore.WarnLevel {
		t.Fatalf("logged %v, want one warning, when the third message came", got)
	}
	if f := got[0].ContextMap(); f["column"] != key || f["template"] != "{data.lastname}" || f["messages"] != int64(3) || f["since"] != eventTime {
		t.Errorf("the warning's fields %v", f)
	}
	if gauge(key) != 1 || gauge(tagKey) != 0 {
		t.Errorf("gauges: last_name %v (want 1), tag %v (want 0)", gauge(key), gauge(tagKey))
	}

	// tag: missed (an empty cell) in one row, then missed for 5 minutes,
	// then missed in one row and filled in another: filled.
	handle(`{"id": 1, "op": "u", "first_name": "Ada", "lastname": "L", "tags": [{"n": 1}]}`) // fills last_name
	if w := p.Status().ColumnsNeverFilled; w != nil || gauge(key) != 0 {
		t.Errorf("last_name was filled, the warning is still %+v, gauge %v", w, gauge(key))
	}
	if got := logs.FilterMessage("a committed message filled the column again").Len(); got != 1 {
		t.Errorf("the end logged %d times, want once", got)
	}
	now = now.Add(DefaultColumnWarnAfter)
	handle(`{"id": 1, "op": "u", "first_name": "Ada", "lastname": "L", "tags": [{"n": 1}, {"n": 2, "tag": ""}]}`)
	if w := p.Status().ColumnsNeverFilled; len(w) != 0 {
		t.Errorf("a tag filled with an empty value beside a missed one: warnings %+v", w)
	}
	handle(`{"id": 1, "op": "u", "first_name": "Ada", "lastname": "L", "tags": [{"n": 1}, {"n": 2}]}`)
	now = now.Add(DefaultColumnWarnAfter)
	handle(`{"id": 1, "op": "u", "first_name": "Ada", "lastname": "L", "tags": [{"n": 1}]}`)
	if w := p.Status().ColumnsNeverFilled; len(w) != 1 || w[0].Column != tagKey || w[0].Messages != 2 || gauge(tagKey) != 1 {
		t.Fatalf("tag missed in every row for %v: warnings %+v, gauge %v", DefaultColumnWarnAfter, w, gauge(tagKey))
	}
	handle(`{"id": 1, "op": "u", "first_name": "Ada", "lastname": "L", "tags": [{"n": 1}, {"n": 2, "tag": "y"}, {"n": 3}]}`)
	if w := p.Status().ColumnsNeverFilled; w != nil || gauge(tagKey) != 0 || logs.FilterMessage("a committed message filled the column again").Len() != 2 {
		t.Errorf("tag filled in one row of three: warnings %+v, gauge %v", w, gauge(tagKey))
	}

	// A new episode counts from its own first message.
	handle(misspelt)
	now = now.Add(DefaultColumnWarnAfter / 2)
	handle(misspelt)
	if w := p.Status().ColumnsNeverFilled; w != nil || len(warnings()) != 2 {
		t.Errorf("a new episode warned early: %+v", w)
	}

	// Only the columns of a policy other than dead_letter have a gauge.
	families, err := reg.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, f := range families {
		if f.GetName() == "pubsink_column_never_filled" {
			for _, s := range f.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "column" {
						series = append(series, l.GetValue())
					}
				}
			}
		}
	}
	slices.Sort(series)
	if wantSeries := []string{"sink.mappings[0].columns.first_name", key, tagKey}; !slices.Equal(series, wantSeries) {
		t.Errorf("pubsink_column_never_filled series %v, want %v", series, wantSeries)
	}
}

// TestAPipelineWithoutLenientColumnsHasNoColumnWatch: every column under
// dead_letter (the default) leaves nothing to watch, so the pipeline pays
// nothing per message.
func TestAPipelineWithoutLenientColumnsHasNoColumnWatch(t *testing.T) {
	p, _ := newTestPipeline(t, testConfig(), Deps{Sink: &fakeSink{}, Dedupe: &fakeDedupe{}})
	if p.columns != nil {
		t.Errorf("a watch of %d columns, all dead_letter", len(p.columns.cols))
	}
	if w := newColumnWatch(0, nil, zap.NewNop(), metrics.New().Pipeline("x"), []mapping.Column{{Key: "sink.columns.a", OnMissing: config.MissingSkip}}); w == nil {
		t.Error("no watch for a column under skip")
	}
}

// BenchmarkColumnWatch is the watch's cost per committed message: nothing
// missed while no episode is on (the common case: a length check and an
// atomic load, no allocation), and a column missed in every message (the
// slow path, under the lock, while a column is warned).
func BenchmarkColumnWatch(b *testing.B) {
	cols := []mapping.Column{
		{Key: "sink.columns.first_name", Name: "first_name", Template: "{data.first_name}", OnMissing: config.MissingSkip},
		{Key: "sink.columns.last_name", Name: "last_name", Template: "{data.lastname}", OnMissing: config.MissingSkip},
	}
	filled := mapping.Result{Rows: []sinks.Row{{Key: "1", Cells: []sinks.Cell{{Column: "first_name"}, {Column: "last_name"}}}}}
	missed := mapping.Result{Rows: []sinks.Row{{Key: "1", Cells: []sinks.Cell{{Column: "first_name"}}}}, MissingColumns: []uint16{1}}
	for _, c := range []struct {
		name string
		r    *mapping.Result
	}{{"nothing missed", &filled}, {"a column missed", &missed}} {
		b.Run(c.name, func(b *testing.B) {
			w := newColumnWatch(0, nil, zap.NewNop(), metrics.New().Pipeline("bench"), cols)
			b.ReportAllocs()
			for b.Loop() {
				w.committed(c.r)
			}
		})
	}
}
