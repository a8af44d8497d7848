package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/audit"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/inspect"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/spill"
	"github.com/pubsink/pubsink/reprocess"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/source"
)

// AuditRequest is what `pubsink audit` was asked to do.
type AuditRequest struct {
	Pipeline string // required
	// From, Snapshot and Until are the range, as for reprocess.
	From, Snapshot, Until string
	// Report is the file the findings go to, one JSON line each: "" none,
	// "-" stdout (the summary then goes to the progress writer).
	Report string
	// Rate caps the messages read per second, and the rows read per
	// second after; 0: no cap.
	Rate float64
	// Idle ends the read once no message of the range arrived for it.
	Idle     time.Duration
	HTTPAddr string
}

// DefaultAuditIdle is --idle's default, as reprocess's.
const DefaultAuditIdle = DefaultReprocessIdle

// auditSpillMemory is how many bytes of entries the read pass holds before
// it spills a sorted run to disk.
const auditSpillMemory = 64 << 20

// auditSpillMemoryEnv overrides auditSpillMemory, in bytes. It is a knob
// to bound a small job's memory, and for measurements (e2e's
// TestMeasureAudit lowers it to show that memory stays bounded once the
// entries spill); docs/reference.md, "Environment".
const auditSpillMemoryEnv = "PUBSINK_AUDIT_SPILL_MEMORY"

// spillMemory is auditSpillMemory, or the positive byte count in
// auditSpillMemoryEnv.
func spillMemory() (int, error) {
	v := os.Getenv(auditSpillMemoryEnv)
	if v == "" {
		return auditSpillMemory, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, &ConfigError{fmt.Errorf("audit: %s=%q: want a positive number of bytes", auditSpillMemoryEnv, v)}
	}
	return n, nil
}

// ErrAuditStopped is an audit stopped (SIGTERM, SIGINT) before it was done:
// the CLI exits 3. It keeps no record: run again, it reads its range again
// from its start.
var ErrAuditStopped = errors.New("audit stopped before it was done; run the same command again to audit the range (it reads it again from its start)")

// ErrAuditFindings is an audit that found something missing or doubled:
// the CLI exits 4.
var ErrAuditFindings = errors.New("audit: something is missing or doubled")

// auditRun is an audit in /status and on the status page, from its start.
type auditRun struct {
	pipeline string // set before the HTTP server serves
	gate     *reprocess.Gate

	mu                 sync.Mutex
	name, subscription string // renamed when the name existed
	phase              string
	auditor            *audit.Auditor // nil while starting
}

// rename gives the run a new name and subscription: the ones it had
// existed already.
func (r *auditRun) rename(name, subscription string) {
	r.mu.Lock()
	r.name, r.subscription = name, subscription
	r.mu.Unlock()
}

// auditStatus is the audit in /status.
type auditStatus struct {
	Name         string             `json:"name"`
	Pipeline     string             `json:"pipeline"`
	Subscription string             `json:"subscription"`
	Phase        string             `json:"phase"`
	Progress     reprocess.Progress `json:"progress"`
	Summary      audit.Summary      `json:"summary"`
}

func (r *auditRun) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

// started sets the auditor, whose counts /status shows from then on.
func (r *auditRun) started(a *audit.Auditor) {
	r.mu.Lock()
	r.auditor = a
	r.mu.Unlock()
}

func (r *auditRun) status() *auditStatus {
	r.mu.Lock()
	name, sub, phase, a := r.name, r.subscription, r.phase, r.auditor
	r.mu.Unlock()
	st := &auditStatus{Name: name, Pipeline: r.pipeline, Subscription: sub, Phase: phase, Progress: r.gate.Progress()}
	if a != nil {
		st.Summary = a.Summary()
	}
	return st
}

// AuditFile audits the file at path (see the command's help and
// docs/reference.md, "Audit"): the plan and the summary go to out, logs and
// the progress to logs.
func AuditFile(ctx context.Context, path string, req AuditRequest, out, logs io.Writer) error {
	cfg, log, opts, err := loadJob(path, req.HTTPAddr, logs)
	if err != nil {
		return err
	}
	defer log.Sync()
	return Audit(ctx, log, cfg, req, opts, out, logs)
}

// Audit runs req against cfg, read-only:
//
//  1. The range: --from (or a snapshot) until --until or now.
//  2. The pipeline's dead-letter copies, read and left in place.
//  3. A subscription of its own on the live topic, seeked to the range's
//     start, with a one-day expiration policy (a killed audit's goes by
//     itself).
//  4. The read pass (audit.Auditor.Message) behind the reprocess gate,
//     until no message of the range arrived for --idle.
//  5. The compare pass (audit.Auditor.Compare), the subscription deleted,
//     the summary.
//
// Stopped (ctx) at any step, it says so and returns ErrAuditStopped.
func Audit(ctx context.Context, log *zap.Logger, cfg *config.Config, req AuditRequest, opts Options, out, progress io.Writer) error {
	err := runAudit(ctx, log, cfg, req, opts, out, progress)
	var ce *ConfigError
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrAuditStopped) || errors.Is(err, ErrAuditFindings) || errors.As(err, &ce) {
		return err
	}
	// Stopped during a step that returned ctx's error (the start-up
	// checks, the dead-letter output, the subscription).
	fmt.Fprintf(out, "audit of %s: stopped before its read; run the same command again to audit the range\n", req.Pipeline)
	return ErrAuditStopped
}

