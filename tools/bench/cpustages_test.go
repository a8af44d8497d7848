package main

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"
)

// Frames of the stacks below, by name.
const (
	tApplyBulk     = "cloud.google.com/go/bigtable.(*Table).ApplyBulk"
	tDoApplyBulk   = "cloud.google.com/go/bigtable.(*Table).doApplyBulk"
	tGRPCSend      = "google.golang.org/grpc.(*clientStream).SendMsg"
	tProtoMarshal  = "google.golang.org/protobuf/proto.MarshalOptions.marshal"
	tFlushWrites   = pubsink + "dedupe.(*Keys).flushWrites"
	tDedupeBatcher = batcherOf + "struct { " + pubsink + "dedupe.row string; " + pubsink + "dedupe.winner string }]).flushOne"
	tDedupeClaim   = pubsink + "dedupe.(*Keys).Claim"
	tSinkFlush     = pubsink + "sinks/bigtable.(*Sink).flush"
	tSinkApply     = pubsink + "sinks/bigtable.(*Sink).apply"
	tSinkBatcher   = batcherOf + "*uint8]).run"
	tHandle        = pubsink + "pipeline.(*Pipeline).Handle"
	tProcess       = pubsink + "pipeline.(*Pipeline).process"
	tCallback      = pubsink + "source.(*Source).receive.func1"
	tReceive       = "cloud.google.com/go/pubsub/v2.(*Subscriber).Receive.func2.2.2"
	tMalloc        = "runtime.mallocgc"
	tMemclr        = "runtime.memclrNoHeapPointers"
	tMcall         = "runtime.mcall"
	tSchedule      = "runtime.schedule"
)

// stack is a sample's frames, leaf first.
func stack(frames ...string) []string { return frames }

