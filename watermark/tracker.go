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
	// Lease is how long a message can stay out of sight, leased to a
	// process that died, a stream that broke or a Pull whose answer was
	// lost: the startup guard and the hold after a break wait it out
	// (default source.LeaseExtension; app gives the longer of it and the
	// tracking subscription's ack deadline, plus the redelivery backoff).
	Lease time.Duration
	// Metrics receives the watermark gauge. Required.
	Metrics *metrics.Pipeline
	// Streams, if set, reports the state of the tracking subscription's
	// reader: its pull loops (source.Puller.State) or streams
	// (source.StreamWatch.State). A break holds the tracker's frontier for
	// Lease + Transit. Unset, breaks go unnoticed (see doc.go, "Failure
	// modes").
	Streams func() source.StreamState
	// MainStreams, if set, reports the state of the main subscription's
	// streams in this process (source.StreamWatch.State). While a break of
	// them is less than Lease + Transit old, this member counts as holding
	// a message published before the start, so the startup guard stays
	// on (see doc.go, "Stream breaks"). Unset, such breaks go unnoticed.
	MainStreams func() source.StreamState
	// Member is this process's member ID (package members): the name it
	// holds the leader lease and writes its reports under. Required with a
	// state table.
	Member string
	// Peers, if set, returns the other live members of the pipeline
	// (package members): the leader waits for a report from each before
	// its startup guard may drop.
	Peers func() []string
	// MaxPending bounds the messages the tracker keeps that it received and
	// the pipeline has not finished (about 13-17 bytes each): at the bound
	// the tracking handler waits, so its pull loop stops pulling, and
	// the watermark holds (it could not pass the oldest of them anyway)
	// until the pipeline catches up. Zero: no bound.
	MaxPending int64
	// LeaderLease is how long the leader cell may stay unchanged before
	// another member takes it over (default DefaultLeaderLease).
	LeaderLease time.Duration
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
// the pipeline. See the package documentation for the algorithm, and
// "Replicas" there for the leader and its followers.
type Tracker struct {
	cfg       Config
	log       *zap.Logger
	tracking  Reader
	store     Store
	probe     func(context.Context) error
	eventTime *EventTime
	params    params

	// est is the estimator of the current leading term; nil while this
	// member follows. Finished records into it, or reports to the leader.
	est      atomic.Pointer[estimator]
	lastEst  atomic.Pointer[estimator] // the latest term's, for Stats
	lead     *leadership               // nil without a store: then this tracker always leads
	reports  reportStore               // nil without a state table
	reporter *reporter                 // a follower's side of reports
	base     time.Time                 // origin of trustUntil
	// trustUntil is leadership.validUntil as nanoseconds since base: the
	// tracking handler acks nothing after it (a paused leader that wakes).
	trustUntil atomic.Int64
	leader     atomic.Pointer[string] // the leader cell's member, as last read
	// waiting counts the tracking handlers waiting for the pending count to
	// drop under MaxPending; pausedTick says one waited since the last tick.
	waiting    atomic.Int64
	pausedTick atomic.Bool
	// sinceTick counts the tracking deliveries since the last tick, which
	// that tick's pending count does not hold: with them the MaxPending
	// bound holds even when a Pull hands over a thousand messages at once.
	sinceTick atomic.Int64
	takeovers atomic.Int64

	inFlight  atomic.Pointer[func() (time.Time, bool)] // the pipeline's oldest in-flight publish time (WatchInFlight)
	published atomic.Int64                             // the watermark (unix ns); never while unknown
	probed    atomic.Int64                             // last successful probe (unix ns)
	loaded    atomic.Bool                              // the stored value was read
	saved     int64                                    // last value stored (unix ns); owned by the io loop and Close
	saveMu    sync.Mutex                               // serializes saves and the lease

	closeOnce sync.Once
	closeErr  error
}

