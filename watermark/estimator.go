package watermark

import (
	"sync"
	"sync/atomic"
	"time"
)

// params are the tunables of the estimate (see Config).
type params struct {
	band    int64 // estimation_band, ns
	transit int64 // assumed delivery latency of a caught-up subscription, ns
	idle    int64 // quiet time that shows a subscription is drained, ns
	lease   int64 // longest lease of a message held by a dead process or stream, ns
}

// estimator is the algorithm of doc.go without I/O: the histogram, fed by
// seen and finished, and tick, which computes the watermark at a given time.
// Tests drive it with a scripted clock. seen and finished are safe for
// concurrent use; tick is serialized by its own lock.
type estimator struct {
	p    params
	hist *histogram

	mu    sync.Mutex
	start int64 // when tracking began (unix ns)
	wm    int64 // the watermark; never before it is known
	// tc is the tracker's frontier: the estimated publish time before
	// which every message has been delivered to the tracker. It only
	// moves forward.
	tc int64
	// guard: the startup guard is on (see doc.go, "Restart"). lastPre is
	// the last tick at which the pipeline held or finished a message
	// published before the start.
	guard   bool
	lastPre int64
	// preAfter counts the ticks, after the guard dropped, at which the
	// pipeline finished a message published before the start: a redelivery
	// of a finished message (harmless), or the guard dropped too early.
	preAfter int64
	// forgotten counts the pending messages published before the start
	// that were dropped after the guard dropped; guardOff is when it did.
	forgotten, guardOff int64
	// The hold after a break of the tracking subscription's streams (see
	// doc.go, "Stream breaks"): until holdUntil, tc does not pass holdCap.
	// broke is the last break taken into account; quietFrom the last tick
	// at which silence was no evidence (holding, or no stream open).
	broke, holdUntil, holdCap, quietFrom int64
	holds                                int64 // breaks seen
	// window is the evidence of the ticks within the last idle period.
	window []tick
	// lastSeen is the time of the last tick that had a tracker delivery;
	// start before any.
	lastSeen int64
	lastTick int64
	last     scan         // the latest sweep, for Stats
	pending  atomic.Int64 // last.pending, read by the tracking handlers
}

type tick struct {
	at   int64
	seen evidence
}

// inputs are what the tracker learns outside the histogram at a tick.
type inputs struct {
	// oldestInFlight is the publish time (to the second, unix ns) of the
	// oldest message the pipeline is processing; noEvent when it holds
	// none, never while the pipeline has not said.
	oldestInFlight int64
	// probed is the last time the tracking subscription answered a probe
	// (unix ns), or never.
	probed int64
	// broke is the last time a stream of the tracking subscription broke
	// (unix ns), never if none did or nobody watches them; down is true
	// while the tracking subscription is known to have no stream open.
	broke int64
	down  bool
}

func newEstimator(p params, start time.Time) *estimator {
	s := start.UnixNano()
	return &estimator{
		p: p, hist: newHistogram(),
		start: s, wm: never, tc: never, guard: true, lastPre: s,
		holdUntil: never, holdCap: never, quietFrom: never,
		lastSeen: s,
	}
}

// begin restarts the clocks of the startup rules at now: tracking begins
// when the tracking subscription is first read.
func (e *estimator) begin(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := now.UnixNano()
	e.start, e.lastSeen, e.lastPre = n, n, n
}

// silentFor is how long the tracking subscription has delivered nothing,
// as of the last tick.
func (e *estimator) silentFor(now time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Duration(now.UnixNano() - e.lastSeen)
}

// seen records a delivery of the tracking subscription.
func (e *estimator) seen(id string, publish, event time.Time) {
	e.hist.record(id, publish.UnixNano(), event.UnixNano(), flagSeen)
}

// finished records a message the pipeline finished.
func (e *estimator) finished(id string, publish, event time.Time) {
	e.hist.record(id, publish.UnixNano(), event.UnixNano(), flagFinished)
}

// raise makes the watermark at least floor (the stored value at start).
func (e *estimator) raise(floor time.Time) {
	if floor.IsZero() {
		return // nothing stored (and UnixNano of the zero time overflows)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := floor.UnixNano(); n > e.wm {
		e.wm = n
	}
}

// watermark returns the current watermark (unix ns), never if unknown.
func (e *estimator) watermark() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wm
}

// preStart is the publish time before which a message counts as published
// before the start: the start plus the transit allowance, which covers a
// service clock ahead of the host's (a message published before the start
// then carries a publish time after it).
func (e *estimator) preStart() int64 { return e.start + e.p.transit }

// guardMin is the shortest time the startup guard stays on: the messages a
// dead process held come back when their lease expires (at most a lease
// after it died, so before the start plus a lease), are delivered within
// transit, and the pipeline is given an idle period to show them.
func (e *estimator) guardMin() int64 { return e.start + e.p.lease + e.p.transit + e.p.idle }

