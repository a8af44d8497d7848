package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/reprocess"
)

// ReprocessRequest is what `pubsink reprocess` was asked to do.
type ReprocessRequest struct {
	Pipeline string // required
	// From or Snapshot (one of them): an RFC 3339 time or a duration
	// before now; a snapshot's name (short or full).
	From, Snapshot string
	// Until ends the range ("": the first start), as From.
	Until          string
	NoRestorePoint bool
	// NoWait starts the run at once, without waiting for the live
	// pipeline to finish the range.
	NoWait bool
	DryRun bool
	// Idle is how long no message of the range must arrive, none in
	// flight, for the range to be done.
	Idle time.Duration
	// Rate caps the messages of the range processed per second (0: no
	// cap), to spare the tables the live pipeline writes.
	Rate float64
	// HTTPAddr overrides http.addr ("" keeps it; "-" serves no HTTP).
	HTTPAddr string
}

// ErrReprocessStopped is a reprocess stopped (SIGTERM, SIGINT) before its
// range was done: the CLI exits 3, so that a Kubernetes Job or Cloud Run
// job runs it again (it resumes), where exit 0 would mark it complete.
var ErrReprocessStopped = errors.New("reprocess stopped before its range was done; run the same command again to resume")

// DefaultReprocessIdle is --idle's default. It is longer than a message can
// stay out of sight: one sent on a stream that broke comes back when its
// lease runs out (source.LeaseExtension, 15 s) and the subscription's
// redelivery backoff allows (5 s with setup's); a run that ended before
// would delete its subscription with that message in it.
const DefaultReprocessIdle = 30 * time.Second

// reprocessRun is what the App of a reprocess wires differently from run:
// the gate in front of the source, and the dead-letter copies in the live
// pipeline's name, marked with the run's.
type reprocessRun struct {
	live   string // the live pipeline's name
	record *reprocess.Record
	gate   *reprocess.Gate
}

// reprocessStatus is the run in /status: its record and progress.
type reprocessStatus struct {
	Name         string             `json:"name"`
	Pipeline     string             `json:"pipeline"`
	Subscription string             `json:"subscription"`
	RestorePoint string             `json:"restore_point,omitempty"`
	Progress     reprocess.Progress `json:"progress"`
}

func (r *reprocessRun) status() *reprocessStatus {
	return &reprocessStatus{Name: r.record.Name, Pipeline: r.live, Subscription: r.record.Subscription,
		RestorePoint: r.record.RestorePoint, Progress: r.gate.Progress()}
}

// ReprocessFile runs a reprocess of the file at path (see the command's
// help and docs/reference.md, "Reprocess"). It prints the plan, the restore
// point and the summary to out; logs, and the progress (a bar on a
// terminal), go to logs. A request that does not fit the file is a
// *ConfigError.
func ReprocessFile(ctx context.Context, path string, req ReprocessRequest, out, logs io.Writer) error {
	cfg, log, opts, err := loadJob(path, req.HTTPAddr, logs)
	if err != nil {
		return err
	}
	defer log.Sync()
	return Reprocess(ctx, log, cfg, req, opts, out, logs)
}

// loadJob loads the file at path for a command that ends by itself
// (reprocess, audit): its configuration, its logger (to logs) and the
// App's options (the clock of $PUBSINK_CLOCK_OFFSET, --http-addr).
func loadJob(path, httpAddr string, logs io.Writer) (*config.Config, *zap.Logger, Options, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, nil, Options{}, err
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, logs)
	if err != nil {
		return nil, nil, Options{}, err
	}
	_, now, err := clockFromEnv()
	if err != nil {
		return nil, nil, Options{}, err
	}
	if now == nil {
		now = time.Now
	}
	return cfg, log, Options{Now: now, HTTPAddr: httpAddr}, nil
}

