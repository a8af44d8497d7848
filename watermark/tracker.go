package watermark

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/retry"
	"github.com/pubsink/pubsink/source"
)

// Config configures the tracker of one pipeline. Zero durations take the
// defaults below.
type Config struct {
	// Pipeline names the pipeline: the row of the stored watermark.
	Pipeline string
	// StateTable is state.table, in the instance of the client given to
	// NewTracker.
	StateTable string
	// TimestampAttribute and TimestampFormat are source.timestamp_attribute
	// and source.timestamp_format: the tracker reads event times as the
	// pipeline does.
	TimestampAttribute, TimestampFormat string
	// Band is watermark.estimation_band: how far event times are assumed
	// to be out of order. Zero is allowed (event times in publish order).
	Band time.Duration
	// Tick is how often the watermark is computed (default 200ms).
	Tick time.Duration
	// Transit is the assumed delivery latency of a caught-up subscription:
	// the watermark stays at least Band+Transit behind the newest publish
	// time the tracker can vouch for (default 1s).
	Transit time.Duration
	// Idle is how long a subscription must deliver nothing to count as
	// drained, and how long the age of a delivery counts as evidence of a
	// backlog (default 2s).
	Idle time.Duration
	// StoreEvery is how often the watermark is stored when it moved, and
	// how often the tracking subscription is probed while it is silent
	// (default 1s).
	StoreEvery time.Duration
	// Lease is how long a message can stay leased to a process or a
	// stream that died: the startup guard and the hold after a stream
	// break wait it out (default source.LeaseExtension).
	Lease time.Duration
	// Metrics receives the watermark gauge. Required.
	Metrics *metrics.Pipeline
	// Streams, if set, reports the state of the tracking subscription's
	// streams (source.StreamWatch.State): a break holds the tracker's
	// frontier for Lease + Transit. Without it breaks go unnoticed (see
	// doc.go, "Failure modes").
	Streams func() source.StreamState
	// Shared, if set, reports whether other processes may be running the
	// pipeline too (package members). Once it has said so the watermark
	// holds where it is for the life of the tracker: this tracker saw only
	// part of the tracking subscription and only this process's finishes,
	// so what it computed since could pass an event another process had
	// not finished, and its bookkeeping keeps messages others finished
	// pending. One watermark for replicas (a leader) is not built yet.
	Shared func() bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Store, if set, replaces the state table (tests).
	Store Store
	// Probe, if set, replaces the probe of the tracking subscription
	// (tests); by default the subscription's metadata is read.
	Probe func(ctx context.Context) error
}

// Defaults of Config; see doc.go for why.
const (
	DefaultTick       = 200 * time.Millisecond
	DefaultTransit    = time.Second
	DefaultIdle       = 2 * time.Second
	DefaultStoreEvery = time.Second
)

// storeTimeout bounds one write of the watermark; a slow write delays the
// next one, never the computation.
const storeTimeout = 10 * time.Second

// Tracker estimates the event-time watermark of one pipeline from its
// tracking subscription and the messages the pipeline finishes. It
// implements pipeline.Tracker; Run and Close make it a background part of
// the pipeline. See the package documentation for the algorithm.
type Tracker struct {
	cfg       Config
	log       *zap.Logger
	tracking  *source.Source
	store     Store
	probe     func(context.Context) error
	eventTime *EventTime
	est       *estimator

	inFlight   atomic.Pointer[func() (time.Time, bool)] // the pipeline's oldest in-flight publish time (WatchInFlight)
	published  atomic.Int64                             // the watermark (unix ns); never while unknown
	sharedHold atomic.Bool                              // Config.Shared said so once: the watermark holds
	probed     atomic.Int64                             // last successful probe (unix ns)
	loaded     atomic.Bool                              // the stored value was read
	saved      int64                                    // last value stored (unix ns); owned by the io loop and Close
	saveMu     sync.Mutex                               // serializes saves

	closeOnce sync.Once
	closeErr  error
}

