package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pubsink/pubsink/sinks/bigtable"
)

// scrapeEvery is how often the bench reads a connector's /metrics. A
// scrape costs the connector about a millisecond of CPU (the Go and process
// collectors): every 100 ms that was 3-4% of a profile, so it is rarer. The
// rate does not suffer: it is computed from the exact counts at two scrapes.
const scrapeEvery = 250 * time.Millisecond

// sampleEvery is how often the bench reads the sampled rows from the sink
// table (which costs the connectors nothing).
const sampleEvery = 100 * time.Millisecond

// result is what one run measured.
type result struct {
	kind  kind
	round int

	msgs    int           // messages published (a drain: N)
	rate    float64       // msg/s between 1% and 99% committed (-latency: published)
	drain   time.Duration // exec → every message committed
	cpu     time.Duration // user + system, the children's whole lives, summed
	rss     int64         // peak RSS of the largest child, bytes
	p50     time.Duration // publish → row, sampled (-latency: confirmed → readable, probed)
	p99     time.Duration
	samples int     // latencies measured
	rows    int     // rows in the sink table afterwards
	perMsg  int     // rows per message the connector writes
	dups    float64 // duplicates the connector reported
	// conditional is the conditional claims the connector reported (all
	// its processes): about N in shared mode.
	conditional float64
	// writes are the Bigtable row mutations of the connector's processes,
	// summed, read at the end of the run (before the stop), with the
	// messages committed then: see statePerMsg and sinkPerMsg.
	writes writes
	// stages are pubsink_stage_seconds by stage, summed over the
	// processes, read with writes (nil for the minimal and naive connectors).
	stages  map[string]*hist
	rssSeen []rssPoint
	err     error
}

// writes are a run's Bigtable row mutations (pubsink_bigtable_mutations_total,
// every call), read once every message was committed, with the sink's
// calls and what its change rows did.
type writes struct {
	known     bool    // the connector exports the counter (an earlier binary may not)
	state     float64 // rows mutated in the run's state table
	sink      float64 // rows mutated in the run's sink table
	committed float64 // messages committed at that scrape

	// callsKnown: the connector observes pubsink_sink_write_seconds (the
	// minimal and naive connectors do not).
	callsKnown bool
	// sinkCalls are the sink's Bigtable calls: pubsink_sink_write_seconds'
	// count, one per ApplyBulk of plain rows, one per call (conditional
	// mutation, mutation, read) of a change row.
	sinkCalls float64
	// sinkCallSeconds is pubsink_sink_write_seconds' sum: the calls'
	// time.
	sinkCallSeconds float64
	// sinkConditional and sinkMutateRow are the sink table's
	// check_and_mutate and mutate_row mutations (one per call).
	sinkConditional, sinkMutateRow float64
	// superseded are the rows of committed messages whose change was
	// superseded (pubsink_row_operations_total{result="superseded"}).
	superseded float64
}

// statePerMsg is the state table's row mutations per committed message
// (NaN when the connector does not count them).
func (r result) statePerMsg() float64 { return r.writes.perMsg(r.writes.state) }

// sinkPerMsg is the sink table's row mutations per committed message (NaN
// when the connector does not count them).
func (r result) sinkPerMsg() float64 { return r.writes.perMsg(r.writes.sink) }

func (w writes) perMsg(rows float64) float64 {
	if !w.known {
		return math.NaN()
	}
	return rows / max(1, w.committed)
}

// sinkCallsPerMsg is the sink's Bigtable calls per committed message (NaN
// when the connector does not time them).
func (r result) sinkCallsPerMsg() float64 {
	if !r.writes.callsKnown {
		return math.NaN()
	}
	return r.writes.sinkCalls / max(1, r.writes.committed)
}

// conditionalPerMsg is the sink's CheckAndMutateRow calls per committed
// message (NaN when unknown).
func (r result) conditionalPerMsg() float64 { return r.writes.perMsg(r.writes.sinkConditional) }

// mutateRowPerMsg is the sink's MutateRow calls per committed message (NaN
// when unknown).
func (r result) mutateRowPerMsg() float64 { return r.writes.perMsg(r.writes.sinkMutateRow) }

