package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	pprofile "github.com/google/pprof/profile"
)

// The CPU stages of a profiled run: every sample of a connector's CPU
// profile goes to exactly one of them, by its stack (cpuRules).
const (
	cpuPull      = "pull and ack"
	cpuDecode    = "decode and map"
	cpuDedupe    = "dedupe"
	cpuSink      = "sink write"
	cpuPipeline  = "pipeline"
	cpuTracking  = "tracking"
	cpuWatermark = "watermark"
	cpuMetrics   = "metrics and logs"
	cpuTransport = "gRPC transport"
	cpuGC        = "GC"
	cpuStacks    = "goroutine stacks"
	cpuRuntime   = "scheduler and runtime"
	cpuOther     = "other"
)

// cpuStageOrder is the order of the stages in the table: a message's path
// first, then what no message owns.
var cpuStageOrder = []string{cpuPull, cpuDecode, cpuDedupe, cpuSink, cpuPipeline, cpuTracking, cpuWatermark,
	cpuMetrics, cpuTransport, cpuGC, cpuStacks, cpuRuntime, cpuOther}

// cpuRule puts a sample in stage when a frame of its stack, anywhere from
// the leaf to the goroutine's root, is a function whose name begins with
// one of prefixes (the name as pprof gives it: package path, receiver,
// function, closures' .funcN). With own, only the sample's leafmost frame
// outside the standard library counts: the rule takes what that
// function's own code costs (with the runtime it calls), not the library
// calls it makes. With root, only the goroutine's root frame counts (the
// one it started in, or the scheduler's g0 frames).
type cpuRule struct {
	stage    string
	prefixes []string
	own      bool
	root     bool
}

const pubsink = "github.com/pubsink/pubsink/"

// batcherOf begins the name of a method of internal/batch's Batcher, up
// to its items' generic shape: a struct's shape names its unexported
// fields with their package ("struct { github.com/pubsink/pubsink/dedupe.row
// string; ..."), every pointer's is *uint8. A batcher's loop and timers
// run on goroutines of their own, where only that shape tells whose they
// are.
const batcherOf = pubsink + "internal/batch.(*Batcher[go.shape."

