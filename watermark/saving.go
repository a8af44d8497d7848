package watermark

// The stored watermark from the tracker's side: reading it at start
// (Check, load), saving it fenced by the lease, and the final save at
// Close.

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/retry"
)

// Check reads the stored watermark, so that a missing or unreadable state
// table is reported at start. Later calls do nothing once it succeeded.
func (t *Tracker) Check(ctx context.Context) error {
	if t.store == nil || t.loaded.Load() {
		t.loaded.Store(true)
		return nil
	}
	st, err := t.store.Load(ctx)
	if err != nil {
		return err
	}
	t.adopt(st)
	if !st.Watermark.IsZero() {
		t.saveMu.Lock()
		t.saved = st.Watermark.UnixNano()
		t.saveMu.Unlock()
		t.log.Info("stored watermark read", watermarkField(st.Watermark))
	}
	t.loaded.Store(true)
	return nil
}

// adopt takes what was read from the store: the stored watermark (the
// watermark never goes below it) and the leader's name.
func (t *Tracker) adopt(st Stored) {
	if !st.Watermark.IsZero() {
		if e := t.est.Load(); e != nil {
			e.raise(st.Watermark)
		}
		t.publish(st.Watermark.UnixNano())
	}
	holder := parseLease(st.Leader).member
	t.leader.Store(&holder)
}

// load reads the stored value, retrying transient errors until ctx ends. A
// missing table or row family is permanent.
func (t *Tracker) load(ctx context.Context) error {
	err := retry.Default.Do(ctx, func(err error) bool {
		return ctx.Err() == nil && status.Code(err) != codes.NotFound
	}, func() error { return t.Check(ctx) }, func(attempt int, err error) {
		if attempt == 1 || attempt%10 == 0 {
			t.log.Warn("cannot read the stored watermark; the watermark stays unknown until it can", zap.Int("attempt", attempt), zap.Error(err))
		}
	})
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// save stores the published watermark if it moved since the last save:
// fenced by the lease, so a leader that was taken over stores nothing and
// steps down.
func (t *Tracker) save(ctx context.Context) error {
	if t.store == nil {
		return nil
	}
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	wm := t.published.Load()
	if wm == never || wm/1e6 <= t.saved/1e6 { // the stored value has millisecond precision
		return nil
	}
	holder := ""
	if t.lead != nil {
		if !t.lead.leading {
			return nil
		}
		holder = t.lead.mine.String()
	}
	ok, err := t.store.Save(ctx, holder, time.Unix(0, wm))
	if err != nil {
		return err
	}
	if !ok {
		if t.lead != nil {
			t.lead.fenced()
			t.trustUntil.Store(0)
		}
		t.log.Info("the watermark's leader lease was taken over: the watermark is not stored", watermarkField(time.Unix(0, wm).UTC()))
		return nil
	}
	t.saved = wm
	return nil
}

// Close stores the final watermark if this process leads (computed once
// more: the pipeline finished its last messages after receiving stopped),
// or holds the lease in a gap between terms (holdsLease), and vacates the
// lease, so that another member takes over at once; a
// follower flushes its reports. It is bounded by ctx and returns ctx's
// error if cut short; later calls return the first result.
func (t *Tracker) Close(ctx context.Context) error {
	t.closeOnce.Do(func() {
		var err error
		if t.reporter != nil {
			err = t.reporter.close(ctx)
		}
		e := t.est.Load()
		if !t.loaded.Load() || (e == nil && !t.holdsLease()) {
			t.closeErr = err
			return // never started, or following: nothing to store
		}
		if e != nil {
			t.step(e, nil)
		}
		if serr := t.save(ctx); serr != nil && err == nil {
			err = serr
		}
		if t.lead != nil {
			t.saveMu.Lock()
			if rerr := t.lead.release(ctx); rerr != nil && err == nil {
				err = rerr
			}
			t.saveMu.Unlock()
		}
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		t.closeErr = err
		switch {
		case err != nil:
		case t.Watermark().IsZero():
			t.log.Info("watermark unknown: nothing to store")
		default:
			t.log.Info("watermark stored", watermarkField(t.Watermark()))
		}
	})
	return t.closeErr
}

// holdsLease reports whether the leader cell holds this member's lease as
// far as it knows, trusted or not. A leader whose own round came late (a
// slow renewal, a loaded machine) stops trusting itself and ends its term
// until the next round renews; the watermark it published is still the
// last one it computed, and a save fenced by the lease stores it only if
// nobody took the cell meanwhile. Close relies on that: a stop in such a
// gap must not leave the stored watermark behind the published one.
func (t *Tracker) holdsLease() bool {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	return t.lead != nil && t.lead.leading
}

// watermarkField is a watermark for the log: its time, or "unknown" before
// any message made it known (the zero time, which the console log would
// print as 00:00:00.000 and the JSON one as the year 1).
func watermarkField(w time.Time) zap.Field {
	if w.IsZero() {
		return zap.String("watermark", "unknown")
	}
	return zap.Time("watermark", w)
}
