package app

import (
	"bytes"
	"context"
	_ "embed"
	"html/template"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/chart"
	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/internal/server"
	"github.com/pubsink/pubsink/pipeline"
)

// The status page at /: server-rendered HTML (html/template, no script, no
// build step) that reloads itself every pageRefresh. It shows what /status
// has, for a person: per pipeline its state, rates and counts (with a line
// of its changes, deletes, superseded rows and cells and missing values,
// when it has any), watermark and lag, dedupe figures, dead letters by
// reason, members and leader, and its last warnings and errors; and charts
// of its last historySpan (the rates of its outcomes, its watermark lag,
// the age of its oldest message in flight), drawn from the history a
// sampler keeps (see history).

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"ago":      ago,
	"percent":  func(f float64) string { return strconv.FormatFloat(max(100*f, 0), 'f', 2, 64) + "%" }, // max: no "-0.00%"
	"float":    func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"permille": func(f float64) int { return int(1000 * f) },
}).Parse(pageHTML))

const (
	// pageRefresh is how often the page reloads itself.
	pageRefresh = 5 * time.Second
	// rateWindow is the span the rates are averaged over; rateSample how
	// often the sampler keeps a sample of each pipeline, for the rates and
	// the charts.
	rateWindow = time.Minute
	rateSample = 5 * time.Second
	// historySpan is the span of the charts, as on the Dataflow job page;
	// historyLen the samples that takes.
	historySpan = 15 * time.Minute
	historyLen  = int(historySpan / rateSample) // 180
	// pageErrors is how many warnings and errors a pipeline's section
	// lists.
	pageErrors = 5
)

// page renders the status page of an App.
type page struct {
	app    *App
	recent *logging.Recent
	now    func() time.Time

	mu           sync.Mutex
	history      map[string]*history // by pipeline name
	stopSampling context.CancelFunc  // set by start
	sampled      chan struct{}       // closed when the sampler returned
}

// history is one pipeline's last historyLen samples, one every rateSample
// (the last historySpan): what its rates and charts are computed from. It
// is a ring of fixed size, allocated once, at the pipeline's first sample,
// and never grows: historyLen (180) samples × 10 fields × 8 bytes = 14,400
// bytes, plus 16 for its two indexes, 14,416 bytes per pipeline (and its
// entry in page.history); adding a sample allocates nothing
// (TestPageHistoryIsBounded measures both). A
// view of the page copies it (14.4 KB) and renders 20 to 24 KB of SVG per
// pipeline with a full history, garbage once the page is written.
type history struct {
	samples [historyLen]historySample
	next    int // where the next sample goes
	n       int // how many it holds, up to historyLen
}

// historySample is one pipeline's figures at one time: 10 fields of 8
// bytes.
type historySample struct {
	at     int64 // Unix nanoseconds, by the page's clock
	counts outcomeCounts
	lag    float64 // the watermark's lag, in seconds; NaN when not known
	oldest float64 // the age of the oldest message in flight, in seconds; 0 when none is
}

func (h *history) add(s historySample) {
	h.samples[h.next] = s
	h.next = (h.next + 1) % historyLen
	h.n = min(h.n+1, historyLen)
}

// get returns the i-th oldest sample, 0 ≤ i < h.n.
func (h *history) get(i int) historySample {
	return h.samples[(h.next-h.n+i+historyLen)%historyLen]
}

// outcomeCounts are a pipeline's counts: what it received, and how many
// ended in each outcome.
type outcomeCounts struct {
	received, committed, duplicate, deadLettered, filtered, dropped, retried int64
}

func countsOf(st pipeline.Status) outcomeCounts {
	c := outcomeCounts{received: st.Received, committed: st.Committed, duplicate: st.Duplicate,
		filtered: st.Filtered, dropped: st.Dropped, retried: st.Retried}
	for _, n := range st.DeadLettered {
		c.deadLettered += n
	}
	return c
}

// outcomes are the series of the throughput chart, in the legend's order:
// each outcome's name, colour and count.
var outcomes = []struct {
	name, color string
	count       func(outcomeCounts) int64
}{
	{"committed", "#2a9d3f", func(c outcomeCounts) int64 { return c.committed }},
	{"duplicate", "#1f77b4", func(c outcomeCounts) int64 { return c.duplicate }},
	{"dead-lettered", "#d62728", func(c outcomeCounts) int64 { return c.deadLettered }},
	{"filtered", "#8c8c8c", func(c outcomeCounts) int64 { return c.filtered }},
	{"dropped", "#ff7f0e", func(c outcomeCounts) int64 { return c.dropped }},
	{"retried", "#9467bd", func(c outcomeCounts) int64 { return c.retried }},
}

// pageData is what the template gets.
type pageData struct {
	Refresh   int // seconds
	Now       time.Time
	Version   string
	Starting  string
	Process   []logging.Entry
	Pipelines []pipelineView
	// Reprocess is the run this process is, with its progress (nil for
	// `run`).
	Reprocess *reprocessStatus
	// Audit is the audit this process is (nil for `run`).
	Audit *auditStatus
}