// tick computes the watermark at now and returns it (unix ns, or never while
// unknown). It also retires the buckets the watermark no longer needs.
func (e *estimator) tick(now time.Time, in inputs) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := now.UnixNano()
	p := e.p
	e.lastTick = t

	// 1. Evidence since the last tick, kept for one idle period.
	// Early messages count from the first whole second after the start
	// (plus transit, as the startup guard counts it): one published
	// before it may have been received and acked by the previous leader's
	// tracker, so this one never receives it, and as an early message it
	// would cap the frontier for maxEarlyAge. Those are the guard's. Seconds
	// are the buckets' resolution, so the start's own second is left out.
	seen, fin, earlySec := e.hist.drain(ceilDiv(max(e.preStart(), t-maxEarlyAge), 1e9))
	e.window = append(e.window, tick{at: t, seen: seen})
	drop := 0
	for drop < len(e.window) && e.window[drop].at <= t-p.idle {
		drop++
	}
	e.window = append(e.window[:0], e.window[drop:]...)
	var seenLag int64 = never
	for _, w := range e.window {
		if w.seen.n > 0 {
			seenLag = max(seenLag, w.at-w.seen.minPub)
			e.lastSeen = max(e.lastSeen, w.at)
		}
	}

	// 2. A break of the tracking subscription's streams: what the server
	// had sent on the dead stream and the tracker never received stays
	// leased to it for up to a lease, while the new stream delivers newer
	// messages. Until that lease has run out (and the messages had the
	// transit to arrive), the frontier stays where it was before the
	// break, and silence is no evidence of an idle topic.
	if in.broke > e.broke { // e.broke starts at 0: never and the zero value are no break
		e.broke = in.broke
		e.holds++
		c := min(e.tc, in.broke-p.transit) // never stays never
		if t < e.holdUntil {
			c = min(c, e.holdCap)
		}
		e.holdCap = c
		e.holdUntil = max(e.holdUntil, in.broke+p.lease+p.transit)
	}
	holding := t < e.holdUntil
	if holding || in.down {
		e.quietFrom = t
	}

	// 3. The tracker's frontier: from the age of what it receives, or, when
	// its streams are up and it has received nothing for an idle period
	// and the subscription answered a probe since, from the time of that
	// probe.
	quietSince := max(e.lastSeen, e.quietFrom)
	next := int64(never)
	switch {
	case seenLag != never:
		next = t - max(p.transit, seenLag)
	case t-quietSince >= e.quiet(e.lastSeen) && in.probed >= quietSince:
		next = min(t, in.probed) - p.transit
	}
	if holding {
		next = min(next, e.holdCap)
	}
	e.tc = max(e.tc, next)
	tc := e.tc
	if holding {
		tc = min(tc, e.holdCap)
	}
	if earlySec != noEvent && tc != never {
		// The pipeline finished a message published then that the tracker
		// has not received yet: the tracker is behind at least that far.
		tc = min(tc, earlySec*1e9)
	}

	// 4. The startup guard: the messages of the previous run that its
	// tracker acked and its pipeline never finished are unknown to this
	// histogram. It stays on for at least guardMin, and until the pipeline
	// has held and finished nothing published before the start for an
	// idle period.
	pre := e.preStart()
	if fin.n > 0 && fin.minPub < pre {
		if e.guard {
			e.lastPre = t
		} else {
			e.preAfter++
		}
	}
	if e.guard {
		if in.oldestInFlight < pre { // never (not told) counts as held
			e.lastPre = t
		}
		if t >= e.guardMin() && t-e.lastPre >= p.idle {
			e.guard = false
			e.guardOff = t
		}
	}
	if !e.guard && t >= e.guardOff+forgetAfter*p.lease && e.last.oldestSec != noEvent && e.last.oldestSec*1e9 < pre {
		// Messages published before the start that this tracker received
		// and nobody reported finished, though no member holds them and
		// the guard has been off for a while: a previous tracker or leader
		// saw them finished (a redelivery to this tracker of a message
		// whose ack the previous one never sent). Waiting for those would
		// hold the watermark for ever. Those still in flight somewhere
		// are kept.
		below := floorDiv(pre, 1e9)
		if in.oldestInFlight != noEvent && in.oldestInFlight != never {
			below = min(below, floorDiv(in.oldestInFlight, 1e9))
		}
		if in.oldestInFlight != never {
			e.forgotten += e.hist.forget(below)
		}
	}

	// 5. Retire what no longer matters, and bound the watermark.
	bandStart := t - p.band
	horizon := bandStart
	if tc != never {
		horizon = min(horizon, tc)
	} else {
		horizon = never
	}
	horizonSec := int64(never)
	if horizon != never {
		horizonSec = floorDiv(horizon, 1e9)
	}
	sc := e.hist.sweep(horizonSec, floorDiv(bandStart, 1e9))
	e.last = sc
	e.pending.Store(sc.pending)

	if tc != never && !e.guard {
		c := min(tc-p.band, sc.minPending, sc.minBand)
		if c > e.wm {
			e.wm = c
		}
	}
	return e.wm
}

