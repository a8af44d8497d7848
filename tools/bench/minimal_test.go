package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The minimal connector's hand-written /metrics is read by the bench's own
// scrape (HTTP and parser) as a pubsink connector's: its commits, and its
// ApplyBulk rows as the sink table's writes (1 per message), no state.
func TestMinimalMetrics(t *testing.T) {
	c := &minimalCounts{table: "rows-minimal-r1-3"}
	srv := httptest.NewServer(c.mux())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	n := names{suffix: "minimal-r1-3", table: "rows-minimal-r1-3", state: "state-minimal-r1-3"}

	// Before any message: zeros, and the counters are there.
	got, err := scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	if got.committed != 0 || !got.mutationsSeen {
		t.Errorf("at start: committed %v, mutations seen %v", got.committed, got.mutationsSeen)
	}

	c.committed.Add(19_999)
	c.mutations.Add(20_000)
	got, err = scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	if got.committed != 19_999 || got.mutations[n.table] != 20_000 || got.byCall[tableCall{n.table, "mutate_rows"}] != 20_000 || len(got.mutations) != 1 {
		t.Errorf("committed %v, mutations %v by call %v", got.committed, got.mutations, got.byCall)
	}
	w, stages := readEnd([]string{addr}, n)
	r := result{writes: w, stages: stages}
	if !w.known || w.callsKnown || r.statePerMsg() != 0 || r.sinkPerMsg() != 20_000.0/19_999 || len(stages) != 0 {
		t.Errorf("read at the end: %+v (state/msg %v, sink/msg %v), stages %v", w, r.statePerMsg(), r.sinkPerMsg(), stages)
	}

	// Only GET /metrics.
	for _, path := range []string{"/", "/readyz", "/healthz", "/status"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", path, resp.Status)
		}
	}
}

// The minimal connector is started, profiled and set up like naive: this
// binary's subcommand with the run's subscription, table, address and
// streams, one row of the raw payload whatever the shape, at_least_once in
// the configuration that setup reads.
func TestMinimalConnector(t *testing.T) {
	o, err := parseOptions([]string{"-streams", "4", "-connectors", "minimal,naive,minimal_each3,minimal_ordered_keys3,exactly_once"})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{o: o, self: "/bin/bench"}
	n := names{suffix: "minimal-r1-1", topic: "t-minimal-r1-1", sub: "s-minimal-r1-1", table: "rows-minimal-r1-1", state: "state-minimal-r1-1"}
	cmd := b.command(minimal, 0, n, "cfg.yaml", "127.0.0.1:9", &profile{dir: "prof"}, "")
	want := []string{"/bin/bench", "minimal", "-project", "bench", "-subscription", "projects/bench/subscriptions/s-minimal-r1-1",
		"-instance", "bench", "-table", "rows-minimal-r1-1", "-http", "127.0.0.1:9", "-streams", "4",
		"-cpuprofile", filepath.Join("prof", "minimal.cpu.pprof"), "-allocprofile", filepath.Join("prof", "minimal.allocs.pprof")}
	if !slices.Equal(cmd.Args, want) {
		t.Errorf("command\n%q, want\n%q", cmd.Args, want)
	}
	if cmd := b.command("minimal_ordered_keys3", 0, n, "cfg.yaml", "127.0.0.1:9", nil, ""); len(cmd.Args) < 2 || cmd.Args[1] != "minimal" {
		t.Errorf("minimal_ordered_keys3 runs %q", cmd.Args)
	}
	if cmd := b.command(exactlyOnce, 0, n, "cfg.yaml", "127.0.0.1:9", nil, ""); slices.Contains(cmd.Args, "minimal") {
		t.Errorf("exactly_once runs %q", cmd.Args)
	}
	if sh := o.shapes["minimal_each3"]; sh.rowsPerMessage() != 1 || sh.each {
		t.Errorf("minimal_each3: %d rows per message (each %v), want one row of the raw payload", sh.rowsPerMessage(), sh.each)
	}
	if y := b.configYAML(minimal, n, "127.0.0.1:9"); !strings.Contains(y, "mode: at_least_once") || strings.Contains(y, "tracking_subscription") {
		t.Errorf("setup's configuration:\n%s", y)
	}
	if !minimal.own() || !kind("minimal_avro").own() || !naive.own() || atLeastOnce.own() || kind("exactly_once_baseline").own() {
		t.Error("own: minimal and naive (any suffix), not pubsink's")
	}
}

