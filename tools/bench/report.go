package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// rounds runs every connector once per round, in an order that rotates
// from round to round (so that no connector always runs first, on a cold
// emulator, or last), then prints the table, and the profiles if asked.
func (b *bench) rounds(ctx context.Context) error {
	out := os.Stdout
	run := b.run
	if b.o.latency {
		run = b.latencyRun
		fmt.Fprintf(out, "pubsink latency bench: %.0f msg/s for %v per run, probes one at a time (row read every %v, warm-up %v), %d rounds, %s streams, %d-byte payloads; %s\n",
			b.o.rate, b.o.duration, pollEvery, b.o.warmup, b.o.rounds, streamsText(b.o.streams), b.o.size, load())
	} else {
		fmt.Fprintf(out, "pubsink bench: %d messages per run, %d rounds, %s streams, %d-byte payloads; %s\n",
			b.o.n, b.o.rounds, streamsText(b.o.streams), b.o.size, load())
	}
	printShapes(out, b.o)
	var all []result
	for r := 0; r < b.o.rounds; r++ {
		for i := range b.o.connectors {
			k := b.o.connectors[(i+r)%len(b.o.connectors)]
			res := run(ctx, k, r+1, nil)
			printRun(os.Stderr, b.o, res)
			all = append(all, res)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if b.o.rounds > 0 {
		fmt.Fprintf(out, "\nafter the rounds: %s\n", load())
		printTable(out, b.o, all)
	}
	if b.o.profileDir != "" {
		if err := os.MkdirAll(b.o.profileDir, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nprofiled runs (profiles in %s; not in the table above):\n", b.o.profileDir)
		var profiled []result
		for _, k := range b.o.connectors {
			res := run(ctx, k, 0, &profile{dir: b.o.profileDir})
			printRun(out, b.o, res)
			profiled = append(profiled, res)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if err := b.printProfiledStages(out, profiled); err != nil {
			fmt.Fprintf(os.Stderr, "bench: CPU by stage: %v\n", err)
		}
	}
	for _, r := range all {
		if r.err != nil {
			return fmt.Errorf("%d of %d runs failed", countFailed(all), len(all))
		}
	}
	return nil
}

func countFailed(rs []result) int {
	n := 0
	for _, r := range rs {
		if r.err != nil {
			n++
		}
	}
	return n
}

// memory drains one large backlog per connector (by default exactly_once
// with defaults) and reports its memory.
func (b *bench) memory(ctx context.Context) error {
	out := os.Stdout
	fmt.Fprintf(out, "pubsink memory test: a backlog of %d messages, %s streams, every other setting at its default; %s\n",
		b.o.n, streamsText(b.o.streams), load())
	printShapes(out, b.o)
	failed := 0
	for _, k := range b.o.connectors {
		res := b.run(ctx, k, 1, nil)
		printRun(out, b.o, res)
		fmt.Fprintf(out, "  RSS while draining (sampled each second; peak (VmHWM) %.0f MB):\n", mb(res.rss))
		step := max(1, len(res.rssSeen)/20)
		for i, p := range res.rssSeen {
			if i%step == 0 || i == len(res.rssSeen)-1 {
				fmt.Fprintf(out, "    %6.1fs  %8.0f committed  %5.0f MB\n", p.at.Seconds(), p.committed, mb(p.rss))
			}
		}
		if res.err != nil {
			failed++
		}
	}
	fmt.Fprintf(out, "%s\n", load())
	if failed > 0 {
		return fmt.Errorf("%d runs failed", failed)
	}
	return nil
}

func streamsText(n int) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprint(n)
}

// printShapes prints what each connector's messages carry and how pubsink
// maps them, unless every connector runs today's payload and row.
func printShapes(w io.Writer, o options) {
	plain := true
	for _, k := range o.connectors {
		plain = plain && o.shapes[k].plain()
	}
	if plain {
		return
	}
	fmt.Fprintln(w, "payloads and rows (the minimal and naive connectors write one row of the raw payload whatever it is):")
	for _, k := range o.connectors {
		sh := o.shapes[k]
		if k.own() && sh.fields {
			sh.each = false
			fmt.Fprintf(w, "  %-28s %s record with %d items, one row of the raw payload\n", k, sh.format, sh.elements)
			continue
		}
		fmt.Fprintf(w, "  %-28s %s\n", k, sh)
	}
}

// manyRows reports whether a connector writes more than one row per
// message: then the tables have rows/s and CPU per million rows too.
func manyRows(o options) bool {
	for _, k := range o.connectors {
		if o.shapes[k].rowsPerMessage() > 1 {
			return true
		}
	}
	return false
}

// printRun prints one run as it finishes.
func printRun(w io.Writer, o options, r result) {
	status := "ok"
	if r.err != nil {
		status = "FAILED: " + r.err.Error()
	}
	shared := ""
	if r.kind.shared() {
		shared = fmt.Sprintf("  conditional claims/N %.3f", r.conditional/float64(max(1, r.msgs)))
	}
	if r.writes.known {
		shared += fmt.Sprintf("  writes/msg state %.3f sink %.3f", r.statePerMsg(), r.sinkPerMsg())
	}
	if r.writes.callsKnown {
		shared += fmt.Sprintf("  sink calls/msg %.3f", r.sinkCallsPerMsg())
		if r.kind.change() {
			shared += fmt.Sprintf(" (conditional %.3f, mutate %.3f, read %.3f; superseded rows %.1f%%)",
				r.conditionalPerMsg(), r.mutateRowPerMsg(), r.readsPerMsg(), 100*r.supersededShare())
		}
	}
	if o.latency {
		fmt.Fprintf(w, "round %d %-13s %6.0f msg/s offered (%d messages)  %6.2f CPU s/M  %5.0f MB  probe p50 %5.1fms p99 %5.1fms (%d probes)  dups %.0f%s  %s\n",
			r.round, r.kind, r.rate, r.msgs, r.cpuPerMillion(), mb(r.rss), millis(r.p50), millis(r.p99), r.samples, r.dups, shared, status)
		return
	}
	if r.perMsg > 1 {
		shared += fmt.Sprintf("  %d rows/msg: %.0f rows/s, %.2f CPU s/M rows", r.perMsg, r.rate*float64(r.perMsg), r.cpuPerMillionRows())
	}
	fmt.Fprintf(w, "round %d %-13s %8.0f msg/s  %6.2f CPU s/M  %5.0f MB  p50 %5.2fs p99 %5.2fs (%d samples)  drain %5.1fs  dups %.0f%s  %s\n",
		r.round, r.kind, r.rate, r.cpuPerMillion(), mb(r.rss), r.p50.Seconds(), r.p99.Seconds(), r.samples, r.drain.Seconds(), r.dups, shared, status)
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// metric is one column of the table. A value that is NaN is unknown (a
// connector that does not export what it is computed from): "-" in the
// table, and left out of medians and ratios.
type metric struct {
	name  string
	get   func(result) float64
	prec  int
	ratio bool // a column of the ratios too (unless the reference's median is 0)
}

// anyChange reports whether a connector of o writes through a change
// mapping: then the tables have the sink's calls per message too.
func anyChange(o options) bool {
	return slices.ContainsFunc(o.connectors, kind.change)
}

// metricsOf are the columns of the table: with -latency, the offered rate
// and the probes' latency instead of the drain's rate and sampled latency.
// With a changes_* connector, the sink's Bigtable calls per message follow
// the sink's writes (a plain connector's are its ApplyBulk calls).
func metricsOf(o options) []metric {
	cpu := metric{"CPU s/M msg", func(r result) float64 { return r.cpuPerMillion() }, 2, true}
	state := metric{"state writes/msg", func(r result) float64 { return r.statePerMsg() }, 3, true}
	sink := metric{"sink writes/msg", func(r result) float64 { return r.sinkPerMsg() }, 3, true}
	rss := metric{"peak RSS MB", func(r result) float64 { return mb(r.rss) }, 0, true}
	writes := []metric{state, sink}
	if anyChange(o) {
		writes = append(writes, metric{"sink calls/msg", func(r result) float64 { return r.sinkCallsPerMsg() }, 3, true})
	}
	if o.latency {
		return slices.Concat([]metric{
			{"offered msg/s", func(r result) float64 { return r.rate }, 0, false},
			cpu}, writes, []metric{rss,
			{"p50 ms", func(r result) float64 { return millis(r.p50) }, 1, true},
			{"p99 ms", func(r result) float64 { return millis(r.p99) }, 1, true},
			{"probes", func(r result) float64 { return float64(r.samples) }, 0, false},
		})
	}
	// A run that sampled no row (_shuffled) has no latency: "-".
	sampled := func(d func(result) time.Duration) func(result) float64 {
		return func(r result) float64 {
			if r.samples == 0 {
				return math.NaN()
			}
			return d(r).Seconds()
		}
	}
	ms := slices.Concat([]metric{
		{"msg/s", func(r result) float64 { return r.rate }, 0, true},
		cpu}, writes, []metric{rss,
		{"p50 s", sampled(func(r result) time.Duration { return r.p50 }), 2, false},
		{"p99 s", sampled(func(r result) time.Duration { return r.p99 }), 2, false},
		{"drain s", func(r result) float64 { return r.drain.Seconds() }, 1, false},
	})
	if manyRows(o) {
		// For a connector writing one row per message these are msg/s
		// and CPU s/M msg again: the ratio of an each connector's CPU
		// per row to a one-row connector's is its CPU per row over the
		// other's CPU per message.
		ms = slices.Insert(ms, 3+len(writes),
			metric{"rows/s", func(r result) float64 { return r.rate * float64(max(1, r.perMsg)) }, 0, true},
			metric{"CPU s/M rows", func(r result) float64 { return r.cpuPerMillionRows() }, 2, true})
	}
	return ms
}

// printTable prints every run, then per connector the median and min–max
// of each metric over the successful runs, then the ratios to minimal and
// to naive (each when it ran) and to the -reference connectors.
func printTable(w io.Writer, o options, all []result) {
	ms := metricsOf(o)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "round\tconnector\t"
	for _, m := range ms {
		header += m.name + "\t"
	}
	fmt.Fprintln(tw, header+"status\t")
	for _, r := range all {
		line := fmt.Sprintf("%d\t%s\t", r.round, r.kind)
		for _, m := range ms {
			if v := m.get(r); math.IsNaN(v) {
				line += "-\t"
			} else {
				line += fmt.Sprintf("%.*f\t", m.prec, v)
			}
		}
		status := "ok"
		if r.err != nil {
			status = "FAILED"
		}
		fmt.Fprintln(tw, line+status+"\t")
	}
	tw.Flush()
	var claims []string
	for _, r := range all {
		if r.kind.shared() {
			claims = append(claims, fmt.Sprintf("%.3f", r.conditional/float64(max(1, r.msgs))))
		}
	}
	if len(claims) > 0 {
		fmt.Fprintf(w, "shared connectors: %d processes; CPU summed over them, peak RSS the largest one's; conditional claims / N by round: %s\n",
			o.replicas, strings.Join(claims, " "))
	}

	fmt.Fprintf(w, "\nmedian [min–max] over the rounds:\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header = "connector\truns\t"
	for _, m := range ms {
		header += m.name + "\t"
	}
	fmt.Fprintln(tw, header)
	byKind := map[kind][]result{}
	for _, r := range all {
		if r.err == nil {
			byKind[r.kind] = append(byKind[r.kind], r)
		}
	}
	for _, k := range o.connectors {
		line := fmt.Sprintf("%s\t%d\t", k, len(byKind[k]))
		for _, m := range ms {
			vs := values(byKind[k], m.get)
			if len(vs) == 0 {
				line += "-\t"
				continue
			}
			line += fmt.Sprintf("%.*f [%.*f–%.*f]\t", m.prec, median(vs), m.prec, vs[0], m.prec, vs[len(vs)-1])
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if !o.latency {
		printSharedThroughput(w, o, byKind)
		printOrdering(w, o, byKind)
	}
	printChanges(w, o, byKind)
	printStages(w, o, byKind)

	for _, ref := range append([]kind{minimal, naive}, o.references...) {
		printRatios(w, o, ms, byKind, ref)
	}
}

// baselineTitles say what the bench's own connectors are, in the titles of
// the tables of ratios to them: which baseline a ratio is to.
var baselineTitles = map[kind]string{
	minimal: "minimal (the honest baseline: a Pub/Sub v2 subscriber and ApplyBulk with the Google client libraries alone, no metrics registry, no interceptor)",
	naive:   "naive (the bench's naive connector: minimal plus pubsink's metrics registry and /metrics server, a commit-latency histogram, and pubsink's Bigtable interceptor counting its writes)",
}

// refTitle names ref in the title of the table of ratios to it.
func refTitle(ref kind) string {
	if t, ok := baselineTitles[ref]; ok {
		return t
	}
	return string(ref)
}

// onePerShared returns the one-process connector that a shared connector
// is compared with: for exactly_once_shared, exactly_once_no_tracking (the
// same pipeline) if it ran, else exactly_once; for
// exactly_once_shared_tracking, exactly_once; with the shared one's format
// and items suffix.
func onePerShared(k kind, o options) kind {
	suffix := strings.TrimPrefix(string(k), string(k.base()))
	if k.base() == exactlyOnceShared && slices.Contains(o.connectors, exactlyOnceNoTracking+kind(suffix)) {
		return exactlyOnceNoTracking + kind(suffix)
	}
	return exactlyOnce + kind(suffix)
}

// printSharedThroughput prints, for each shared connector, its throughput
// over its one-process counterpart's (onePerShared): the ratio of the
// medians over the rounds where both ran, the min–max of the per-round
// ratios, and each round's. Above 1, the processes together drained
// faster than one.
func printSharedThroughput(w io.Writer, o options, byKind map[kind][]result) {
	for _, k := range o.connectors {
		one := onePerShared(k, o)
		if !k.shared() || len(byKind[k]) == 0 || len(byKind[one]) == 0 {
			continue
		}
		var shared, single, per []float64
		var rounds []string
		for _, r := range byKind[k] {
			for _, a := range byKind[one] {
				if a.round == r.round && a.rate > 0 {
					shared, single = append(shared, r.rate), append(single, a.rate)
					per = append(per, r.rate/a.rate)
					rounds = append(rounds, fmt.Sprintf("%.3f", r.rate/a.rate))
				}
			}
		}
		if len(per) == 0 {
			continue
		}
		slices.Sort(shared)
		slices.Sort(single)
		slices.Sort(per)
		fmt.Fprintf(w, "shared/one throughput, %s (%d processes) / %s (one), msg/s in the same rounds: %.3f [%.3f–%.3f]; by round: %s\n",
			k, o.replicas, one, median(shared)/median(single), per[0], per[len(per)-1], strings.Join(rounds, " "))
	}
}

// printChanges prints, for each changes_* connector, its sink's Bigtable
// calls per message by call (medians [min–max] over the rounds): the
// conditional mutations (CheckAndMutateRow), the unconditional ones
// (MutateRow), the reads (ReadRow: the calls that mutated nothing), the
// share of its rows that were superseded (a newer change or a tombstone
// held them), the mean time of a call, and the msg/s that MaxChangeCalls calls at once
// allow at those: where a conditional mode's calls go and what bounds it.
func printChanges(w io.Writer, o options, byKind map[kind][]result) {
	header := false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, k := range o.connectors {
		if !k.change() || len(byKind[k]) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nchange rows: the sink's Bigtable calls per message (pubsink_sink_write_seconds' count; by call from pubsink_bigtable_mutations_total, reads the rest), superseded rows (pubsink_row_operations_total), a call's mean time (the histogram's sum / count) and the msg/s that %d calls at once allow at those (%d / (calls/msg × call time)), medians [min–max] over the rounds:\n",
				changeCallsInFlight, changeCallsInFlight)
			fmt.Fprintln(tw, "connector\tcalls/msg\tCheckAndMutateRow/msg\tMutateRow/msg\tReadRow/msg\tsuperseded %\tcall ms\tbound msg/s\tmsg/s\t")
			header = true
		}
		line := string(k) + "\t"
		for _, get := range []func(result) float64{
			result.sinkCallsPerMsg, result.conditionalPerMsg, result.mutateRowPerMsg, result.readsPerMsg,
			func(r result) float64 { return 100 * r.supersededShare() },
			result.callMillis, result.callBound, func(r result) float64 { return r.rate },
		} {
			vs := values(byKind[k], get)
			if len(vs) == 0 {
				line += "-\t"
				continue
			}
			prec := 3
			if vs[len(vs)-1] >= 100 {
				prec = 0
			}
			line += fmt.Sprintf("%.*f [%.*f–%.*f]\t", prec, median(vs), prec, vs[0], prec, vs[len(vs)-1])
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// orderedRE finds the _ordered_keysK suffix of a connector's name.
var orderedRE = regexp.MustCompile(`_ordered_keys\d+`)

// printOrdering prints, for each _ordered_keysK connector, its msg/s per
// ordering key (one key's messages are committed one after another: about
// 1 / the commit latency of one at most) and its msg/s over the same
// connector's unordered (the name without _ordered_keysK) when that ran:
// the ratio of the medians over the rounds where both ran, [min–max] of
// the per-round ratios.
func printOrdering(w io.Writer, o options, byKind map[kind][]result) {
	header := false
	for _, k := range o.connectors {
		keys := o.shapes[k].orderingKeys
		if keys == 0 || len(byKind[k]) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nordering (source.ordering, a key's messages one at a time), medians [min–max] over the rounds:\n")
			header = true
		}
		rates := values(byKind[k], func(r result) float64 { return r.rate })
		perKey := median(rates) / float64(keys)
		line := fmt.Sprintf("  %s: %.0f msg/s over %d keys, %.2f msg/s per key (one every %.1f ms)", k, median(rates), keys, perKey, 1000/perKey)
		unordered := kind(orderedRE.ReplaceAllString(string(k), ""))
		var per, a, b []float64
		for _, r := range byKind[k] {
			for _, u := range byKind[unordered] {
				if u.round == r.round && u.rate > 0 {
					a, b = append(a, r.rate), append(b, u.rate)
					per = append(per, r.rate/u.rate)
				}
			}
		}
		if len(per) > 0 {
			slices.Sort(a)
			slices.Sort(b)
			slices.Sort(per)
			line += fmt.Sprintf("; / %s (unordered) msg/s in the same rounds: %.3f [%.3f–%.3f]", unordered, median(a)/median(b), per[0], per[len(per)-1])
		}
		fmt.Fprintln(w, line)
	}
}

// printRatios prints the ratios of every connector's metrics to ref's.
func printRatios(w io.Writer, o options, ms []metric, byKind map[kind][]result, ref kind) {
	if len(byKind[ref]) == 0 {
		return
	}
	fmt.Fprintf(w, "\nratios to %s: ratio of the medians [min–max of the per-round ratios]:\n", refTitle(ref))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	var rs []metric
	for _, m := range ms {
		// A figure the reference does not have (0: the minimal and naive
		// connectors' state writes) has no ratio.
		if m.ratio && median(values(byKind[ref], m.get)) != 0 {
			rs = append(rs, m)
		}
	}
	header := "ratio\t"
	for _, m := range rs {
		header += m.name + "\t"
	}
	fmt.Fprintln(tw, header)
	for _, k := range o.connectors {
		if k == ref || len(byKind[k]) == 0 {
			continue
		}
		line := fmt.Sprintf("%s / %s\t", k, ref)
		for _, m := range rs {
			vs := values(byKind[k], m.get)
			if len(vs) == 0 {
				line += "-\t"
				continue
			}
			ratio := median(vs) / median(values(byKind[ref], m.get))
			var per []float64
			for _, r := range byKind[k] {
				for _, a := range byKind[ref] {
					if a.round == r.round && m.get(a) != 0 && !math.IsNaN(m.get(a)) && !math.IsNaN(m.get(r)) {
						per = append(per, m.get(r)/m.get(a))
					}
				}
			}
			slices.Sort(per)
			if len(per) == 0 {
				line += fmt.Sprintf("%.3f\t", ratio)
				continue
			}
			line += fmt.Sprintf("%.3f [%.3f–%.3f]\t", ratio, per[0], per[len(per)-1])
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// values returns the sorted values of a metric, those unknown (NaN) left
// out.
func values(rs []result, get func(result) float64) []float64 {
	vs := make([]float64, 0, len(rs))
	for _, r := range rs {
		if v := get(r); !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

// median of sorted values.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

// load is the machine's load average, for context: the machine is shared.
func load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return fmt.Sprintf("load average %s %s %s at %s", f[0], f[1], f[2], time.Now().Format("15:04:05"))
}
