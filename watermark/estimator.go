package watermark

import (
	"sync"
	"time"
)

// params are the tunables of the estimate (see Config).
type params struct {
	band    int64 // estimation_band, ns
	transit int64 // assumed delivery latency of a caught-up subscription, ns
	idle    int64 // quiet time that shows a subscription is drained, ns
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
	// Frontiers: the estimated publish time before which every message has
	// been delivered to the tracker (tc) and finished or held by the
	// pipeline (tm). Both only move forward.
	tc, tm int64
	// guard: the startup guard is on (see doc.go, "Restart").
	guard bool
	// window is the evidence of the ticks within the last idle period.
	window []tick
	// lastSeen and lastFin are the times of the last tick that had a
	// tracker delivery, and a pipeline finish; start before any.
	lastSeen, lastFin int64
	last              scan // the latest sweep, for Stats
}

type tick struct {
	at        int64
	seen, fin evidence
}

// inputs are what the tracker learns outside the histogram at a tick.
type inputs struct {
	// mainInFlight is the number of messages the pipeline is processing.
	mainInFlight int64
	// probed is the last time the tracking subscription answered a probe
	// (unix ns), or never.
	probed int64
}

func newEstimator(p params, start time.Time) *estimator {
	s := start.UnixNano()
	return &estimator{
		p: p, hist: newHistogram(),
		start: s, wm: never, tc: never, tm: never, guard: true,
		lastSeen: s, lastFin: s,
	}
}

// begin restarts the clocks of the startup rules at now: tracking begins
// when the tracking subscription is first read.
func (e *estimator) begin(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := now.UnixNano()
	e.start, e.lastSeen, e.lastFin = n, n, n
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

// tick computes the watermark at now and returns it (unix ns, or never while
// unknown). It also retires the buckets the watermark no longer needs.
func (e *estimator) tick(now time.Time, in inputs) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := now.UnixNano()
	p := e.p

	// 1. Evidence since the last tick, kept for one idle period.
	seen, fin, earlySec := e.hist.drain(floorDiv(max(e.start, t-maxEarlyAge), 1e9))
	e.window = append(e.window, tick{at: t, seen: seen, fin: fin})
	drop := 0
	for drop < len(e.window) && e.window[drop].at <= t-p.idle {
		drop++
	}
	e.window = append(e.window[:0], e.window[drop:]...)
	var seenLag, finLag int64 = never, never
	for _, w := range e.window {
		if w.seen.n > 0 {
			seenLag = max(seenLag, w.at-w.seen.minPub)
			e.lastSeen = max(e.lastSeen, w.at)
		}
		if w.fin.n > 0 {
			finLag = max(finLag, w.at-w.fin.minPub)
			e.lastFin = max(e.lastFin, w.at)
		}
	}

	// 2. The tracker's frontier: from the age of what it receives, or, when
	// it has received nothing for an idle period and the subscription
	// answered a probe since, from the time of that probe.
	switch {
	case seenLag != never:
		e.tc = max(e.tc, t-max(p.transit, seenLag))
	case t-e.lastSeen >= e.quiet(e.lastSeen) && in.probed >= e.lastSeen:
		e.tc = max(e.tc, min(t, in.probed)-p.transit)
	}
	tc := e.tc
	if earlySec != noEvent && tc != never {
		// The pipeline finished a message published then that the tracker
		// has not received yet: the tracker is behind at least that far.
		tc = min(tc, earlySec*1e9)
	}

	// 3. The pipeline's frontier, only until it has caught up with the
	// start (the startup guard): the messages of the previous run that the
	// tracker acked but the pipeline never finished are unknown to this
	// histogram.
	if e.guard {
		switch {
		case finLag != never:
			e.tm = max(e.tm, t-max(p.transit, finLag))
		case t-e.lastFin >= e.quiet(e.lastFin) && in.mainInFlight == 0:
			e.tm = max(e.tm, t-p.transit)
		}
		if e.tm >= e.start {
			e.guard = false
		}
	}

	// 4. Retire what no longer matters, and bound the watermark.
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

	c := int64(never)
	if tc != never {
		c = tc - p.band
		if e.guard {
			c = never
			if e.tm != never {
				c = min(tc, e.tm) - p.band
			}
		}
	}
	if c != never {
		c = min(c, sc.minPending, sc.minBand)
		if c > e.wm {
			e.wm = c
		}
	}
	return e.wm
}

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
	Pending       int64
	OldestPending time.Time
	// Buckets and Bytes are the histogram's size and approximate memory.
	Buckets int
	Bytes   int64
	// TrackerFrontier is the publish time before which the tracker is
	// estimated to have received every message (zero while unknown).
	TrackerFrontier time.Time
	// StartupGuard is true until the pipeline has caught up with the
	// moment tracking began.
	StartupGuard bool
	// Duplicate and ignored arrivals, since the start.
	DuplicateSeen, DuplicateFinished, IgnoredSeen, IgnoredFinished int64
}

func (e *estimator) stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{
		Pending: e.last.pending, Buckets: e.last.buckets, Bytes: e.last.bytes,
		StartupGuard:      e.guard,
		DuplicateSeen:     e.last.stats.dupSeen,
		DuplicateFinished: e.last.stats.dupFinished,
		IgnoredSeen:       e.last.stats.lateSeen,
		IgnoredFinished:   e.last.stats.lateFinished,
	}
	if e.last.oldestSec != noEvent && e.last.pending > 0 {
		s.OldestPending = time.Unix(e.last.oldestSec, 0).UTC()
	}
	if e.tc != never {
		s.TrackerFrontier = time.Unix(0, e.tc).UTC()
	}
	return s
}