// readsPerMsg is a change connector's ReadRow calls per committed message:
// its sink calls that mutated nothing (a change row's calls are
// CheckAndMutateRow, MutateRow or ReadRow). NaN for another connector,
// whose calls are ApplyBulk's, or when unknown.
func (r result) readsPerMsg() float64 {
	if !r.kind.change() || !r.writes.callsKnown || !r.writes.known {
		return math.NaN()
	}
	return max(0, r.writes.sinkCalls-r.writes.sinkConditional-r.writes.sinkMutateRow) / max(1, r.writes.committed)
}

// callMillis is the mean time of a sink call in milliseconds (NaN when
// unknown): of a change row's calls, each one round trip.
func (r result) callMillis() float64 {
	if !r.writes.callsKnown {
		return math.NaN()
	}
	return r.writes.sinkCallSeconds / r.writes.sinkCalls * 1000
}

// changeCallsInFlight is how many calls of change rows a pubsink process
// makes at once (sinks/bigtable's maxChangeCalls): the bound of a change
// mapping's throughput is that many over the time of a message's calls.
const changeCallsInFlight = bigtable.MaxChangeCalls

// callBound is the msg/s that changeCallsInFlight calls at once allow a
// changes_* connector at its calls per message and mean call time (NaN for
// another connector, or unknown).
func (r result) callBound() float64 {
	if !r.kind.change() {
		return math.NaN()
	}
	return changeCallsInFlight / (r.sinkCallsPerMsg() * r.callMillis() / 1000)
}

// supersededShare is the share of a change connector's rows that were
// superseded (NaN for another connector).
func (r result) supersededShare() float64 {
	if !r.kind.change() || !r.writes.callsKnown {
		return math.NaN()
	}
	return r.writes.superseded / max(1, r.writes.committed*float64(max(1, r.perMsg)))
}

// cpuPerMillion is CPU seconds per million messages.
func (r result) cpuPerMillion() float64 { return r.cpu.Seconds() / float64(max(1, r.msgs)) * 1e6 }

// cpuPerMillionRows is CPU seconds per million rows written.
func (r result) cpuPerMillionRows() float64 {
	return r.cpu.Seconds() / float64(max(1, r.msgs*max(1, r.perMsg))) * 1e6
}

type rssPoint struct {
	at        time.Duration
	committed float64
	rss       int64
}

// point is one scrape of the committed counter.
type point struct {
	at time.Time
	n  float64
}

// profile asks a run for CPU and alloc profiles, written under dir.
type profile struct{ dir string }

// run drains one fresh backlog with connector k and measures it.
func (b *bench) run(ctx context.Context, k kind, round int, prof *profile) result {
	return b.runWith(ctx, k, round, prof, func(ctx context.Context, e *runEnv, res *result) (int, error) {
		every := max(1, b.o.n/b.o.samples)
		published, err := b.preload(ctx, "projects/"+project+"/topics/"+e.n.topic, b.o.shapes[k], b.o.n, every)
		if err != nil {
			return b.o.n, err
		}
		sctx, cancelSampler := context.WithCancel(ctx)
		defer cancelSampler()
		smp := newSampler(b.data.Open(e.n.table), published)
		if err := e.startAll(); err != nil {
			return b.o.n, err
		}
		go smp.run(sctx, sampleEvery)
		series, err := b.watch(ctx, e, b.o.n, smp, res)
		res.p50, res.p99, res.samples = smp.quantiles()
		res.rate = rate(series, float64(b.o.n))
		if err == nil && (k.base() == reprocessRun || k.base() == besideReprocess) {
			// Read while the reprocess still serves its metrics, then
			// let it end by itself.
			res.writes, res.stages = readEnd(e.addrs, e.n)
			err = b.awaitReprocess(ctx, e.cs[len(e.cs)-1])
		}
		return b.o.n, err
	})
}

// runEnv is the connector of one run: its fresh resources and its
// processes, prepared by runWith and started by the run's body.
type runEnv struct {
	n     names
	addrs []string // one per process, its http.addr
	cmds  []*exec.Cmd
	logs  []string
	cs    []*child  // the processes started so far
	start time.Time // when the first was started
}

// startAll starts the processes together.
func (e *runEnv) startAll() error {
	e.start = time.Now()
	for i, cmd := range e.cmds {
		c, err := startChild(cmd, e.logs[i])
		if err != nil {
			return err
		}
		e.cs = append(e.cs, c)
	}
	return nil
}

