package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/pool"
	"github.com/pubsink/pubsink/internal/retry"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// Pipeline processes the messages of one subscription: decode, dedupe,
// write, finish. Its Handle method is the source's handler.
type Pipeline struct {
	name     string
	cfg      config.Pipeline
	log      *zap.Logger
	mapper   Mapper
	deps     Deps
	retry    retry.Policy
	dlWait   time.Duration
	inFlight *inFlight
	stages   stageObservers
	sampler  stageSampler
	changes  changeCounters
	// filters watches the filter for dropping every message; nil
	// without a filter.
	filters *filterWatch
	// columns watches the columns whose policy is not dead_letter for a
	// value missing in every committed message; nil without such columns.
	columns *columnWatch
	// stopMembers ends the membership's renewals that Run started and
	// waits for them; Close calls it.
	stopMembers func()
}

// New wires a pipeline. It compiles the templates; it does no I/O.
func New(log *zap.Logger, cfg config.Pipeline, deps Deps) (*Pipeline, error) {
	if deps.Sink == nil || deps.Metrics == nil {
		return nil, errors.New("pipeline: Sink and Metrics are required")
	}
	mapper := deps.Mapper
	if mapper == nil {
		m, err := mapping.New(cfg, nil, deps.Limits)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", cfg.Name, err)
		}
		mapper = m
	}
	p := &Pipeline{
		name:     cfg.Name,
		cfg:      cfg,
		log:      log.Named("pipeline").With(zap.String("pipeline", cfg.Name)),
		mapper:   mapper,
		deps:     deps,
		retry:    deps.Retry,
		dlWait:   deps.DeadLetterWait,
		inFlight: newInFlight(),
		sampler:  stageSampler{every: stageSampleEvery},
		changes:  newChangeCounters(cfg, deps.Metrics),
	}
	if cfg.Filter != "" {
		p.filters = newFilterWatch(deps.FilterWarnAfter, deps.WarnClock, p.log, cfg.Filter)
	}
	p.columns = newColumnWatch(deps.ColumnWarnAfter, deps.WarnClock, p.log, deps.Metrics, mapper.Columns())
	if p.dlWait <= 0 {
		p.dlWait = DefaultDeadLetterWait
	}
	if p.retry == (retry.Policy{}) {
		p.retry = retry.Default
	}
	if deps.Tracker != nil {
		deps.Tracker.WatchInFlight(p.inFlight.oldest)
		deps.Metrics.WatchWatermark(deps.Tracker.Watermark)
	}
	deps.Metrics.WatchOldestInFlight(p.inFlight.oldest)
	for s, name := range stageNames {
		switch stage(s) {
		case stageDedupe, stageCommit:
			if deps.Dedupe == nil {
				continue
			}
		case stageReport:
			if deps.Tracker == nil {
				continue
			}
		}
		p.stages[s] = deps.Metrics.Stage(name)
	}
	for _, r := range deadletter.Reasons {
		deps.Metrics.DeadLettered(string(r)) // export every reason at 0, so that rate() works from the start
	}
	return p, nil
}

// Name is the pipeline's name.
func (p *Pipeline) Name() string { return p.name }

// Handle processes one delivery and returns whether to ack it. It blocks
// until the outcome is durable, or until ctx ends (then it returns false:
// nack, and Pub/Sub redelivers). It is safe for concurrent use and has the
// signature of a source.Handler.
func (p *Pipeline) Handle(ctx context.Context, m *source.Message) bool {
	p.deps.Metrics.Received.Inc()
	p.deps.Metrics.InFlight.Inc()
	slot := p.inFlight.add(m.PublishTime)
	r := records.Get()
	p.sampler.start(r)
	out := p.process(ctx, m, r)
	p.inFlight.remove(slot)
	p.deps.Metrics.InFlight.Dec()
	out = p.finish(ctx, m, r, out)
	r.reason, r.resumed = "", false
	records.Put(r) // Map resets the rest; nothing keeps r (the sink copies what it batches)
	return out.Ack()
}

// records are the per-message records, reused: a record escapes to the heap
// (parts take pointers into it through their interfaces), and a fresh one
// per message cost an allocation and first touches of its memory on the
// path of every message.
var records pool.Pool[record]