type pipelineView struct {
	pipeline.Status
	State             string          // "running", "not ready", "stalled", "not receiving"
	Problem           string          // why, when not running
	Rates             *rates          // nil until a sample is a second old
	Charts            []template.HTML // inline SVG: outcomes, watermark lag (when tracked), oldest in flight
	Reasons           []reasonCount
	Errors            []logging.Entry
	OldestAge         *time.Duration
	Watermark         *time.Time
	Lag               float64 // seconds, when Watermark is set
	DeadLetteredTotal int64
	// Changes are the counts of the changes line, those that are not 0:
	// none, and no line, for a pipeline without change activity.
	Changes []changeCount
}

// changeCount is one count of a pipeline's changes line.
type changeCount struct {
	Label string
	Count int64
}

type rates struct {
	Over                                                  time.Duration
	Received, Committed, Duplicate, DeadLettered, Retried float64 // per second
}

// changesOf is a pipeline's changes line (those of its counts that are
// not 0): the rows of its delete operations, the set rows superseded and
// their cells, the missing values by policy.
func changesOf(st pipeline.Status) []changeCount {
	var deletes, superseded int64
	for op, c := range st.Operations {
		if op != "set" {
			deletes += c.Applied + c.Superseded
		}
		superseded += c.Superseded
	}
	var out []changeCount
	for _, c := range []changeCount{
		{"deletes", deletes}, {"superseded rows", superseded}, {"superseded cells", st.CellsSuperseded},
		{"missing skipped", st.MissingValues.Skip}, {"missing empty", st.MissingValues.Empty}, {"missing deleted", st.MissingValues.Delete},
	} {
		if c.Count != 0 {
			out = append(out, c)
		}
	}
	return out
}

type reasonCount struct {
	Reason string
	Count  int64
}