// Reprocess runs req against cfg: opts as for Open (the App of the run is
// opened with them). The steps, each found done on a restart:
//
//  1. The lock of the pipeline's reprocess row (refused while another run
//     renews it).
//  2. The run's record: found again, or made, with the restore point (a
//     snapshot of the live subscription) taken first.
//  3. The run's subscription, created on the live topic and seeked to
//     --from or the snapshot, once.
//  4. Unless --no-wait, the wait for a running live pipeline to finish the
//     range (waitForLive), so that it writes nothing of it after the run.
//  5. The pipeline of the current configuration, named after the run (its
//     dedupe scope and metrics), on that subscription, without a watermark,
//     behind the gate; run until the gate says the range is done.
//  6. The subscription deleted, the record and lock too, the summary.
//
// Stopped (ctx) or failed before step 6, it releases the lock and leaves
// the rest for a restart. Stopped at any moment, it is ErrReprocessStopped
// (exit 3), never a failure: an error once ctx ended is a stop (a
// *ConfigError stays one).
func Reprocess(ctx context.Context, log *zap.Logger, cfg *config.Config, req ReprocessRequest, opts Options, out, progress io.Writer) error {
	err := reprocessSteps(ctx, log, cfg, req, opts, out, progress)
	var ce *ConfigError
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrReprocessStopped) || errors.As(err, &ce) {
		return err
	}
	// Stopped during a step that returned ctx's error (as Audit).
	fmt.Fprintf(out, "reprocess of %q: stopped during start-up; run the same command again to resume\n", req.Pipeline)
	return ErrReprocessStopped
}

