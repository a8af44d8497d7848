package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// Exit codes.
const (
	exitOK        = 0
	exitViolation = 1 // an invariant failed
	exitUsage     = 2
	exitCannotRun = 3 // emulators, build or setup failed: nothing was checked
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 0, "seed of the workload and the fault schedule (0: one from the clock, printed)")
	short := fs.Bool("short", false, "the CI campaign: 3,000 messages over 60s, 7 faults (one of each kind), stalls up to 10s")
	n := fs.Int("n", 0, "messages to publish, every kind included (default 50,000; 3,000 with -short)")
	duration := fs.Duration("duration", 0, "how long the workload publishes (default 6m; 60s with -short)")
	faults := fs.Int("faults", 0, "faults to inject (default one per 15s of -duration, at least 7, one of each kind)")
	maxStall := fs.Duration("max-stall", 0, "longest Bigtable or Pub/Sub stall (default 30s; 10s with -short)")
	replicas := fs.Int("replicas", 1, "pubsink processes running the pipeline at once; each kill or term hits one of them")
	settle := fs.Duration("settle", 0, "longest wait after the workload for every outcome (default 3m; 90s with -short)")
	dir := fs.String("dir", "", "run directory for logs, config and binary (default: a new temporary one)")
	keep := fs.Bool("keep", false, "keep the run directory even when every invariant holds")
	binary := fs.String("binary", "", "a built pubsink binary to run (default: build this module's)")
	dryRun := fs.Bool("dry-run", false, "print the workload and the fault schedule of the seed, and run nothing")
	mix := fs.Bool("mix", false, "run two pipelines in every process (exactly_once with a dead-letter table and late_data: accept; at_least_once with a dead-letter file and late_data: drop) instead of the default one, with the replicas' clocks skewed, and the change pipeline beside them")
	changes := fs.Bool("changes", false, "also run the change pipeline (two change mappings, upsert and replace_if_newer) with its own workload of changes (n/5), held to the model of its changes applied in event-time order (on with -mix)")
	ordered := fs.Bool("ordered", false, "the change pipeline's subscription with message ordering, each change published under its row key as the ordering key (implies -changes)")
	formats := fs.Bool("formats", false, "also run the format pipelines (Avro topic schema BINARY and JSON with a revision committed mid-campaign; a .proto file with each and a second table under when), each with its own workload of n/20 keys, and a reprocess of the Avro BINARY one's middle range with a changed mapping beside them; CI runs it with -replicas 3")
	reprocessRivals := fs.Bool("reprocess-rivals", true, "give the reprocessed pipeline's workload rivals too (the reprocess must keep the live pipeline's winner of each key); false leaves them out")
	skew := fs.Duration("skew", -1, "largest clock offset of a replica, spread from +D to -D over the replicas (default 2s with -mix, else 0)")
	tolerate := fs.Bool("tolerate-late-after-fault", false, "a diagnostic: count on-time records dead-lettered as late after a restart or Pub/Sub reset in a row of their own instead of failing the run")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chaos: unexpected arguments %v\n", fs.Args())
		return exitUsage
	}

	opts := Options{Seed: *seed, Replicas: *replicas, Messages: 50000, Duration: 6 * time.Minute, MaxStall: 30 * time.Second, BigPayloads: 5, Settle: 3 * time.Minute, Binary: *binary, Log: stderr, TolerateLateAfterFault: *tolerate, Mix: *mix, Changes: *changes || *mix || *ordered, Ordered: *ordered, Formats: *formats, ReprocessRivals: *reprocessRivals}
	if *short {
		opts.Messages, opts.Duration, opts.MaxStall, opts.BigPayloads, opts.Settle = 3000, 60*time.Second, 10*time.Second, 2, 90*time.Second
	}
	setIf(&opts.Messages, *n)
	setIf(&opts.Duration, *duration)
	setIf(&opts.MaxStall, *maxStall)
	setIf(&opts.Settle, *settle)
	opts.Faults = max(int(numFaultKinds), int(opts.Duration/(15*time.Second)))
	setIf(&opts.Faults, *faults)
	opts.LateBursts = max(3, int(opts.Duration/(25*time.Second)))
	if opts.Seed == 0 {
		opts.Seed = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	switch {
	case *skew >= 0:
		opts.Skew = *skew
	case opts.Mix:
		opts.Skew = 2 * time.Second
	}
	if opts.Messages < 100 || opts.Duration < 10*time.Second || opts.MaxStall < time.Second || opts.Replicas < 1 || opts.Skew > time.Minute {
		fmt.Fprintln(stderr, "chaos: -n must be at least 100, -duration at least 10s, -max-stall at least 1s, -replicas at least 1, -skew from 0 to 1m")
		return exitUsage
	}

	if *dryRun {
		printPlan(stdout, opts)
		return exitOK
	}

	opts.Dir = *dir
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "pubsink-chaos-")
		if err != nil {
			fmt.Fprintln(stderr, "chaos:", err)
			return exitCannotRun
		}
		opts.Dir = d
	} else if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return exitCannotRun
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rerun := fmt.Sprintf("go run ./tools/chaos -seed %d -n %d -duration %v -faults %d -max-stall %v", opts.Seed, opts.Messages, opts.Duration, opts.Faults, opts.MaxStall)
	if opts.Replicas > 1 {
		rerun += fmt.Sprintf(" -replicas %d", opts.Replicas)
	}
	if opts.Mix {
		rerun += " -mix"
	} else {
		if opts.Changes {
			rerun += " -changes"
		}
	}
	if opts.Ordered {
		rerun += " -ordered"
	}
	if opts.Formats {
		rerun += " -formats"
	}
	if !opts.ReprocessRivals {
		rerun += " -reprocess-rivals=false"
	}
	if *skew >= 0 {
		rerun += fmt.Sprintf(" -skew %v", opts.Skew)
	}
	if *short {
		rerun += " -short"
	}
	if opts.TolerateLateAfterFault {
		rerun += " -tolerate-late-after-fault"
	}
	fmt.Fprintf(stderr, "chaos: seed %d; rerun with: %s\nchaos: run directory %s\n", opts.Seed, rerun, opts.Dir)

	start := time.Now()
	report, err := Run(ctx, opts)
	elapsed := time.Since(start).Round(time.Second)
	printFaults(stdout, report.Faults)
	if len(report.Procs) > 0 {
		fmt.Fprintln(stdout, "\nprocesses:")
		for _, p := range report.Procs {
			fmt.Fprintln(stdout, "  "+p)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "chaos: the campaign could not run: %v\nchaos: seed %d; run directory kept: %s\n", err, opts.Seed, opts.Dir)
		if errors.Is(err, emulator.ErrNotInstalled) {
			fmt.Fprintln(stderr, "chaos: it needs the Pub/Sub and Bigtable emulators of the Google Cloud SDK and a JDK 17+")
		}
		return exitCannotRun
	}
	results := report.Results
	fmt.Fprintf(stdout, "\nseed %d: %d messages over %v%s, %d faults, %v in all\nworkload: %s\n%s\n", opts.Seed, opts.Messages, opts.Duration, replicasText(opts.Replicas), len(report.Faults), elapsed, report.Workload, setupText(opts))
	PrintTable(stdout, results)
	if !Passed(results) {
		logs := "pubsink-NN.log"
		if opts.Replicas > 1 {
			logs = "pubsink-rR-NN.log"
		}
		fmt.Fprintf(stdout, "\nVIOLATION: seed %d; rerun with: %s\nrun directory kept: %s (%s per process, emulator logs, config.yaml)\n", opts.Seed, rerun, opts.Dir, logs)
		return exitViolation
	}
	fmt.Fprintf(stdout, "\nevery invariant holds (seed %d)\n", opts.Seed)
	if *keep {
		fmt.Fprintf(stdout, "run directory kept: %s\n", opts.Dir)
	} else {
		os.RemoveAll(opts.Dir)
	}
	return exitOK
}