func TestCPUStageOf(t *testing.T) {
	for _, c := range []struct {
		name   string
		frames []string
		want   string
	}{
		// A Bigtable write is its caller's stage.
		{"ApplyBulk under dedupe's flush", stack(tProtoMarshal, tGRPCSend, tDoApplyBulk, tApplyBulk, pubsink+"dedupe.btStore.put", tFlushWrites, tDedupeBatcher), cpuDedupe},
		{"ApplyBulk under the sink's flush", stack(tProtoMarshal, tGRPCSend, tDoApplyBulk, tApplyBulk, tSinkApply, tSinkFlush, tSinkBatcher), cpuSink},
		{"ApplyBulk under the minimal connector's writer", stack(tMemclr, tMalloc, tGRPCSend, tApplyBulk, "main.(*writer).apply"), cpuSink},
		// The runtime's own work first, whoever caused it.
		{"a GC assist under dedupe", stack("runtime.scanobject", "runtime.gcDrainN", "runtime.gcAssistAlloc1", "runtime.gcAssistAlloc", tMalloc, tDedupeClaim, tProcess, tHandle, tCallback, tReceive), cpuGC},
		{"the background mark worker", stack("runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker.func2", "runtime.systemstack", "runtime.gcBgMarkWorker"), cpuGC},
		{"sweeping before an allocation", stack("runtime.(*sweepLocked).sweep", "runtime.(*mcentral).cacheSpan", tMalloc, tSinkApply), cpuGC},
		{"a stack shrunk by the GC's scan", stack(tMemclr, "runtime.copystack", "runtime.shrinkstack", "runtime.scanstack", "runtime.gcBgMarkWorker"), cpuStacks},
		{"a stack grown under the claim", stack("runtime.memmove", "runtime.copystack", "runtime.newstack", "runtime.morestack", tDedupeClaim, tProcess), cpuStacks},
		{"a preemption at the stack check", stack(tSchedule, "runtime.goschedImpl", "runtime.gopreempt_m", "runtime.newstack", "runtime.morestack", tDedupeClaim), cpuRuntime},
		{"warm.Stack (9dd617d)", stack("runtime.copystack", pubsink+"internal/warm.Stack", tCallback, tReceive), cpuStacks},
		// Metrics and logs wherever they are written.
		{"a histogram observed under dedupe", stack("github.com/prometheus/client_golang/prometheus.(*histogram).Observe", tDedupeClaim, tProcess), cpuMetrics},
		{"a log line under the sink", stack("go.uber.org/zap.(*Logger).Warn", tSinkApply), cpuMetrics},
		{"the scrape's readiness check, a Bigtable call", stack(tGRPCSend, pubsink+"sinks/bigtable.(*Sink).checkTable", pubsink+"pipeline.(*Pipeline).Ready", pubsink+"internal/metrics.(*Metrics).readyValue", "github.com/prometheus/client_golang/prometheus/promhttp.HandlerForTransactional.func1", "net/http.(*conn).serve"), cpuMetrics},
		{"the minimal connector's /metrics", stack("fmt.Fprintf", "main.(*minimalCounts).mux.func1", "net/http.HandlerFunc.ServeHTTP", "net/http.(*conn).serve"), cpuMetrics},
		{"the stage timing", stack("time.now", pubsink+"pipeline.(*Pipeline).lap", tProcess, tHandle, tCallback), cpuMetrics},
		// The interceptor: its own code is metrics, the call it wraps its caller's.
		{"the interceptor's own allocation", stack(tMalloc, "runtime.newobject", pubsink+"internal/metrics.(*bigtableCounter).stream", tApplyBulk, tSinkApply), cpuMetrics},
		{"the call under the interceptor", stack(tMalloc, "google.golang.org/grpc.newClientStream", pubsink+"internal/metrics.(*bigtableCounter).stream", tApplyBulk, tFlushWrites), cpuDedupe},
		// Tracking before watermark and decode.
		{"the tracking Pull's decoding", stack("runtime.memmove", pubsink+"app.decodeMessages", pubsink+"app.pubsubCodec.Unmarshal", "google.golang.org/grpc.recv", pubsink+"source.(*pullLoop).call", pubsink+"source.(*pullLoop).run", pubsink+"source.(*Puller).Run.func1"), cpuTracking},
		{"the tracker's event time", stack(pubsink+"watermark.parseUnix", pubsink+"watermark.(*EventTime).Of", pubsink+"watermark.(*Tracker).receive", pubsink+"source.(*pullLoop).deliver"), cpuTracking},
		{"the mapping's event time", stack(pubsink+"watermark.parseUnix", pubsink+"watermark.(*EventTime).Of", pubsink+"mapping.(*Mapper).eventAndKey", tProcess, tHandle), cpuDecode},
		{"Finished", stack(pubsink+"watermark.(*histogram).record", pubsink+"watermark.(*Tracker).Finished", pubsink+"pipeline.(*Pipeline).finish", tHandle), cpuWatermark},
		{"the estimator's tick", stack(pubsink+"watermark.(*estimator).tick", pubsink+"watermark.(*Tracker).tickLoop"), cpuWatermark},
		// The batchers' own goroutines, by their shape.
		{"dedupe's batcher loop", stack("runtime.closechan", batcherOf+"struct { "+pubsink+"dedupe.row string }]).run"), cpuDedupe},
		{"the sink's batcher loop", stack("runtime.closechan", tSinkBatcher), cpuSink},
		{"the reporter's batcher timer", stack("runtime.chansend", batcherOf+"struct { "+pubsink+"watermark.id string; "+pubsink+"watermark.publish int64 }]).newBatch.func1"), cpuWatermark},
		{"the warm pool's hand-off", stack("runtime.chansend", pubsink+"internal/warm.(*Pool).work"), cpuDedupe},
		{"membership", stack(pubsink+"members.(*Members).View", tDedupeClaim), cpuDedupe},
		// The minimal connector's callback: its hand-off is the sink's,
		// its ack pull and ack.
		{"the minimal callback's hand-off", stack("runtime.chanrecv", "runtime.chanrecv1", "main.minimalRun.func3", tReceive), cpuSink},
		{"the minimal callback's ack", stack("runtime.mapdelete_faststr", "cloud.google.com/go/pubsub/v2.(*messageIterator).done", "cloud.google.com/go/internal/pubsub.(*Message).Ack", "main.minimalRun.func3", tReceive), cpuPull},
		{"the minimal row", stack(tMalloc, "main.newRow", "main.minimalRun.func3", tReceive), cpuDecode},
		// The pipeline's own code, then the source's.
		{"the pipeline's bookkeeping", stack("runtime.mapassign_faststr", pubsink+"pipeline.(*inFlight).add", tHandle, tCallback, tReceive), cpuPipeline},
		{"the source's callback", stack(tMalloc, tCallback, tReceive), cpuPull},
		{"the ack", stack("cloud.google.com/go/pubsub/v2.(*messageIterator).sendAck", "cloud.google.com/go/pubsub/v2.(*messageIterator).sender"), cpuPull},
		{"the stream's decoding", stack(pubsink+"app.decodeMessages", pubsink+"app.pubsubCodec.Unmarshal", "google.golang.org/grpc.recv", "cloud.google.com/go/pubsub/v2.(*pullStream).Recv"), cpuPull},
		// The shared transport.
		{"the transport's reader", stack("internal/runtime/syscall/linux.Syscall6", "syscall.Syscall", "net.(*conn).Read", "google.golang.org/grpc/internal/transport.(*framer).readFrame", "google.golang.org/grpc/internal/transport.(*http2Client).reader"), cpuTransport},
		{"gRPC's own goroutine", stack("runtime.selectgo", "google.golang.org/grpc.newClientStreamWithParams.func4"), cpuTransport},
		// The rest of the runtime, and the rest.
		{"the scheduler", stack("runtime.futex", "runtime.notesleep", "runtime.stopm", "runtime.findRunnable", tSchedule, "runtime.park_m", tMcall), cpuRuntime},
		{"the netpoller", stack("internal/runtime/syscall/linux.EpollWait", "runtime.netpoll", "runtime.findRunnable", tSchedule, tMcall), cpuRuntime},
		{"a truncated stack", stack("time.now"), cpuOther},
		{"someone else's goroutine", stack("runtime.memmove", "github.com/example/lib.(*T).Run"), cpuOther},
		{"no frames", nil, cpuOther},
	} {
		if got, frame := cpuStageOf(c.frames); got != c.want {
			t.Errorf("%s: %q (decided by %s), want %q", c.name, got, frame, c.want)
		}
	}
}