func reprocessSteps(ctx context.Context, log *zap.Logger, cfg *config.Config, req ReprocessRequest, opts Options, out, progress io.Writer) error {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	pc := pipelineNamed(cfg, req.Pipeline)
	if pc == nil {
		return &ConfigError{fmt.Errorf("reprocess: the configuration has no pipeline %q", req.Pipeline)}
	}
	if pc.Sink.Type == config.SinkStdout {
		return &ConfigError{fmt.Errorf("reprocess: pipeline %q writes to stdout: there is nothing to rewrite", req.Pipeline)}
	}
	start := now()
	rf, err := parseRange("reprocess", cfg, req.From, req.Until, req.Snapshot, start)
	if err != nil {
		return err
	}
	from, fromRel, until, untilRel, snapshot := rf.from, rf.fromRelative, rf.until, rf.untilRelative, rf.snapshot

	ps := opts.PubSub
	if ps == nil {
		if ps, err = openPubSub(ctx, cfg.Project, opts.PubSubOptions...); err != nil {
			return err
		}
		defer ps.Close()
	}
	open := opts.Bigtable
	if open == nil {
		open = func(ctx context.Context, instance string) (*bigtable.Client, error) {
			return openBigtable(ctx, cfg.Project, instance, cfg.State.AppProfile, nil)
		}
	}
	bt, err := open(ctx, cfg.State.Instance)
	if err != nil {
		return err
	}
	defer bt.Close()
	stateTable := bt.Open(cfg.State.Table)
	store := reprocess.NewStore(stateTable, pc.Name, now)

	live := cfg.SubscriptionName(pc.Source.Subscription)
	liveSub, err := ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: live})
	if err != nil {
		return fmt.Errorf("reprocess: the live subscription %s: %w", live, err)
	}
	rec, err := store.Load(ctx)
	if err != nil {
		return fmt.Errorf("reprocess: %w (does `pubsink setup` need to run?)", err)
	}
	if rec != nil && !rec.Same(reprocess.Range{From: from, FromRelative: fromRel, Snapshot: snapshot, Until: until, UntilRelative: untilRel}) {
		return &ConfigError{fmt.Errorf("reprocess: an unfinished reprocess of %q (%s, %s) is on record: run it again with its arguments to finish it", pc.Name, rec.Name, describeRange(rec))}
	}
	stamp := reprocess.Stamp(start)
	plan := &reprocess.Record{
		Name: reprocess.NameFor(pc.Name, stamp), Pipeline: pc.Name, From: from, Snapshot: snapshot, Until: until,
		Subscription: live + "-reprocess", Started: start,
	}
	if plan.Until.IsZero() {
		plan.Until = start.Truncate(time.Millisecond) // as a relative --from: the range prints as it is
	}
	if !req.NoRestorePoint {
		plan.RestorePoint = restorePointName(cfg, liveSub.GetName(), stamp)
	}
	if rec == nil || !rec.Ready {
		if err := checkHistory(ctx, "reprocess", ps, liveSub, from, snapshot, start); err != nil {
			return err
		}
	}
	if req.DryRun {
		return printPlan(ctx, out, store, rec, plan)
	}

	lock, err := store.Acquire(ctx, holderID(), func(h reprocess.Holder) {
		log.Info("the reprocess lock is held; waiting to see whether its holder renews it", zap.String("holder", h.ID), zap.Time("until", h.Until))
	})
	if err != nil {
		if ctx.Err() != nil {
			// Stopped (SIGTERM, SIGINT) while waiting for a killed run's
			// lock to lapse: stopped before done like any other stop, so
			// that a Job runs it again (exit 3), not failed.
			name := plan.Name
			if rec != nil {
				name = rec.Name
			}
			fmt.Fprintf(out, "reprocess %s: stopped after 0 messages; run the same command again to resume\n", name)
			return ErrReprocessStopped
		}
		return fmt.Errorf("reprocess of %q: %w", pc.Name, err)
	}
	finished := false
	defer func() {
		if finished {
			return
		}
		// Stopped or failed: a restart resumes at once.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lock.Release(rctx); err != nil {
			log.Warn("could not release the reprocess lock; a restart waits for it to lapse", zap.Error(err))
		}
	}()
	// The record again, under the lock: the run it names may have moved on
	// since the first read.
	if rec, err = store.Load(ctx); err != nil {
		return err
	}
	if rec == nil {
		rec = plan
		if rec.RestorePoint != "" {
			if err := takeRestorePoint(ctx, ps, cfg, liveSub.GetName(), rec, start); err != nil {
				return err
			}
		}
		if err := lock.Save(ctx, rec); err != nil {
			return err
		}
		fmt.Fprintf(out, "reprocess %s: restore point %s\n", rec.Name, orNone(rec.RestorePoint))
	} else {
		fmt.Fprintf(out, "reprocess %s: resuming (%s)\n", rec.Name, describeRange(rec))
	}
	if rec.Done {
		// Stopped or killed during its end: the range was done, what is
		// left is the end itself.
		if err := endRun(ctx, ps, lock, rec); err != nil {
			return err
		}
		finished = true
		printSummary(out, rec, reprocess.Progress{}, nil, now().Sub(rec.Started))
		return nil
	}
	// Only a process that seeked the subscription sees the whole range: a
	// resumed one counts what it did since.
	seeked := !rec.Ready
	if !rec.Ready {
		if err := prepareSubscription(ctx, ps, liveSub, rec); err != nil {
			return err
		}
		rec.Ready = true
		if err := lock.Save(ctx, rec); err != nil {
			return err
		}
	}
	if !req.NoWait {
		if err := waitForLive(ctx, log, cfg, ps, stateTable, lock, pc.Name, live, rec, now, out); err != nil {
			return err
		}
	}

	// The pipeline of the run: the current configuration's, on the run's
	// subscription, named after the run.
	run := *pc
	run.Name = rec.Name
	run.Source.Subscription = rec.Subscription
	run.Source.Topic = liveSub.GetTopic()
	run.Source.TrackingSubscription = ""
	rcfg := *cfg
	rcfg.Pipelines = []config.Pipeline{run}
	gate := reprocess.NewGate(rec.From, rec.Until, now)
	gate.Limit(reprocess.RateCap(req.Rate))
	opts.reprocess = &reprocessRun{live: pc.Name, record: rec, gate: gate}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = memoryLimit()
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	a, err := Open(runCtx, log, &rcfg, opts)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped during the start-up checks: nothing was received.
			fmt.Fprintf(out, "reprocess %s: stopped during start-up; run the same command again to resume\n", rec.Name)
			return ErrReprocessStopped
		}
		return err
	}
	kept := keepLock(runCtx, log, lock, stopRun)
	done := make(chan struct{})
	reporter := reprocess.NewReporter(progress, log, "reprocess")
	rangeDone := false
	go func() {
		defer close(done)
		if rangeDone = reprocess.Watch(runCtx, gate, reporter, req.Idle); rangeDone {
			stopRun()
		}
	}()
	runErr := a.Run(runCtx)
	stopRun()
	<-done
	lost := kept()
	reporter.Close()
	p := gate.Progress()
	var st []pipeline.Status
	for _, pl := range a.Pipelines() {
		st = append(st, pl.Status())
	}
	switch {
	case runErr != nil:
		return runErr
	case lost != nil:
		return lockLost(out, rec, p.Done, lost)
	case !rangeDone:
		fmt.Fprintf(out, "reprocess %s: stopped after %d messages; run the same command again to resume\n", rec.Name, p.Done)
		return ErrReprocessStopped
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec.Done = true
	if err := lock.Save(cctx, rec); err != nil {
		return err
	}
	if err := endRun(cctx, ps, lock, rec); err != nil {
		return err
	}
	finished = true
	printSummary(out, rec, p, st, now().Sub(rec.Started))
	if p.Done > 0 || !seeked {
		return nil
	}
	return emptyRange(cctx, ps, stateTable, pc.Name, liveSub.GetTopic(), rec, out)
}