// cpuRules are tried in order; the first one that matches decides. The
// runtime's own work (GC, stacks, preemption) comes first, whoever caused
// it; then metrics and logs, wherever they are written; then pubsink's
// stages, the more specific first, so that a library call (a Bigtable
// ApplyBulk, a gRPC send, a protobuf decode) counts for the pubsink stage
// that made it; the libraries' own goroutines after; the rest of the
// runtime last.
var cpuRules = []cpuRule{
	// Stack shrinking is done by the GC's stack scan (scanstack), but it
	// is what a goroutine's stack costs, not marking: before GC.
	{stage: cpuStacks, prefixes: []string{"runtime.shrinkstack"}},
	// Collection: the background mark workers, the assists that a
	// goroutine pays when it allocates during a cycle (whatever stage it
	// runs: an assist under dedupe is GC), the sweeper and scavenger and
	// the sweeping and scavenging an allocation does first, and the
	// cycle's transitions.
	{stage: cpuGC, prefixes: []string{
		"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge",
		"runtime.gcStart", "runtime.gcMarkDone", "runtime.gcMarkTermination",
		"runtime.deductSweepCredit", "runtime.(*sweepLocked).sweep", "runtime.(*mheap).reclaim",
		"runtime.(*pageAlloc).scavenge",
	}},
	// Preemption goes through the stack check (morestack, newstack), but
	// newstack then hands the goroutine back to the scheduler
	// (gopreempt_m): scheduling, not the stack. Before the stack rule.
	{stage: cpuRuntime, prefixes: []string{"runtime.gopreempt_m", "runtime.preemptPark"}},
	// A goroutine's stack growing (the stack check, a larger stack, the
	// frames copied), whoever's goroutine it is; warm.Stack grew the
	// callback's stack on purpose in 9dd617d (reverted in 6a96ec3).
	{stage: cpuStacks, prefixes: []string{
		"runtime.newstack", "runtime.copystack", "runtime.morestack",
		pubsink + "internal/warm.Stack",
	}},
	// Metrics and logs, wherever they are written: the Prometheus client
	// (a counter or histogram under dedupe is metrics too) and the scrape
	// (net/http serves nothing else; promhttp's gathering, encoding and
	// gzip, and what the collectors do: the Go and process collectors,
	// pubsink_ready's readiness check, a Bigtable call), zap and
	// pubsink's logging, pubsink's server, and the pipeline's sampled
	// stage timing (pubsink_stage_seconds: its clock reads and laps).
	{stage: cpuMetrics, prefixes: []string{
		"github.com/prometheus/", "go.uber.org/zap", "net/http.",
		pubsink + "internal/server.", pubsink + "internal/logging.",
		pubsink + "pipeline.(*stageSampler)", pubsink + "pipeline.(*Pipeline).lap",
	}},
	// The Bigtable interceptor's own code (it counts each call's rows):
	// the call it wraps is its caller's stage.
	{stage: cpuMetrics, own: true, prefixes: []string{
		pubsink + "internal/metrics.(*bigtableCounter)", pubsink + "internal/metrics.(*mutateRowsStream)",
	}},
	// The watermark's tracking subscription: its reader (source.Puller's
	// pull loops: the Pull calls, their decoding by app's codec, the acks)
	// and the tracker's handler that records each message in the
	// estimator (its event time included). Before watermark and decode,
	// which would take the handler.
	{stage: cpuTracking, prefixes: []string{
		pubsink + "source.(*Puller)", pubsink + "source.(*pullLoop)",
		pubsink + "watermark.(*Tracker).receive",
	}},
	// Decoding the payload and rendering the rows (the event time
	// included, which mapping reads with watermark's EventTime: before
	// watermark); the minimal and naive connectors' newRow, which builds
	// their row.
	{stage: cpuDecode, prefixes: []string{pubsink + "mapping", pubsink + "template.", "main.newRow"}},
	// The rest of the watermark: Finished (a leader's histogram, a
	// follower's report), the estimator's tick, the store, the leader's
	// lease and the followers' reports (their batcher's loop too).
	{stage: cpuWatermark, prefixes: []string{
		pubsink + "watermark.", batcherOf + "struct { " + pubsink + "watermark.",
	}},
	// Dedupe: the claims, the catalog's batched writes and reads (their
	// Bigtable calls included: an ApplyBulk under dedupe's flush is
	// dedupe), the journal, the conditional claims (through internal/warm's
	// pool) and the membership that tells shared mode; the dedupe
	// batchers' own loops and timers (internal/batch), which carry
	// dedupe's types in their generic shape.
	{stage: cpuDedupe, prefixes: []string{
		pubsink + "dedupe.", pubsink + "members.",
		batcherOf + "struct { " + pubsink + "dedupe.",
	}},
	// The sink: pubsink's sinks (the batcher's flush and its ApplyBulk:
	// an ApplyBulk under the sink's flush is sink write), the sink's
	// batcher's own loop and timers (sinks/bigtable's Batcher[*item] is
	// the only one of a pointer shape), and the minimal and naive
	// connectors' writer, whose goroutines (collect, apply) are theirs
	// alone.
	{stage: cpuSink, prefixes: []string{pubsink + "sinks/", batcherOf + "*uint8]", "main.(*writer)."}},
	// The minimal and naive connectors' callbacks' own code is the
	// hand-off of the row to their writer and the wait for its result
	// (channel operations): what pubsink's Sink.Write does, so sink write
	// too. Their acks, under them, are pull and ack.
	{stage: cpuSink, own: true, prefixes: []string{"main.minimalRun.func", "main.naiveRun.func"}},
	// internal/warm's pools run deep calls on goroutines of their own:
	// dedupe's conditional claims and the change sink's calls (the call's
	// own frames, under it, are matched above). What the pool's goroutine
	// does between calls (its hand-off, its wait for the next call)
	// cannot be told apart by stack: dedupe, whose pool is the one at work
	// but with a change mapping (changes_*), where it is mostly the sink's.
	{stage: cpuDedupe, prefixes: []string{pubsink + "internal/warm."}},
	// The rest of pubsink's metrics package.
	{stage: cpuMetrics, prefixes: []string{pubsink + "internal/metrics."}},
	// What the pipeline does itself around the stages: Handle, process,
	// finish (the outcome, the in-flight bookkeeping). Before pull and
	// ack: the pipeline runs inside the source's callback.
	{stage: cpuPipeline, prefixes: []string{pubsink + "pipeline."}},
	// Pulling and acking the main subscription: the Pub/Sub client (its
	// streams, scheduler, acks, lease extension, flow control), pubsink's
	// decoding of its responses (app's codec) and the source's callback
	// (what remains of it once the pipeline's stages are counted); what
	// remains of the minimal and naive connectors' callbacks (their acks
	// are the client's: their own code was sink write's, above).
	{stage: cpuPull, prefixes: []string{
		"cloud.google.com/go/pubsub/v2", "cloud.google.com/go/internal/pubsub", pubsink + "source.",
		pubsink + "app.decodeMessages", pubsink + "app.pubsubCodec",
		"main.minimalRun.func", "main.naiveRun.func",
	}},
	// gRPC's transport goroutines, one reader and one writer per
	// connection, shared by every call on it (Pub/Sub's streams and acks,
	// Bigtable's writes): their frames and syscalls cannot be told apart
	// by stack. With them, gRPC's other goroutines of its own (a stream's
	// watch of its context, the connection's management); gRPC's frames
	// under a stage's call were matched by that stage above.
	{stage: cpuTransport, prefixes: []string{"google.golang.org/grpc"}},
	// Everything else the runtime does on its own: the scheduler
	// (mcall's park_m, schedule, findRunnable, the netpoller, timers),
	// sysmon, the work run on the system stack. Only by the goroutine's
	// root: the runtime under another goroutine (a channel operation, an
	// allocation, a copy) is that goroutine's, and left in other when no
	// rule above knows it.
	{stage: cpuRuntime, root: true, prefixes: []string{"runtime.", "internal/runtime/"}},
}

