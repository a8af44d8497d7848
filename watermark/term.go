package watermark

// The leading term: the estimate computed every tick from the tracking
// subscription and the followers' reports, and the leader's io rounds
// (probe, store, warnings).

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// leadingTerm is one stretch of leading: its estimator and the goroutines
// that read the tracking subscription, compute the watermark and collect
// the followers' reports.
type leadingTerm struct {
	est    *estimator
	cancel context.CancelFunc
	done   chan struct{}
	errc   chan error
	t      *Tracker
}

// startTerm begins leading with an empty histogram (its startup guard on:
// the previous leader's bookkeeping is gone).
func (t *Tracker) startTerm(ctx context.Context) *leadingTerm {
	e := t.startEstimator()
	t.cfg.Metrics.WatermarkLeader.Set(1)
	t.log.Info("leading the watermark: reading the tracking subscription", watermarkField(t.Watermark()))
	tctx, cancel := context.WithCancel(ctx)
	term := &leadingTerm{est: e, cancel: cancel, done: make(chan struct{}), errc: make(chan error, 1), t: t}
	go func() {
		defer close(term.done)
		if err := t.runTerm(tctx, e); err != nil && tctx.Err() == nil {
			term.errc <- err
		}
	}()
	return term
}

// stop ends the term's goroutines. demoted: another member leads now, so
// this one's finishes go to reports from here on; otherwise (Run ending)
// the estimator stays for the messages still draining and Close.
func (term *leadingTerm) stop(demoted bool) {
	if demoted {
		term.t.est.Store(nil)
		term.t.cfg.Metrics.WatermarkLeader.Set(0)
	}
	term.cancel()
	<-term.done
}

// runTerm reads the tracking subscription, computes the watermark every
// tick and collects the followers' reports, until ctx ends.
func (t *Tracker) runTerm(ctx context.Context, e *estimator) error {
	e.begin(t.cfg.Now())
	var peers *peerReports
	if t.reports != nil {
		peers = newPeerReports(t.reports, t.cfg.Member, t.cfg.Peers, t.cfg.Idle, t.log)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return t.tracking.Run(gctx, gctx, t.receive) })
	g.Go(func() error { t.tickLoop(gctx, e, peers); return nil })
	if t.lead == nil {
		g.Go(func() error { t.ioLoop(gctx, e); return nil })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("watermark: %w", err)
	}
	return nil
}

// tickLoop computes the watermark every tick; before each, a leader with
// followers applies their reports.
func (t *Tracker) tickLoop(ctx context.Context, e *estimator, peers *peerReports) {
	tk := time.NewTicker(t.cfg.Tick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if peers != nil {
			peers.collect(ctx, e, t.cfg.Now())
		}
		t.step(e, peers)
	}
}

// step computes and publishes the watermark.
func (t *Tracker) step(e *estimator, peers *peerReports) {
	now := t.cfg.Now()
	in := inputs{oldestInFlight: noEvent, probed: t.probed.Load(), broke: never}
	if oldest, ok := t.oldestHeld(now); ok {
		in.oldestInFlight = oldest.UnixNano()
	}
	if peers != nil {
		in.oldestInFlight = min(in.oldestInFlight, peers.oldest(now))
	}
	if t.cfg.Streams != nil {
		st := t.cfg.Streams()
		in.down = st.Open == 0
		if !st.Broke.IsZero() {
			in.broke = st.Broke.UnixNano()
		}
	}
	if t.pausedTick.Swap(false) || t.waiting.Load() > 0 {
		in.down = true // paused at MaxPending: messages wait in the subscription
	}
	// From here the tick's pending count holds what was delivered so far
	// (what comes during its sweep may count twice: on the safe side).
	t.sinceTick.Store(0)
	if wm := e.tick(now, in); wm != never {
		t.publish(wm)
	}
}

func (t *Tracker) publish(wm int64) {
	for {
		old := t.published.Load()
		if wm <= old {
			return
		}
		if t.published.CompareAndSwap(old, wm) {
			return
		}
	}
}

// heldWarning is how old the oldest unfinished message may get before the
// tracker warns that it holds the watermark back.
const heldWarning = 5 * time.Minute

// warnings is what the leader's io work has said, so that it says it once.
type warnings struct {
	warned, began, paused time.Time
	guard                 bool
	breaks                int64
}

// ioLoop is the leader's io work every StoreEvery when there is no lease
// (a tracker without a state table).
func (t *Tracker) ioLoop(ctx context.Context, e *estimator) {
	tk := time.NewTicker(t.cfg.StoreEvery)
	defer tk.Stop()
	warn := warnings{began: t.cfg.Now(), guard: true}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		t.lead1(ctx, e, &warn)
	}
}

// lead1 is one round of the leader's io work: probe the tracking
// subscription while it is silent, store the watermark, and say what
// holds it.
func (t *Tracker) lead1(ctx context.Context, e *estimator, w *warnings) {
	now := t.cfg.Now()
	if t.probe != nil && e.silentFor(now) >= t.cfg.Transit {
		pctx, cancel := context.WithTimeout(ctx, t.cfg.StoreEvery)
		if err := t.probe(pctx); err == nil {
			t.probed.Store(now.UnixNano())
		} else if ctx.Err() == nil {
			t.log.Warn("tracking subscription does not answer; the watermark holds until it does", zap.Error(err))
		}
		cancel()
	}
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	if err := t.save(sctx); err != nil && ctx.Err() == nil {
		t.log.Warn("cannot store the watermark; retrying", zap.Error(err))
	}
	cancel()
	st := e.stats()
	if t.waiting.Load() > 0 && now.Sub(w.paused) > time.Minute {
		w.paused = now
		t.log.Warn("the tracker holds as many unfinished messages as its budget allows: the tracking subscription is paused and the watermark holds until the pipeline catches up",
			zap.Int64("pending", st.Pending), zap.Int64("max_pending", t.cfg.MaxPending))
	}
	if w.guard && !st.StartupGuard {
		w.guard = false
		t.log.Info("startup guard off: the pipeline finished every message published before the start", watermarkField(t.Watermark()))
	}
	if st.StreamBreaks > w.breaks {
		w.breaks = st.StreamBreaks
		t.log.Info("the tracking subscription's reader broke (a failed pull or a broken stream); the tracker's frontier holds until what it held has been redelivered",
			zap.Time("until", st.HeldUntil))
	}
	switch {
	case now.Sub(w.warned) <= time.Minute:
	case !st.OldestPending.IsZero() && now.Sub(st.OldestPending) > heldWarning:
		w.warned = now
		t.log.Warn("the watermark is held by messages the tracker received and the pipeline has not finished",
			zap.Int64("pending", st.Pending), zap.Time("oldest_publish_time", st.OldestPending), watermarkField(t.Watermark()))
	case st.StartupGuard && now.Sub(w.began) > heldWarning:
		w.warned = now
		t.log.Warn("the startup guard holds the watermark: the pipeline still holds or keeps finishing messages published before the start",
			zap.Duration("since_start", now.Sub(w.began)), watermarkField(t.Watermark()))
	}
}