// exited returns a process that has exited, or nil.
func (e *runEnv) exited() *child {
	for _, c := range e.cs {
		select {
		case <-c.done:
			return c
		default:
		}
	}
	return nil
}

// runWith runs connector k once: it creates the run's fresh topic,
// subscriptions and tables and prepares its processes; body publishes,
// starts them (runEnv.startAll), measures into res, and returns how many
// messages it published. Then runWith stops the processes, adds their CPU
// time and peak RSS to res, checks that the sink table holds exactly one
// row per message published, and deletes the resources.
func (b *bench) runWith(ctx context.Context, k kind, round int, prof *profile,
	body func(ctx context.Context, e *runEnv, res *result) (published int, err error)) (res result) {
	res = result{kind: k, round: round, perMsg: b.o.shapes[k].rowsPerMessage()}
	n := b.names(k, round)
	addrs, err := freeAddrs(b.procs(k))
	if err != nil {
		res.err = err
		return res
	}
	paths, err := b.setUp(ctx, k, n, addrs)
	if err != nil {
		res.err = err
		return res
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := b.tearDown(tctx, n); err != nil {
			fmt.Fprintf(os.Stderr, "bench: cleaning up after %s: %v\n", n.suffix, err)
		}
	}()

	e := &runEnv{n: n, addrs: addrs, cmds: make([]*exec.Cmd, len(addrs)), logs: make([]string, len(addrs))}
	for i := range e.cmds {
		tag := procTag(i, len(addrs))
		e.cmds[i] = b.command(k, i, n, paths[i], addrs[i], prof, tag)
		e.logs[i] = filepath.Join(b.dir, n.suffix+tag+".log")
		logf, err := os.Create(e.logs[i])
		if err != nil {
			res.err = err
			return res
		}
		defer logf.Close()
		e.cmds[i].Stdout, e.cmds[i].Stderr = logf, logf
		e.cmds[i].Env = b.env()
		e.cmds[i].SysProcAttr = procAttr()
	}

	res.msgs, err = body(ctx, e, &res)
	if err == nil && !res.writes.known {
		// The run's Bigtable writes, read after the last commit and
		// before the stop, so that they cover the whole run (the
		// membership and watermark renewals of the state table included)
		// but not the writes of the shutdown.
		res.writes, res.stages = readEnd(e.addrs, n)
	}
	// Peak RSS is the largest child's VmHWM, read while they run (watch)
	// and just before they are stopped. Not rusage's maxrss: on Linux a
	// child started with vfork inherits its parent's peak RSS across exec,
	// so maxrss would report the bench's own RSS when that is larger.
	res.rss = max(res.rss, maxStatus(e.cs, "VmHWM:"))
	if stopErr := stopAll(e.cs); err == nil && stopErr != nil {
		err = fmt.Errorf("%s did not stop cleanly: %w", k, stopErr)
	}
	for _, c := range e.cs {
		if ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			res.cpu += time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
		}
	}
	if err != nil {
		res.err = err
		return res
	}
	if k.change() {
		if res.rows, err = b.checkChanges(ctx, n.table, b.o.shapes[k], b.n, b.epoch); err != nil {
			res.err = fmt.Errorf("checking the change rows: %w", err)
			return res
		}
	} else if res.rows, err = b.countRows(ctx, n.table); err != nil {
		res.err = fmt.Errorf("counting rows: %w", err)
		return res
	}
	if want := b.o.shapes[k].rowsFor(res.msgs); res.rows != want {
		res.err = fmt.Errorf("%d rows in the sink table, want %d", res.rows, want)
	}
	return res
}

// command is the child process of connector k; tag (procTag) tells apart
// the profiles of several processes.
func (b *bench) command(k kind, i int, n names, path, addr string, prof *profile, tag string) *exec.Cmd {
	var args []string
	if prof != nil {
		args = []string{"-cpuprofile", filepath.Join(prof.dir, string(k)+tag+".cpu.pprof"),
			"-allocprofile", filepath.Join(prof.dir, string(k)+tag+".allocs.pprof")}
	}
	switch {
	case k.own():
		args = append([]string{string(k.base()),
			"-project", project, "-subscription", "projects/" + project + "/subscriptions/" + n.sub,
			"-instance", instance, "-table", n.table, "-http", addr,
			"-streams", strconv.Itoa(b.o.streams)}, args...)
		return exec.Command(b.self, args...)
	case k.base() == exactlyOnceBaseline:
		return exec.Command(b.o.baseline, "run", "--config", path)
	case k.base() == reprocessRun || k.base() == besideReprocess && i == 1:
		// Everything published to the run's fresh topic, up to the start.
		return exec.Command(b.pubsink, "reprocess", "--config", path, "--pipeline", pipelineName,
			"--from", "30m", "--no-restore-point", "--no-wait", "--idle", reprocessIdle)
	case prof != nil:
		return exec.Command(b.self, append([]string{"inproc", "-config", path}, args...)...)
	default:
		return exec.Command(b.pubsink, "run", "--config", path)
	}
}

