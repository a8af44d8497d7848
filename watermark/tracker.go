package watermark

// Tracker: its Config and construction, and the pipeline's side of it:
// messages received and finished, the published watermark, /status.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/metrics"
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