// cpuStageOf is the stage of a sample whose stack is frames (function
// names, leaf first) and the frame that decided it ("" for other).
func cpuStageOf(frames []string) (stage, frame string) {
	own := slices.IndexFunc(frames, func(f string) bool { return !stdlib(f) })
	for _, r := range cpuRules {
		for i, f := range frames {
			if r.own && i != own || r.root && i != len(frames)-1 {
				continue
			}
			for _, p := range r.prefixes {
				if strings.HasPrefix(f, p) {
					return r.stage, f
				}
			}
		}
	}
	return cpuOther, ""
}

// stdlib reports whether a function is the standard library's (the
// runtime's included): its package path has no dot in its first element,
// and it is not main.
func stdlib(fn string) bool {
	if first, _, ok := strings.Cut(fn, "/"); ok {
		return !strings.Contains(first, ".")
	}
	return !strings.HasPrefix(fn, "main.")
}

// sampleFrames are the function names of a sample's stack, leaf first,
// inlined calls included (a location's lines are its inlined calls, the
// innermost first).
func sampleFrames(s *pprofile.Sample) []string {
	var frames []string
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil {
				frames = append(frames, l.Function.Name)
			}
		}
	}
	return frames
}

// valueIndex is the index of a sample type (a CPU profile's "samples",
// their count, and "cpu", their CPU nanoseconds) in its samples' values,
// -1 if it has none.
func valueIndex(p *pprofile.Profile, typ string) int {
	for i, st := range p.SampleType {
		if st.Type == typ {
			return i
		}
	}
	return -1
}

// stageCPU is where one connector's CPU went, from its profiles (a shared
// connector's processes summed).
type stageCPU struct {
	connector string
	files     []string
	samples   int64            // samples, all stages (the profile's "samples" values: a stack seen n times is one sample of n)
	total     int64            // CPU nanoseconds, all stages
	byStage   map[string]int64 // CPU nanoseconds
	count     map[string]int64 // samples
	// frames are the CPU nanoseconds by stage and deciding frame (with
	// the root frame for scheduler and runtime, and other), for -v.
	frames map[string]map[string]int64
	run    *profiledRun // the profiled run's figures, if known
}