// process runs the stages in order: map (event time, dedupe key, filter,
// rows), dedupe, late check, write, commit. Each stage either passes the message on or ends it in an outcome.
//
// The path of a message that is written is kept to small frames, every
// stage that it does not need (a retry, a dead letter, the dedupe of
// exactly_once mode) in a function of its own: the Pub/Sub client runs each
// callback in a new goroutine, whose stack starts small and is copied to a
// larger one when a call goes past it, once per message.
func (p *Pipeline) process(ctx context.Context, m *source.Message, r *record) Outcome {
	if err := p.mapper.Map(ctx, m, &r.Result); err != nil {
		if out, done := p.mapFailed(ctx, m, r, err); done {
			return out
		}
	}
	p.lap(r, stageMap)
	if r.Filtered {
		// Before dedupe: a filtered message makes no state write, and its
		// redelivery is filtered again (the filter is deterministic).
		return Filtered
	}
	if p.deps.Dedupe != nil {
		return p.processClaimed(ctx, m, r)
	}
	// at_least_once: what store does, in place, for one frame less on the
	// stack of the write.
	if p.isLate(r.EventTime) {
		if out, done := p.late(ctx, m, r); done {
			return out
		}
	}
	if err := p.write(ctx, r); err != nil {
		return p.writeFailed(ctx, m, r, err)
	}
	p.lap(r, stageWrite)
	return Committed
}

// mapFailed handles the failure err of the mapping: a message that can
// never be written is dead-lettered with the mapping's reason; a transient
// failure (a topic schema not fetched yet) is retried, and done is false
// once the mapping succeeded.
func (p *Pipeline) mapFailed(ctx context.Context, m *source.Message, r *record, err error) (out Outcome, done bool) {
	var bad *mapping.BadInput
	if !errors.As(err, &bad) {
		err = p.retry.Retry(ctx, transient(ctx), err, func() error {
			return p.mapper.Map(ctx, m, &r.Result)
		}, p.logRetry(m, "mapping"))
		if err == nil {
			return 0, false
		}
		if !errors.As(err, &bad) {
			return Retry, true
		}
	}
	return p.deadLetter(ctx, m, r, bad.Reason, bad.Err), true
}

// write writes the rows of r, all in one call, so that they share a batch
// where they fit. A message without rows (its mappings' when were false,
// its lists empty) writes nothing and is committed.
func (p *Pipeline) write(ctx context.Context, r *record) error {
	if len(r.Rows) == 0 {
		return nil
	}
	return p.deps.Sink.Write(ctx, r.Rows)
}

// processClaimed is the rest of process in exactly_once mode: the late
// check, dedupe, the write, then the end of the hold. The key is held from
// the claim until it returns: Commit ends the hold on the success path,
// and the deferred Release (which does nothing after Commit) on every
// other; the claim itself stays either way (it decided the key).
//
// Lateness is judged before the claim, so that a claim means "on time": a
// late message under late_data drop or dead_letter claims nothing and only
// looks (Resume) whether its key was decided already. Another message's
// claim makes it a duplicate; its own (an earlier delivery was on time and
// claimed the key, then crashed, was nacked or lost its ack) makes it
// finish that delivery's work, however far the watermark has moved since.
func (p *Pipeline) processClaimed(ctx context.Context, m *source.Message, r *record) Outcome {
	isLate := p.isLate(r.EventTime) // read once: the watermark moves meanwhile
	late := isLate && p.cfg.Watermark.LateData != config.LateAccept
	kind := claimAhead // a new key's claim goes ahead of its rows: the sink waits for it
	switch {
	case late:
		kind = claimResumes
	case p.keyIsMessageID():
		// No other message can have the key: no claim, and the record
		// after the rows makes a redelivery a duplicate.
		kind = claimOnce
	}
	// The first attempt is a plain call, a retry a function of its own:
	// the path of a message that is written keeps its frames small (see
	// process).
	claim, dup, err := p.claim(ctx, kind, r.Key, m.ID)
	if err != nil {
		if claim, dup, err = p.claimFailed(ctx, m, r, kind, err); err != nil {
			return Retry
		}
	}
	defer func() { claim.Release() }() // a closure: claimAgain may replace claim; after Commit it does nothing
	p.lap(r, stageDedupe)
	switch {
	case dup:
		return Duplicate
	case late && !claim.Held():
		out, _ := p.late(ctx, m, r)
		return out
	case isLate && !late:
		p.deps.Metrics.Late.Inc() // late_data: accept
	}
	r.resumed = claim.Resumed()
	if ready := claim.Ready(); ready != nil {
		for i := range r.Rows {
			r.Rows[i].After = ready
		}
	}
	err = p.write(ctx, r)
	// A claim queued ahead of the rows (ClaimAhead) must be durable and
	// decided before the ack, rows or none: the sink waited for it, and
	// this returns at once then.
	if cerr := claim.Wait(ctx); cerr != nil {
		if out, done := p.claimAgain(ctx, m, r, &claim, cerr); done {
			return out
		}
	} else if err != nil {
		if out := p.writeFailed(ctx, m, r, err); out != Committed {
			return out
		}
	}
	p.lap(r, stageWrite)
	// The rows are durable. A claim decided the key already, so its Commit
	// writes nothing: it tells the deliveries of the key waiting in this
	// process that they are duplicates; ClaimOnce's writes the record,
	// which is retried like any catalog write. If it fails for good, the
	// message is redelivered and rewrites the same cells: harmless.
	if err := claim.Commit(ctx); err != nil {
		if p.commitFailed(ctx, m, claim, err) != nil {
			return Retry
		}
	}
	p.lap(r, stageCommit)
	return Committed
}