// printPlan writes what the seed would do.
func printPlan(w io.Writer, opts Options) {
	p := NewPlan(opts.Seed, WorkloadConfig{Messages: opts.Messages, BigPayloads: opts.BigPayloads, LateBursts: opts.LateBursts, Band: band})
	fmt.Fprintf(w, "seed %d: %d messages over %v%s\nworkload: %s\n", opts.Seed, opts.Messages, opts.Duration, replicasText(opts.Replicas), p.Summary())
	if opts.Changes {
		fmt.Fprintf(w, "changes: %s\n", NewChangePlan(opts.Seed, opts.changeConfig()).Summary())
	}
	for _, p := range opts.fmtPlans("DIR") {
		fmt.Fprintf(w, "formats: %s\n", p.Summary())
	}
	fmt.Fprintf(w, "%sfaults:\n", setupText(opts))
	for i, f := range NewSchedule(opts.Seed, FaultConfig{Count: opts.Faults, Duration: opts.Duration, MaxStall: opts.MaxStall, Replicas: opts.Replicas}) {
		fmt.Fprintf(w, "  %2d  not before +%v  %s\n", i+1, f.At.Round(100*time.Millisecond), f)
	}
}

// setupText names the pipelines under test and the clock offsets, one
// line each.
func setupText(opts Options) string {
	var b strings.Builder
	b.WriteString("pipelines:")
	for i, p := range opts.pipes("DIR") {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" " + p.String())
	}
	b.WriteString("\n")
	if t := offsetsText(replicaOffsets(opts.Replicas, opts.Skew)); t != "" {
		b.WriteString(t + "\n")
	}
	return b.String()
}

// replicasText says how many replicas run, when more than one.
func replicasText(n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(", %d replicas", n)
}

func setIf[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

// printFaults writes the fault log: what ran when, and counts by kind.
func printFaults(w io.Writer, log []faultEntry) {
	if len(log) == 0 {
		return
	}
	fmt.Fprintln(w, "\nfaults:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tstart\tend\twall clock\tfault\tnote")
	counts := map[FaultKind]int{}
	for _, e := range log {
		counts[e.fault.Kind]++
		fmt.Fprintf(tw, "  %d\t+%.1fs\t+%.1fs\t%s\t%s\t%s\n", e.n, e.start.Seconds(), e.end.Seconds(), e.wall.Format("15:04:05.000"), e.fault, e.note)
	}
	tw.Flush()
	fmt.Fprint(w, "fault counts:")
	for k := FaultKind(0); k < numFaultKinds; k++ {
		fmt.Fprintf(w, " %s %d", k, counts[k])
	}
	fmt.Fprintln(w)
}