// TestCPURuleOrder checks that the order of cpuRules, not the frames'
// order, decides: the same stack with a rule moved before another goes
// elsewhere.
func TestCPURuleOrder(t *testing.T) {
	assist := stack("runtime.gcAssistAlloc", tMalloc, tDedupeClaim)
	if got, _ := cpuStageOf(assist); got != cpuGC {
		t.Fatalf("assist under dedupe: %q, want GC", got)
	}
	saved := cpuRules
	defer func() { cpuRules = saved }()
	var dedupeFirst []cpuRule
	for _, r := range saved {
		if r.stage == cpuDedupe {
			dedupeFirst = append([]cpuRule{r}, dedupeFirst...)
		} else {
			dedupeFirst = append(dedupeFirst, r)
		}
	}
	cpuRules = dedupeFirst
	if got, _ := cpuStageOf(assist); got != cpuDedupe {
		t.Errorf("assist under dedupe with dedupe's rules first: %q, want dedupe", got)
	}
}

func TestStdlib(t *testing.T) {
	for fn, want := range map[string]bool{
		"runtime.gopark": true,
		"internal/runtime/syscall/linux.Syscall6":          true,
		"sync.(*Mutex).Lock":                               true,
		"net/http.(*conn).serve":                           true,
		"main.newRow":                                      false,
		"main.minimalRun.func3":                            false,
		"google.golang.org/grpc.recv":                      false,
		"golang.org/x/net/http2.(*Framer).ReadFrameHeader": false,
		pubsink + "dedupe.(*Keys).Claim":                   false,
	} {
		if got := stdlib(fn); got != want {
			t.Errorf("stdlib(%q) = %v, want %v", fn, got, want)
		}
	}
}