// NewTracker returns the tracker of a pipeline that reads tracking (a
// reader of the tracking subscription; nil for a tracker that never runs)
// and stores its watermark through state, a client of the state instance
// (nil with cfg.Store set, or for no storage at all). It does no I/O.
func NewTracker(tracking Reader, state *bigtable.Client, log *zap.Logger, cfg Config) (*Tracker, error) {
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
	cfg.LeaderLease = orDefault(cfg.LeaderLease, DefaultLeaderLease)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Member == "" {
		cfg.Member = "tracker"
	}
	t := &Tracker{
		cfg:       cfg,
		log:       log.Named("watermark").With(zap.String("pipeline", cfg.Pipeline)),
		tracking:  tracking,
		store:     cfg.Store,
		probe:     cfg.Probe,
		eventTime: et,
		params:    params{band: int64(cfg.Band), transit: int64(cfg.Transit), idle: int64(cfg.Idle), lease: int64(cfg.Lease)},
		saved:     never,
		base:      cfg.Now(),
	}
	if t.store == nil && state != nil {
		t.store = newBigtableStore(state, cfg.StateTable, cfg.Pipeline)
		t.reports = btReports{table: state.Open(cfg.StateTable), pipeline: cfg.Pipeline}
	}
	if t.store != nil {
		t.lead = newLeadership(t.store, cfg.Member, cfg.LeaderLease, cfg.Now)
	}
	if t.reports != nil {
		t.reporter = newReporter(t.reports, cfg.Member, func() (time.Time, bool) { return t.oldestHeld(cfg.Now()) })
	}
	if t.probe == nil && tracking != nil {
		t.probe = func(ctx context.Context) error { _, err := tracking.Check(ctx); return err }
	}
	if t.lead == nil {
		t.startEstimator() // alone by construction: no lease to take
	}
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

// startEstimator begins a leading term's bookkeeping: an empty histogram
// whose startup guard is on, at or above the watermark known so far.
func (t *Tracker) startEstimator() *estimator {
	e := newEstimator(t.params, t.cfg.Now())
	if wm := t.Watermark(); !wm.IsZero() {
		e.raise(wm)
	}
	t.lastEst.Store(e)
	t.est.Store(e)
	return e
}

// Watermark returns the current watermark, the zero time until it is known
// (until the stored value was read or, with none stored, until the first
// estimate). It never goes backwards. It is an atomic load: safe and cheap
// on the per-message path. A follower's is the stored value, read every
// StoreEvery.
func (t *Tracker) Watermark() time.Time {
	n := t.published.Load()
	if n == never {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Leading reports whether this process leads the pipeline's watermark.
func (t *Tracker) Leading() bool { return t.est.Load() != nil }

// Finished records that the pipeline finished m (committed, duplicate,
// dead-lettered or dropped) with the given event time, and returns nil
// once that is safe to ack. A leader records it in its histogram (a shard
// lock, no I/O, no allocation); a follower reports it to the leader and
// returns once the report is durable (within a few milliseconds; the error
// of the state table or ctx's otherwise: do not ack then, the message
// comes back). Safe for concurrent use; a message finished twice (a
// redelivery) counts once.
func (t *Tracker) Finished(ctx context.Context, m *source.Message, eventTime time.Time) error {
	if e := t.est.Load(); e != nil {
		e.finished(m.ID, m.PublishTime, eventTime)
		return nil
	}
	if t.reporter == nil {
		return nil
	}
	return t.reporter.add(ctx, finish{id: m.ID, publish: m.PublishTime.UnixNano(), event: eventTime.UnixNano()})
}

// oldestHeld is the oldest publish time this member holds, for the startup
// guard (here, and in a follower's reports): the pipeline's oldest message
// in flight (WatchInFlight), false when it holds none. It is the epoch
// (held since 1970) while messages may be out of the pipeline's sight:
// before WatchInFlight is called, and, with Config.MainStreams, until the
// main subscription's streams have opened and for Lease + Transit after
// they first opened or last broke. What a broken stream had been sent and
// never handed over stays leased to it until then, and may have been
// published before the start; so may what the emulator leased to a stream
// as it opened and handed over only when that lease ran out (see doc.go,
// "Stream breaks").
func (t *Tracker) oldestHeld(now time.Time) (time.Time, bool) {
	if t.cfg.MainStreams != nil {
		st := t.cfg.MainStreams()
		if st.Opened.IsZero() || now.Before(later(st.Opened, st.Broke).Add(t.cfg.Lease+t.cfg.Transit)) {
			return time.Unix(0, 0), true
		}
	}
	f := t.inFlight.Load()
	if f == nil {
		return time.Unix(0, 0), true // not told
	}
	return (*f)()
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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
// as the pipeline reports it when it dead-letters the message. A leader
// that can no longer be sure it leads (its lease may have been taken over:
// a process paused past its lease, an outage of the state table) acks
// nothing: the message goes back to the subscription for the next leader.
func (t *Tracker) receive(ctx context.Context, m *source.Message) bool {
	e := t.est.Load()
	if e == nil || (t.lead != nil && int64(t.cfg.Now().Sub(t.base)) >= t.trustUntil.Load()) {
		return false
	}
	if t.cfg.MaxPending > 0 {
		if t.full(e) && !t.waitForRoom(ctx, e) {
			return false
		}
		t.sinceTick.Add(1)
	}
	et, err := t.eventTime.Of(m.Attributes, m.PublishTime)
	if err != nil {
		et = m.PublishTime
	}
	e.seen(m.ID, m.PublishTime, et)
	return true
}

// waitForRoom holds a tracking handler until the pending messages are under
// MaxPending again (the pipeline finished some), so that the tracker's
// memory stays bounded: its pull loop (or the client's flow control, on a
// stream) then stops pulling, and the message waits here, not lost (past
// the ack deadline the rest of its batch is redelivered, which changes
// nothing: the histogram counts a message once). While a handler
// waits the tracker's silence is no evidence of an idle topic (step). It
// returns false if ctx ends first.
func (t *Tracker) waitForRoom(ctx context.Context, e *estimator) bool {
	t.waiting.Add(1)
	defer t.waiting.Add(-1)
	for t.full(e) {
		t.pausedTick.Store(true)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(t.cfg.Tick):
		}
	}
	return true
}

// full reports whether the tracker holds MaxPending unfinished messages:
// those of the last tick's count and those delivered since (the finishes
// since count at the next tick, so a pause may start up to a tick early).
// Handlers that check at once may each take one more.
func (t *Tracker) full(e *estimator) bool {
	return e.pendingCount()+t.sinceTick.Load() >= t.cfg.MaxPending
}

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
// more: the pipeline finished its last messages after receiving stopped)
// and vacates the lease, so that another member takes over at once; a
// follower flushes its reports. It is bounded by ctx and returns ctx's
// error if cut short; later calls return the first result.
func (t *Tracker) Close(ctx context.Context) error {
	t.closeOnce.Do(func() {
		var err error
		if t.reporter != nil {
			err = t.reporter.close(ctx)
		}
		e := t.est.Load()
		if e == nil || !t.loaded.Load() {
			t.closeErr = err
			return // never started, or following: nothing to store
		}
		t.step(e, nil)
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

// watermarkField is a watermark for the log: its time, or "unknown" before
// any message made it known (the zero time, which the console log would
// print as 00:00:00.000 and the JSON one as the year 1).
func watermarkField(w time.Time) zap.Field {
	if w.IsZero() {
		return zap.String("watermark", "unknown")
	}
	return zap.Time("watermark", w)
}

// Stalled reports the liveness of the tracking subscription's reader
// (source.Puller.Stalled: nil unless no pull has been answered for the stall
// timeout; source.Source.Stalled: nil unless its streams hung and
// reopening them did not help). A follower, which does not read the
// subscription, is never stalled.
func (t *Tracker) Stalled() error {
	if t.tracking == nil {
		return nil
	}
	return t.tracking.Stalled()
}

// Stats returns the tracker's bookkeeping figures as of the last tick of
// the latest leading term, for /status, with this member's role.
func (t *Tracker) Stats() Stats {
	var s Stats
	if e := t.lastEst.Load(); e != nil {
		s = e.stats()
	}
	s.Leading = t.Leading()
	if l := t.leader.Load(); l != nil {
		s.Leader = *l
	}
	s.Takeovers = t.takeovers.Load()
	s.Paused = t.waiting.Load() > 0
	s.MessageLeaseSeconds = t.cfg.Lease.Seconds()
	return s
}
