package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseOptionsLatency(t *testing.T) {
	o, err := parseOptions([]string{"-latency"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.latency || o.rate != 1000 || o.duration != 20*time.Second || o.warmup != 3*time.Second {
		t.Errorf("-latency defaults: rate %v, duration %v, warmup %v; want 1000, 20s, 3s", o.rate, o.duration, o.warmup)
	}
	if o.timeout != 2*time.Minute {
		t.Errorf("-latency timeout %v, want 2m (not one that grows with -n)", o.timeout)
	}
	if got := strings.Join(kindNames(o.connectors), ","); got != "minimal,naive,at_least_once,exactly_once" {
		t.Errorf("-latency connectors %s, want the default ones", got)
	}

	o, err = parseOptions([]string{"-latency", "-rate", "500", "-duration", "10s", "-warmup", "0s", "-connectors", "naive,exactly_once", "-timeout", "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.rate != 500 || o.duration != 10*time.Second || o.warmup != 0 || o.timeout != 30*time.Second || len(o.connectors) != 2 {
		t.Errorf("got rate %v, duration %v, warmup %v, timeout %v, connectors %v", o.rate, o.duration, o.warmup, o.timeout, o.connectors)
	}

	o, err = parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.latency || o.timeout != 2*time.Minute+400*time.Second {
		t.Errorf("without -latency: latency %v, timeout %v; want false, 2m + 2 ms × 200,000", o.latency, o.timeout)
	}
}

func TestParseOptionsLatencyRejects(t *testing.T) {
	for _, args := range [][]string{
		{"-latency", "-memory"},
		{"-latency", "-rate", "0"},
		{"-latency", "-duration", "0s"},
		{"-latency", "-warmup", "-1s"},
		{"-latency", "-duration", "5s", "-warmup", "5s"},
	} {
		if _, err := parseOptions(args); err == nil {
			t.Errorf("parseOptions(%q) accepted", args)
		}
	}
}

func kindNames(ks []kind) []string {
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return s
}

func TestQuantiles(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		var ds []time.Duration
		for _, v := range vs {
			ds = append(ds, time.Duration(v)*time.Millisecond)
		}
		return ds
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 … 1, unsorted
	}
	thousand := make([]int, 1000)
	for i := range thousand {
		thousand[i] = i + 1
	}
	for _, c := range []struct {
		name     string
		in       []time.Duration
		p50, p99 time.Duration
	}{
		{"none", nil, 0, 0},
		{"one", ms(7), 7 * time.Millisecond, 7 * time.Millisecond},
		{"two", ms(9, 3), 3 * time.Millisecond, 9 * time.Millisecond},
		{"three", ms(5, 1, 3), 3 * time.Millisecond, 5 * time.Millisecond},
		// Nearest rank: 99 of 100 values are at or below the 99th.
		{"hundred", ms(hundred...), 50 * time.Millisecond, 99 * time.Millisecond},
		{"thousand", ms(thousand...), 500 * time.Millisecond, 990 * time.Millisecond},
	} {
		p50, p99 := quantiles(c.in)
		if p50 != c.p50 || p99 != c.p99 {
			t.Errorf("%s: p50 %v, p99 %v; want %v, %v", c.name, p50, p99, c.p50, c.p99)
		}
	}
}

// The latency table has the probes' columns, and ratios to naive of CPU,
// RSS and the two quantiles, not of the offered rate.
func TestPrintTableLatency(t *testing.T) {
	o := options{latency: true, connectors: []kind{naive, exactlyOnce}}
	rs := []result{
		{kind: naive, round: 1, msgs: 20_000, rate: 1000, cpu: 2 * time.Second, rss: 40 << 20, p50: 20 * time.Millisecond, p99: 50 * time.Millisecond, samples: 300, rows: 20_000},
		{kind: exactlyOnce, round: 1, msgs: 20_000, rate: 1000, cpu: 3 * time.Second, rss: 60 << 20, p50: 30 * time.Millisecond, p99: 60 * time.Millisecond, samples: 280, rows: 20_000},
	}
	var b strings.Builder
	printTable(&b, o, rs)
	out := b.String()
	for _, want := range []string{"offered msg/s", "p50 ms", "p99 ms", "probes", "100.00", "150.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	_, ratios, ok := strings.Cut(out, "ratios to naive")
	if !ok {
		t.Fatalf("no ratios:\n%s", out)
	}
	header, rest, _ := strings.Cut(strings.TrimLeft(ratios[strings.Index(ratios, "\n"):], "\n"), "\n")
	if got := strings.Fields(header); strings.Join(got, " ") != "ratio CPU s/M msg peak RSS MB p50 ms p99 ms" {
		t.Errorf("ratio columns %q", header)
	}
	// CPU 1.5, RSS 1.5, p50 1.5, p99 1.2.
	if !strings.Contains(rest, "exactly_once / naive") || strings.Count(rest, "1.500 [1.500–1.500]") != 3 || !strings.Contains(rest, "1.200 [1.200–1.200]") {
		t.Errorf("ratios:\n%s", rest)
	}
}

// The bench reads its counters from the Prometheus text: the pipeline's,
// and the Bigtable mutations summed by table over the calls.
func TestParseMetrics(t *testing.T) {
	text := `# HELP pubsink_bigtable_mutations_total Rows mutated.
# TYPE pubsink_bigtable_mutations_total counter
pubsink_bigtable_mutations_total{call="check_and_mutate",table="state-eo-r1-2"} 5
pubsink_bigtable_mutations_total{call="mutate_row",table="state-eo-r1-2"} 8
pubsink_bigtable_mutations_total{call="mutate_rows",table="rows-eo-r1-2"} 20000
pubsink_bigtable_mutations_total{call="mutate_rows",table="state-eo-r1-2"} 1.9999e+04
pubsink_dedupe_conditional_claims_total{pipeline="bench"} 3
pubsink_messages_committed_total{pipeline="bench"} 20000
pubsink_messages_committed_total{pipeline="other"} 7
pubsink_messages_duplicate_total{pipeline="bench"} 2
`
	c, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if c.committed != 20000 || c.duplicate != 2 || c.conditional != 3 {
		t.Errorf("committed %v, duplicate %v, conditional %v", c.committed, c.duplicate, c.conditional)
	}
	if !c.mutationsSeen || c.mutations["state-eo-r1-2"] != 20012 || c.mutations["rows-eo-r1-2"] != 20000 || len(c.mutations) != 2 {
		t.Errorf("mutations %v (seen %v)", c.mutations, c.mutationsSeen)
	}
	c, err = parseMetrics(strings.NewReader(`pubsink_messages_committed_total{pipeline="bench"} 1` + "\n"))
	if err != nil || c.mutationsSeen {
		t.Errorf("without the counter: %v, seen %v", err, c.mutationsSeen)
	}
	if _, err := parseMetrics(strings.NewReader(`pubsink_messages_duplicate_total{pipeline="bench"} 1` + "\n")); err == nil {
		t.Error("no committed counter: accepted")
	}
	// A reprocess's series carry the run's name; another pipeline's do not
	// count, even one whose name starts with the bench's.
	c, err = parseMetrics(strings.NewReader(`pubsink_messages_committed_total{pipeline="bench~r20261203t061500z-k3xq7a"} 9
pubsink_messages_committed_total{pipeline="benchmark"} 5
pubsink_messages_duplicate_total{pipeline="bench~r20261203t061500z-k3xq7a"} 4
`))
	if err != nil || c.committed != 9 || c.duplicate != 4 {
		t.Errorf("a reprocess's counters: committed %v, duplicate %v, %v", c.committed, c.duplicate, err)
	}
}

// The drain's table has the state and sink writes per committed message
// beside CPU ("-" for a connector without the counter, no ratio to naive
// of the state writes, which are 0 there), and the throughput of the
// shared connector over exactly_once's in the same rounds.
func TestPrintTableWrites(t *testing.T) {
	o := options{connectors: []kind{naive, exactlyOnce, exactlyOnceShared, exactlyOnceBaseline}, replicas: 2}
	run := func(k kind, round int, rate, state float64) result {
		return result{kind: k, round: round, msgs: 20_000, rate: rate, cpu: 2 * time.Second,
			writes: writes{known: true, state: state * 20_000, sink: 20_000, committed: 20_000}}
	}
	rs := []result{
		run(naive, 1, 10_000, 0), run(exactlyOnce, 1, 5_000, 2.1), run(exactlyOnceShared, 1, 6_000, 3),
		run(naive, 2, 10_000, 0), run(exactlyOnce, 2, 4_000, 2.3), run(exactlyOnceShared, 2, 4_000, 3.2),
		{kind: exactlyOnceBaseline, round: 1, msgs: 20_000, rate: 5_000, cpu: 2 * time.Second},
	}
	var b strings.Builder
	printTable(&b, o, rs)
	out := b.String()
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if got := strings.Join(header, " "); !strings.HasPrefix(got, "round connector msg/s CPU s/M msg state writes/msg sink writes/msg peak RSS MB") {
		t.Errorf("columns %q", got)
	}
	for _, want := range []string{
		"2.200 [2.100–2.300]", // exactly_once's state writes
		"3.100 [3.000–3.200]", // exactly_once_shared's
		"0.000 [0.000–0.000]", // naive's
		"1.000 [1.000–1.000]", // the sink's, one row per message
		"shared/one throughput, exactly_once_shared (2 processes) / exactly_once (one), msg/s in the same rounds: 1.111 [1.000–1.200]; by round: 1.200 1.000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	baseline := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "1  exactly_once_baseline") {
			baseline = line
		}
	}
	if f := strings.Fields(baseline); len(f) < 6 || f[4] != "-" || f[5] != "-" {
		t.Errorf("the baseline's writes (not exported): %q", baseline)
	}
	_, ratios, _ := strings.Cut(out, "ratios to naive")
	ratioHeader := strings.SplitN(strings.TrimLeft(ratios[strings.Index(ratios, "\n"):], "\n"), "\n", 2)[0]
	if strings.Contains(ratioHeader, "state writes") || !strings.Contains(ratioHeader, "sink writes/msg") {
		t.Errorf("ratio columns to naive %q: want the sink's writes, not the state's", ratioHeader)
	}
}

func TestOnePerShared(t *testing.T) {
	o := options{connectors: []kind{exactlyOnce, exactlyOnceShared, exactlyOnceSharedTracking}}
	if got := onePerShared(exactlyOnceShared, o); got != exactlyOnce {
		t.Errorf("exactly_once_shared compares with %s, want exactly_once", got)
	}
	o.connectors = append(o.connectors, exactlyOnceNoTracking, "exactly_once_shared_avro")
	if got := onePerShared(exactlyOnceShared, o); got != exactlyOnceNoTracking {
		t.Errorf("with exactly_once_no_tracking run: %s", got)
	}
	if got := onePerShared(exactlyOnceSharedTracking, o); got != exactlyOnce {
		t.Errorf("exactly_once_shared_tracking compares with %s", got)
	}
	if got := onePerShared("exactly_once_shared_avro", o); got != "exactly_once_avro" {
		t.Errorf("exactly_once_shared_avro compares with %s", got)
	}
}

// The stages' histograms are read from the Prometheus text, summed over
// processes, and their quantiles interpolated as histogram_quantile does.
func TestStageHistograms(t *testing.T) {
	text := `pubsink_stage_seconds_bucket{pipeline="bench",stage="write",le="0.01"} 0
pubsink_stage_seconds_bucket{pipeline="bench",stage="write",le="0.025"} 50
pubsink_stage_seconds_bucket{pipeline="bench",stage="write",le="0.05"} 100
pubsink_stage_seconds_bucket{pipeline="bench",stage="write",le="+Inf"} 100
pubsink_stage_seconds_sum{pipeline="bench",stage="write"} 2.5
pubsink_stage_seconds_count{pipeline="bench",stage="write"} 100
pubsink_stage_seconds_bucket{pipeline="bench",stage="map",le="0.0001"} 10
pubsink_stage_seconds_bucket{pipeline="bench",stage="map",le="+Inf"} 10
pubsink_stage_seconds_sum{pipeline="bench",stage="map"} 0.0005
pubsink_stage_seconds_count{pipeline="bench",stage="map"} 10
pubsink_messages_committed_total{pipeline="bench"} 100
`
	c, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	w := c.stages["write"]
	if w == nil || w.count != 100 || w.mean() != 25 {
		t.Fatalf("write: %+v", w)
	}
	// The median is the 50th observation: the top of the 10–25 ms bucket;
	// the p99 is 99% of the way through the 25–50 ms one.
	if got := w.quantile(0.5); math.Abs(got-25) > 1e-9 {
		t.Errorf("p50 %v ms, want 25", got)
	}
	if got := w.quantile(0.99); math.Abs(got-49.5) > 1e-9 {
		t.Errorf("p99 %v ms, want 49.5", got)
	}
	if got := c.stages["map"].quantile(0.99); math.Abs(got-0.099) > 1e-9 {
		t.Errorf("map p99 %v ms, want 0.099", got)
	}
	two := w.plus(w)
	if two.count != 200 || two.quantile(0.99) != w.quantile(0.99) || w.count != 100 {
		t.Errorf("summed: %+v (and the first %+v)", two, w)
	}
	if (*hist)(nil).plus(w).count != 100 {
		t.Error("nil plus h is not h")
	}
	var out strings.Builder
	printStages(&out, options{connectors: []kind{naive, exactlyOnce}}, map[kind][]result{
		naive: {{kind: naive}}, exactlyOnce: {{kind: exactlyOnce, stages: c.stages}, {kind: exactlyOnce, stages: map[string]*hist{"write": two}}},
	})
	if !strings.Contains(out.String(), "exactly_once  write  25.00 [25.00–25.00]  25.00 [25.00–25.00]  49.50 [49.50–49.50]") ||
		!strings.Contains(out.String(), "exactly_once    map") || strings.Contains(out.String(), "naive") {
		t.Errorf("stages printed:\n%s", out.String())
	}
	if _, err := parseMetrics(strings.NewReader(`pubsink_stage_seconds_count{pipeline="bench"} 1` + "\n")); err == nil {
		t.Error("a stage series without a stage: accepted")
	}
}