// cpuSample is a stack (leaf first) seen n times.
type cpuSample struct {
	n      int64
	frames []string
}

// cpuProfile builds a CPU profile of samples, each sample at 10 ms. A
// frame "a+b" is one location with b inlined into a (b's line first).
func cpuProfile(samples ...cpuSample) *pprofile.Profile {
	p := &pprofile.Profile{
		SampleType: []*pprofile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &pprofile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
	}
	funcs := map[string]*pprofile.Function{}
	fn := func(name string) *pprofile.Function {
		if f := funcs[name]; f != nil {
			return f
		}
		f := &pprofile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: name}
		funcs[name] = f
		p.Function = append(p.Function, f)
		return f
	}
	locs := map[string]*pprofile.Location{}
	for _, s := range samples {
		var ls []*pprofile.Location
		for _, frame := range s.frames {
			loc := locs[frame]
			if loc == nil {
				loc = &pprofile.Location{ID: uint64(len(p.Location) + 1), Address: uint64(0x1000 + 16*len(p.Location))}
				names := strings.Split(frame, "+")
				for i := len(names) - 1; i >= 0; i-- { // the inlined callee first
					loc.Line = append(loc.Line, pprofile.Line{Function: fn(names[i]), Line: int64(10 + i)})
				}
				locs[frame] = loc
				p.Location = append(p.Location, loc)
			}
			ls = append(ls, loc)
		}
		p.Sample = append(p.Sample, &pprofile.Sample{Location: ls, Value: []int64{s.n, s.n * 10_000_000}})
	}
	if err := p.CheckValid(); err != nil {
		panic(err)
	}
	return p
}

// writeProfile writes p to dir/name.
func writeProfile(t *testing.T, dir, name string, p *pprofile.Profile) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSampleFramesInlined(t *testing.T) {
	// ApplyBulk inlined into dedupe's flush: one location, two lines.
	p := cpuProfile(cpuSample{1, stack(tProtoMarshal, tFlushWrites+"+"+tApplyBulk, tDedupeBatcher)})
	got := sampleFrames(p.Sample[0])
	want := []string{tProtoMarshal, tApplyBulk, tFlushWrites, tDedupeBatcher}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("frames %q, want %q", got, want)
	}
	if s, _ := cpuStageOf(got); s != cpuDedupe {
		t.Errorf("an inlined dedupe frame: %q, want dedupe", s)
	}
}

// tableRow is one row of printCPUStages' table: samples, share %, µs/msg,
// / minimal total (NaN when "-" or absent).
type tableRow struct {
	samples              int64
	share, us, vsMinimal float64
}

// parseCPUTable reads printCPUStages' table: connector → stage → row.
func parseCPUTable(t *testing.T, out string) map[string]map[string]tableRow {
	t.Helper()
	rows := map[string]map[string]tableRow{}
	connector := ""
	in := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "connector" {
			in = true
			continue
		}
		if !in || len(f) < 4 {
			continue
		}
		// The stage names have spaces: the numbers are the last fields.
		nums := 3
		if strings.Contains(out, "/ minimal total") {
			nums = 4
		}
		head, tail := f[:len(f)-nums], f[len(f)-nums:]
		var r tableRow
		var err error
		if r.samples, err = strconv.ParseInt(tail[0], 10, 64); err != nil {
			continue // past the table
		}
		num := func(s string) float64 {
			if s == "-" {
				return math.NaN()
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("table line %q: %v", line, err)
			}
			return v
		}
		r.share, r.us, r.vsMinimal = num(tail[1]), num(tail[2]), math.NaN()
		if nums == 4 {
			r.vsMinimal = num(tail[3])
		}
		stage := strings.Join(head, " ")
		if len(head) > 0 && rows[head[0]] == nil && !isStage(stage) {
			connector, stage = head[0], strings.Join(head[1:], " ")
			rows[connector] = map[string]tableRow{}
		}
		rows[connector][stage] = r
	}
	return rows
}

func isStage(s string) bool {
	for _, st := range append(cpuStageOrder, "total") {
		if s == st {
			return true
		}
	}
	return false
}