// claimKind is which of the Deduper's claims a message makes.
type claimKind uint8

const (
	claimDecides claimKind = iota // Claim: the first claim decides the key
	claimAhead                    // ClaimAhead: Claim, queued ahead of the rows when it can be
	claimOnce                     // ClaimOnce: a key only this message can have
	claimResumes                  // Resume: a late message, which only looks
)

// claim makes the claim of kind for key, once.
func (p *Pipeline) claim(ctx context.Context, kind claimKind, key, id string) (dedupe.Claim, bool, error) {
	switch kind {
	case claimAhead:
		return p.deps.Dedupe.ClaimAhead(ctx, key, id)
	case claimOnce:
		return p.deps.Dedupe.ClaimOnce(ctx, key, id)
	case claimResumes:
		return p.deps.Dedupe.Resume(ctx, key, id)
	}
	return p.deps.Dedupe.Claim(ctx, key, id)
}

// claimAgain is the path of a message whose claim, queued ahead of its rows,
// decided nothing (err: its write failed, or it was not trusted once
// durable and lost the key to another process's claim): no row was
// written for it (the sink waits for the claim). It gives the key up and
// claims it again, waiting this time (Claim, with the retries of any
// claim), then writes the rows. done is false once they are durable and
// *claim is the new claim, to commit; otherwise out is the message's
// outcome.
//
//go:noinline
func (p *Pipeline) claimAgain(ctx context.Context, m *source.Message, r *record, claim *dedupe.Claim, err error) (out Outcome, done bool) {
	claim.Release()
	*claim = dedupe.Claim{}
	p.log.Debug("a claim queued ahead of its rows decided nothing; claiming again", zap.String("message_id", m.ID), zap.Error(err))
	c, dup, err := p.claim(ctx, claimDecides, r.Key, m.ID)
	if err != nil {
		if c, dup, err = p.claimFailed(ctx, m, r, claimDecides, err); err != nil {
			return Retry, true
		}
	}
	*claim = c
	if dup {
		return Duplicate, true
	}
	r.resumed = c.Resumed()
	for i := range r.Rows {
		r.Rows[i].After = nil
	}
	if err := p.write(ctx, r); err != nil {
		if out := p.writeFailed(ctx, m, r, err); out != Committed {
			return out, true
		}
	}
	return Committed, false
}

// claimFailed retries the claim whose first attempt failed with err, for
// as long as its failures are transient and ctx lasts.
//
//go:noinline
func (p *Pipeline) claimFailed(ctx context.Context, m *source.Message, r *record, kind claimKind, err error) (claim dedupe.Claim, dup bool, _ error) {
	err = p.retry.Retry(ctx, transient(ctx), err, func() (err error) {
		claim, dup, err = p.claim(ctx, kind, r.Key, m.ID)
		return err
	}, p.logRetry(m, "dedupe lookup"))
	return claim, dup, err
}

// commitFailed retries the Commit of claim whose first attempt failed with
// err.
//
//go:noinline
func (p *Pipeline) commitFailed(ctx context.Context, m *source.Message, claim dedupe.Claim, err error) error {
	return p.retry.Retry(ctx, transient(ctx), err, func() error {
		return claim.Commit(ctx)
	}, p.logRetry(m, "dedupe commit"))
}

// keyIsMessageID reports whether the dedupe key is the message ID (no
// source.id_attribute, no source.id_template): then only one message can
// have a key.
func (p *Pipeline) keyIsMessageID() bool { return p.cfg.KeyIsMessageID() }