// add classifies the samples of one CPU profile.
func (c *stageCPU) add(p *pprofile.Profile) error {
	i, n := valueIndex(p, "cpu"), valueIndex(p, "samples")
	if i < 0 || n < 0 {
		return errors.New("not a CPU profile (no samples and cpu sample types)")
	}
	if c.byStage == nil {
		c.byStage, c.count, c.frames = map[string]int64{}, map[string]int64{}, map[string]map[string]int64{}
	}
	for _, s := range p.Sample {
		v := s.Value[i]
		frames := sampleFrames(s)
		stage, frame := cpuStageOf(frames)
		if (stage == cpuOther || stage == cpuRuntime) && len(frames) > 0 {
			frame += " ← " + frames[len(frames)-1]
		}
		c.byStage[stage] += v
		c.count[stage] += s.Value[n]
		c.total += v
		c.samples += s.Value[n]
		if c.frames[stage] == nil {
			c.frames[stage] = map[string]int64{}
		}
		c.frames[stage][frame] += v
	}
	return nil
}

// perM is the profiled run's CPU s/M (its CPU µs per message), false if
// unknown or if the run failed.
func (c *stageCPU) perM() (float64, bool) {
	if c.run == nil || c.run.Error != "" || c.run.CPUPerM <= 0 {
		return 0, false
	}
	return c.run.CPUPerM, true
}

// share is a stage's share of the connector's CPU samples.
func (c *stageCPU) share(stage string) float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.byStage[stage]) / float64(c.total)
}

// profiledRun is what the bench measured of a profiled run, kept in
// runs.json beside the profiles so that `bench stages` can redo the table.
type profiledRun struct {
	// CPUPerM is the run's CPU seconds per million messages (summed over
	// a shared connector's processes): its CPU µs per message.
	CPUPerM float64 `json:"cpu_s_per_m"`
	// Messages is how many the run published (0: unknown).
	Messages int `json:"messages,omitempty"`
	// CPUSeconds is the run's CPU time, its processes' whole lives (0:
	// unknown).
	CPUSeconds float64 `json:"cpu_s,omitempty"`
	// Processes is how many processes ran the connector.
	Processes int `json:"processes,omitempty"`
	// Error is why the run failed, if it did.
	Error string `json:"error,omitempty"`
}

// runsFile is the profiled runs' figures in a profile directory.
const runsFile = "runs.json"

// readRuns reads DIR/runs.json: connector → its profiled run; none if
// there is no such file.
func readRuns(dir string) (map[string]profiledRun, error) {
	runs := map[string]profiledRun{}
	b, err := os.ReadFile(filepath.Join(dir, runsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return runs, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &runs); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, runsFile), err)
	}
	return runs, nil
}

// writeRuns adds runs to DIR/runs.json, keeping the entries of connectors
// not run this time (their profiles are still in DIR).
func writeRuns(dir string, runs map[string]profiledRun) error {
	all, err := readRuns(dir)
	if err != nil {
		return err
	}
	for k, r := range runs {
		all[k] = r
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, runsFile), append(b, '\n'), 0o644)
}

// cpuProfileName matches the CPU profiles the bench writes: <connector>.cpu.pprof,
// <connector>.p<i>.cpu.pprof for a process of several.
var cpuProfileName = regexp.MustCompile(`^(.+?)(\.p[0-9]+)?\.cpu\.pprof$`)

// profiledConnectors are the connectors with a CPU profile in dir, and
// each one's files.
func profiledConnectors(dir string) (map[string][]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]string{}
	for _, e := range es {
		if m := cpuProfileName.FindStringSubmatch(e.Name()); m != nil && !e.IsDir() {
			files[m[1]] = append(files[m[1]], filepath.Join(dir, e.Name()))
		}
	}
	return files, nil
}