// waitForLive waits until the live pipeline has finished rec's range (see
// reprocess.WaitForLive), renewing the run's lock meanwhile. It reads the
// live subscription's oldest unacked message from a probe snapshot (taken
// and deleted at once: Pub/Sub expires a snapshot 7 days after the oldest
// unacked message it holds), and whether the live pipeline runs from its
// membership (first: a live pipeline that does not run is not probed). It
// says what it waits for, and when it does not wait for a live pipeline
// that does not run.
func waitForLive(ctx context.Context, log *zap.Logger, cfg *config.Config, ps *pubsub.Client, state *bigtable.Table, lock *reprocess.Lock, pipelineName, live string, rec *reprocess.Record, now func() time.Time, out io.Writer) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	kept := keepLock(wctx, log, lock, stop)
	liveID := live[strings.LastIndexByte(live, '/')+1:]
	read := func(ctx context.Context) (reprocess.Live, error) {
		var l reprocess.Live
		var err error
		if l.Running, err = members.RenewedSince(ctx, state, pipelineName, now().Add(-reprocess.LiveRecently)); err != nil || !l.Running {
			if err != nil {
				err = fmt.Errorf("reprocess: read the live pipeline's members (--no-wait does not): %w", err)
			}
			return l, err // not running: nothing to wait for, no probe
		}
		name := snapshotName(cfg, liveID+"-probe-"+reprocess.Stamp(now()))
		snap, err := ps.SubscriptionAdminClient.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: name, Subscription: live})
		if err != nil {
			return l, fmt.Errorf("reprocess: read what the live subscription holds (a snapshot of %s; --no-wait does not): %w", live, err)
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := ps.SubscriptionAdminClient.DeleteSnapshot(dctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: name}); err != nil {
			log.Warn("could not delete the probe snapshot; it expires by itself", zap.String("snapshot", name), zap.Error(err))
		}
		cancel()
		if t := snap.GetExpireTime(); t != nil {
			l.Oldest = t.AsTime().Add(-snapshotLifetime)
		}
		return l, nil
	}
	var said time.Time
	waited := false
	l, err := reprocess.WaitForLive(wctx, rec.Until, reprocess.LivePoll, read, func(l reprocess.Live) {
		waited = true
		if now().Sub(said) >= 30*time.Second {
			said = now()
			fmt.Fprintf(out, "reprocess %s: waiting for the live pipeline to finish the range: its subscription holds a message published at %s, at or before the range's end %s (--no-wait starts at once)\n",
				rec.Name, l.Oldest.UTC().Format(time.RFC3339Nano), rec.Until.UTC().Format(time.RFC3339Nano))
		}
	})
	stop()
	switch lost := kept(); {
	case lost != nil:
		return lockLost(out, rec, 0, lost)
	case err != nil:
		return err
	case !l.Running:
		fmt.Fprintf(out, "reprocess %s: not waiting for the live pipeline: no process of it renewed its membership in the last %s (it does not run); should it run again before it finished the range, what it writes of the range goes over the run's\n",
			rec.Name, reprocess.LiveRecently)
	case waited:
		fmt.Fprintf(out, "reprocess %s: the live pipeline finished the range\n", rec.Name)
	}
	return nil
}