// forgetAfter is how many leases after the startup guard dropped the
// tracker stops waiting for messages published before the start that it
// received and no member holds or reported (see doc.go, "Restart").
const forgetAfter = 2

// pendingCount is the number of pending messages as of the last tick. It
// is an atomic load, for the tracking handlers.
func (e *estimator) pendingCount() int64 { return e.pending.Load() }

// quiet is how long a subscription must deliver nothing, after its last
// delivery at last, to count as drained: one idle period, or startupQuiet
// when it has delivered nothing since tracking began, since opening the
// streams and receiving a first backlog can take a few seconds.
func (e *estimator) quiet(last int64) int64 {
	if last == e.start {
		return startupQuiet * e.p.idle
	}
	return e.p.idle
}

// startupQuiet is the multiple of the idle period that a subscription must
// stay silent after the start to count as drained.
const startupQuiet = 5

// maxEarlyAge bounds how long a message finished by the pipeline and not
// yet received by the tracker holds the tracker's frontier back. A message
// published after tracking began reaches the tracking subscription within
// seconds; one that has not after ten minutes (the longest ack deadline)
// never will (a subscription filter, an expired message), and must not
// stall the watermark for ever.
const maxEarlyAge = int64(10 * time.Minute)

// Stats are the tracker's figures at the last tick.
type Stats struct {
	// Pending is the number of messages the tracker received that the
	// pipeline has not finished; OldestPending the publish second of the
	// oldest (zero if none).
	Pending       int64     `json:"pending"`
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	// Buckets and Bytes are the histogram's size and approximate memory.
	Buckets int   `json:"buckets"`
	Bytes   int64 `json:"bytes"`
	// TrackerFrontier is the publish time before which the tracker is
	// estimated to have received every message (zero while unknown).
	TrackerFrontier time.Time `json:"tracker_frontier,omitzero"`
	// StartupGuard is true until the pipeline has finished every message
	// published before tracking began (see doc.go, "Restart").
	StartupGuard bool `json:"startup_guard"`
	// PreStartFinishedAfterGuard counts the ticks at which the pipeline
	// finished a message published before the start after the guard had
	// dropped: redeliveries of finished messages, or a guard dropped too
	// early if any of them was judged late.
	PreStartFinishedAfterGuard int64 `json:"pre_start_finished_after_guard"`
	// StreamBreaks counts the breaks of the tracking subscription's streams
	// the tracker held the frontier for; HeldUntil is when the current
	// hold ends (zero if none).
	StreamBreaks int64     `json:"stream_breaks"`
	HeldUntil    time.Time `json:"held_until,omitzero"`
	// Forgotten counts the messages received before the start and never
	// reported finished that the tracker stopped waiting for when the
	// startup guard dropped (see doc.go, "Restart").
	Forgotten int64 `json:"forgotten"`
	// Leading is true while this process leads the pipeline's watermark;
	// Leader is the member named by the leader cell as last read ("" if
	// vacant), Takeovers the times this process took the lease.
	Leading bool `json:"leading"`
	// Paused is true while the tracking subscription waits for the pending
	// messages to drop under Config.MaxPending.
	Paused    bool   `json:"paused"`
	Leader    string `json:"leader,omitempty"`
	Takeovers int64  `json:"takeovers"`
	// MessageLeaseSeconds is Config.Lease: how long a message leased to a
	// dead process or stream may stay out of sight (the lease extension
	// plus the subscriptions' longest redelivery backoff), which the
	// startup guard and the holds after a stream break wait for.
	MessageLeaseSeconds float64 `json:"message_lease_seconds"`
	// Duplicate and ignored arrivals, since the start.
	DuplicateSeen     int64 `json:"duplicate_seen"`
	DuplicateFinished int64 `json:"duplicate_finished"`
	IgnoredSeen       int64 `json:"ignored_seen"`
	IgnoredFinished   int64 `json:"ignored_finished"`
}

func (e *estimator) stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{
		Pending: e.last.pending, Buckets: e.last.buckets, Bytes: e.last.bytes,
		StartupGuard:               e.guard,
		StreamBreaks:               e.holds,
		PreStartFinishedAfterGuard: e.preAfter,
		Forgotten:                  e.forgotten,
		DuplicateSeen:              e.last.stats.dupSeen,
		DuplicateFinished:          e.last.stats.dupFinished,
		IgnoredSeen:                e.last.stats.lateSeen,
		IgnoredFinished:            e.last.stats.lateFinished,
	}
	if e.last.oldestSec != noEvent && e.last.pending > 0 {
		s.OldestPending = time.Unix(e.last.oldestSec, 0).UTC()
	}
	if e.tc != never {
		s.TrackerFrontier = time.Unix(0, e.tc).UTC()
	}
	if e.holdUntil != never && e.holdUntil > e.lastTick {
		s.HeldUntil = time.Unix(0, e.holdUntil).UTC()
	}
	return s
}
