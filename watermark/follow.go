package watermark

// Run's rounds: every StoreEvery, read the stored watermark and the
// leader cell, then lead a term (term.go) or follow, a follower
// publishing the stored value and reporting to the leader (report.go).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Run takes part in the pipeline's watermark until ctx ends: it reads the
// stored value (retrying transient errors), then every StoreEvery reads
// the leader cell and the stored value again, and leads or follows. The
// leader reads the tracking subscription, applies the followers' reports,
// computes the watermark every tick and stores it (fenced by its lease);
// a follower publishes the stored value and reports what its pipeline
// finished. It returns nil when ctx ends, or an error when the tracking
// subscription or the state table fails permanently. Call it once.
func (t *Tracker) Run(ctx context.Context) error {
	if t.tracking == nil {
		return errors.New("watermark: Run needs a tracking source")
	}
	if err := t.load(ctx); err != nil {
		return fmt.Errorf("watermark: %w", err)
	}
	if ctx.Err() != nil {
		return nil
	}
	if t.lead == nil {
		return t.runTerm(ctx, t.est.Load())
	}
	var term *leadingTerm
	defer func() {
		if term != nil {
			term.stop(false)
		}
	}()
	io := time.NewTicker(t.cfg.StoreEvery)
	defer io.Stop()
	beat := time.NewTicker(t.cfg.Tick)
	defer beat.Stop()
	var warn warnings
	for {
		leading := t.follow(ctx)
		switch {
		case leading && term == nil:
			term = t.startTerm(ctx)
			warn = warnings{began: t.cfg.Now(), guard: true}
		case !leading && term != nil:
			term.stop(true)
			term = nil
			t.log.Info("no longer the watermark's leader: following the stored watermark", zap.Stringp("leader", t.leader.Load()))
		}
		if term != nil {
			t.lead1(ctx, term.est, &warn)
		}
		for wait := true; wait; {
			select {
			case <-ctx.Done():
				return nil
			case err := <-t.termErr(term):
				return fmt.Errorf("watermark: %w", err)
			case <-beat.C:
				if term == nil && t.reporter != nil {
					if err := t.reporter.heartbeat(ctx, t.cfg.Tick); err != nil && ctx.Err() == nil {
						t.log.Debug("cannot report to the watermark's leader; retrying", zap.Error(err))
					}
				}
			case <-io.C:
				wait = false
			}
		}
	}
}

func (t *Tracker) termErr(term *leadingTerm) <-chan error {
	if term == nil {
		return nil
	}
	return term.errc
}

// follow reads the stored value and the leader cell, publishes the first,
// renews or takes the lease as the rules allow (leadership), and reports
// whether this member leads now.
func (t *Tracker) follow(ctx context.Context) bool {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	st, err := t.store.Load(lctx)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("cannot read the stored watermark and its leader; retrying", zap.Error(err))
		}
	} else {
		t.adopt(st)
		was := t.lead.takeovers
		if _, err := t.lead.observe(lctx, st.Leader); err != nil && ctx.Err() == nil {
			t.log.Warn("cannot renew or take the watermark's leader lease; retrying", zap.Error(err))
		}
		if t.lead.takeovers > was {
			t.takeovers.Add(1)
			t.cfg.Metrics.Takeovers.Inc()
		}
	}
	now := t.cfg.Now()
	trusted := t.lead.trusted(now)
	if trusted {
		t.trustUntil.Store(int64(t.lead.validUntil.Sub(t.base)))
		me := t.cfg.Member
		t.leader.Store(&me)
	} else {
		t.trustUntil.Store(0)
	}
	return trusted
}