// late counts a late message and applies late_data to it: it returns the
// outcome and true, or false when the message is to be written as any other
// (accept).
func (p *Pipeline) late(ctx context.Context, m *source.Message, r *record) (Outcome, bool) {
	p.deps.Metrics.Late.Inc()
	switch p.cfg.Watermark.LateData {
	case config.LateDrop:
		return Dropped, true
	case config.LateDeadLetter:
		return p.deadLetter(ctx, m, r, deadletter.Late, fmt.Errorf("event time %s is behind the watermark", r.EventTime.UTC().Format(time.RFC3339Nano))), true
	}
	return 0, false
}

// writeFailed retries the write of the rows whose first attempt failed with
// err, and returns Committed once they are durable; a rejection of any of
// them dead-letters the message, naming the row.
func (p *Pipeline) writeFailed(ctx context.Context, m *source.Message, r *record, err error) Outcome {
	err = p.retry.Retry(ctx, transient(ctx), err, func() error {
		return p.write(ctx, r)
	}, p.logRetry(m, "sink write"))
	switch {
	case err == nil:
		return Committed
	case sinks.IsRejected(err):
		return p.deadLetter(ctx, m, r, deadletter.SinkRejected, rejectedRow(r, err))
	}
	return Retry
}

// rejectedRow names the row of r that the sink refused in err, when the
// message has several: its index and table (not its key, which may hold
// payload values).
func rejectedRow(r *record, err error) error {
	var rej *sinks.RejectedError
	if len(r.Rows) < 2 || !errors.As(err, &rej) || rej.Row < 0 || rej.Row >= len(r.Rows) {
		return err
	}
	row := &r.Rows[rej.Row]
	table := row.Table
	if table == "" {
		table = "the sink's table"
	}
	return fmt.Errorf("row %d of %d (%s): %w", rej.Row+1, len(r.Rows), table, err)
}

// isLate reports whether an event time is behind the watermark by more than
// the allowed lateness.
func (p *Pipeline) isLate(eventTime time.Time) bool {
	if p.deps.Tracker == nil {
		return false
	}
	wm := p.deps.Tracker.Watermark()
	return !wm.IsZero() && eventTime.Before(wm.Add(-p.cfg.Watermark.AllowedLateness))
}

// DefaultDeadLetterWait is how long a message waits for a failing
// dead-letter output before it is nacked. Each waiting message holds a
// flow-control slot: without a bound, enough poison during an outage of the
// output would stop good traffic. A minute rides out a blip of Pub/Sub or
// Bigtable; the nacked message comes back later and tries again.
const DefaultDeadLetterWait = time.Minute

// deadLetter sends m to the dead-letter output, retrying transient failures
// of the output for at most DeadLetterWait. Without an output, or if it
// keeps failing, the message is nacked: it is never acked without a
// confirmed copy. While it retries it counts in pubsink_dead_letter_held.
func (p *Pipeline) deadLetter(ctx context.Context, m *source.Message, r *record, reason deadletter.Reason, cause error) Outcome {
	if p.deps.DeadLetter == nil {
		p.log.Error("message cannot be written and no dead_letter output is configured; nacking it",
			zap.String("message_id", m.ID), zap.String("reason", string(reason)), zap.Error(cause))
		return Retry
	}
	// In exactly_once mode the copy is claimed under its own dedupe key,
	// which names the delivery: a redelivery of a message whose copy was
	// confirmed (Pub/Sub's at-least-once delivery, a lost ack, a stream
	// that sent it twice) is a duplicate, acked without a second copy.
	var claim dedupe.Claim
	defer func() { claim.Release() }()
	if p.deps.Dedupe != nil {
		var dup bool
		err := p.retry.Do(ctx, transient(ctx), func() (err error) {
			claim, dup, err = p.deps.Dedupe.ClaimOnce(ctx, deadLetterKey(m.ID), m.ID)
			return err
		}, p.logRetry(m, "dead-letter claim"))
		if err != nil {
			return Retry
		}
		if dup {
			p.log.Info("already dead-lettered; acking the redelivery without a second copy",
				zap.String("message_id", m.ID), zap.String("reason", string(reason)))
			return Duplicate
		}
	}
	wctx, cancel := context.WithTimeout(ctx, p.dlWait)
	defer cancel()
	held, logRetry := false, p.logRetry(m, "dead-letter send")
	err := p.retry.Do(wctx, func(error) bool { return wctx.Err() == nil }, func() error {
		err := p.deps.DeadLetter.Send(wctx, m, reason, cause)
		if err != nil {
			p.deps.Metrics.DeadLetterErrors(status.Code(err).String()).Inc()
		}
		return err
	}, func(attempt int, err error) {
		if !held {
			held = true
			p.deps.Metrics.DeadLetterHeld.Inc()
		}
		logRetry(attempt, err)
	})
	if held {
		p.deps.Metrics.DeadLetterHeld.Dec()
	}
	if err != nil {
		if ctx.Err() == nil {
			p.deps.Metrics.DeadLetterGaveUp.Inc()
			p.log.Error("the dead-letter output kept failing; nacking the message, which comes back later",
				zap.String("message_id", m.ID), zap.String("reason", string(reason)), zap.Duration("waited", p.dlWait), zap.Error(err))
		}
		return Retry
	}
	if claim.Held() {
		// The copy is durable; now its key. If recording it fails, the
		// message is still acked: the copy is confirmed, and only a
		// redelivery despite the ack could make a second one.
		cctx, cancel := context.WithTimeout(ctx, p.dlWait)
		defer cancel()
		err := p.retry.Do(cctx, transient(cctx), func() error {
			return claim.Commit(cctx)
		}, p.logRetry(m, "dead-letter commit"))
		if err != nil {
			p.log.Warn("the dead-letter copy is confirmed but its dedupe record could not be written; a redelivery would copy it again",
				zap.String("message_id", m.ID), zap.Error(err))
		}
	}
	r.reason = reason
	p.log.Warn("dead-lettered", zap.String("message_id", m.ID), zap.String("reason", string(reason)), zap.Error(cause))
	return DeadLettered
}

