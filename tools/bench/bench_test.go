package main

import (
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
	if got := strings.Join(kindNames(o.connectors), ","); got != "naive,at_least_once,exactly_once" {
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
