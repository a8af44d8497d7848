package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/internal/testenv/faultproxy"
)

// Names of the campaign's resources on the emulators (fresh emulators per
// campaign, so fixed names do not collide).
const (
	project      = "chaos-project"
	instance     = "chaos-instance"
	pipelineName = "chaos"
	topicName    = "chaos-events"
	mainSub      = "chaos-main"
	trackingSub  = "chaos-tracking"
	dlTopic      = "chaos-dlq"
	dlSub        = "chaos-dlq-replay"
	rowsTable    = "chaos_rows"
	stateTable   = "chaos_state"
)

const (
	// band is the pipeline's estimation_band: the default, so that what
	// the campaign finds about lateness holds for a default deployment.
	band = 10 * time.Second
	// shutdownTimeout is the pipeline's shutdown_timeout.
	shutdownTimeout = 10 * time.Second
	// lease is how long a message delivered to a process that died stays
	// leased to it: pubsink asks for leases of at most 15 s (source), plus
	// a margin.
	lease = 16 * time.Second
	// readyTimeout bounds a restart until /readyz answers 200.
	readyTimeout = 90 * time.Second
	wmFormat     = state.WatermarkFormat
)

// Options configure a campaign.
type Options struct {
	Seed        uint64
	Messages    int
	Duration    time.Duration
	Faults      int
	MaxStall    time.Duration
	BigPayloads int
	LateBursts  int
	// Settle bounds the wait, after the workload, for every outcome.
	Settle time.Duration
	// Replicas is how many pubsink processes run the pipeline at once
	// (0 or 1: one, as before replicas).
	Replicas int
	Dir      string // run directory: logs, config, binary
	Binary   string // a built pubsink; "" builds the module's
	Log      io.Writer
	// TolerateLateAfterFault reports valid records dead-lettered as late
	// after a fault as a known bug instead of a violation (see
	// lateAfterFault).
	TolerateLateAfterFault bool
	// Mix runs the two pipelines of mixPipes in every process instead of
	// the default one.
	Mix bool
	// Skew is the largest clock offset of a replica (replicaOffsets); 0:
	// every process runs on the host's clock.
	Skew time.Duration
	// Changes runs the change pipeline (changePipe) in every process too,
	// with its workload of Messages/5 changes (changes.go); -mix sets it.
	Changes bool
	// Formats runs the format pipelines (formatPipes) in every process
	// too, each with a workload of Messages/20 keys, and the reprocess of
	// one of them (formats.go, reprocess.go).
	Formats bool
	// Ordered gives the change pipeline a subscription with message
	// ordering, each change published under its row key as the ordering
	// key: a kill or term of a replica then hits the holder of keys, whose
	// held changes must come back before the key's later ones (the
	// emulator's javaagent, OrderingFix). -ordered sets Changes.
	Ordered bool
	// ReprocessRivals gives the reprocessed pipeline's workload rivals
	// too: the reprocess must keep the live pipeline's winner of each key
	// (dedupe.Rerun). The command line sets it unless -reprocess-rivals=false.
	ReprocessRivals bool
}

// changeConfig sizes the change workload of a campaign with opts.
func (o Options) changeConfig() ChangeConfig { return ChangeConfig{Changes: o.Messages / 5} }

// fmtPlans are the format workloads of a campaign with opts.
func (o Options) fmtPlans(dir string) []*FmtPlan {
	var pipes []PipeSpec
	for _, p := range o.pipes(dir) {
		if p.Format != "" {
			pipes = append(pipes, p)
		}
	}
	return NewFmtPlans(o.Seed, pipes, o.Messages/20, o.ReprocessRivals)
}

// pipes are the pipelines a campaign with opts runs; dir is the run
// directory (where a dead-letter file goes).
func (o Options) pipes(dir string) []PipeSpec {
	out := []PipeSpec{defaultPipe}
	if o.Mix {
		out = mixPipes(dir)
	}
	if o.Changes {
		out = append(out, changePipe(dir, o.Ordered))
	}
	if o.Formats {
		out = append(out, formatPipes(dir)...)
	}
	return out
}

// pipeState is what the campaign collects of one pipeline under test; the
// campaign's mu guards it.
type pipeState struct {
	spec   PipeSpec
	stored wmStats
	// copies are the copies read from its dead-letter output: pulled and
	// acked from a topic's replay subscription, or the whole table or file
	// read again each time.
	copies    []dlCopy
	malformed int // entries of a table or file output that are no copy
}

// faultEntry is one fault as it ran.
type faultEntry struct {
	n          int
	fault      Fault
	start, end time.Duration // offsets from the start of the campaign
	wall       time.Time
	note       string
}

// campaign is one run. Its fields are set up by run and read by the
// goroutines it starts; mu guards what those goroutines share.
type campaign struct {
	opts  Options
	plan  *Plan
	sched []Fault
	begin time.Time // the campaign's start, for the offsets in the log

	ps       *emulator.PubSub
	bt       *emulator.Bigtable
	psProxy  *faultproxy.Proxy
	btProxy  *faultproxy.Proxy
	pubsub   *pubsub.Client
	bigtable *bigtable.Client
	binary   string
	config   string
	cfg      *config.Config // config, as pubsink reads it (for the dead-letter readers)
	replicas []*replica     // one unless -replicas
	pipes    []*pipeState   // the pipelines under test; the first gates duplicates and replays
	offsets  []time.Duration

	// life serialises starting and stopping pubsink (faults, the
	// watchdog, the final stop).
	life     sync.Mutex
	stopping atomic.Bool // the final stop began: an exit is expected

	mu           sync.Mutex
	gens         []*genRecord // every process of every replica, by gen
	steps        []published
	recs         []recRuntime
	committed    map[string]bool // ids with a dedupe record in the first pipeline's catalog
	faultLog     []faultEntry
	terms        []int
	unexpected   []string
	notReady     []string
	lastFault    time.Time // when the last fault ended
	disrupted    []time.Time
	resets       []time.Time // Pub/Sub resets (in disrupted too)
	kills        []time.Time // SIGKILLs, and exits on their own
	stops        []time.Time // every stop of a process but the final one
	gatedLeft    []int
	orphaned     []int        // gated steps dropped: their original was dead-lettered
	deadLettered map[int]bool // records with a dead-letter copy in the first pipeline's output
	pendingCat   atomic.Int64 // gated dups and replays waiting for a commit

	// The change workload (with Options.Changes; chg nil without): its
	// plan, what became of each of its messages, and its base event time,
	// fixed when publishing starts.
	chg      *ChangePlan
	chgSteps []published
	chgBase  time.Time

	// The format workloads and the reprocess (with Options.Formats; nil
	// without).
	fmt             *fmtRun
	schemas         *vkit.SchemaClient // the emulator's, for the Avro schema
	rp              *reprocessor
	reprocessConfig string // the reprocess's config: config.yaml with its mapping
}