// deadLetterKey is the dedupe key of the dead-letter copy of the message
// with ID id. It starts with 0xff, a byte that no valid UTF-8 string holds:
// a key from a message ID or an attribute (both UTF-8, as Pub/Sub requires)
// can never be equal to it.
func deadLetterKey(id string) string { return "\xffdead-letter\xff" + id }

// finish accounts for the outcome: the watermark tracker, then metrics. It
// returns the outcome to act on: Retry if the tracker could not be told
// (the effect is durable, so the redelivery is a duplicate).
func (p *Pipeline) finish(ctx context.Context, m *source.Message, r *record, out Outcome) Outcome {
	mt := p.deps.Metrics
	if out != Retry && p.deps.Tracker != nil {
		et := r.EventTime
		if et.IsZero() { // bad event time: the publish time stands in
			et = m.PublishTime
		}
		err := p.retry.Do(ctx, func(error) bool { return ctx.Err() == nil }, func() error {
			return p.deps.Tracker.Finished(ctx, m, et)
		}, p.logRetry(m, "watermark report"))
		if err != nil {
			out = Retry
		} else {
			p.lap(r, stageReport)
		}
	}
	if p.filters != nil && out != Retry {
		if out == Filtered {
			p.filters.filtered()
		} else {
			p.filters.passed()
		}
	}
	switch out {
	case Retry:
		mt.Retried.Inc()
	case Committed:
		mt.Committed.Inc()
		if r.resumed {
			mt.Resumed.Inc()
		}
		mt.Rows.Add(float64(len(r.Rows)))
		p.changes.count(&r.Result)
		if p.columns != nil {
			p.columns.committed(&r.Result)
		}
		mt.CommitLatency.Observe(time.Since(m.PublishTime).Seconds())
	case Duplicate:
		mt.Duplicate.Inc()
	case Dropped:
		mt.Dropped.Inc()
	case Filtered:
		mt.Filtered.Inc()
	case DeadLettered:
		mt.DeadLettered(string(r.reason)).Inc()
	}
	return out
}

// transient says which errors of a stage are worth retrying: all but a
// sink's rejection, while ctx lasts.
func transient(ctx context.Context) func(error) bool {
	return func(err error) bool {
		return ctx.Err() == nil && !sinks.IsRejected(err)
	}
}

// logRetry logs the first retry of a stage and every tenth after it, so an
// outage is visible without one line per message per attempt.
func (p *Pipeline) logRetry(m *source.Message, stage string) func(int, error) {
	return func(attempt int, err error) {
		if attempt == 1 || attempt%10 == 0 {
			p.log.Warn("transient failure, retrying", zap.String("stage", stage),
				zap.String("message_id", m.ID), zap.Int("attempt", attempt), zap.Error(err))
		}
	}
}
