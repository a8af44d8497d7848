package app

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/reprocess"
)

// screenshot, if set, is where TestStatusPageInChromium saves its
// screenshot: `go test ./app -run TestStatusPageInChromium -screenshot
// ../docs/status-page.png` refreshes the README's.
var screenshot = flag.String("screenshot", "", "save the status page's screenshot to this PNG file")

// pageYAML has two pipelines, so that the page must name both: orders in
// exactly_once mode with a watermark (dedupe, members and leader on the
// page), clicks at least once without a dead-letter output, so that its
// poison is nacked with an error the page lists.
const pageYAML = `
project: p
http: {addr: "127.0.0.1:0"}
shutdown_timeout: 5s
state: {instance: i}
pipelines:
  - name: orders
    source: {topic: orders, subscription: orders-sub, tracking_subscription: orders-tracking, streams: 1}
    sink: {table: orders, row_key: "{message_id}", batch: {max_delay: 1ms}, columns: {data: "{data}", note: "{data.note}"}, on_missing_columns: {note: skip}}
  - name: clicks
    mode: at_least_once
    source: {topic: clicks, subscription: clicks-sub, streams: 1}
    filter: "data.?kind.orValue('') != 'heartbeat'"
    sink: {table: clicks, row_key: "{data.user}", batch: {max_delay: 1ms}}
`