// keepLock renews lock on a goroutine of its own until ctx ends; when the
// lock is lost (taken over, or lapsing: reprocess.Lock.Keep) it logs why
// and calls stop. The func it returns waits for the goroutine and returns
// why the lock was lost, nil if it was kept.
func keepLock(ctx context.Context, log *zap.Logger, lock *reprocess.Lock, stop func()) func() error {
	var lost error
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		if err := lock.Keep(ctx, func(err error) { log.Warn("could not renew the reprocess lock; retrying", zap.Error(err)) }); err != nil {
			lost = err
			log.Error("stopping: the reprocess lock", zap.Error(err))
			stop()
		}
	}()
	return func() error { <-kept; return lost }
}

// lockLost is the end of a run whose lock was lost after done messages: a
// lock that would lapse (the state table did not answer) is a stop before
// the lock could lapse, resumable like any other (ErrReprocessStopped);
// one taken over is the error itself.
func lockLost(out io.Writer, rec *reprocess.Record, done int64, lost error) error {
	if !errors.Is(lost, reprocess.ErrLapsing) {
		return lost
	}
	fmt.Fprintf(out, "reprocess %s: stopped after %d messages: %v; run the same command again to resume\n", rec.Name, done, lost)
	return ErrReprocessStopped
}

// endRun deletes the run's subscription, then its record and lock. The
// record says Done first, so that a run killed between the two finishes
// its end when run again instead of looking for the deleted subscription.
func endRun(ctx context.Context, ps *pubsub.Client, lock *reprocess.Lock, rec *reprocess.Record) error {
	if err := ps.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: rec.Subscription}); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("reprocess: delete the run's subscription %s: %w", rec.Subscription, err)
	}
	return lock.Finish(ctx)
}

// emptyRange answers a run that got no message of its range. It is an
// error (a *ConfigError: running it again gets nothing more) when the topic
// is known to have carried messages in the range (rangeEvidence).
// Otherwise the summary only notes it: an empty range may be a quiet one.
func emptyRange(ctx context.Context, ps *pubsub.Client, state *bigtable.Table, live, topic string, rec *reprocess.Record, out io.Writer) error {
	r := emptyRead{command: "reprocess", name: rec.Name, rangeText: describeRange(rec), live: live, topic: topic,
		from: rec.From, until: rec.Until, snapshot: rec.Snapshot, restorePoint: rec.RestorePoint, started: rec.Started,
		what: "reprocess only a range published after retention was enabled"}
	return r.check(ctx, ps, state, out)
}

// emptyRead is a reprocess's or an audit's read that got no message of
// its range: what check needs to look for proof that the topic had some.
type emptyRead struct {
	command, name, rangeText string // "reprocess" or "audit", the run's name, its range as printed
	live, topic              string // the live pipeline's name, its topic
	from, until              time.Time
	snapshot, restorePoint   string    // "" when none
	started                  time.Time // when the run started
	what                     string    // what to do instead, the first half of the advice
}