// watch scrapes the run's processes until, summed over them, want
// messages committed and every sampled row was seen (smp nil: none are
// sampled), and returns the summed committed counts it saw.
func (b *bench) watch(ctx context.Context, e *runEnv, want int, smp *sampler, res *result) ([]point, error) {
	cs, addrs := e.cs, e.addrs
	if res.kind.base() == besideReprocess {
		// The live process alone is measured; the reprocess beside it
		// ends by itself (awaitReprocess).
		cs, addrs = cs[:1], addrs[:1]
	}
	deadline := time.NewTimer(b.o.timeout)
	defer deadline.Stop()
	tk := time.NewTicker(scrapeEvery)
	defer tk.Stop()
	exited := make(chan *child, len(cs))
	for _, c := range cs {
		go func() { <-c.done; exited <- c }()
	}
	var series []point
	var doneAt time.Time
	lastRSS := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return series, ctx.Err()
		case c := <-exited:
			return series, fmt.Errorf("%s exited early: %v (log %s)", res.kind, c.err, c.log)
		case <-deadline.C:
			last := 0.0
			if len(series) > 0 {
				last = series[len(series)-1].n
			}
			return series, fmt.Errorf("%s: timed out after %v with %.0f of %d committed", res.kind, b.o.timeout, last, want)
		case <-tk.C:
		}
		now := time.Now()
		m, err := scrapeAll(addrs)
		if err != nil {
			continue // not all listening yet
		}
		series = append(series, point{now, m.committed})
		res.dups, res.conditional = m.duplicate, m.conditional
		res.rss = max(res.rss, maxStatus(cs, "VmHWM:"))
		if b.o.memory && now.Sub(lastRSS) >= time.Second {
			lastRSS = now
			res.rssSeen = append(res.rssSeen, rssPoint{now.Sub(e.start), m.committed, maxStatus(cs, "VmRSS:")})
		}
		if m.committed >= float64(want) {
			if doneAt.IsZero() {
				doneAt = now
				res.drain = now.Sub(e.start)
			}
			if smp == nil {
				return series, nil
			}
			select {
			case <-smp.done:
				return series, nil
			default:
			}
			if now.Sub(doneAt) > 10*time.Second {
				return series, fmt.Errorf("%s committed every message, but sampled rows are missing from the sink table", res.kind)
			}
		}
	}
}

// awaitReprocess waits for a reprocess (the connector, or the one beside a
// live process) to end by itself, its range done, so that the stop does not
// cut it short (exit 3).
func (b *bench) awaitReprocess(ctx context.Context, c *child) error {
	select {
	case <-c.done:
		if c.err != nil {
			return fmt.Errorf("the reprocess: %w (log %s)", c.err, c.log)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.o.timeout):
		return fmt.Errorf("the reprocess did not end within %v (log %s)", b.o.timeout, c.log)
	}
}

// readEnd reads the row mutations of the run's state and sink tables,
// and the stages' histograms, from its processes, summed. A failed scrape
// leaves them unknown: it does not fail the run, whose drain was measured.
func readEnd(addrs []string, n names) (writes, map[string]*hist) {
	m, err := scrapeAll(addrs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: reading the Bigtable mutations at the end of the run: %v\n", n.suffix, err)
		return writes{}, nil
	}
	return writes{known: m.mutationsSeen, state: m.mutations[n.state], sink: m.mutations[n.table], committed: m.committed,
		// The naive connector exports the histogram but never observes it
		// (minimal does not export it):
		// a run that committed messages made calls.
		callsKnown: m.sinkCallsSeen && m.sinkCalls > 0, sinkCalls: m.sinkCalls, sinkCallSeconds: m.sinkCallSeconds,
		sinkConditional: m.byCall[tableCall{n.table, callCheckAndMutate}], sinkMutateRow: m.byCall[tableCall{n.table, callMutateRow}],
		superseded: m.superseded}, m.stages
}