func TestCPUStagesTable(t *testing.T) {
	dir := t.TempDir()
	// minimal: 6 samples of pull and ack, 3 of sink write, 1 of GC.
	writeProfile(t, dir, "minimal.cpu.pprof", cpuProfile(
		cpuSample{4, stack("cloud.google.com/go/pubsub/v2.(*messageIterator).receive")},
		cpuSample{2, stack(tMalloc, tCallback, tReceive)},
		cpuSample{3, stack(tGRPCSend, tApplyBulk, "main.(*writer).apply")},
		cpuSample{1, stack("runtime.gcBgMarkWorker")},
	))
	// exactly_once_shared, two processes: 8 + 4 samples of dedupe (ApplyBulk
	// under dedupe's flush, a GC assist under the claim goes to GC), 4 of
	// sink write, 2 + 2 of GC.
	writeProfile(t, dir, "exactly_once_shared.p1.cpu.pprof", cpuProfile(
		cpuSample{8, stack(tApplyBulk, tFlushWrites)},
		cpuSample{2, stack("runtime.gcAssistAlloc", tMalloc, tDedupeClaim)},
		cpuSample{4, stack(tApplyBulk, tSinkApply)},
	))
	writeProfile(t, dir, "exactly_once_shared.p2.cpu.pprof", cpuProfile(
		cpuSample{4, stack(tDedupeClaim)},
		cpuSample{2, stack("runtime.bgsweep")},
	))
	// A profile without figures.
	writeProfile(t, dir, "exactly_once.cpu.pprof", cpuProfile(cpuSample{5, stack(tHandle)}))
	if err := writeRuns(dir, map[string]profiledRun{
		"minimal":             {CPUPerM: 30, Messages: 1000, CPUSeconds: 0.2, Processes: 1},
		"exactly_once_shared": {CPUPerM: 120, Messages: 1000, Processes: 2},
	}); err != nil {
		t.Fatal(err)
	}

	var out, errs bytes.Buffer
	if code := stagesMain([]string{dir}, &out, &errs); code != 0 {
		t.Fatalf("stages: exit %d: %s", code, errs.String())
	}
	t.Log("\n" + out.String())
	rows := parseCPUTable(t, out.String())
	want := map[string]map[string]tableRow{
		"minimal": {
			cpuPull: {6, 60, 18, 0.6},
			cpuSink: {3, 30, 9, 0.3},
			cpuGC:   {1, 10, 3, 0.1},
			"total": {10, 100, 30, 1},
		},
		"exactly_once_shared": {
			cpuDedupe: {12, 60, 72, 2.4},
			cpuSink:   {4, 20, 24, 0.8},
			cpuGC:     {4, 20, 24, 0.8},
			"total":   {20, 100, 120, 4},
		},
		"exactly_once": {
			cpuPipeline: {5, 100, math.NaN(), math.NaN()},
			"total":     {5, 100, math.NaN(), math.NaN()},
		},
	}
	close := func(a, b float64) bool {
		return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 0.006
	}
	for k, stages := range want {
		got := rows[k]
		if got == nil {
			t.Errorf("%s: no rows", k)
			continue
		}
		if len(got) != len(cpuStageOrder)+1 {
			t.Errorf("%s: %d rows, want every stage and total: %d", k, len(got), len(cpuStageOrder)+1)
		}
		var samples int64
		var share, us float64
		for _, s := range cpuStageOrder {
			r := got[s]
			w, ok := stages[s]
			if !ok {
				w = tableRow{0, 0, 0, 0}
				if math.IsNaN(stages["total"].us) {
					w.us, w.vsMinimal = math.NaN(), math.NaN()
				}
			}
			if r.samples != w.samples || !close(r.share, w.share) || !close(r.us, w.us) || !close(r.vsMinimal, w.vsMinimal) {
				t.Errorf("%s %s: %+v, want %+v", k, s, r, w)
			}
			samples, share, us = samples+r.samples, share+r.share, us+r.us
		}
		total := got["total"]
		if w := stages["total"]; total.samples != w.samples || !close(total.share, w.share) || !close(total.us, w.us) || !close(total.vsMinimal, w.vsMinimal) {
			t.Errorf("%s total: %+v, want %+v", k, total, w)
		}
		// The stages add up to the total.
		if samples != total.samples || !close(share, 100) || !close(us, total.us) {
			t.Errorf("%s: the stages add up to %d samples, %.2f%%, %.2f µs/msg; total %+v", k, samples, share, us, total)
		}
	}
	// Minimal first; the rest by name.
	if a, b, c := strings.Index(out.String(), "  minimal "), strings.Index(out.String(), "  exactly_once "), strings.Index(out.String(), "  exactly_once_shared "); !(a < b && b < c) {
		t.Errorf("connectors out of order (minimal at %d, exactly_once at %d, exactly_once_shared at %d)", a, b, c)
	}
	for _, s := range []string{"exactly_once_shared.p1.cpu.pprof, exactly_once_shared.p2.cpu.pprof", "profiled 50% of it", "exactly_once: 5 samples, 0.05 s CPU in exactly_once.cpu.pprof; the run's CPU s/M unknown"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q", s)
		}
	}

	// -cpu gives a figure that runs.json lacks, or replaces one.
	out.Reset()
	if code := stagesMain([]string{"-cpu", "exactly_once=50", "-cpu", "minimal=20", dir}, &out, &errs); code != 0 {
		t.Fatalf("stages -cpu: exit %d: %s", code, errs.String())
	}
	rows = parseCPUTable(t, out.String())
	if r := rows["exactly_once"]["total"]; !close(r.us, 50) || !close(r.vsMinimal, 2.5) {
		t.Errorf("-cpu exactly_once=50 minimal=20: exactly_once total %+v, want 50 µs/msg, 2.5 × minimal", r)
	}
	if r := rows["minimal"][cpuSink]; !close(r.us, 6) {
		t.Errorf("-cpu minimal=20: minimal's sink write %+v, want 6 µs/msg", r)
	}
	if strings.Contains(out.String(), "profiled 50% of it") {
		t.Errorf("-cpu minimal=20 kept runs.json's CPU seconds, of another figure:\n%s", out.String())
	}
}