// check is an error (a *ConfigError) when the topic is known to have
// carried messages in the range: the live pipeline's dedupe journal holds
// keys claimed in it (exactly_once), or the restore point shows the live
// subscription holding an unacked message published in it. Otherwise it
// prints a note for the summary.
func (r emptyRead) check(ctx context.Context, ps *pubsub.Client, state *bigtable.Table, out io.Writer) error {
	from := r.from
	if r.snapshot != "" {
		from = oldestRetained(ctx, ps, r.snapshot)
	}
	var evidence []string
	if !from.IsZero() {
		if n, err := dedupe.ClaimedBetween(ctx, state, r.live, from, r.until); err == nil && n > 0 {
			evidence = append(evidence, fmt.Sprintf("the live pipeline %q claimed %d messages' keys in that time (its dedupe journal)", r.live, n))
		}
	}
	if r.restorePoint != "" {
		// A backlog: older than a minute before the run's start, so that
		// clock skew and messages in flight do not count.
		t := oldestRetained(ctx, ps, r.restorePoint)
		if !t.IsZero() && t.Before(r.started.Add(-time.Minute)) && !t.After(r.until) && (from.IsZero() || !t.Before(from)) {
			evidence = append(evidence, fmt.Sprintf("the live subscription holds an unacked message published at %s (restore point %s)", t.Format(time.RFC3339Nano), r.restorePoint))
		}
	}
	why := "a new subscription gets only what the topic retains: messages published before its message retention was enabled " +
		"(retention added after the topic was created) or before the retention window (--from too far back) cannot be replayed"
	if len(evidence) == 0 {
		fmt.Fprintf(out, "  note         no message of the range arrived; if the topic had messages in it, %s\n", why)
		return nil
	}
	return &ConfigError{fmt.Errorf("%s %s: no message of the range (%s) arrived, but %s: the topic had messages in the range that the run's subscription did not get. "+
		"Why: %s. What to do: see what %s retains (`gcloud pubsub topics describe %s --format='value(messageRetentionDuration)'`); "+
		"%s, or give --snapshot with a snapshot of the live subscription taken before the range",
		r.command, r.name, r.rangeText, strings.Join(evidence, ", and "), why, r.topic, r.topic, r.what)}
}

// oldestRetained reads a snapshot's oldest message: Pub/Sub expires a
// snapshot 7 days after the publish time of the oldest unacked message it
// holds (7 days after its creation when it holds none). Zero when the
// snapshot cannot be read.
func oldestRetained(ctx context.Context, ps *pubsub.Client, name string) time.Time {
	s, err := ps.SubscriptionAdminClient.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: name})
	if err != nil || s.GetExpireTime() == nil {
		return time.Time{}
	}
	return s.GetExpireTime().AsTime().Add(-snapshotLifetime)
}

// snapshotLifetime is how long after its oldest message a snapshot lives.
const snapshotLifetime = 7 * 24 * time.Hour

// rangeFlags are --from, --until and --snapshot as read at start: a
// relative time is resolved against it.
type rangeFlags struct {
	from, until                 time.Time // zero: not given
	fromRelative, untilRelative bool
	snapshot                    string // the full name; "" for --from
}

// parseRange reads the range flags of command (reprocess, audit); a range
// that cannot be is a *ConfigError.
func parseRange(command string, cfg *config.Config, from, until, snapshot string, start time.Time) (rangeFlags, error) {
	var rf rangeFlags
	var err error
	if rf.from, rf.fromRelative, err = parseWhen(command, "--from", from, start); err != nil {
		return rf, err
	}
	if rf.until, rf.untilRelative, err = parseWhen(command, "--until", until, start); err != nil {
		return rf, err
	}
	if !rf.until.IsZero() && rf.until.After(start) {
		return rf, &ConfigError{fmt.Errorf("%s: --until %s is in the future", command, rf.until.Format(time.RFC3339))}
	}
	if !rf.from.IsZero() && !rf.until.IsZero() && !rf.from.Before(rf.until) {
		return rf, &ConfigError{fmt.Errorf("%s: --from %s is not before --until %s", command, rf.from.Format(time.RFC3339), rf.until.Format(time.RFC3339))}
	}
	if snapshot != "" {
		rf.snapshot = snapshotName(cfg, snapshot)
	}
	return rf, nil
}

// parseWhen reads a time flag: RFC 3339, or a duration before now
// (relative).
func parseWhen(command, flag, v string, now time.Time) (t time.Time, relative bool, err error) {
	if v == "" {
		return time.Time{}, false, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), false, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d).UTC().Truncate(time.Millisecond), true, nil
	}
	return time.Time{}, false, &ConfigError{fmt.Errorf("%s: %s %q is neither an RFC 3339 time (2026-12-03T10:00:00Z) nor a positive duration before now (2h)", command, flag, v)}
}

func snapshotName(cfg *config.Config, s string) string {
	if strings.HasPrefix(s, "projects/") {
		return s
	}
	return "projects/" + cfg.Project + "/snapshots/" + s
}