// child is a connector process, the leader of its own process group.
type child struct {
	cmd  *exec.Cmd
	log  string        // where its output goes
	done chan struct{} // closed when it exited
	err  error         // Wait's, set before done is closed
}

func startChild(cmd *exec.Cmd, log string) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	return c, nil
}

// stop sends SIGTERM and waits for the child to exit. After a minute it
// sends SIGQUIT, so that the Go runtime writes every goroutine's stack to
// the child's log and exits, and 10 s later kills the child's process
// group. It returns the exit error.
func (c *child) stop() error {
	select {
	case <-c.done:
		return c.err
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(time.Minute):
	}
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.done
	return errors.New("not stopped a minute after SIGTERM: SIGQUIT (the goroutines' stacks are in its log), then killed")
}

// stopAll stops the children at once and returns their exit errors, each
// with its log.
func stopAll(cs []*child) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			if err := c.stop(); err != nil {
				errs[i] = fmt.Errorf("%w (log %s)", err, c.log)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rate is the commit rate between the scrapes where 1% and 99% of n had
// committed: start-up and the tail are left out.
func rate(series []point, n float64) float64 {
	var from, to *point
	for i := range series {
		p := &series[i]
		if from == nil && p.n >= 0.01*n {
			from = p
		}
		if p.n >= 0.99*n {
			to = p
			break
		}
	}
	if from == nil || to == nil || !to.at.After(from.at) {
		return 0
	}
	return (to.n - from.n) / to.at.Sub(from.at).Seconds()
}

// counts are what the bench reads from a connector's /metrics.
type counts struct {
	committed, duplicate, conditional float64
	// mutations are pubsink_bigtable_mutations_total's rows by table ID,
	// summed over the calls; mutationsSeen says the counter was there.
	mutations     map[string]float64
	mutationsSeen bool
	// byCall are the same by table and call.
	byCall map[tableCall]float64
	// sinkCalls is pubsink_sink_write_seconds_count; sinkCallsSeen says it
	// was there.
	sinkCalls     float64
	sinkCallsSeen bool
	// sinkCallSeconds is pubsink_sink_write_seconds_sum.
	sinkCallSeconds float64
	// superseded are pubsink_row_operations_total's superseded rows,
	// summed over the operations.
	superseded float64
	// stages are pubsink_stage_seconds by stage (empty: not exported).
	stages map[string]*hist
}

// tableCall is a series of pubsink_bigtable_mutations_total: a table ID and
// a call.
type tableCall struct{ table, call string }

// The calls of pubsink_bigtable_mutations_total that a change row makes
// (internal/metrics' CallCheckAndMutate and CallMutateRow).
const (
	callCheckAndMutate = "check_and_mutate"
	callMutateRow      = "mutate_row"
)

// rowOperationsMetric is the prefix of pubsink_row_operations_total's
// series.
const rowOperationsMetric = "pubsink_row_operations_total{"

// mutationsMetric is the prefix of pubsink_bigtable_mutations_total's
// series in the Prometheus text.
const mutationsMetric = "pubsink_bigtable_mutations_total{"

// scrapeAll sums the counters of the processes at addrs; it fails if one
// does not answer.
func scrapeAll(addrs []string) (counts, error) {
	var sum counts
	for _, addr := range addrs {
		c, err := scrape(addr)
		if err != nil {
			return sum, err
		}
		sum.committed += c.committed
		sum.duplicate += c.duplicate
		sum.conditional += c.conditional
		sum.mutationsSeen = sum.mutationsSeen || c.mutationsSeen
		for t, v := range c.mutations {
			if sum.mutations == nil {
				sum.mutations = map[string]float64{}
			}
			sum.mutations[t] += v
		}
		for tc, v := range c.byCall {
			if sum.byCall == nil {
				sum.byCall = map[tableCall]float64{}
			}
			sum.byCall[tc] += v
		}
		sum.sinkCalls += c.sinkCalls
		sum.sinkCallSeconds += c.sinkCallSeconds
		sum.sinkCallsSeen = sum.sinkCallsSeen || c.sinkCallsSeen
		sum.superseded += c.superseded
		for s, h := range c.stages {
			if sum.stages == nil {
				sum.stages = map[string]*hist{}
			}
			sum.stages[s] = sum.stages[s].plus(h)
		}
	}
	return sum, nil
}

// scrapeClient asks for /metrics uncompressed. Go's client asks for gzip
// by default, and Prometheus's handler then compresses every scrape: about
// 3 ms of a connector's CPU each, 4 times a second, far more often than a
// Prometheus server scrapes (every 15 to 60 s), and more for pubsink's
// registry than for minimal's two lines, so that the bench's own polling
// weighed on the ratios it reports (tools/bench/doc.go, "Baselines").
var scrapeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableCompression: true}}

