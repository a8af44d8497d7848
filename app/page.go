package app

import (
	"bytes"
	"context"
	_ "embed"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/pipeline"
)

// The status page at /: server-rendered HTML (html/template, no script, no
// build step) that reloads itself every pageRefresh. It shows what /status
// has, for a person: per pipeline its state, rates and counts, watermark
// and lag, dedupe figures, dead letters by reason, members and leader, and
// its last warnings and errors.

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"ago":     ago,
	"percent": func(f float64) string { return strconv.FormatFloat(max(100*f, 0), 'f', 2, 64) + "%" }, // max: no "-0.00%"
	"float":   func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
}).Parse(pageHTML))

const (
	// pageRefresh is how often the page reloads itself.
	pageRefresh = 5 * time.Second
	// rateWindow is the span the rates are averaged over; rateSample how
	// often the page keeps a sample of the counts for them.
	rateWindow = time.Minute
	rateSample = 5 * time.Second
	// pageErrors is how many warnings and errors a pipeline's section
	// lists.
	pageErrors = 5
	// pageReadyTimeout bounds a pipeline's readiness check on the page.
	pageReadyTimeout = 900 * time.Millisecond
)

// page renders the status page of an App.
type page struct {
	app    *App
	recent *logging.Recent
	now    func() time.Time

	mu      sync.Mutex
	samples []rateSamplePoint // oldest first, within rateWindow
}

// rateSamplePoint is the counts of every pipeline at one time.
type rateSamplePoint struct {
	at     time.Time
	counts map[string]outcomeCounts
}

type outcomeCounts struct{ received, committed, duplicate, deadLettered, retried int64 }

func countsOf(st pipeline.Status) outcomeCounts {
	c := outcomeCounts{received: st.Received, committed: st.Committed, duplicate: st.Duplicate, retried: st.Retried}
	for _, n := range st.DeadLettered {
		c.deadLettered += n
	}
	return c
}

// pageData is what the template gets.
type pageData struct {
	Refresh   int // seconds
	Now       time.Time
	Version   string
	Starting  string
	Process   []logging.Entry
	Pipelines []pipelineView
}

type pipelineView struct {
	pipeline.Status
	State             string // "running", "not ready", "stalled", "not receiving"
	Problem           string // why, when not running
	Rates             *rates // nil until two samples span a few seconds
	Reasons           []reasonCount
	Errors            []logging.Entry
	OldestAge         *time.Duration
	Watermark         *time.Time
	Lag               float64 // seconds, when Watermark is set
	DeadLetteredTotal int64
}

type rates struct {
	Over                                                  time.Duration
	Received, Committed, Duplicate, DeadLettered, Retried float64 // per second
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
	statuses := map[string]pipeline.Status{}
	for _, p := range a.Pipelines() {
		st := p.Status()
		statuses[st.Name] = st
		v := pipelineView{Status: st, State: "running", Watermark: st.Watermark, DeadLetteredTotal: countsOf(st).deadLettered}
		if st.WatermarkLagSeconds != nil {
			v.Lag = *st.WatermarkLagSeconds
		}
		rctx, cancel := context.WithTimeout(ctx, pageReadyTimeout)
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
		d.Pipelines = append(d.Pipelines, v)
	}
	pg.rates(now, statuses, d.Pipelines)
	return d
}

// sample keeps a sample of the counts every rateSample until ctx ends, so
// that the page shows rates at its first view.
func (pg *page) sample(ctx context.Context) {
	t := time.NewTicker(rateSample)
	defer t.Stop()
	for {
		statuses := map[string]pipeline.Status{}
		for _, p := range pg.app.Pipelines() {
			st := p.Status()
			statuses[st.Name] = st
		}
		pg.rates(pg.now(), statuses, nil)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rates keeps a sample of the counts at most every rateSample, drops those
// older than rateWindow, and fills in each view's rates over the span from
// the oldest sample to now.
func (pg *page) rates(now time.Time, statuses map[string]pipeline.Status, views []pipelineView) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for len(pg.samples) > 0 && now.Sub(pg.samples[0].at) > rateWindow {
		pg.samples = pg.samples[1:]
	}
	if len(pg.samples) > 0 {
		from := pg.samples[0]
		if span := now.Sub(from.at); span >= time.Second {
			for i := range views {
				old, ok := from.counts[views[i].Name]
				if !ok {
					continue
				}
				cur, s := countsOf(views[i].Status), span.Seconds()
				views[i].Rates = &rates{Over: span.Round(time.Second),
					Received: float64(cur.received-old.received) / s, Committed: float64(cur.committed-old.committed) / s,
					Duplicate: float64(cur.duplicate-old.duplicate) / s, DeadLettered: float64(cur.deadLettered-old.deadLettered) / s,
					Retried: float64(cur.retried-old.retried) / s}
			}
		}
	}
	if len(pg.samples) == 0 || now.Sub(pg.samples[len(pg.samples)-1].at) >= rateSample {
		counts := map[string]outcomeCounts{}
		for name, st := range statuses {
			counts[name] = countsOf(st)
		}
		pg.samples = append(pg.samples, rateSamplePoint{at: now, counts: counts})
	}
}

// ago says how long before now t was, to the second.
func ago(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < time.Second {
		return "just now"
	}
	return d.String() + " ago"
}