// restorePointName is the snapshot a run takes of the live subscription
// first: the subscription's ID and the run's stamp.
func restorePointName(cfg *config.Config, live, stamp string) string {
	id := live[strings.LastIndexByte(live, '/')+1:]
	return snapshotName(cfg, id+"-restore-"+stamp)
}

// takeRestorePoint takes rec's restore point. A name that exists is
// another run's snapshot (or a user's), never joined: the run takes a new
// stamp, its name and its restore point's, and tries again.
func takeRestorePoint(ctx context.Context, ps *pubsub.Client, cfg *config.Config, live string, rec *reprocess.Record, start time.Time) error {
	for range 5 {
		_, err := ps.SubscriptionAdminClient.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: rec.RestorePoint, Subscription: live})
		if status.Code(err) != codes.AlreadyExists {
			if err != nil {
				return fmt.Errorf("reprocess: the restore point (a snapshot of %s): %w", live, err)
			}
			return nil
		}
		stamp := reprocess.Stamp(start)
		rec.Name, rec.RestorePoint = reprocess.NameFor(rec.Pipeline, stamp), restorePointName(cfg, live, stamp)
	}
	return fmt.Errorf("reprocess: the restore point (a snapshot of %s): five names in a row existed already", live)
}

// holderID names this process in the reprocess lock: unique, since the
// lock's writes are fenced on it (two pods of one Job may share a host
// name and a pid).
func holderID() string {
	host, _ := os.Hostname()
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + rand.Text()[:13]
}

func describeRange(r *reprocess.Record) string {
	layout := rangeLayout(r.From, r.Until)
	what := "from " + r.From.Format(layout)
	if r.Snapshot != "" {
		what = "from snapshot " + r.Snapshot
	}
	return what + " until " + r.Until.Format(layout)
}

// rangeLayout is the one precision of a range's ends: milliseconds (a
// relative time and the default --until are whole ones), or nanoseconds
// when a time given on the command line is finer.
func rangeLayout(ends ...time.Time) string {
	for _, t := range ends {
		if t.Nanosecond()%int(time.Millisecond) != 0 {
			return "2006-01-02T15:04:05.000000000Z07:00"
		}
	}
	return "2006-01-02T15:04:05.000Z07:00"
}

func orNone(s string) string {
	if s == "" {
		return "none (--no-restore-point)"
	}
	return s
}

// checkHistory says whether the run can get the range: a snapshot of the
// live topic, or, for --from, a topic that retains its messages that long.
func checkHistory(ctx context.Context, command string, ps *pubsub.Client, liveSub *pubsubpb.Subscription, from time.Time, snapshot string, now time.Time) error {
	if snapshot != "" {
		snaps, err := getSnapshot(ctx, command, ps, snapshot)
		if err != nil {
			return err
		}
		if snaps.GetTopic() != liveSub.GetTopic() {
			return &ConfigError{fmt.Errorf("%s: snapshot %s is of topic %s, not of the pipeline's topic %s", command, snapshot, snaps.GetTopic(), liveSub.GetTopic())}
		}
		return nil
	}
	topic, err := ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: liveSub.GetTopic()})
	if err != nil {
		return fmt.Errorf("%s: the topic %s: %w", command, liveSub.GetTopic(), err)
	}
	keeps := topic.GetMessageRetentionDuration().AsDuration()
	// To the second: --from 1h on a topic that keeps an hour is fine.
	if need := now.Sub(from).Truncate(time.Second); keeps < need {
		have := "retains no acknowledged messages (message retention is off)"
		if keeps > 0 {
			have = "retains messages for " + keeps.String()
		}
		return &ConfigError{fmt.Errorf("%s: --from %s needs the topic to retain %s of messages, but %s %s. "+
			"Enable it with `gcloud pubsub topics update %s --message-retention-duration=7d` (or set source.topic_message_retention in the configuration and run `pubsink setup`, which widens it); "+
			"only messages published after that can be replayed. Or give --snapshot with a snapshot taken before the range",
			command, from.Format(time.RFC3339), need.Round(time.Second), topic.GetName(), have, topic.GetName())}
	}
	return nil
}