// scrape reads the pipeline's counters from the Prometheus text at
// http://addr/metrics.
func scrape(addr string) (counts, error) {
	var c counts
	resp, err := scrapeClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the counters the bench uses from the Prometheus text
// of a connector's /metrics.
func parseMetrics(r io.Reader) (counts, error) {
	var c counts
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	c.stages = map[string]*hist{}
	for sc.Scan() {
		line := sc.Text()
		if ok, err := addStageLine(c.stages, line); ok {
			if err != nil {
				return c, err
			}
			continue
		}
		var dst *float64
		switch {
		case seriesOf(line, "pubsink_messages_committed_total"):
			dst, found = &c.committed, true
		case seriesOf(line, "pubsink_messages_duplicate_total"):
			dst = &c.duplicate
		case seriesOf(line, "pubsink_dedupe_conditional_claims_total"):
			dst = &c.conditional
		case seriesOf(line, "pubsink_sink_write_seconds_count"):
			dst, c.sinkCallsSeen = &c.sinkCalls, true
		case seriesOf(line, "pubsink_sink_write_seconds_sum"):
			dst = &c.sinkCallSeconds
		case strings.HasPrefix(line, rowOperationsMetric):
			labels := strings.TrimPrefix(line, rowOperationsMetric)
			if !ofPipeline(labelValue(labels, "pipeline")) || labelValue(labels, "result") != "superseded" {
				continue
			}
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return c, fmt.Errorf("metrics: %q: %w", line, err)
			}
			c.superseded += v
			continue
		case strings.HasPrefix(line, mutationsMetric):
			labels := strings.TrimPrefix(line, mutationsMetric)
			t := labelValue(labels, "table")
			if t == "" {
				return c, fmt.Errorf("metrics: %q: no table label", line)
			}
			if c.mutations == nil {
				c.mutations = map[string]float64{}
				c.byCall = map[tableCall]float64{}
			}
			c.mutationsSeen = true
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return c, fmt.Errorf("metrics: %q: %w", line, err)
			}
			c.mutations[t] += v
			c.byCall[tableCall{t, labelValue(labels, "call")}] += v
			continue
		default:
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return c, fmt.Errorf("metrics: %q: %w", line, err)
		}
		*dst = v
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if !found {
		return c, errors.New("metrics: no pubsink_messages_committed_total for the pipeline")
	}
	return c, nil
}

// pipelineSeries matches a series of the bench's pipeline,
// {pipeline="bench"}, or of a reprocess's, {pipeline="bench~rYYYYMMDDtHHMMSSz-XXXXXX"},
// and captures the metric's name.
var pipelineSeries = regexp.MustCompile(`^([a-z_]+)\{pipeline="` + pipelineName + `(?:~r[0-9a-z-]+)?"\} `)

// ofPipeline reports whether a pipeline label is the bench's pipeline's or
// a reprocess's of it.
func ofPipeline(p string) bool {
	rest, ok := strings.CutPrefix(p, pipelineName)
	return ok && (rest == "" || strings.HasPrefix(rest, "~r"))
}

// seriesOf reports whether line is metric's series of the bench's pipeline.
func seriesOf(line, metric string) bool {
	m := pipelineSeries.FindStringSubmatch(line)
	return m != nil && m[1] == metric
}

// maxStatus is the largest of a size field of /proc/PID/status over the
// running children (VmHWM: the peak resident set), 0 if it cannot be read.
func maxStatus(cs []*child, field string) int64 {
	var m int64
	for _, c := range cs {
		m = max(m, procStatus(c.cmd.Process.Pid, field))
	}
	return m
}

// procStatus reads a size field of /proc/PID/status (Linux) in bytes, 0 if
// it cannot.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