func TestCPUStagesFailedRun(t *testing.T) {
	dir := t.TempDir()
	writeProfile(t, dir, "at_least_once.cpu.pprof", cpuProfile(cpuSample{2, stack(tSinkApply)}))
	if err := writeRuns(dir, map[string]profiledRun{"at_least_once": {CPUPerM: 1e6, Error: "timed out"}}); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := stagesMain([]string{dir}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if r := parseCPUTable(t, out.String())["at_least_once"]["total"]; !math.IsNaN(r.us) {
		t.Errorf("a failed run's CPU used: %+v", r)
	}
	if !strings.Contains(out.String(), "FAILED: timed out") {
		t.Errorf("the failure is not said:\n%s", out.String())
	}
}

func TestWriteRunsMerges(t *testing.T) {
	dir := t.TempDir()
	if err := writeRuns(dir, map[string]profiledRun{"minimal": {CPUPerM: 30}, "naive": {CPUPerM: 31}}); err != nil {
		t.Fatal(err)
	}
	if err := writeRuns(dir, map[string]profiledRun{"naive": {CPUPerM: 33, Messages: 5}, "exactly_once": {CPUPerM: 60}}); err != nil {
		t.Fatal(err)
	}
	runs, err := readRuns(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs["minimal"].CPUPerM != 30 || runs["naive"] != (profiledRun{CPUPerM: 33, Messages: 5}) || runs["exactly_once"].CPUPerM != 60 {
		t.Errorf("runs.json after two writes: %+v", runs)
	}
}

func TestStagesArgs(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	for _, args := range [][]string{nil, {dir, dir}, {"-cpu", "minimal", dir}, {"-cpu", "minimal=-1", dir}, {"-cpu", "=3", dir}} {
		if code := stagesMain(args, &out, &errs); code != 2 {
			t.Errorf("stages %q: exit %d, want 2", args, code)
		}
	}
	if code := stagesMain([]string{dir}, &out, &errs); code != 1 {
		t.Errorf("stages on a directory without profiles: exit %d, want 1", code)
	}
}

func TestProfiledConnectors(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"exactly_once.cpu.pprof", "exactly_once_shared.p1.cpu.pprof", "exactly_once_shared.p2.cpu.pprof",
		"exactly_once.allocs.pprof", "runs.json", "exactly_once.top"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := profiledConnectors(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || len(files["exactly_once"]) != 1 || len(files["exactly_once_shared"]) != 2 {
		t.Errorf("profiles by connector: %q", files)
	}
}

func TestPrintProfiledStages(t *testing.T) {
	dir := t.TempDir()
	writeProfile(t, dir, "minimal.cpu.pprof", cpuProfile(cpuSample{3, stack("cloud.google.com/go/pubsub/v2.(*messageIterator).receive")}, cpuSample{1, stack(tApplyBulk, "main.(*writer).apply")}))
	writeProfile(t, dir, "exactly_once_shared.p1.cpu.pprof", cpuProfile(cpuSample{1, stack(tDedupeClaim)}))
	writeProfile(t, dir, "exactly_once_shared.p2.cpu.pprof", cpuProfile(cpuSample{1, stack(tSinkApply)}))
	// An earlier invocation's run, whose profile is still there.
	writeProfile(t, dir, "naive.cpu.pprof", cpuProfile(cpuSample{1, stack(tSinkApply)}))
	if err := writeRuns(dir, map[string]profiledRun{"naive": {CPUPerM: 31}}); err != nil {
		t.Fatal(err)
	}
	b := &bench{o: options{profileDir: dir, replicas: 2}}
	var out bytes.Buffer
	err := b.printProfiledStages(&out, []result{
		{kind: minimal, msgs: 1000, cpu: 30 * time.Millisecond},
		{kind: exactlyOnceShared, msgs: 1000, cpu: 100 * time.Millisecond},
		{kind: reprocessRun, msgs: 1000, cpu: time.Second, err: errors.New("no profile")},
	})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := readRuns(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]profiledRun{
		"minimal":             {CPUPerM: 30, Messages: 1000, CPUSeconds: 0.03, Processes: 1},
		"exactly_once_shared": {CPUPerM: 100, Messages: 1000, CPUSeconds: 0.1, Processes: 2},
		"reprocess":           {CPUPerM: 1000, Messages: 1000, CPUSeconds: 1, Processes: 1, Error: "no profile"},
		"naive":               {CPUPerM: 31},
	}
	if len(runs) != len(want) {
		t.Errorf("runs.json: %+v, want %+v", runs, want)
	}
	for k, w := range want {
		if r := runs[k]; math.Abs(r.CPUPerM-w.CPUPerM) > 1e-9 || math.Abs(r.CPUSeconds-w.CPUSeconds) > 1e-9 || r.Messages != w.Messages || r.Processes != w.Processes || r.Error != w.Error {
			t.Errorf("runs.json %s: %+v, want %+v", k, r, w)
		}
	}
	rows := parseCPUTable(t, out.String())
	if len(rows) != 2 || rows["naive"] != nil {
		t.Errorf("the table has %d connectors, want this invocation's two with a profile:\n%s", len(rows), out.String())
	}
	if r := rows["minimal"][cpuPull]; r.samples != 3 || math.Abs(r.us-22.5) > 0.006 {
		t.Errorf("minimal's pull and ack: %+v, want 3 samples, 22.5 µs/msg", r)
	}
	if r := rows["exactly_once_shared"][cpuDedupe]; r.samples != 1 || math.Abs(r.us-50) > 0.006 || math.Abs(r.vsMinimal-50.0/30) > 0.0006 {
		t.Errorf("exactly_once_shared's dedupe: %+v, want 1 sample, 50 µs/msg, 1.667 × minimal", r)
	}
	if !strings.Contains(out.String(), "go run ./tools/bench stages "+dir) {
		t.Errorf("no command to redo the table:\n%s", out.String())
	}
}