// NewTracker returns the tracker of a pipeline that reads tracking (a
// source on the tracking subscription) and stores its watermark through
// state, a client of the state instance (nil with cfg.Store set, or for no
// storage at all). It does no I/O.
func NewTracker(tracking *source.Source, state *bigtable.Client, log *zap.Logger, cfg Config) (*Tracker, error) {
	if cfg.Metrics == nil {
		return nil, errors.New("watermark: Config.Metrics is required")
	}
	if cfg.Band < 0 {
		return nil, fmt.Errorf("watermark: negative estimation band %v", cfg.Band)
	}
	et, err := NewEventTime(cfg.TimestampAttribute, cfg.TimestampFormat)
	if err != nil {
		return nil, fmt.Errorf("watermark: %w", err)
	}
	cfg.Tick = orDefault(cfg.Tick, DefaultTick)
	cfg.Transit = orDefault(cfg.Transit, DefaultTransit)
	cfg.Idle = orDefault(cfg.Idle, DefaultIdle)
	cfg.StoreEvery = orDefault(cfg.StoreEvery, DefaultStoreEvery)
	cfg.Lease = orDefault(cfg.Lease, source.LeaseExtension)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t := &Tracker{
		cfg:       cfg,
		log:       log.Named("watermark").With(zap.String("pipeline", cfg.Pipeline)),
		tracking:  tracking,
		store:     cfg.Store,
		probe:     cfg.Probe,
		eventTime: et,
		saved:     never,
	}
	if t.store == nil && state != nil {
		t.store = newBigtableStore(state, cfg.StateTable, cfg.Pipeline)
	}
	if t.probe == nil && tracking != nil {
		t.probe = func(ctx context.Context) error { _, err := tracking.Check(ctx); return err }
	}
	t.est = newEstimator(params{band: int64(cfg.Band), transit: int64(cfg.Transit), idle: int64(cfg.Idle), lease: int64(cfg.Lease)}, cfg.Now())
	t.published.Store(never)
	t.probed.Store(never)
	return t, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Watermark returns the current watermark, the zero time until it is known
// (until the stored value was read or, with none stored, until the first
// estimate). It never goes backwards. It is an atomic load: safe and cheap
// on the per-message path.
func (t *Tracker) Watermark() time.Time {
	n := t.published.Load()
	if n == never {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Finished records that the pipeline finished m (committed, duplicate,
// dead-lettered or dropped) with the given event time. It takes a shard
// lock for a hash-table update, does no I/O and does not retain m. Safe for
// concurrent use; a message finished twice (a redelivery) counts once.
func (t *Tracker) Finished(m *source.Message, eventTime time.Time) {
	t.est.finished(m.ID, m.PublishTime, eventTime)
}

// WatchInFlight gives the tracker the pipeline's oldest in-flight publish
// time: oldest returns it (to the second), or false when the pipeline holds
// nothing. The tracker calls it once a tick, never per message; until
// WatchInFlight is called, the pipeline counts as holding messages
// published before the start, so the startup guard stays on. Safe for
// concurrent use.
func (t *Tracker) WatchInFlight(oldest func() (time.Time, bool)) {
	t.inFlight.Store(&oldest)
}

// receive is the handler of the tracking subscription: record and ack. A
// message whose event time cannot be read is recorded at its publish time,
// as the pipeline reports it when it dead-letters the message.
func (t *Tracker) receive(_ context.Context, m *source.Message) bool {
	et, err := t.eventTime.Of(m.Attributes, m.PublishTime)
	if err != nil {
		et = m.PublishTime
	}
	t.est.seen(m.ID, m.PublishTime, et)
	return true
}

// Check reads the stored watermark, so that a missing or unreadable state
// table is reported at start. Later calls do nothing once it succeeded.
func (t *Tracker) Check(ctx context.Context) error {
	if t.store == nil || t.loaded.Load() {
		t.loaded.Store(true)
		return nil
	}
	wm, err := t.store.Load(ctx)
	if err != nil {
		return err
	}
	t.est.raise(wm)
	if !wm.IsZero() {
		t.publish(wm.UnixNano())
		t.saveMu.Lock()
		t.saved = wm.UnixNano()
		t.saveMu.Unlock()
		t.log.Info("stored watermark read", zap.Time("watermark", wm))
	}
	t.loaded.Store(true)
	return nil
}

// Run reads the tracking subscription and computes the watermark every
// tick until ctx ends, storing it every StoreEvery when it moved. It first
// reads the stored watermark (retrying transient errors): the watermark
// never starts below it. It returns nil when ctx ends, or an error when
// the tracking subscription or the state table fails permanently. Call it
// once.
func (t *Tracker) Run(ctx context.Context) error {
	if t.tracking == nil {
		return errors.New("watermark: Run needs a tracking source")
	}
	t.est.begin(t.cfg.Now())
	g, gctx := errgroup.WithContext(ctx)
	// Receiving starts at once, so that the histogram is complete even
	// while the stored value is being read.
	g.Go(func() error { return t.tracking.Run(gctx, gctx, t.receive) })
	g.Go(func() error {
		if err := t.load(gctx); err != nil {
			return err
		}
		if gctx.Err() != nil {
			return nil
		}
		var lg errgroup.Group
		lg.Go(func() error { t.tickLoop(gctx); return nil })
		lg.Go(func() error { t.ioLoop(gctx); return nil })
		return lg.Wait()
	})
	if err := g.Wait(); err != nil {
		return fmt.Errorf("watermark: %w", err)
	}
	return nil
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

func (t *Tracker) tickLoop(ctx context.Context) {
	tk := time.NewTicker(t.cfg.Tick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			t.step()
		}
	}
}

// step computes and publishes the watermark.
func (t *Tracker) step() {
	in := inputs{oldestInFlight: never, probed: t.probed.Load(), broke: never}
	if f := t.inFlight.Load(); f != nil {
		in.oldestInFlight = noEvent
		if oldest, ok := (*f)(); ok {
			in.oldestInFlight = oldest.UnixNano()
		}
	}
	if t.cfg.Streams != nil {
		st := t.cfg.Streams()
		in.down = st.Open == 0
		if !st.Broke.IsZero() {
			in.broke = st.Broke.UnixNano()
		}
	}
	wm := t.est.tick(t.cfg.Now(), in)
	if t.cfg.Shared != nil && t.cfg.Shared() && !t.sharedHold.Swap(true) {
		t.log.Warn("another process runs the pipeline: the watermark holds where it is until this process restarts alone",
			zap.Time("watermark", t.Watermark()))
	}
	if wm != never && !t.sharedHold.Load() {
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
			t.cfg.Metrics.Watermark.Set(float64(wm) / 1e9)
			return
		}
	}
}

// heldWarning is how old the oldest unfinished message may get before the
// tracker warns that it holds the watermark back.
const heldWarning = 5 * time.Minute

// ioLoop stores the watermark, probes the tracking subscription while it
// is silent, and warns about a held watermark.
func (t *Tracker) ioLoop(ctx context.Context) {
	tk := time.NewTicker(t.cfg.StoreEvery)
	defer tk.Stop()
	var warned time.Time
	began, guard, breaks := t.cfg.Now(), true, int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		now := t.cfg.Now()
		if t.probe != nil && t.est.silentFor(now) >= t.cfg.Transit {
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
		st := t.est.stats()
		if guard && !st.StartupGuard {
			guard = false
			t.log.Info("startup guard off: the pipeline finished every message published before the start", zap.Time("watermark", t.Watermark()))
		}
		if st.StreamBreaks > breaks {
			breaks = st.StreamBreaks
			t.log.Info("a stream of the tracking subscription broke; the tracker's frontier holds until what it held has been redelivered",
				zap.Time("until", st.HeldUntil))
		}
		switch {
		case now.Sub(warned) <= time.Minute:
		case !st.OldestPending.IsZero() && now.Sub(st.OldestPending) > heldWarning:
			warned = now
			t.log.Warn("the watermark is held by messages the tracker received and the pipeline has not finished",
				zap.Int64("pending", st.Pending), zap.Time("oldest_publish_time", st.OldestPending), zap.Time("watermark", t.Watermark()))
		case st.StartupGuard && now.Sub(began) > heldWarning:
			warned = now
			t.log.Warn("the startup guard holds the watermark: the pipeline still holds or keeps finishing messages published before the start",
				zap.Duration("since_start", now.Sub(began)), zap.Time("watermark", t.Watermark()))
		}
	}
}

// save stores the published watermark if it moved since the last save.
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
	if err := t.store.Save(ctx, time.Unix(0, wm)); err != nil {
		return err
	}
	t.saved = wm
	return nil
}

// Close computes the watermark once more (the pipeline finished its last
// messages after receiving stopped) and stores it. It is bounded by ctx and
// returns ctx's error if cut short; later calls return the first result.
func (t *Tracker) Close(ctx context.Context) error {
	t.closeOnce.Do(func() {
		if !t.loaded.Load() {
			return // never started: nothing known, nothing to store
		}
		t.step()
		err := t.save(ctx)
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		t.closeErr = err
		if err == nil {
			t.log.Info("watermark stored", zap.Time("watermark", t.Watermark()))
		}
	})
	return t.closeErr
}

// Stats returns the tracker's bookkeeping figures as of the last tick, for
// /status.
func (t *Tracker) Stats() Stats {
	s := t.est.stats()
	s.HeldShared = t.sharedHold.Load()
	return s
}