// readStageCPU classifies a connector's profiles.
func readStageCPU(connector string, files []string) (*stageCPU, error) {
	c := &stageCPU{connector: connector, files: files}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		p, err := pprofile.Parse(r)
		r.Close()
		if err == nil {
			err = c.add(p)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return c, nil
}

// loadStageCPU reads the CPU profiles of dir with the figures of runs, in
// the order of connectors (nil: minimal and naive first, then the rest
// by name). A connector without a profile in dir is left out.
func loadStageCPU(dir string, runs map[string]profiledRun, connectors []string) ([]*stageCPU, error) {
	files, err := profiledConnectors(dir)
	if err != nil {
		return nil, err
	}
	if connectors == nil {
		for k := range files {
			connectors = append(connectors, k)
		}
		rank := func(k string) int {
			switch kind(k) {
			case minimal:
				return 0
			case naive:
				return 1
			}
			return 2
		}
		slices.SortFunc(connectors, func(a, b string) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
		})
	}
	var cs []*stageCPU
	for _, k := range connectors {
		if len(files[k]) == 0 {
			continue
		}
		slices.Sort(files[k])
		c, err := readStageCPU(k, files[k])
		if err != nil {
			return nil, err
		}
		if r, ok := runs[k]; ok {
			c.run = &r
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// printCPUStages prints where each connector's CPU went by stage: per
// stage its samples, their share, the CPU µs per message that share is of
// the run's CPU s/M, and that over minimal's whole CPU per message (when
// minimal was profiled). With explain, the frames that decided each stage
// follow (with the goroutine's root frame for scheduler and runtime, and
// other).
func printCPUStages(w io.Writer, cs []*stageCPU, explain bool) {
	if len(cs) == 0 {
		return
	}
	var base float64 // minimal's CPU µs/msg
	for _, c := range cs {
		if kind(c.connector) == minimal {
			base, _ = c.perM()
		}
	}
	fmt.Fprintf(w, "\nCPU by stage (each CPU profile sample in one stage by its stack; µs/msg: the stage's share of the samples × the profiled run's CPU s/M")
	if base > 0 {
		fmt.Fprintf(w, "; / minimal total: those µs over minimal's whole CPU per message")
	}
	fmt.Fprintf(w, "):\n")
	for _, c := range cs {
		names := make([]string, len(c.files))
		for i, f := range c.files {
			names[i] = filepath.Base(f)
		}
		line := fmt.Sprintf("  %s: %d samples, %.2f s CPU in %s", c.connector, c.samples, float64(c.total)/1e9, strings.Join(names, ", "))
		switch r := c.run; {
		case r == nil:
			line += "; the run's CPU s/M unknown"
		default:
			line += fmt.Sprintf("; the run %.2f CPU s/M", r.CPUPerM)
			if r.CPUSeconds > 0 {
				line += fmt.Sprintf(", %.2f s CPU in all (profiled %.0f%% of it)", r.CPUSeconds, 100*float64(c.total)/1e9/r.CPUSeconds)
			}
			if r.Processes > len(c.files) {
				line += fmt.Sprintf("; CPU of %d processes, profiles of %d", r.Processes, len(c.files))
			}
			if r.Error != "" {
				line += "; the run FAILED: " + r.Error
			}
		}
		fmt.Fprintln(w, line)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "connector\tstage\tsamples\tshare %\tµs/msg\t"
	if base > 0 {
		header += "/ minimal total\t"
	}
	fmt.Fprintln(tw, header)
	row := func(name, stage string, n int64, share float64, c *stageCPU) {
		line := fmt.Sprintf("%s\t%s\t%d\t%.1f\t", name, stage, n, 100*share)
		perM, ok := c.perM()
		switch {
		case !ok:
			line += "-\t"
			if base > 0 {
				line += "-\t"
			}
		case base > 0:
			line += fmt.Sprintf("%.2f\t%.3f\t", share*perM, share*perM/base)
		default:
			line += fmt.Sprintf("%.2f\t", share*perM)
		}
		fmt.Fprintln(tw, line)
	}
	for _, c := range cs {
		name := c.connector
		for _, s := range cpuStageOrder {
			row(name, s, c.count[s], c.share(s), c)
			name = ""
		}
		total := 1.0
		if c.total == 0 {
			total = 0
		}
		row("", "total", c.samples, total, c)
	}
	tw.Flush()
	if explain {
		for _, c := range cs {
			fmt.Fprintf(w, "\n%s: the frames that decided each stage (← the goroutine's root frame, for scheduler and runtime, and other), share of the samples:\n", c.connector)
			for _, s := range cpuStageOrder {
				fr := c.frames[s]
				if len(fr) == 0 {
					continue
				}
				fmt.Fprintf(w, "  %s %.1f%%\n", s, 100*c.share(s))
				keys := make([]string, 0, len(fr))
				for f := range fr {
					keys = append(keys, f)
				}
				slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(fr[b], fr[a]), cmp.Compare(a, b)) })
				for i, f := range keys {
					if i == explainFrames {
						fmt.Fprintf(w, "      ... %d more\n", len(keys)-i)
						break
					}
					fmt.Fprintf(w, "    %5.1f%%  %s\n", 100*float64(fr[f])/float64(c.total), f)
				}
			}
		}
	}
}

// explainFrames is how many frames -v lists per stage.
const explainFrames = 25

// printProfiledStages writes the profiled runs' figures to runs.json in
// the profile directory and prints the table of CPU by stage of their
// profiles.
func (b *bench) printProfiledStages(w io.Writer, profiled []result) error {
	runs := map[string]profiledRun{}
	var order []string
	for _, r := range profiled {
		pr := profiledRun{CPUPerM: r.cpuPerMillion(), Messages: r.msgs, CPUSeconds: r.cpu.Seconds(), Processes: b.procs(r.kind)}
		if r.err != nil {
			pr.Error = r.err.Error()
		}
		runs[string(r.kind)] = pr
		order = append(order, string(r.kind))
	}
	if err := writeRuns(b.o.profileDir, runs); err != nil {
		return err
	}
	cs, err := loadStageCPU(b.o.profileDir, runs, order)
	if err != nil {
		return err
	}
	printCPUStages(w, cs, false)
	if len(cs) > 0 {
		fmt.Fprintf(w, "(again from the files: go run ./tools/bench stages %s; -v lists the frames that decided each stage)\n", b.o.profileDir)
	}
	return nil
}

// cpuFlag is -cpu connector=CPU s/M, repeatable.
type cpuFlag map[string]float64

func (f cpuFlag) String() string { return fmt.Sprint(map[string]float64(f)) }

func (f cpuFlag) Set(v string) error {
	k, n, ok := strings.Cut(v, "=")
	x, err := strconv.ParseFloat(n, 64)
	if !ok || k == "" || err != nil || x <= 0 {
		return fmt.Errorf("want connector=CPU s/M (a positive number), got %q", v)
	}
	f[k] = x
	return nil
}

// runStages is `bench stages [-cpu connector=s/M ...] [-v] DIR`: the
// table of CPU by stage of the profiles in DIR, with the CPU s/M of each
// run from DIR/runs.json (which the profiled runs write) or -cpu.
func runStages(args []string) int { return stagesMain(args, os.Stdout, os.Stderr) }

// stagesMain is runStages writing to stdout and stderr.
func stagesMain(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("stages", flag.ContinueOnError)
	flags.SetOutput(stderr)
	cpu := cpuFlag{}
	flags.Var(cpu, "cpu", "connector=CPU s/M: the CPU per million messages of a connector's profiled run, instead of runs.json's (repeat for each)")
	explain := flags.Bool("v", false, "also list, per connector and stage, the frames that decided it")
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "usage: bench stages [-cpu connector=s/M ...] [-v] DIR\n")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() != 1 {
		flags.Usage()
		return 2
	}
	dir := flags.Arg(0)
	runs, err := readRuns(dir)
	if err != nil {
		fmt.Fprintln(stderr, "stages:", err)
		return 1
	}
	for k, v := range cpu {
		r := runs[k]
		if r.CPUPerM != v {
			r = profiledRun{CPUPerM: v} // the rest was of another figure
		}
		runs[k] = r
	}
	cs, err := loadStageCPU(dir, runs, nil)
	if err != nil {
		fmt.Fprintln(stderr, "stages:", err)
		return 1
	}
	if len(cs) == 0 {
		fmt.Fprintf(stderr, "stages: no CPU profile (*.cpu.pprof) in %s\n", dir)
		return 1
	}
	printCPUStages(stdout, cs, *explain)
	return 0
}