// startPageApp runs an App of pageYAML on the fakes, with 20 orders
// committed and one poison click nacked, and returns it and its base URL.
func startPageApp(t *testing.T) (*App, string) {
	t.Helper()
	f := newFakes(t)
	ctx := context.Background()
	cfg := parse(t, pageYAML)
	if err := Setup(ctx, cfg, f.ps, f.admin, io.Discard); err != nil {
		t.Fatal(err)
	}
	opts := f.opts
	opts.filterWarnAfter = time.Nanosecond // a second heartbeat of clicks is a warning (filterEverything)
	opts.columnWarnAfter = time.Nanosecond // a second order without a note is a warning (missNote)
	a := runApp(t, zap.NewNop(), cfg, opts)
	for i := range 20 {
		f.psSrv.Publish("projects/p/topics/orders", []byte(`{"n":`+strconv.Itoa(i)+`,"note":"x"}`), nil)
	}
	f.psSrv.Publish("projects/p/topics/clicks", []byte("not json"), nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := a.Pipelines()[0].Status()
		if st.Committed >= 20 && a.Pipelines()[1].Status().Retried >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a, "http://" + a.Addr()
}

// filterEverything publishes heartbeats to clicks, which its filter drops,
// until the pipeline warns that its filter drops every message; it returns
// the start of the warning the page shows.
func filterEverything(t *testing.T, a *App) string {
	t.Helper()
	publishUntil(t, a, 1, `{"kind":"heartbeat"}`, func(st pipeline.Status) bool { return st.FilteredEverything != nil })
	return `<div class="warning">warning: the filter has dropped every message for `
}

// missNote publishes orders without a note, which their note column
// (on_missing: skip) misses, until the pipeline warns that no committed
// message fills it; it returns the start of the warning the page shows.
func missNote(t *testing.T, a *App) string {
	t.Helper()
	publishUntil(t, a, 0, `{"n":-1}`, func(st pipeline.Status) bool { return st.ColumnsNeverFilled != nil })
	return `<div class="warning">warning: column sink.columns.note has been missing in every committed message for `
}

// publishUntil publishes data to the topic of a's pipeline i, one message
// every 20 ms, until warned says its status has the warning wanted; it
// fails the test after 10 s.
func publishUntil(t *testing.T, a *App, i int, data string, warned func(pipeline.Status) bool) {
	t.Helper()
	p := a.Pipelines()[i]
	pub := a.pubsub.Publisher("projects/" + a.cfg.Project + "/topics/" + a.cfg.Pipelines[i].Source.Topic)
	defer pub.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !warned(p.Status()) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning: %+v", p.Status())
		}
		if _, err := pub.Publish(context.Background(), &pubsub.Message{Data: []byte(data)}).Get(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// makeChanges gives the pipeline called name of a's the counts of a change
// mapping's activity (made up: the fakes run plain mappings), and returns
// the changes line the page shows for them (with the real values missed
// before: missNote's).
func makeChanges(a *App, name string) string {
	m := a.Metrics().Pipeline(name)
	m.RowOperations("delete", "applied").Add(10)
	m.RowOperations("delete_family", "applied").Add(2)
	m.RowOperations("set", "superseded").Add(3)
	m.CellsSuperseded.Add(7)
	m.MissingValues("skip").Add(5)
	return `<div class="changes">changes: deletes 12 · superseded rows 3 · superseded cells 7 · missing skipped ` +
		strconv.Itoa(int(metrics.Value(m.MissingValues("skip")))) + `</div>`
}

// getStatus returns the pipelines of GET /status, failing unless there
// are pageYAML's two.
func getStatus(t *testing.T, base string) (st struct {
	Pipelines []pipeline.Status `json:"pipelines"`
}) {
	t.Helper()
	resp, err := http.Get(base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Pipelines) != 2 {
		t.Fatalf("/status: %v, %+v", err, st)
	}
	return st
}

// getPage returns the body of GET url, failing unless it is 200 HTML.
func getPage(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return string(body)
}

// pageCharts are the charts each pipeline of pageYAML has, by their
// titles: orders tracks a watermark, clicks does not.
var pageCharts = map[string][]string{
	"orders": {"Messages per second by outcome", "Watermark lag", "Oldest message in flight"},
	"clicks": {"Messages per second by outcome", "Oldest message in flight"},
}

// section returns the pipeline's section of a page, "" if there is none.
func section(page, name string) string { return sectionByID(page, "pipeline-"+name) }

// sectionByID returns the page's section with that id ("reprocess",
// "audit", "pipeline-orders"), "" if there is none.
func sectionByID(page, id string) string {
	_, after, ok := strings.Cut(page, `<section class="pipeline" id="`+id+`">`)
	if !ok {
		return ""
	}
	sec, _, _ := strings.Cut(after, "</section>")
	return sec
}

// svgs returns the <svg> elements of s, whole.
func svgs(s string) []string {
	return regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(s, -1)
}

// seedHistory stops a's sampler and gives each of its pipelines a full
// history, historySpan of made-up traffic sampled every rateSample up to
// now, whose last sample has the pipeline's real counts: a steady flow
// with some duplicates, dead letters, filtered and dropped messages, and
// an outage 6 to 4.5 minutes before now (commits stall, deliveries are
// retried, the watermark lag and the oldest message's age climb, then
// catch up), so that every series has a shape. The second pipeline has
// half the flow, and its poison message's retries. It is what the README's
// screenshot shows.
func seedHistory(a *App, now time.Time) {
	pg := a.page
	pg.stop()
	for k, p := range a.Pipelines() {
		live := p.Status()
		// The made-up statuses, from the last (live) one back: each is the
		// next one less the messages of the 5 s between them.
		statuses := make([]pipeline.Status, historyLen)
		cur := countsOf(live)
		for i := historyLen - 1; i >= 0; i-- {
			x, scale := float64(i), 1/float64(k+1)
			in := outcomeCounts{} // the messages of the 5 s before sample i
			rate := func(r float64) int64 { return int64(math.Round(r * scale * rateSample.Seconds())) }
			lag, oldest := 3+1.5*math.Sin(x/4), 0.6+0.4*math.Abs(math.Sin(x/5))
			in.committed = rate(42 + 10*math.Sin(x/11) + 4*math.Sin(x/3))
			in.duplicate = rate(3 + 2*math.Sin(x/5))
			in.filtered = rate(8 + 2*math.Cos(x/7))
			if i%41 == 7 {
				in.deadLettered = rate(4)
			}
			if i >= 40 && i < 52 {
				in.dropped = rate(2)
			}
			switch {
			case i >= 108 && i < 126: // the outage
				d := float64(i - 107)
				in.committed, in.retried = rate(3), rate(30)
				lag, oldest = lag+4*d, oldest+4*d
			case i >= 126 && i < 144: // catching up
				d := float64(144 - i)
				in.committed = rate(45 + 2*d)
				lag, oldest = max(lag, 4*d), max(oldest, 4*d)
			}
			if k > 0 { // at least once: no dedupe, no dead-letter output, a poison retried
				in.duplicate, in.deadLettered, in.retried = 0, 0, in.retried+rate(20)
			}
			st := pipeline.Status{Name: live.Name, Received: cur.received, Committed: cur.committed, Duplicate: cur.duplicate,
				DeadLettered: map[string]int64{"invalid_payload": cur.deadLettered}, Filtered: cur.filtered, Dropped: cur.dropped, Retried: cur.retried}
			at := now.Add(-time.Duration(historyLen-1-i) * rateSample)
			oldestAt := at.Add(-time.Duration(oldest * float64(time.Second)))
			st.OldestInFlight = &oldestAt
			if live.Tracker != nil {
				st.WatermarkLagSeconds = &lag
			}
			statuses[i] = st
			cur = outcomeCounts{received: cur.received - in.committed - in.duplicate - in.deadLettered - in.filtered - in.dropped - in.retried,
				committed: cur.committed - in.committed, duplicate: cur.duplicate - in.duplicate, deadLettered: cur.deadLettered - in.deadLettered,
				filtered: cur.filtered - in.filtered, dropped: cur.dropped - in.dropped, retried: cur.retried - in.retried}
		}
		pg.mu.Lock()
		delete(pg.history, live.Name)
		pg.mu.Unlock()
		for i, st := range statuses {
			pg.record(now.Add(-time.Duration(historyLen-1-i)*rateSample), st)
		}
	}
}

// TestStatusPage: / is HTML naming every pipeline with its state, counts
// and dead letters, the poison's warning among the last errors, and it
// reloads itself; each pipeline has its charts, which say how much history
// they have until they have two samples, then draw every series; other
// paths stay 404.
func TestStatusPage(t *testing.T) {
	a, base := startPageApp(t)
	page := getPage(t, base+"/")
	for _, want := range []string{
		`id="pipeline-orders"`, `id="pipeline-clicks"`, `<meta http-equiv="refresh" content="5">`,
		`<td>committed</td><td class="n">20</td>`, "no tracking subscription", "invalid_payload",
		"<h3>Dedupe</h3>", "<h3>Members</h3>", "<td>leader</td>", "<h3>Payload</h3>", "<td>format</td><td>json</td>",
		`<td>filtered</td><td class="n">0</td>`, `<td>rows written</td><td class="n">20</td>`,
		"no dead_letter output is configured", // clicks' poison, among its last warnings and errors
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if r, err := http.Get(base + "/nope"); err != nil || r.StatusCode != 404 {
		t.Errorf("GET /nope: %v %v, want 404", r.StatusCode, err)
	}
	if strings.Contains(page, `class="changes"`) {
		t.Errorf("a pipeline without change activity has a changes line:\n%s", page)
	}
	if strings.Contains(page, `class="warning"`) {
		t.Errorf("a pipeline whose filter dropped nothing, whose columns were all filled, has a warning:\n%s", page)
	}
	t.Run("a filter that drops every message is a warning on the page and /status", func(t *testing.T) {
		warning := filterEverything(t, a)
		page := getPage(t, base+"/")
		if !strings.Contains(section(page, "clicks"), warning) || strings.Contains(section(page, "orders"), "the filter has dropped") {
			t.Errorf("want clicks' filter warning %s, and none for orders:\n%s", warning, page)
		}
		st := getStatus(t, base)
		w := st.Pipelines[1].FilteredEverything
		if w == nil || w.Messages < 2 || w.Since.IsZero() || !strings.Contains(w.Warning, `check filter "data.?kind.orValue('') != 'heartbeat'"`) || st.Pipelines[0].FilteredEverything != nil {
			t.Errorf("/status filtered_everything: clicks %+v, orders %+v", w, st.Pipelines[0].FilteredEverything)
		}
	})
	t.Run("a column missing in every committed message is a warning on the page and /status", func(t *testing.T) {
		warning := missNote(t, a)
		page := getPage(t, base+"/")
		if !strings.Contains(section(page, "orders"), warning) || strings.Contains(section(page, "clicks"), "has been missing in every committed message") {
			t.Errorf("want orders' column warning %s, and none for clicks:\n%s", warning, page)
		}
		st := getStatus(t, base)
		w := st.Pipelines[0].ColumnsNeverFilled
		if len(w) != 1 || w[0].Column != "sink.columns.note" || w[0].Template != "{data.note}" || w[0].OnMissing != "skip" || w[0].Messages < 2 ||
			w[0].Since.IsZero() || !strings.Contains(w[0].Warning, `check its template "{data.note}"`) || st.Pipelines[1].ColumnsNeverFilled != nil {
			t.Errorf("/status columns_never_filled: orders %+v, clicks %+v", w, st.Pipelines[1].ColumnsNeverFilled)
		}
	})
	t.Run("a pipeline with change activity has a changes line", func(t *testing.T) {
		line := makeChanges(a, "orders")
		page := getPage(t, base+"/")
		if !strings.Contains(section(page, "orders"), line) || strings.Contains(section(page, "clicks"), `class="changes"`) {
			t.Errorf("want orders' changes line %s, and none for clicks:\n%s", line, page)
		}
	})

	// The sampler ran from the start; the test's samples replace its own.
	a.page.stop()
	for name := range pageCharts {
		if len(a.page.samples(name)) == 0 {
			t.Errorf("the sampler kept no sample of %s", name)
		}
	}

	t.Run("with one sample, each chart says how much history it has", func(t *testing.T) {
		at := time.Now().Add(-3 * time.Second)
		for _, p := range a.Pipelines() {
			st := p.Status()
			a.page.mu.Lock()
			delete(a.page.history, st.Name)
			a.page.mu.Unlock()
			a.page.record(at, st)
		}
		page := getPage(t, base+"/")
		for name, titles := range pageCharts {
			charts := svgs(section(page, name))
			if len(charts) != len(titles) {
				t.Errorf("%s has %d charts, want %d (%q):\n%s", name, len(charts), len(titles), titles, page)
				continue
			}
			for i, svg := range charts {
				if !strings.Contains(svg, `aria-label="`+titles[i]+`"`) || !regexp.MustCompile(`>collecting: [345] s of history<`).MatchString(svg) ||
					strings.Contains(svg, `class="series"`) {
					t.Errorf("%s's chart %d is not %q saying it is collecting 3 s of history, and nothing else:\n%s", name, i, titles[i], svg)
				}
			}
		}
	})

	t.Run("with history, each chart draws its series", func(t *testing.T) {
		seedHistory(a, time.Now())
		page := getPage(t, base+"/")
		for name, titles := range pageCharts {
			sec := section(page, name)
			charts := svgs(sec)
			if len(charts) != len(titles) {
				t.Errorf("%s has %d charts, want %d (%q):\n%s", name, len(charts), len(titles), titles, page)
				continue
			}
			for i, svg := range charts {
				series := map[string]int{}
				for _, m := range regexp.MustCompile(`(?s)<g class="series" data-name="([^"]*)">.*?</g>`).FindAllStringSubmatch(svg, -1) {
					series[m[1]] = strings.Count(m[0], "<polyline")
				}
				want := []string{"age of the oldest message in flight"}
				switch titles[i] {
				case "Messages per second by outcome":
					want = []string{"committed", "duplicate", "dead-lettered", "filtered", "dropped", "retried"}
				case "Watermark lag":
					want = []string{"watermark lag"}
				}
				for _, name := range want {
					if series[name] == 0 {
						t.Errorf("chart %q lacks a line of %q (has %v):\n%s", titles[i], name, series, svg)
					}
				}
				if len(series) != len(want) || strings.Contains(svg, "collecting") || !strings.Contains(svg, ">last 15 min</text>") {
					t.Errorf("chart %q: series %v, want %q, over the last 15 min:\n%s", titles[i], series, want, svg)
				}
			}
			// The rates are the history's too: orders committed about 40 a second.
			if name == "orders" {
				m := regexp.MustCompile(`<td>committed</td><td class="n">\d+</td><td class="n">([\d.]+)</td>`).FindStringSubmatch(sec)
				if rate, _ := strconv.ParseFloat(append(m, "", "")[1], 64); rate < 10 {
					t.Errorf("orders' committed rate %q, want the history's (about 40/s):\n%s", m, sec)
				}
			}
		}
		for _, want := range []string{">msg/s</text>", ">committed</text>", ">retried</text>", ">−15 min</text>", ">now</text>"} {
			if !strings.Contains(page, want) {
				t.Errorf("the page lacks %q (units, legend, time axis)", want)
			}
		}
	})
}

// TestPageChartsSayWhatTheyLack: with two samples and no watermark yet,
// the lag chart says so, and the others draw.
func TestPageChartsSayWhatTheyLack(t *testing.T) {
	now := time.Now()
	samples := []historySample{{at: now.Add(-5 * time.Second).UnixNano(), lag: math.NaN()}, {at: now.UnixNano(), lag: math.NaN()}}
	svgs := charts(now, samples, true)
	if len(svgs) != 3 || !strings.Contains(string(svgs[1]), ">watermark not known yet<") ||
		strings.Contains(string(svgs[0]), `class="empty"`) || strings.Contains(string(svgs[2]), `class="empty"`) {
		t.Errorf("charts, want the lag's saying the watermark is not known yet, the others drawn:\n%s", svgs)
	}
}

// TestPageHistoryIsBounded measures what a pipeline's history costs: its
// size is the doc comment's figure (180 samples × 10 fields × 8 bytes,
// plus two indexes: 14,416 bytes), it is allocated once however many
// samples are recorded, adding a sample allocates nothing, and it keeps the
// last historyLen samples, oldest first.
func TestPageHistoryIsBounded(t *testing.T) {
	if got, want := unsafe.Sizeof(history{}), uintptr(historyLen*10*8+16); got != want || historyLen != 180 {
		t.Errorf("a history is %d bytes of %d samples, want %d of 180", got, historyLen, want)
	}
	pg := &page{}
	st := pipeline.Status{Name: "p", DeadLettered: map[string]int64{"invalid_payload": 1}}
	const n = int64(10*historyLen + 7) // not a multiple: the ring has wrapped around mid-way
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		st.Committed = i
		pg.record(time.Unix(i*5, 0), st)
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d samples of a pipeline allocated %d bytes; a history is %d", n, grew, unsafe.Sizeof(history{}))
	if grew > 2*uint64(unsafe.Sizeof(history{})) {
		t.Errorf("%d samples allocated %d bytes, want about one history (%d)", n, grew, unsafe.Sizeof(history{}))
	}
	s := pg.samples("p")
	if len(s) != historyLen || s[0].counts.committed != n-int64(historyLen) || s[len(s)-1].counts.committed != n-1 {
		t.Errorf("the history holds %d samples, committed %d to %d; want %d, %d to %d",
			len(s), s[0].counts.committed, s[len(s)-1].counts.committed, historyLen, n-int64(historyLen), n-1)
	}
	if allocs := testing.AllocsPerRun(1000, func() { pg.record(time.Unix(0, 0), st) }); allocs != 0 {
		t.Errorf("a sample allocates %v times, want 0", allocs)
	}
}

// TestStatusPageInChromium loads the page in headless Chromium (Debian's
// chromium; CI installs it) 1280 pixels wide: it renders, names every
// pipeline, has each pipeline's charts as SVG with their lines (the
// history seeded by seedHistory), shows a reprocess's run and progress
// when the process is one, a pipeline's changes line when it has change
// activity, and the warning of a filter that drops every message, and its
// screenshot is a real image.
func TestStatusPageInChromium(t *testing.T) {
	chrome := headlessChromium(t)
	a, base := startPageApp(t)
	seedHistory(a, time.Now()) // charts with lines, for the test and the README's screenshot
	dir := t.TempDir()
	// As a reprocess shows itself: its run, the live pipeline, its
	// progress.
	from := time.Now().Add(-time.Hour)
	gate := reprocess.NewGate(from, from.Add(time.Hour), nil)
	a.opts.reprocess = &reprocessRun{live: "orders", gate: gate, record: &reprocess.Record{Name: "orders~r20261203t061500z",
		Subscription: "projects/p/subscriptions/orders-sub-reprocess", RestorePoint: "projects/p/snapshots/orders-sub-restore-20261203t061500z"}}
	missed := missNote(t, a)            // no order has a note
	changes := makeChanges(a, "orders") // and none for clicks
	warning := filterEverything(t, a)   // clicks' filter drops every message
	dom := string(chrome("--dump-dom", base+"/"))
	if !strings.Contains(section(dom, "clicks"), warning) {
		t.Errorf("Chromium's DOM lacks clicks' filter warning %s:\n%s", warning, dom)
	}
	if !strings.Contains(section(dom, "orders"), missed) || strings.Contains(section(dom, "clicks"), "has been missing in every committed message") {
		t.Errorf("Chromium's DOM lacks orders' column warning %s, or has one for clicks:\n%s", missed, dom)
	}
	if !strings.Contains(section(dom, "orders"), changes) || strings.Contains(section(dom, "clicks"), `class="changes"`) {
		t.Errorf("Chromium's DOM lacks orders' changes line %s, or has one for clicks:\n%s", changes, dom)
	}
	for _, want := range []string{"pipeline-orders", "pipeline-clicks", "committed", "invalid_payload",
		`id="reprocess"`, "reprocess orders~r20261203t061500z", "of orders", "<progress", "0 messages done (0% of the range", "orders-sub-restore-20261203t061500z"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM Chromium rendered lacks %q:\n%s", want, dom)
		}
	}
	for name, titles := range pageCharts {
		charts := svgs(section(dom, name))
		if len(charts) != len(titles) {
			t.Errorf("Chromium's DOM of %s has %d svg charts, want %d:\n%s", name, len(charts), len(titles), dom)
		}
		for i, svg := range charts {
			if i < len(titles) && (!strings.Contains(svg, `aria-label="`+titles[i]+`"`) || !strings.Contains(svg, "<polyline")) {
				t.Errorf("Chromium's DOM of %s's chart %d is not %q with lines:\n%s", name, i, titles[i], svg)
			}
		}
	}
	png := filepath.Join(dir, "status.png")
	chrome("--screenshot="+png, base+"/")
	b, err := os.ReadFile(png)
	if err != nil || len(b) < 10_000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("screenshot: %d bytes, %v", len(b), err)
	}
	if *screenshot != "" {
		if err := os.WriteFile(*screenshot, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// headlessChromium returns a function that runs headless Chromium
// (Debian's chromium; CI installs it) 1280 pixels wide with the arguments
// given, and returns its stdout, failing the test if it fails. Without a
// chromium on PATH it skips the test, or fails it with CI=true.
func headlessChromium(t *testing.T) func(args ...string) []byte {
	t.Helper()
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("no chromium on PATH: .ci/run installs it (apt-get install chromium)")
		}
		t.Skip("no chromium on PATH (with CI=true this is a failure)")
	}
	profile := filepath.Join(t.TempDir(), "profile")
	return func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir=" + profile, "--window-size=1280,1700"}, args...)
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, browser, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", browser, args, err, stderr.String())
		}
		return out
	}
}