// replica is one slot of -replicas: the HTTP address and the environment
// of every process that runs in it, and the process running now. A restart
// replaces the process in its slot; c.mu guards cur and started.
type replica struct {
	n       int // 1..N with -replicas N > 1; 0 when one process runs
	addr    string
	offset  time.Duration // PUBSINK_CLOCK_OFFSET of its processes
	env     []string
	cur     *child
	started int // processes started in this slot so far
}

func (c *campaign) since() time.Duration { return time.Since(c.begin) }

func (c *campaign) logf(format string, args ...any) {
	fmt.Fprintf(c.opts.Log, "[+%7.2fs] %s\n", c.since().Seconds(), fmt.Sprintf(format, args...))
}

// Report is what a campaign found: the invariant table, the fault log and
// the processes' timeline.
type Report struct {
	Results  []Result
	Faults   []faultEntry
	Procs    []string
	Workload string // the plan's records by kind and messages by variant
}

// Run runs one campaign and returns its report, which holds the fault log
// even when err is set. An error means the campaign could not run
// (emulators, build, setup), not that an invariant failed.
func Run(ctx context.Context, opts Options) (*Report, error) {
	c := &campaign{
		opts:         opts,
		begin:        time.Now(),
		committed:    map[string]bool{},
		deadLettered: map[int]bool{},
	}
	c.plan = NewPlan(opts.Seed, WorkloadConfig{Messages: opts.Messages, BigPayloads: opts.BigPayloads, LateBursts: opts.LateBursts, Band: band})
	c.sched = NewSchedule(opts.Seed, FaultConfig{Count: opts.Faults, Duration: opts.Duration, MaxStall: opts.MaxStall, Replicas: opts.Replicas})
	c.steps = make([]published, len(c.plan.Steps))
	c.recs = make([]recRuntime, len(c.plan.Records))
	if opts.Changes {
		c.chg = NewChangePlan(opts.Seed, opts.changeConfig())
		c.chgSteps = make([]published, len(c.chg.Steps))
	}
	for _, p := range opts.pipes(opts.Dir) {
		c.pipes = append(c.pipes, &pipeState{spec: p})
	}
	if opts.Formats {
		c.fmt = &fmtRun{plans: opts.fmtPlans(opts.Dir), rangeDone: make(chan struct{})}
		for _, p := range c.fmt.plans {
			c.fmt.steps = append(c.fmt.steps, make([]published, len(p.Steps)))
			c.fmt.writers = append(c.fmt.writers, make([]int, len(p.Steps)))
		}
		c.rp = newReprocessor(opts.Seed)
	}
	c.offsets = replicaOffsets(max(opts.Replicas, 1), opts.Skew)
	results, err := c.run(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &Report{Results: results, Faults: c.faultLog, Workload: c.plan.Summary()}
	if c.chg != nil {
		r.Workload += "\nchanges: " + c.chg.Summary()
	}
	if c.fmt != nil {
		for _, p := range c.fmt.plans {
			r.Workload += "\nformats: " + p.Summary()
		}
	}
	for _, g := range c.gens {
		line := fmt.Sprintf("%s: started +%.1fs", g.child.name(), g.startedAt.Seconds())
		if g.offset != 0 {
			line += fmt.Sprintf(", clock %s", signed(g.offset))
		}
		if g.guardOff > 0 {
			line += fmt.Sprintf(", startup guard off +%.1fs", g.guardOff.Seconds())
		}
		how := g.how
		if how == "" {
			how = g.child.exitText()
		}
		r.Procs = append(r.Procs, line+"; "+how+"; log "+filepath.Base(g.child.logPath))
	}
	return r, err
}

func (c *campaign) run(ctx context.Context) ([]Result, error) {
	defer c.stopInfrastructure() // what did start, also when the rest failed
	if err := c.startInfrastructure(ctx); err != nil {
		return nil, err
	}

	obsCtx, stopObservers := context.WithCancel(ctx)
	var observers sync.WaitGroup
	defer func() { stopObservers(); observers.Wait() }()
	for _, f := range []func(context.Context){c.sampleStored, c.sampleStatus, c.collectDeadLetters, c.watchCatalog} {
		observers.Add(1)
		go func() { defer observers.Done(); f(obsCtx) }()
	}

	defer c.killAll()
	if err := c.startAll(ctx); err != nil {
		return nil, err
	}

	c.logf("workload: %d messages over %v; %d faults", len(c.plan.Steps), c.opts.Duration, len(c.sched))
	c.logf("workload: %s", c.plan.Summary())
	t0 := time.Now()
	var g errgroup.Group
	g.Go(func() error { return c.publish(ctx, t0) })
	if c.chg != nil {
		c.logf("changes: %s", c.chg.Summary())
		c.mu.Lock()
		c.chgBase = chgBaseOf(t0)
		c.mu.Unlock()
		g.Go(func() error { return c.publishChanges(ctx, t0) })
	}
	var reprocessing sync.WaitGroup
	rpCtx, stopReprocess := context.WithCancel(ctx)
	defer func() { stopReprocess(); reprocessing.Wait() }()
	if c.fmt != nil {
		c.mu.Lock()
		c.fmt.base = chgBaseOf(t0)
		c.mu.Unlock()
		g.Go(func() error { return c.publishFormats(ctx, t0) })
		reprocessing.Go(func() { c.superviseReprocess(rpCtx) })
	}
	g.Go(func() error { c.runFaults(ctx, t0); return nil })
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	final, finalOK := c.settle(ctx)
	stopReprocess() // it ended, or settling gave up on it: kill it
	reprocessing.Wait()
	c.finalStop()
	left := c.leftovers(ctx)
	c.drainDeadLetters(ctx)
	stopObservers()
	observers.Wait()
	rows := make([]map[string]map[string][]cell, len(c.pipes))
	fmtTables := make([]map[string]map[string]map[string][]cell, len(c.pipes))
	var chgTables map[string]map[string]chgRow
	for i, p := range c.pipes {
		var err error
		switch {
		case p.spec.Changes:
			chgTables, err = c.readChangeTables(ctx)
		case p.spec.Format != "":
			fmtTables[i], err = c.readFormatTables(ctx, p.spec)
		default:
			rows[i], err = c.readRows(ctx, p.spec.Table)
		}
		if err != nil {
			return nil, err
		}
	}

	var rpLeft [2]bool
	if c.fmt != nil {
		rpLeft = c.reprocessLeftovers(ctx)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var skew time.Duration
	for _, o := range c.offsets {
		skew = max(skew, o, -o)
	}
	var obs []*Observed
	var chg []*ChangeObserved
	var fmts []*FmtObserved
	for i, p := range c.pipes {
		if p.spec.Format != "" {
			fmts = append(fmts, c.fmtObserved(i, fmtTables[i], left[i][0], final[i], finalOK, rpLeft))
			continue
		}
		if p.spec.Changes {
			chg = append(chg, &ChangeObserved{
				Begin: c.begin, Pipe: p.spec, Plan: c.chg, Base: c.chgBase, Steps: c.chgSteps, Tables: chgTables, Copies: p.copies,
				Malformed: p.malformed, LeftMain: left[i][0], Gens: c.gensOf(i), Final: final[i], FinalOK: finalOK, Skew: skew,
				Disruptions: c.disrupted, Kills: c.kills,
			})
			continue
		}
		obs = append(obs, &Observed{
			Begin: c.begin, Replicas: len(c.replicas), Pipe: p.spec, Skew: skew, Plan: c.plan, Steps: c.steps, Recs: c.recs, Rows: rows[i], Copies: p.copies,
			Malformed: p.malformed, LeftMain: left[i][0], LeftTracking: left[i][1], Stored: p.stored, Gens: c.gensOf(i),
			Final: final[i], FinalOK: finalOK, Terms: c.terms, Unexpected: c.unexpected, NotReady: c.notReady,
			GatedLeft: c.gatedLeft, Orphaned: c.orphaned, Disruptions: c.disrupted, Resets: c.resets, Kills: c.kills, Stops: c.stops, TolerateLateAfterFault: c.opts.TolerateLateAfterFault,
		})
	}
	out := CheckAll(obs, chg...)
	for _, o := range fmts {
		out = append(out, CheckFormats(o)...)
	}
	return out, nil
}

// gensOf returns the records of pipeline i in every process: the process's
// own record for the first, else the record it keeps for pipeline i, with
// how and when the process ended copied in. The caller holds c.mu.
func (c *campaign) gensOf(i int) []*genRecord {
	out := make([]*genRecord, len(c.gens))
	for j, g := range c.gens {
		if i == 0 {
			out[j] = g
			continue
		}
		o := g.others[i-1]
		o.how, o.stoppedAt = g.how, g.stoppedAt
		out[j] = o
	}
	return out
}

// startInfrastructure starts both emulators and builds pubsink at once,
// then the proxies, then runs `pubsink setup`.
func (c *campaign) startInfrastructure(ctx context.Context) error {
	var g errgroup.Group
	g.Go(func() (err error) {
		c.ps, err = emulator.StartPubSub(ctx, emulator.Options{LogDir: c.opts.Dir})
		return err
	})
	g.Go(func() (err error) {
		c.bt, err = emulator.StartBigtable(ctx, emulator.Options{LogDir: c.opts.Dir})
		return err
	})
	g.Go(func() error {
		if c.opts.Binary != "" {
			c.binary = c.opts.Binary
			return nil
		}
		c.binary = filepath.Join(c.opts.Dir, "pubsink")
		return build(ctx, c.binary)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	c.logf("emulators: pubsub %s, bigtable %s; binary %s", c.ps.Host, c.bt.Host, c.binary)

	var err error
	if c.psProxy, err = faultproxy.Start(c.ps.Host); err != nil {
		return err
	}
	if c.btProxy, err = faultproxy.Start(c.bt.Host); err != nil {
		return err
	}
	if err := c.makeReplicas(); err != nil {
		return err
	}
	c.config = filepath.Join(c.opts.Dir, "config.yaml")
	specs := make([]PipeSpec, len(c.pipes))
	for i, p := range c.pipes {
		specs[i] = p.spec
	}
	if err := os.WriteFile(c.config, []byte(configYAMLOf(c.replicas[0].addr, specs, c.opts.Dir, false)), 0o644); err != nil {
		return err
	}
	if c.pubsub, err = c.ps.Client(ctx, project); err != nil {
		return err
	}
	if c.fmt != nil {
		// The Avro topics (with their schema) exist before setup, which
		// makes their subscriptions; the .proto file before the config is
		// loaded.
		c.reprocessConfig = filepath.Join(c.opts.Dir, "config-reprocess.yaml")
		if err := os.WriteFile(c.reprocessConfig, []byte(configYAMLOf(c.replicas[0].addr, specs, c.opts.Dir, true)), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c.opts.Dir, protoFile), []byte(protoSchema), 0o644); err != nil {
			return err
		}
		if err := c.createAvroTopics(ctx); err != nil {
			return err
		}
	}
	if c.cfg, err = config.Load(c.config); err != nil {
		return fmt.Errorf("the campaign's own config.yaml: %w", err)
	}
	setup := exec.CommandContext(ctx, c.binary, "setup", "--config", c.config)
	setup.Env = append(append(os.Environ(), c.ps.Env()...), c.bt.Env()...)
	if out, err := setup.CombinedOutput(); err != nil {
		return fmt.Errorf("pubsink setup: %w\n%s", err, out)
	}
	var addrs []string
	for _, r := range c.replicas {
		addrs = append(addrs, r.addr)
	}
	c.logf("proxies: pubsub %s, bigtable %s; setup done; http %s", c.psProxy.Addr(), c.btProxy.Addr(), strings.Join(addrs, ", "))

	if c.bigtable, _, err = c.bt.Clients(ctx, project, instance); err != nil {
		return err
	}
	return nil
}

func (c *campaign) stopInfrastructure() {
	if c.pubsub != nil {
		c.pubsub.Close()
	}
	if c.bigtable != nil {
		c.bigtable.Close()
	}
	if c.schemas != nil {
		c.schemas.Close()
	}
	for _, p := range []*faultproxy.Proxy{c.psProxy, c.btProxy} {
		if p != nil {
			p.Close()
		}
	}
	if c.ps != nil {
		c.ps.Stop()
	}
	if c.bt != nil {
		c.bt.Stop()
	}
}

// build builds the pubsink binary of the module this command belongs to.
func build(ctx context.Context, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/pubsink/pubsink")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build pubsink: %w\n%s", err, b)
	}
	return nil
}

// freePorts returns n distinct free ports of the loopback interface. It
// holds each listener until it has all of them, so that none is handed out
// twice.
func freePorts(n int) ([]string, error) {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// makeReplicas gives each replica a port of its own. Every process reads
// the one config.yaml, whose http.addr is the first replica's:
// PUBSINK_HTTP_ADDR, which wins over the file and over a $PORT that this
// environment may have, gives each replica its address. pubsink talks to
// the emulators through the proxies; setup, the publisher and the checks go
// to them directly, out of the faults' way.
func (c *campaign) makeReplicas() error {
	n := max(c.opts.Replicas, 1)
	ports, err := freePorts(n)
	if err != nil {
		return err
	}
	for i, port := range ports {
		r := &replica{addr: "127.0.0.1:" + port}
		if n > 1 {
			r.n = i + 1
		}
		r.env = []string{"PUBSUB_EMULATOR_HOST=" + c.psProxy.Addr(), "BIGTABLE_EMULATOR_HOST=" + c.btProxy.Addr(), "PUBSINK_HTTP_ADDR=" + r.addr}
		if c.offsets != nil {
			r.offset = c.offsets[i]
			r.env = append(r.env, app.ClockOffsetEnv+"="+signed(r.offset))
		}
		c.replicas = append(c.replicas, r)
	}
	return nil
}

// startAll starts a process in every replica at once, then waits until
// each is ready.
func (c *campaign) startAll(ctx context.Context) error {
	c.life.Lock()
	defer c.life.Unlock()
	var g errgroup.Group
	for _, r := range c.replicas {
		ch, err := c.launch(ctx, r)
		if err != nil {
			return err // killAll stops those already started
		}
		g.Go(func() error { return c.awaitReady(ctx, r, ch) })
	}
	return g.Wait()
}

// startGen starts the next pubsink process in replica r and waits until it
// is ready. The caller holds c.life.
func (c *campaign) startGen(ctx context.Context, r *replica) error {
	ch, err := c.launch(ctx, r)
	if err != nil {
		return err
	}
	return c.awaitReady(ctx, r, ch)
}

// launch starts the next pubsink process in replica r and does not wait
// for it. The caller holds c.life, which is what keeps gen numbers unique.
func (c *campaign) launch(ctx context.Context, r *replica) (*child, error) {
	c.mu.Lock()
	gen := len(c.gens) + 1
	r.started++
	nth := r.started
	stored := make([]time.Time, len(c.pipes))
	for i, p := range c.pipes {
		stored[i] = p.stored.last
	}
	c.mu.Unlock()
	ch, err := startChild(c.binary, c.config, filepath.Join(c.opts.Dir, logName(r.n, nth, gen)), gen, r.n, r.env)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	r.cur = ch
	at := c.since()
	g := &genRecord{gen: gen, child: ch, offset: r.offset, storedAtStart: stored[0], startedAt: at}
	for i := 1; i < len(c.pipes); i++ {
		g.others = append(g.others, &genRecord{gen: gen, child: ch, offset: r.offset, storedAtStart: stored[i], startedAt: at})
	}
	c.gens = append(c.gens, g)
	c.mu.Unlock()
	go c.watch(ctx, r, ch)
	return ch, nil
}

// awaitReady waits until ch, just started in replica r, answers /readyz.
func (c *campaign) awaitReady(ctx context.Context, r *replica, ch *child) error {
	if err := ch.waitReady(ctx, r.addr, readyTimeout); err != nil {
		return err
	}
	c.logf("pubsink %s ready in %v", ch.name(), time.Since(ch.started).Round(time.Millisecond))
	return nil
}

// current is the process running in replica r now (nil before the first).
func (c *campaign) current(r *replica) *child {
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.cur
}

// watch restarts a replica whose process exits without being told to,
// which is a violation in itself.
func (c *campaign) watch(ctx context.Context, r *replica, ch *child) {
	<-ch.done
	if ch.signaled.Load() || c.stopping.Load() || ctx.Err() != nil {
		return
	}
	c.life.Lock()
	defer c.life.Unlock()
	c.mu.Lock()
	current := r.cur == ch
	msg := fmt.Sprintf("%s exited on its own at +%v (%s); log %s ends:\n%s", ch.name(), c.since().Round(time.Millisecond), ch.exitText(), ch.logPath, ch.logTail(10))
	c.unexpected = append(c.unexpected, msg)
	c.disrupted = append(c.disrupted, time.Now())
	c.kills = append(c.kills, time.Now())
	c.stops = append(c.stops, time.Now())
	c.gens[ch.gen-1].how = "exited on its own: " + ch.exitText()
	c.gens[ch.gen-1].stoppedAt = c.since()
	c.mu.Unlock()
	c.logf("VIOLATION: %s", msg)
	if !current || c.stopping.Load() {
		return
	}
	time.Sleep(time.Second)
	if err := c.startGen(ctx, r); err != nil {
		c.recordNotReady(err)
	}
}

func (c *campaign) recordNotReady(err error) {
	c.mu.Lock()
	c.notReady = append(c.notReady, err.Error())
	c.mu.Unlock()
	c.logf("VIOLATION: %v", err)
}

// stopReplica signals the process of replica r and waits for it to exit.
// With SIGTERM it expects exit 0 within shutdown_timeout and a margin,
// records the exit code, and kills the process if it does not exit. The
// caller holds c.life.
func (c *campaign) stopReplica(r *replica, sig syscall.Signal, how string) {
	ch := c.current(r)
	if ch == nil || !ch.running() {
		return
	}
	c.mu.Lock()
	g := c.gens[ch.gen-1]
	c.disrupted = append(c.disrupted, time.Now())
	if sig == syscall.SIGKILL {
		c.kills = append(c.kills, time.Now())
	}
	if !c.stopping.Load() {
		c.stops = append(c.stops, time.Now())
	}
	c.mu.Unlock()
	ch.signal(sig)
	timeout := 10 * time.Second
	if sig == syscall.SIGTERM {
		timeout = shutdownTimeout + 20*time.Second
	}
	code, err := ch.wait(timeout)
	if err != nil {
		c.logf("VIOLATION: %v; killing it", err)
		ch.signal(syscall.SIGKILL)
		ch.wait(10 * time.Second)
		code = -1
	}
	c.mu.Lock()
	g.how = how + ": " + ch.exitText()
	g.stoppedAt = c.since()
	if sig == syscall.SIGTERM {
		c.terms = append(c.terms, code)
		if code != 0 {
			c.logf("VIOLATION: %s exited %s after SIGTERM; log %s", ch.name(), ch.exitText(), ch.logPath)
		}
	}
	c.mu.Unlock()
}

// killAll kills the processes still running when the campaign ends early.
func (c *campaign) killAll() {
	c.stopping.Store(true)
	for _, r := range c.replicas {
		if ch := c.current(r); ch != nil && ch.running() {
			ch.signal(syscall.SIGKILL)
			ch.wait(10 * time.Second)
		}
	}
}

// target is the replica a kill or term hits (Fault.Replica; 0, with one
// process, is that process).
func (c *campaign) target(f Fault) *replica {
	return c.replicas[max(f.Replica, 1)-1]
}

// runFaults runs the schedule, one fault after another, each no earlier
// than its offset from t0.
func (c *campaign) runFaults(ctx context.Context, t0 time.Time) {
	for i, f := range c.sched {
		if !sleepUntil(ctx, t0.Add(f.At)) {
			return
		}
		e := faultEntry{n: i + 1, fault: f, start: c.since(), wall: time.Now()}
		c.logf("fault %d/%d: %s", i+1, len(c.sched), f)
		switch f.Kind {
		case FaultKill, FaultTerm:
			sig := map[FaultKind]syscall.Signal{FaultKill: syscall.SIGKILL, FaultTerm: syscall.SIGTERM}[f.Kind]
			if c.hitReprocess(sig) {
				e.note = "the reprocess too; "
			}
			r := c.target(f)
			c.life.Lock()
			c.stopReplica(r, sig, map[FaultKind]string{FaultKill: "SIGKILL", FaultTerm: "SIGTERM"}[f.Kind])
			stopped := c.since()
			sleep(ctx, f.Dur)
			err := c.startGen(ctx, r)
			c.life.Unlock()
			if err != nil {
				c.recordNotReady(err)
			}
			e.note += fmt.Sprintf("down %v", (c.since() - stopped).Round(time.Millisecond))
		case FaultBigtableStall:
			c.btProxy.Stall()
			sleep(ctx, f.Dur)
			c.btProxy.Resume()
		case FaultBigtableReset:
			c.btProxy.ResetAll()
		case FaultPubSubReset:
			c.mu.Lock()
			c.disrupted = append(c.disrupted, time.Now())
			c.resets = append(c.resets, time.Now())
			c.mu.Unlock()
			c.psProxy.ResetAll()
		case FaultLatency:
			p := map[string]*faultproxy.Proxy{"bigtable": c.btProxy, "pubsub": c.psProxy}[f.Target]
			p.SetLatency(f.Latency)
			sleep(ctx, f.Dur)
			p.SetLatency(0)
		case FaultPubSubStall:
			// Nothing is lost in a stall, but a stream the client gives up
			// on meanwhile takes the acks it held with it: a disruption,
			// like a reset, counted when the stall ends (copies made
			// during it are acked only after it).
			c.psProxy.Stall()
			sleep(ctx, f.Dur)
			c.psProxy.Resume()
			c.mu.Lock()
			c.disrupted = append(c.disrupted, time.Now())
			c.mu.Unlock()
		}
		e.end = c.since()
		c.mu.Lock()
		c.faultLog = append(c.faultLog, e)
		c.lastFault = time.Now()
		c.mu.Unlock()
		c.logf("fault %d/%d done after %v %s", i+1, len(c.sched), (e.end - e.start).Round(time.Millisecond), e.note)
	}
}

func sleep(ctx context.Context, d time.Duration) bool { return sleepUntil(ctx, time.Now().Add(d)) }

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// publish publishes the plan's steps: the ungated ones paced evenly over
// the duration, the gated ones as soon as their condition holds.
func (c *campaign) publish(ctx context.Context, t0 time.Time) error {
	pub := c.pubsub.Publisher(topicName)
	defer pub.Stop()

	type pending struct {
		i   int
		res *pubsub.PublishResult
	}
	results := make(chan pending, 4096)
	var collected sync.WaitGroup
	collected.Add(1)
	go func() {
		defer collected.Done()
		for p := range results {
			id, err := p.res.Get(context.WithoutCancel(ctx))
			c.mu.Lock()
			c.steps[p.i].id, c.steps[p.i].err = id, err
			c.mu.Unlock()
		}
	}()
	send := func(i int) {
		m := c.message(i)
		results <- pending{i, pub.Publish(ctx, m)}
	}

	var gated []int
	ungated := 0
	for _, s := range c.plan.Steps {
		if !s.Gated(c.plan) {
			ungated++
		}
	}
	interval := c.opts.Duration / time.Duration(max(ungated, 1))
	var gateMu sync.Mutex
	published := false // every ungated step is out
	gateDone := make(chan struct{})
	go func() {
		defer close(gateDone)
		var endAt time.Time
		for {
			gateMu.Lock()
			left := gated[:0]
			for _, i := range gated {
				switch c.gate(i) {
				case gateOpen:
					send(i)
				case gateOrphan:
					c.mu.Lock()
					c.orphaned = append(c.orphaned, i)
					c.mu.Unlock()
				default:
					left = append(left, i)
				}
			}
			gated = left
			done := published
			n := len(gated)
			gateMu.Unlock()
			if done && n == 0 {
				return
			}
			if done && endAt.IsZero() {
				endAt = time.Now().Add(c.opts.Settle / 2)
			}
			if (!endAt.IsZero() && time.Now().After(endAt)) || ctx.Err() != nil {
				c.mu.Lock()
				c.gatedLeft = append([]int(nil), gated...)
				c.mu.Unlock()
				c.logf("%d gated messages left unpublished", n)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	j := 0
	for i, s := range c.plan.Steps {
		if s.Gated(c.plan) {
			if s.Variant == VariantDup || s.Variant == VariantReplay {
				c.pendingCat.Add(1)
			}
			gateMu.Lock()
			gated = append(gated, i)
			gateMu.Unlock()
			continue
		}
		if !sleepUntil(ctx, t0.Add(time.Duration(j)*interval)) {
			break
		}
		j++
		send(i)
		if j%max(ungated/10, 1) == 0 {
			c.logf("published %d of %d paced messages", j, ungated)
		}
	}
	gateMu.Lock()
	published = true
	gateMu.Unlock()
	<-gateDone
	close(results)
	collected.Wait()
	c.logf("publishing done")
	return nil
}

// gateState is what becomes of a gated step.
type gateState int

const (
	gateWait   gateState = iota
	gateOpen             // publish it now
	gateOrphan           // never: its original was dead-lettered instead of committed
)

// gate says whether gated step i may be published now.
func (c *campaign) gate(i int) gateState {
	s := c.plan.Steps[i]
	rec := &c.plan.Records[s.Rec]
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s.Variant {
	case VariantDup, VariantReplay:
		switch {
		case c.committed[rec.ID]:
			c.pendingCat.Add(-1)
			return gateOpen
		case c.deadLettered[rec.CID]:
			c.pendingCat.Add(-1)
			return gateOrphan
		}
		return gateWait
	}
	for _, p := range c.pipes { // a late record: once every pipeline with a watermark stored one
		if p.spec.Tracking != "" && p.stored.samples == 0 {
			return gateWait
		}
	}
	return gateOpen
}

// message builds the message of step i and records what it fixed (the
// original's event time).
func (c *campaign) message(i int) *pubsub.Message {
	s := c.plan.Steps[i]
	rec := &c.plan.Records[s.Rec]
	now := time.Now()
	attrs := map[string]string{"cid": strconv.Itoa(rec.CID), "v": s.Variant.String()}
	data := rec.Payload
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steps[i].at = now
	rt := &c.recs[s.Rec]
	ts := rt.ts
	switch s.Variant {
	case VariantOriginal:
		switch rec.Kind {
		case KindPre1970:
			ts = pre1970TS
			rt.et = time.UnixMilli(-1000)
		case KindBadEventTime:
			ts = rec.BadTS
		default:
			ts, rt.et = FormatTS(now.Add(-rec.EventLag), rec.Format)
		}
		rt.ts = ts
	case VariantDup:
		ts, rt.dupET = FormatTS(now, rec.Format)
		data = rec.Second
	case VariantRace:
		data = rec.Second
	}
	if !rec.NoTS {
		attrs["ts"] = ts
	}
	switch {
	case !rec.NoID:
		attrs["id"] = rec.ID
	case rec.EmptyID:
		attrs["id"] = ""
	}
	return &pubsub.Message{Data: data, Attributes: attrs}
}

// sampleStored reads the stored watermark of every pipeline every 500 ms.
func (c *campaign) sampleStored(ctx context.Context) {
	tbl := c.bigtable.Open(stateTable)
	for sleep(ctx, 500*time.Millisecond) {
		for _, p := range c.pipes {
			if p.spec.Tracking == "" {
				continue // no watermark
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			row, err := tbl.ReadRow(rctx, state.WatermarkRow(p.spec.Name), bigtable.RowFilter(bigtable.LatestNFilter(1)))
			cancel()
			if err != nil {
				continue
			}
			for _, it := range row[state.FamilyMeta] {
				if it.Column == state.FamilyMeta+":"+state.WatermarkColumn {
					c.mu.Lock()
					p.stored.observe(string(it.Value), c.since())
					c.mu.Unlock()
				}
			}
		}
	}
}

// sampleStatus reads /status of every replica's process every 250 ms.
func (c *campaign) sampleStatus(ctx context.Context) {
	for sleep(ctx, 250*time.Millisecond) {
		for _, r := range c.replicas {
			c.sampleReplica(ctx, r)
		}
	}
}

// sampleReplica reads /status of replica r's process once.
func (c *campaign) sampleReplica(ctx context.Context, r *replica) {
	ch := c.current(r)
	if ch == nil || !ch.running() {
		return
	}
	sts, err := readStatus(ctx, r.addr)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A status read while the replica's process changed may be either's:
	// drop it.
	if r.cur != ch || !ch.running() {
		return
	}
	g := c.gens[ch.gen-1]
	for i, p := range c.pipes {
		st, ok := statusOf(sts, p.spec.Name)
		if !ok {
			continue
		}
		if i == 0 {
			g.observeStatus(st, c.since())
		} else {
			g.others[i-1].observeStatus(st, c.since())
		}
	}
}

// collectDeadLetters collects the copies of every pipeline's dead-letter
// output until ctx ends: it pulls a topic's replay subscription (acking
// what it got), and reads a table or a file whole again every second.
func (c *campaign) collectDeadLetters(ctx context.Context) {
	var g sync.WaitGroup
	for _, p := range c.pipes {
		g.Go(func() {
			for ctx.Err() == nil {
				if p.spec.Output != deadletter.KindTopic {
					c.readDeadLetters(ctx, p)
					sleep(ctx, time.Second)
					continue
				}
				if n, err := c.pullDeadLetters(ctx, p); err != nil || n == 0 {
					sleep(ctx, 200*time.Millisecond)
				}
			}
		})
	}
	g.Wait()
}

// noteCopies marks the records of copies as dead-lettered, when p is the
// pipeline whose catalog gates duplicates and replays. The caller holds
// c.mu.
func (c *campaign) noteCopies(p *pipeState, copies []dlCopy) {
	if p != c.pipes[0] {
		return
	}
	for _, cp := range copies {
		if cid, err := strconv.Atoi(cp.attrs["cid"]); err == nil {
			c.deadLettered[cid] = true
		}
	}
}

// pullDeadLetters pulls p's replay subscription once, keeps and acks what
// came.
func (c *campaign) pullDeadLetters(ctx context.Context, p *pipeState) (int, error) {
	msgs, ackIDs, err := c.pull(ctx, p.spec.DLSub, 1000)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	got := make([]dlCopy, 0, len(msgs))
	for _, m := range msgs {
		got = append(got, dlCopy{attrs: m.Attributes, data: m.Data})
	}
	c.mu.Lock()
	p.copies = append(p.copies, got...)
	c.noteCopies(p, got)
	c.mu.Unlock()
	err = c.pubsub.SubscriptionAdminClient.Acknowledge(context.WithoutCancel(ctx), &pubsubpb.AcknowledgeRequest{
		Subscription: "projects/" + project + "/subscriptions/" + p.spec.DLSub, AckIds: ackIDs})
	return len(msgs), err
}

// readDeadLetters reads the whole of p's table or file output, as `pubsink
// deadletter replay` would (deadletter.OpenReader), and makes what it
// found p's copies. A read that fails keeps the last one.
func (c *campaign) readDeadLetters(ctx context.Context, p *pipeState) error {
	i := slices.Index(c.pipes, p)
	r, err := deadletter.OpenReader(ctx, zap.NewNop(), c.cfg, c.cfg.Pipelines[i], deadletter.Clients{Bigtable: c.bigtable})
	if err != nil {
		if p.spec.Output == deadletter.KindFile && errors.Is(err, os.ErrNotExist) {
			return nil // no copy yet: the file comes with the first
		}
		return err
	}
	defer r.Close()
	var got []dlCopy
	malformed := 0
	for {
		es, err := r.Next(ctx, 1000)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if e.Copy == nil {
				malformed++ // a write a SIGKILL cut short; its message comes back
				continue
			}
			got = append(got, dlCopy{attrs: e.Copy.AllAttributes(), data: e.Copy.Data})
		}
	}
	c.mu.Lock()
	p.copies, p.malformed = got, malformed
	c.noteCopies(p, got)
	c.mu.Unlock()
	return nil
}

// pull is one synchronous Pull of sub, bounded to 3 s; an empty answer and
// a timeout are both nothing.
func (c *campaign) pull(ctx context.Context, sub string, n int32) ([]*pubsubpb.PubsubMessage, []string, error) {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := c.pubsub.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{
		Subscription: "projects/" + project + "/subscriptions/" + sub, MaxMessages: n})
	if status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var msgs []*pubsubpb.PubsubMessage
	var ids []string
	for _, rm := range resp.ReceivedMessages {
		msgs = append(msgs, rm.Message)
		ids = append(ids, rm.AckId)
	}
	return msgs, ids, nil
}

// catalogPrefix is the prefix of a pipeline's dedupe records in the state
// table (see package dedupe: dedupe#PIPELINE#HH#KEY).
func catalogPrefix(pipeline string) string { return "dedupe#" + pipeline + "#" }

// watchCatalog marks the ids that have a dedupe claim or record, so that
// a duplicate is published only after its original's key is decided. It
// scans only while some duplicate waits, every catalog row stamped since
// the campaign began (a timestamp filter): a claim is stamped when it is
// made, before the row, and may be minutes older than the moment its
// duplicate waits (a stall, a kill and the redelivery that resumes it);
// the scans of an earlier version, from the last scan on, missed such keys
// and left their duplicates unpublished (seed 20261202 -mix -replicas 3).
// About a tenth of a second per scan at 20,000 keys on the emulator.
func (c *campaign) watchCatalog(ctx context.Context) {
	tbl := c.bigtable.Open(stateTable)
	since := c.begin.Add(-10*time.Second - c.opts.Skew) // a skewed process's clock may be behind
	prefix := catalogPrefix(c.pipes[0].spec.Name)
	for sleep(ctx, 500*time.Millisecond) {
		if c.pendingCat.Load() <= 0 {
			continue
		}
		var ids []string
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := tbl.ReadRows(rctx, bigtable.PrefixRange(prefix), func(r bigtable.Row) bool {
			rest := strings.TrimPrefix(r.Key(), prefix)
			if len(rest) > 3 && rest[2] == '#' && rest[0] != '~' { // not the journal (dedupe#PIPELINE#~...)
				ids = append(ids, rest[3:])
			}
			return true
		}, bigtable.RowFilter(bigtable.TimestampRangeFilterMicros(bigtable.Time(since).TruncateToMilliseconds(), 0)))
		cancel()
		if err != nil {
			continue
		}
		c.mu.Lock()
		for _, id := range ids {
			c.committed[id] = true
		}
		c.mu.Unlock()
	}
}

// settle waits, after the workload and the faults, until the live
// processes (one per replica) have finished everything: at least a lease
// after the last fault, every record's outcome visible, no tracker holding
// its frontier after a stream break (two seconds past the hold, so that
// the watermark could move and be stored), and, for five
// seconds, no process replaced, none receiving anything new and nothing in
// flight in any. It returns /metrics of each, read then.
func (c *campaign) settle(ctx context.Context) ([][]procCounters, bool) {
	c.logf("settling: waiting for every outcome (at most %v)", c.opts.Settle)
	deadline := time.Now().Add(c.opts.Settle)
	var still stillness
	var lastScan, lastHeld time.Time
	complete := false
	for sleep(ctx, time.Second) {
		c.mu.Lock()
		quietFor := time.Since(c.lastFault)
		c.mu.Unlock()
		if time.Since(lastScan) > 3*time.Second && !complete {
			lastScan = time.Now()
			missing, err := c.missingOutcomes(ctx)
			complete = err == nil && missing == 0
			if err == nil && missing > 0 {
				c.logf("settling: %d outcomes not visible yet", missing)
			}
		}
		if snap, heldUntil, ok := c.liveStatus(ctx); ok {
			still.observe(time.Now(), snap)
			// A tracker that holds its frontier after a stream break
			// (watermark.Stats.HeldUntil, the message lease after the
			// break, longer than lease) has not moved its watermark since;
			// the run is not over before it could, and stored it. A hold
			// that ended reads as zero: the latest end seen is kept.
			lastHeld = latestTime(lastHeld, heldUntil)
			unheld := time.Now().After(lastHeld.Add(2 * time.Second))
			if complete && quietFor >= lease && unheld && c.storedAdvanced() && still.stillFor(time.Now()) >= 5*time.Second {
				if final, ok := c.readFinal(ctx); ok {
					for i, fs := range final {
						for _, f := range fs {
							c.logf("settled: %s, %s: received %v, committed %v, duplicate %v, dead-lettered %v, dropped %v, retried %v",
								f.proc, c.pipes[i].spec.Name, f.Received, f.Committed, f.Duplicate, f.DeadLetteredTotal(), f.Dropped, f.Retried)
						}
					}
					return final, true
				}
			}
		}
		if time.Now().After(deadline) {
			c.logf("settling timed out after %v (outcomes complete: %v)", c.opts.Settle, complete)
			return c.readFinal(ctx)
		}
	}
	return make([][]procCounters, len(c.pipes)), false
}

// latestTime is the later of a and b.
func latestTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// procStatus is what settle reads of one live process: its counts summed
// over its pipelines.
type procStatus struct {
	gen                int
	received, inFlight int64
}

// stillness tracks since when the live processes have been still: the
// same processes as at the last reading, none with a new message received,
// none with anything in flight.
type stillness struct {
	last  []procStatus
	since time.Time
}

func (s *stillness) observe(now time.Time, snap []procStatus) {
	busy := slices.ContainsFunc(snap, func(p procStatus) bool { return p.inFlight != 0 })
	if busy || s.since.IsZero() || !slices.Equal(snap, s.last) {
		s.last, s.since = snap, now
	}
}

func (s *stillness) stillFor(now time.Time) time.Duration { return now.Sub(s.since) }

// storedAdvanced reports whether every pipeline's stored watermark has
// moved since it was first sampled. A run whose faults kept each new
// leader's startup guard on, and then the messages a dead leader had
// finished pending until they are forgotten (two leases after the guard,
// package watermark, "Restart"), has not shown that the watermark moves
// when its workload ends; settling waits for it (within -settle), so that
// the invariant "stored watermark advanced" judges liveness, not the
// moment the run happened to stop.
func (c *campaign) storedAdvanced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pipes {
		if p.spec.Tracking == "" {
			continue // no watermark
		}
		if p.stored.samples == 0 || !p.stored.last.After(p.stored.first) {
			return false
		}
	}
	return true
}

// liveStatus reads /status of every replica's process, and the latest end
// of a hold of any of their trackers' frontiers (zero if none holds; a
// leader's startup guard that is on counts as a hold ending a second from
// now); ok is false when a replica has none running or it does not answer.
func (c *campaign) liveStatus(ctx context.Context) ([]procStatus, time.Time, bool) {
	var out []procStatus
	var heldUntil time.Time
	for _, r := range c.replicas {
		ch := c.current(r)
		if ch == nil || !ch.running() {
			return nil, time.Time{}, false
		}
		sts, err := readStatus(ctx, r.addr)
		if err != nil {
			return nil, time.Time{}, false
		}
		ps := procStatus{gen: ch.gen}
		for _, st := range sts {
			ps.received += st.Received
			ps.inFlight += st.InFlight
			if st.Tracker != nil && st.Tracker.HeldUntil.After(heldUntil) {
				heldUntil = st.Tracker.HeldUntil
			}
			if st.Tracker != nil && st.Tracker.Leading && st.Tracker.StartupGuard {
				// The leader's startup guard holds the watermark as a
				// hold does, until it drops (a lease after the last
				// restart or main-stream break, and more while old
				// messages come): a run that ended before it could
				// find the watermark never moved.
				heldUntil = latestTime(heldUntil, time.Now().Add(time.Second))
			}
		}
		out = append(out, ps)
	}
	return out, heldUntil, true
}

// readFinal reads /metrics of every replica's process, for each pipeline
// (out[i] is pipeline i's counters of every process); ok is false unless
// each was read.
func (c *campaign) readFinal(ctx context.Context) ([][]procCounters, bool) {
	out := make([][]procCounters, len(c.pipes))
	for _, r := range c.replicas {
		ch := c.current(r)
		if ch == nil || !ch.running() {
			return out, false
		}
		for i, p := range c.pipes {
			cs, err := readCounters(ctx, r.addr, p.spec.Name)
			if err != nil {
				return out, false
			}
			out[i] = append(out[i], procCounters{proc: ch.name(), Counters: cs})
		}
	}
	return out, true
}

// missingOutcomes counts the outcomes not visible yet, over every
// pipeline: a valid record without a row (at_least_once: without the
// version of its duplicate, if one was published), a poison message
// without a copy, a late message without a copy (late_data: dead_letter)
// or a row (accept). A late record may have a row instead of a copy, and
// has neither under late_data: drop.
func (c *campaign) missingOutcomes(ctx context.Context) (int, error) {
	missing := 0
	for _, p := range c.pipes {
		n, err := c.missingOf(ctx, p)
		if err != nil {
			return 0, err
		}
		missing += n
	}
	return missing, nil
}

func (c *campaign) missingOf(ctx context.Context, p *pipeState) (int, error) {
	if p.spec.Changes {
		return c.missingChanges(ctx, p)
	}
	if p.spec.Format != "" {
		return c.missingFormats(ctx, p)
	}
	versions := map[string]int{} // row key → versions of data
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := c.bigtable.Open(p.spec.Table).ReadRows(rctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		n := 0
		for _, items := range r {
			for _, it := range items {
				if strings.HasSuffix(it.Column, ":data") {
					n++
				}
			}
		}
		versions[r.Key()] = max(n, 1)
		return true
	}, bigtable.RowFilter(bigtable.StripValueFilter()))
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	copied := map[string]bool{}
	for _, cp := range p.copies {
		copied[cp.attrs["pubsink_message_id"]] = true
	}
	missing := 0
	for i, s := range c.plan.Steps {
		rec := &c.plan.Records[s.Rec]
		id := c.steps[i].id
		if id == "" {
			continue
		}
		switch {
		case rec.Kind.Valid():
			// A valid record dead-lettered is an outcome too (a wrong one,
			// which Check reports).
			want := 1
			if s.Variant == VariantDup && !p.spec.ExactlyOnce() {
				want = 2
			}
			if versions[rec.ID] < want && !copied[id] {
				missing++
			}
		case rec.Kind == KindLate:
			if p.spec.Late != lateDrop && versions[rec.ID] == 0 && !copied[id] {
				missing++
			}
		default:
			if !copied[id] {
				missing++
			}
		}
	}
	return missing, nil
}

// finalStop stops every replica's process with SIGTERM, all at once, and
// expects exit 0 from each.
func (c *campaign) finalStop() {
	c.stopping.Store(true)
	c.life.Lock()
	defer c.life.Unlock()
	c.logf("final stop: SIGTERM")
	var wg sync.WaitGroup
	for _, r := range c.replicas {
		wg.Go(func() { c.stopReplica(r, syscall.SIGTERM, "final SIGTERM") })
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.replicas {
		if r.cur != nil {
			c.logf("final %s: %s", r.cur.name(), c.gens[r.cur.gen-1].how)
		}
	}
}

// leftovers waits out the lease of the last processes, then pulls the main
// and the tracking subscription of every pipeline: all must be empty. What
// it finds is not acked. out[i] is pipeline i's main and tracking count.
func (c *campaign) leftovers(ctx context.Context) [][2]int {
	c.logf("waiting %v for leases to expire, then pulling both subscriptions", lease)
	sleep(ctx, lease)
	count := func(sub string) int {
		if sub == "" {
			return 0 // no tracking subscription
		}
		seen := map[string]bool{}
		for range 2 {
			msgs, _, err := c.pull(ctx, sub, 1000)
			if err != nil {
				c.logf("pull %s: %v", sub, err)
			}
			for _, m := range msgs {
				if !seen[m.MessageId] && len(seen) < 5 {
					c.logf("left on %s: message %s attributes cid=%s v=%s", sub, m.MessageId, m.Attributes["cid"], m.Attributes["v"])
				}
				seen[m.MessageId] = true
			}
		}
		return len(seen)
	}
	out := make([][2]int, len(c.pipes))
	for i, p := range c.pipes {
		out[i] = [2]int{count(p.spec.Sub), count(p.spec.Tracking)}
	}
	return out
}

// drainDeadLetters pulls every replay subscription until two pulls in a
// row come back empty, and reads every table and file output once more.
func (c *campaign) drainDeadLetters(ctx context.Context) {
	for _, p := range c.pipes {
		if p.spec.Output != deadletter.KindTopic {
			if err := c.readDeadLetters(ctx, p); err != nil {
				c.logf("reading the dead letters of %s: %v", p.spec.Name, err)
			}
			continue
		}
		for empty := 0; empty < 2 && ctx.Err() == nil; {
			n, err := c.pullDeadLetters(ctx, p)
			if err != nil || n == 0 {
				empty++
			} else {
				empty = 0
			}
		}
	}
}

// readRows reads the whole of a sink table: row key → column → versions.
func (c *campaign) readRows(ctx context.Context, table string) (map[string]map[string][]cell, error) {
	out := map[string]map[string][]cell{}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := c.bigtable.Open(table).ReadRows(rctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		cols := map[string][]cell{}
		for _, items := range r {
			for _, it := range items {
				col := it.Column[strings.IndexByte(it.Column, ':')+1:]
				cols[col] = append(cols[col], cell{value: it.Value, ts: it.Timestamp})
			}
		}
		out[r.Key()] = cols
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return out, nil
}
