package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