// When minimal ran, the ratios are to minimal first, then to naive, each
// table titled with its baseline, with the same columns (naive's latency
// ones too); -reference minimal or naive adds no third table; without
// minimal, only naive's.
func TestPrintTableMinimal(t *testing.T) {
	run := func(k kind, round int, cpu time.Duration, rss int64, p99 time.Duration) result {
		return result{kind: k, round: round, msgs: 20_000, rate: 1000, cpu: cpu, rss: rss, p50: 20 * time.Millisecond, p99: p99, samples: 300, rows: 20_000,
			writes: writes{known: true, sink: 20_000, committed: 20_000}}
	}
	rs := []result{
		run(minimal, 1, 2*time.Second, 40<<20, 40*time.Millisecond), run(naive, 1, 2500*time.Millisecond, 50<<20, 50*time.Millisecond), run(exactlyOnce, 1, 4*time.Second, 60<<20, 60*time.Millisecond),
		run(minimal, 2, 2*time.Second, 40<<20, 40*time.Millisecond), run(naive, 2, 2200*time.Millisecond, 50<<20, 50*time.Millisecond), run(exactlyOnce, 2, 4*time.Second, 60<<20, 60*time.Millisecond),
	}
	o, err := parseOptions([]string{"-latency", "-reference", "minimal,naive,exactly_once"})
	if err != nil {
		t.Fatal(err)
	}
	o.connectors = []kind{minimal, naive, exactlyOnce}
	var b strings.Builder
	printTable(&b, o, rs)
	out := b.String()
	if n := strings.Count(out, "\nratios to "); n != 3 {
		t.Errorf("%d ratio tables, want 3 (minimal, naive, exactly_once):\n%s", n, out)
	}
	_, toMinimal, ok := strings.Cut(out, "ratios to minimal (the honest baseline: ")
	toMinimal, toNaive, ok2 := strings.Cut(toMinimal, "ratios to naive (the bench's naive connector: ")
	if !ok || !ok2 {
		t.Fatalf("no ratios to minimal, then to naive, titled with their baselines:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(toMinimal), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[1]), " ") != "ratio CPU s/M msg sink writes/msg peak RSS MB p50 ms p99 ms" {
		t.Fatalf("ratios to minimal:\n%s", toMinimal)
	}
	// naive: CPU 2.35/2 (1.1 and 1.25), RSS 1.25, p99 1.25; exactly_once: 2, 1.5, 1.5.
	if f := strings.Fields(lines[2]); strings.Join(f, " ") != "naive / minimal 1.175 [1.100–1.250] 1.000 [1.000–1.000] 1.250 [1.250–1.250] 1.000 [1.000–1.000] 1.250 [1.250–1.250]" {
		t.Errorf("naive / minimal: %q", lines[2])
	}
	if f := strings.Fields(lines[3]); strings.Join(f[:5], " ") != "exactly_once / minimal 2.000 [2.000–2.000]" {
		t.Errorf("exactly_once / minimal: %q", lines[3])
	}
	if !strings.Contains(toNaive, "minimal / naive") || !strings.Contains(toNaive, "exactly_once / naive") || strings.Contains(toNaive, "/ minimal") {
		t.Errorf("ratios to naive:\n%s", toNaive)
	}

	// Without minimal, only naive's table.
	b.Reset()
	o.connectors, o.references = []kind{naive, exactlyOnce}, nil
	printTable(&b, o, rs[1:3])
	if out := b.String(); strings.Contains(out, "ratios to minimal") || strings.Count(out, "\nratios to naive (the bench's naive connector") != 1 {
		t.Errorf("without minimal:\n%s", out)
	}
}

// TestScrapesAskForNoCompression: the bench's scrapes must not make the
// connectors gzip their metrics (scrapeClient).
func TestScrapesAskForNoCompression(t *testing.T) {
	var asked atomic.Pointer[string]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		enc := r.Header.Get("Accept-Encoding")
		asked.Store(&enc)
		fmt.Fprintln(w, `pubsink_messages_committed_total{pipeline="bench"} 3`)
	}))
	defer srv.Close()
	c, err := scrape(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if c.committed != 3 {
		t.Fatalf("committed %v, want 3", c.committed)
	}
	if enc := asked.Load(); enc == nil || strings.Contains(*enc, "gzip") {
		t.Fatalf("the scrape asked for Accept-Encoding %v, want no gzip", enc)
	}
}