func runAudit(ctx context.Context, log *zap.Logger, cfg *config.Config, req AuditRequest, opts Options, out, progress io.Writer) error {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	pc := pipelineNamed(cfg, req.Pipeline)
	if pc == nil {
		return &ConfigError{fmt.Errorf("audit: the configuration has no pipeline %q", req.Pipeline)}
	}
	if pc.Sink.Type == config.SinkStdout {
		return &ConfigError{fmt.Errorf("audit: pipeline %q writes to stdout: there is no table to audit", req.Pipeline)}
	}
	start := now()
	rf, err := parseRange("audit", cfg, req.From, req.Until, req.Snapshot, start)
	if err != nil {
		return err
	}
	until := rf.until
	if until.IsZero() {
		until = start.Truncate(time.Millisecond)
	}
	// Named as a reprocess run is, with "a" for "r":
	// orders~a20261204t091500z-k3xq7a.
	stamp := reprocess.Stamp(start)
	name := pc.Name + "~a" + stamp
	report, closeReport, err := openReport(req.Report)
	if err != nil {
		return err
	}
	defer closeReport()
	summaryOut := out
	if req.Report == "-" {
		summaryOut = progress
	}

	// The App serves /status, /metrics and the page, and holds the
	// clients; it runs no pipeline.
	acfg := *cfg
	acfg.Pipelines = nil
	live := cfg.SubscriptionName(pc.Source.Subscription)
	run := &auditRun{name: name, pipeline: pc.Name, subscription: live + "-audit-" + stamp, phase: "starting", gate: reprocess.NewGate(rf.from, until, now)}
	opts.audit = run
	a, err := Open(ctx, log, &acfg, opts)
	if err != nil {
		return err
	}
	defer func() {
		a.stopServer()
		a.closeClients()
	}()
	ps := a.pubsub
	liveSub, err := ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: live})
	if err != nil {
		return fmt.Errorf("audit: the live subscription %s: %w", live, err)
	}
	if err := checkHistory(ctx, "audit", ps, liveSub, rf.from, rf.snapshot, start); err != nil {
		return err
	}
	stateClient, err := a.stateBigtable(ctx)
	if err != nil {
		return err
	}
	deadLetters := map[string]deadletter.Reason{}
	if deadletter.Kind(pc.DeadLetter) != "" {
		err := inspect.Each(ctx, log, cfg, *pc, deadletter.Clients{PubSub: ps, Bigtable: stateClient}, func(c *deadletter.Copy) {
			deadLetters[c.MessageID] = c.Reason
		})
		if err != nil {
			return fmt.Errorf("audit: read the dead-letter output: %w", err)
		}
	}
	maxBytes := int64(pc.Source.MaxOutstandingBytes)
	if maxBytes == 0 {
		maxBytes = source.DefaultMaxOutstandingBytes(memoryLimit(), 1)
	}
	mp, err := a.mapper(ctx, *pc, btsink.Limits, maxBytes)
	if err != nil {
		return err
	}
	acf := audit.Config{Pipeline: *pc, Mapper: mp, DeadLetters: deadLetters, Report: audit.NewReport(report),
		ClaimsSince: start.Add(-pc.Dedupe.Window - time.Hour)}
	if pc.ExactlyOnce() && !pc.KeyIsMessageID() {
		lc := dedupe.NewLiveCatalog(stateClient, cfg.State.Table, pc.Name)
		defer lc.Close(context.WithoutCancel(ctx))
		acf.Catalog = lc
	}
	memory, err := spillMemory()
	if err != nil {
		return err
	}
	sorter := spill.New("", memory)
	defer sorter.Close()
	acf.Spill = sorter
	auditor := audit.New(acf)
	run.started(auditor)

	// A subscription of that name exists (another audit's): never joined,
	// the audit takes a new stamp.
	own := ownSubscription{command: "audit", live: liveSub}
	sub, err := own.create(ctx, ps, rf, stamp, start, func(stamp string) {
		name = pc.Name + "~a" + stamp
		run.rename(name, own.name(stamp))
	})
	if err != nil {
		return err
	}
	defer own.delete(ctx, log, ps, sub)
	fmt.Fprintf(out, "audit %s: reading %s of pipeline %s on %s\n", name, describeAuditRange(rf, until), pc.Name, sub)

	// The read pass.
	limit := reprocess.RateCap(req.Rate)
	run.gate.Limit(limit)
	src := pc.Source
	src.Subscription, src.Ordering = sub, false
	gated := run.gate.Wrap(source.New(ps, log, sub, src, maxBytes))
	run.setPhase("reading")
	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	reporter := reprocess.NewReporter(progress, log, "audit")
	read := false
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if read = reprocess.Watch(readCtx, run.gate, reporter, req.Idle); read {
			stopRead()
		}
	}()
	readErr := gated.Run(readCtx, ctx, func(hctx context.Context, msg *source.Message) bool {
		if err := auditor.Message(hctx, msg); err != nil {
			log.Warn("audit: a message could not be read; it comes again", zap.String("message_id", msg.ID), zap.Error(err))
			return false
		}
		return true
	})
	stopRead()
	<-watched
	reporter.Close()
	switch {
	case readErr != nil && ctx.Err() == nil:
		return fmt.Errorf("audit: read the range: %w", readErr)
	case !read:
		fmt.Fprintf(out, "audit %s: stopped after %d messages; run the same command again to audit the range (it reads it again from its start)\n", name, run.gate.Progress().Done)
		return ErrAuditStopped
	}

	// The compare pass.
	run.setPhase("comparing")
	sinkClient, err := a.bigtableClient(ctx, sinkInstance(cfg, pc), pc.Sink.AppProfile)
	if err != nil {
		return err
	}
	pace := func(ctx context.Context, n int) error {
		if limit == nil {
			return nil
		}
		for n > 0 {
			k := min(n, limit.Burst())
			if err := limit.WaitN(ctx, k); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
	sum, err := auditor.Compare(ctx, audit.Tables{Client: sinkClient}, pc.Sink.TombstoneFamily, pace)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(out, "audit %s: stopped while comparing; run the same command again to audit the range (it reads it again from its start)\n", name)
			return ErrAuditStopped
		}
		return err
	}
	run.setPhase("done")
	if err := acf.Report.Finish(sum); err != nil {
		return fmt.Errorf("audit: write the report: %w", err)
	}
	printAuditSummary(summaryOut, name, describeAuditRange(rf, until), sum, now().Sub(start))
	if !sum.Clean() {
		return ErrAuditFindings
	}
	if sum.Messages == 0 {
		// Nothing was compared: the range was quiet, or the topic no longer
		// gives it (as a reprocess's empty range).
		r := emptyRead{command: "audit", name: name, rangeText: describeAuditRange(rf, until), live: pc.Name, topic: liveSub.GetTopic(),
			from: rf.from, until: until, snapshot: rf.snapshot, started: start,
			what: "audit only a range published after retention was enabled"}
		return r.check(context.WithoutCancel(ctx), ps, stateClient.Open(cfg.State.Table), summaryOut)
	}
	return nil
}