func (pg *page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, pg.data(r.Context())); err != nil {
		pg.app.log.Error("status page", zap.Error(err))
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

func (pg *page) data(ctx context.Context) pageData {
	now := pg.now()
	a := pg.app
	a.mu.RLock()
	starting := a.starting
	a.mu.RUnlock()
	d := pageData{Refresh: int(pageRefresh / time.Second), Now: now, Version: Version(), Starting: starting, Process: pg.recent.Last("")}
	if len(d.Process) > pageErrors {
		d.Process = d.Process[:pageErrors]
	}
	if r := a.opts.reprocess; r != nil {
		d.Reprocess = r.status()
	}
	if r := a.opts.audit; r != nil {
		d.Audit = r.status()
	}
	for _, p := range a.Pipelines() {
		st := p.Status()
		v := pipelineView{Status: st, State: "running", Watermark: st.Watermark, DeadLetteredTotal: countsOf(st).deadLettered, Changes: changesOf(st)}
		if st.WatermarkLagSeconds != nil {
			v.Lag = *st.WatermarkLagSeconds
		}
		rctx, cancel := context.WithTimeout(ctx, server.ReadyTimeout)
		err := p.Ready(rctx)
		cancel()
		switch {
		case st.Stalled != "":
			v.State, v.Problem = "stalled", st.Stalled
		case !st.Receiving:
			v.State = "not receiving"
			if err != nil {
				v.Problem = err.Error()
			}
		case err != nil:
			v.State, v.Problem = "not ready", err.Error()
		}
		for reason, n := range st.DeadLettered {
			v.Reasons = append(v.Reasons, reasonCount{reason, n})
		}
		sort.Slice(v.Reasons, func(i, j int) bool { return v.Reasons[i].Reason < v.Reasons[j].Reason })
		if st.OldestInFlight != nil {
			age := now.Sub(*st.OldestInFlight).Round(time.Second)
			v.OldestAge = &age
		}
		v.Errors = pg.recent.Last(st.Name)
		if len(v.Errors) > pageErrors {
			v.Errors = v.Errors[:pageErrors]
		}
		samples := pg.samples(st.Name)
		v.Rates = ratesSince(now, samples, countsOf(st))
		v.Charts = charts(now, samples, st.Tracker != nil)
		d.Pipelines = append(d.Pipelines, v)
	}
	return d
}

// start starts the sampler: a sample of every pipeline at once (so that
// the page shows rates at its first view), then one every rateSample, until
// stop. The App starts it with its pipelines and stops it with its HTTP
// server, so that the charts go on through the drain.
func (pg *page) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	pg.mu.Lock()
	pg.stopSampling, pg.sampled = cancel, done
	pg.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(rateSample)
		defer t.Stop()
		for {
			for _, p := range pg.app.Pipelines() {
				pg.record(pg.now(), p.Status())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stop stops the sampler and returns once it returned. It does nothing if
// the sampler was not started, and may be called again.
func (pg *page) stop() {
	pg.mu.Lock()
	cancel, done := pg.stopSampling, pg.sampled
	pg.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// record adds a sample of st, taken at now, to its pipeline's history.
func (pg *page) record(now time.Time, st pipeline.Status) {
	s := historySample{at: now.UnixNano(), counts: countsOf(st), lag: math.NaN()}
	if st.WatermarkLagSeconds != nil {
		s.lag = *st.WatermarkLagSeconds
	}
	if st.OldestInFlight != nil {
		s.oldest = now.Sub(*st.OldestInFlight).Seconds()
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	h := pg.history[st.Name]
	if h == nil {
		if pg.history == nil {
			pg.history = map[string]*history{}
		}
		h = new(history)
		pg.history[st.Name] = h
	}
	h.add(s)
}

// samples returns a copy of a pipeline's history, oldest first.
func (pg *page) samples(name string) []historySample {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	h := pg.history[name]
	if h == nil {
		return nil
	}
	out := make([]historySample, h.n)
	for i := range out {
		out[i] = h.get(i)
	}
	return out
}

// ratesSince returns the rates from the oldest sample within rateWindow to
// the counts cur at now, or nil if that sample is not a second old.
func ratesSince(now time.Time, samples []historySample, cur outcomeCounts) *rates {
	for _, from := range samples {
		span := now.Sub(time.Unix(0, from.at))
		if span > rateWindow {
			continue
		}
		if span < time.Second {
			return nil
		}
		old, s := from.counts, span.Seconds()
		return &rates{Over: span.Round(time.Second),
			Received: float64(cur.received-old.received) / s, Committed: float64(cur.committed-old.committed) / s,
			Duplicate: float64(cur.duplicate-old.duplicate) / s, DeadLettered: float64(cur.deadLettered-old.deadLettered) / s,
			Retried: float64(cur.retried-old.retried) / s}
	}
	return nil
}

// The charts' widths: the outcomes' chart has a legend, and with the two
// others fills a row of a 1280-pixel window.
const (
	ratesChartWidth = 540
	chartWidth      = 300
)

// charts draws a pipeline's charts from its samples, up to now: the rate
// of each outcome between consecutive samples, the watermark lag (if
// tracked) and the age of the oldest message in flight.
func charts(now time.Time, samples []historySample, tracked bool) []template.HTML {
	base := chart.Chart{End: now, Span: historySpan, Times: make([]time.Time, len(samples))}
	for i, s := range samples {
		base.Times[i] = time.Unix(0, s.at)
	}
	if len(samples) < 2 {
		var collected time.Duration
		if len(samples) == 1 {
			collected = now.Sub(base.Times[0])
		}
		base.Empty = "collecting: " + strconv.Itoa(int(collected/time.Second)) + " s of history"
	}

	rates := base
	rates.Title, rates.Unit, rates.Width = "Messages per second by outcome", "msg/s", ratesChartWidth
	for _, o := range outcomes {
		values := make([]float64, len(samples))
		for i := range values {
			values[i] = math.NaN() // the first sample has no rate
			if i > 0 {
				dt := time.Duration(samples[i].at - samples[i-1].at).Seconds()
				values[i] = float64(o.count(samples[i].counts)-o.count(samples[i-1].counts)) / dt // dt 0: ±Inf or NaN, a gap
			}
		}
		rates.Series = append(rates.Series, chart.Series{Name: o.name, Color: o.color, Values: values})
	}
	out := []template.HTML{rates.SVG()}

	seconds := func(title, name, color, empty string, value func(historySample) float64) template.HTML {
		c := base
		c.Title, c.Width = title, chartWidth
		if c.Empty == "" {
			c.Empty = empty
		}
		values := make([]float64, len(samples))
		for i, s := range samples {
			values[i] = value(s)
		}
		c.Unit = inSeconds(values)
		c.Series = []chart.Series{{Name: name, Color: color, Values: values}}
		return c.SVG()
	}
	if tracked {
		out = append(out, seconds("Watermark lag", "watermark lag", "#1f77b4", "watermark not known yet",
			func(s historySample) float64 { return s.lag }))
	}
	return append(out, seconds("Oldest message in flight", "age of the oldest message in flight", "#8c564b", "",
		func(s historySample) float64 { return s.oldest }))
}

// inSeconds scales values in seconds to the unit that keeps the axis's
// labels short, minutes from 10 minutes and hours from 2 hours, and
// returns the unit.
func inSeconds(values []float64) string {
	var top float64
	for _, v := range values {
		if !math.IsInf(v, 0) && v > top {
			top = v
		}
	}
	unit, per := "seconds", 1.0
	switch {
	case top >= 2*3600:
		unit, per = "hours", 3600
	case top >= 600:
		unit, per = "minutes", 60
	}
	for i := range values {
		values[i] /= per
	}
	return unit
}

// ago says how long before now t was, to the second.
func ago(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < time.Second {
		return "just now"
	}
	return d.String() + " ago"
}