// getSnapshot reads a snapshot by its full name; a missing one is the
// request's mistake (a *ConfigError).
func getSnapshot(ctx context.Context, command string, ps *pubsub.Client, name string) (*pubsubpb.Snapshot, error) {
	s, err := ps.SubscriptionAdminClient.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: name})
	if status.Code(err) == codes.NotFound {
		return nil, &ConfigError{fmt.Errorf("%s: snapshot %s does not exist", command, name)}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: snapshot %s: %w", command, name, err)
	}
	return s, nil
}

// prepareSubscription creates the run's subscription on the live topic (or
// finds it, from an attempt that stopped before it was seeked) and seeks it
// to the range's start. It has the live subscription's ack deadline, retry
// policy and message ordering: the run's start-up checks hold it to
// source.ordering as run holds the live one.
func prepareSubscription(ctx context.Context, ps *pubsub.Client, liveSub *pubsubpb.Subscription, rec *reprocess.Record) error {
	_, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: rec.Subscription, Topic: liveSub.GetTopic(), AckDeadlineSeconds: liveSub.GetAckDeadlineSeconds(),
		RetryPolicy: liveSub.GetRetryPolicy(), EnableMessageOrdering: liveSub.GetEnableMessageOrdering(),
		Labels: map[string]string{"pubsink-reprocess": "true"},
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("reprocess: create the run's subscription %s: %w", rec.Subscription, err)
	}
	seek := &pubsubpb.SeekRequest{Subscription: rec.Subscription}
	if rec.Snapshot != "" {
		seek.Target = &pubsubpb.SeekRequest_Snapshot{Snapshot: rec.Snapshot}
	} else {
		seek.Target = &pubsubpb.SeekRequest_Time{Time: timestamppb.New(rec.From)}
	}
	if _, err := ps.SubscriptionAdminClient.Seek(ctx, seek); err != nil {
		return fmt.Errorf("reprocess: seek the run's subscription %s: %w", rec.Subscription, err)
	}
	return nil
}

// printPlan is --dry-run's answer: what a run would do, having changed
// nothing.
func printPlan(ctx context.Context, out io.Writer, store *reprocess.Store, rec, plan *reprocess.Record) error {
	if held, err := store.Held(ctx); err != nil {
		return err
	} else if held != nil {
		fmt.Fprintf(out, "dry run: another reprocess holds the lock (%s, until %s): a run now would wait for it or be refused\n", held.ID, held.Until.Format(time.RFC3339))
	}
	if rec != nil {
		fmt.Fprintf(out, "dry run: would resume %s (%s) on %s\n", rec.Name, describeRange(rec), rec.Subscription)
		return nil
	}
	fmt.Fprintf(out, "dry run: would take the restore point %s\n", orNone(plan.RestorePoint))
	fmt.Fprintf(out, "dry run: would create %s on the pipeline's topic, seeked %s\n", plan.Subscription, describeRange(plan))
	fmt.Fprintf(out, "dry run: would rewrite that range as %s (its own dedupe scope), then delete the subscription\n", plan.Name)
	return nil
}

// printSummary is the end of a run.
func printSummary(out io.Writer, rec *reprocess.Record, p reprocess.Progress, st []pipeline.Status, took time.Duration) {
	var s pipeline.Status
	if len(st) > 0 {
		s = st[0]
	}
	var dead int64
	for _, n := range s.DeadLettered {
		dead += n
	}
	fmt.Fprintf(out, "reprocess %s: done in %s\n", rec.Name, took.Round(time.Second))
	fmt.Fprintf(out, "  range        %s\n", describeRange(rec))
	fmt.Fprintf(out, "  messages     %d (this process: received %d, committed %d, duplicates %d, dead-lettered %d, filtered %d)\n",
		p.Done, s.Received, s.Committed, s.Duplicate, dead, s.Filtered)
	fmt.Fprintf(out, "  rows         %d written by this process\n", s.Rows)
	fmt.Fprintf(out, "  after range  %d skipped\n", p.Beyond)
	fmt.Fprintf(out, "  restore point %s (kept; delete it with `gcloud pubsub snapshots delete`)\n", orNone(rec.RestorePoint))
}