// pipelineNamed returns the pipeline of cfg named name, or nil.
func pipelineNamed(cfg *config.Config, name string) *config.Pipeline {
	for i := range cfg.Pipelines {
		if cfg.Pipelines[i].Name == name {
			return &cfg.Pipelines[i]
		}
	}
	return nil
}

// sinkInstance is the instance of the pipeline's sink tables.
func sinkInstance(cfg *config.Config, pc *config.Pipeline) string {
	if pc.Sink.Instance != "" {
		return pc.Sink.Instance
	}
	return cfg.State.Instance
}

// openReport opens --report: nil for none, stdout for "-", else the file,
// created or truncated (a restarted audit reports its range again whole).
func openReport(path string) (io.Writer, func(), error) {
	switch path {
	case "":
		return nil, func() {}, nil
	case "-":
		return os.Stdout, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, &ConfigError{fmt.Errorf("audit: --report: %w", err)}
	}
	return f, func() { f.Close() }, nil
}

// describeAuditRange is the range in the audit's lines.
func describeAuditRange(rf rangeFlags, until time.Time) string {
	if rf.snapshot != "" {
		return fmt.Sprintf("snapshot %s until %s", rf.snapshot, until.UTC().Format(rangeLayout(until)))
	}
	return fmt.Sprintf("from %s until %s", rf.from.UTC().Format(rangeLayout(rf.from, until)), until.UTC().Format(rangeLayout(rf.from, until)))
}

// printAuditSummary prints the audit's summary table.
func printAuditSummary(w io.Writer, name, rng string, s audit.Summary, took time.Duration) {
	verdict := "clean: nothing missing or doubled"
	switch {
	case !s.Clean():
		verdict = "FINDINGS: something is missing or doubled (exit 4)"
	case s.Messages == 0:
		verdict = "nothing compared: no message of the range arrived"
	}
	fmt.Fprintf(w, "audit %s: done in %s, %s\n", name, took.Round(time.Second), verdict)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  range\t%s\n", rng)
	fmt.Fprintf(tw, "  messages\t%d\t(winners %d, duplicates %d, filtered %d, dead-lettered %d)\n", s.Messages, s.Winners, s.Rivals, s.Filtered, s.DeadLettered)
	fmt.Fprintf(tw, "  rows read\t%d\t(cells as the mapping gives them %d, superseded by newer changes %d, late-dropped %d)\n", s.Rows, s.Checked, s.Superseded, s.LateDropped)
	fmt.Fprintf(tw, "  missing\t%d\t(cells and copies, of %d messages)\n", s.Missing, s.MissingMessages)
	fmt.Fprintf(tw, "  doubled\t%d\n", s.Doubled)
	fmt.Fprintf(tw, "  different\t%d\t(a cell whose bytes differ from the current mapping's: after a mapping change, `pubsink reprocess` rewrites them)\n", s.Different)
	tw.Flush()
}
