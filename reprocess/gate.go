package reprocess

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/pubsink/pubsink/source"
)

// Source is what the gate wraps: the pipeline's source (the method set
// pipeline.Deps names).
type Source interface {
	Run(receiveCtx, workCtx context.Context, h source.Handler) error
	Receiving() bool
	Stalled() error
}

// Gate bounds a run to its range and tells when the range is done. Safe
// for concurrent use.
type Gate struct {
	from, until time.Time // from is zero for a snapshot: the first message seen
	now         func() time.Time

	limit    *rate.Limiter // --rate; nil: no cap
	inFlight atomic.Int64
	done     atomic.Int64 // messages of the range finished (acked)
	beyond   atomic.Int64 // messages after the range, acked unprocessed

	mu       sync.Mutex
	started  time.Time // when the source began receiving; zero before
	last     time.Time // the last arrival of a message of the range
	first    time.Time // the oldest publish time of the range seen
	frontier time.Time // the newest publish time of the range finished
	began    time.Time // the frontier's first value and when, for the rate
	beganAt  time.Time
}

// NewGate returns the gate of a range from (zero: unknown, a snapshot's)
// until; now is the clock (nil: time.Now).
func NewGate(from, until time.Time, now func() time.Time) *Gate {
	if now == nil {
		now = time.Now
	}
	return &Gate{from: from, until: until, now: now}
}

// Limit caps the messages of the range handed on per second with l (see
// RateCap; nil: no cap). A message waits for its token after it arrived,
// in flight, so that the range is not done while messages wait. Call it
// before Run.
func (g *Gate) Limit(l *rate.Limiter) { g.limit = l }

// RateCap is --rate N as a token bucket (nil: no cap, N 0). Its burst is
// a tenth of N (at least one), and it starts full: any second, the first
// included, lets at most 1.1 N through.
func RateCap(n float64) *rate.Limiter {
	if n <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(n), max(1, int(n/10)))
}

// Wrap returns src behind the gate.
func (g *Gate) Wrap(src Source) Source { return gated{src, g} }

type gated struct {
	Source
	g *Gate
}

func (s gated) Run(receiveCtx, workCtx context.Context, h source.Handler) error {
	g := s.g
	g.mu.Lock()
	g.started = g.now()
	g.mu.Unlock()
	return s.Source.Run(receiveCtx, workCtx, func(ctx context.Context, m *source.Message) bool {
		if m.PublishTime.After(g.until) {
			g.beyond.Add(1)
			return true
		}
		g.arrived(m.PublishTime)
		g.inFlight.Add(1)
		defer g.inFlight.Add(-1)
		if g.limit != nil && g.limit.Wait(ctx) != nil {
			return false // stopped while waiting: it comes again
		}
		ack := h(ctx, m)
		if ack {
			g.finished(m.PublishTime)
		}
		return ack
	})
}

func (g *Gate) arrived(publish time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = g.now()
	if g.first.IsZero() || publish.Before(g.first) {
		g.first = publish
	}
}

func (g *Gate) finished(publish time.Time) {
	g.done.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if publish.After(g.frontier) {
		if g.frontier.IsZero() {
			g.began, g.beganAt = publish, g.now()
		}
		g.frontier = publish
	}
}

// Done reports whether the range is done: the source has been receiving,
// no message of the range arrived for idle, and none is in flight.
func (g *Gate) Done(idle time.Duration) bool {
	if g.inFlight.Load() > 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started.IsZero() {
		return false
	}
	return g.now().Sub(later(g.started, g.last)) >= idle
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Progress is how far a run is, for the bar, the log and /status.
type Progress struct {
	// Done counts the messages of the range finished; Beyond those after
	// it, acked unprocessed; InFlight those being processed.
	Done     int64 `json:"done"`
	Beyond   int64 `json:"beyond"`
	InFlight int64 `json:"in_flight"`
	// From and Until are the range (From: the oldest publish time seen,
	// when later than --from, and for a snapshot); Frontier the newest
	// publish time finished.
	From     time.Time `json:"from,omitzero"`
	Until    time.Time `json:"until"`
	Frontier time.Time `json:"frontier,omitzero"`
	// Fraction is how much of the range's time span the frontier covers
	// (0 to 1): the backlog is delivered roughly in publish order, so it
	// is the share of the range done. Left is the time left at the rate
	// the frontier moved, 0 while unknown. Rate is messages per second.
	Fraction float64       `json:"fraction"`
	Left     time.Duration `json:"-"`
	LeftSecs float64       `json:"seconds_left"`
	Rate     float64       `json:"messages_per_second"`
	Elapsed  time.Duration `json:"-"`
	// Quiet is how long no message of the range arrived: the run ends
	// when it reaches the idle period, with nothing in flight.
	Quiet     time.Duration `json:"-"`
	QuietSecs float64       `json:"quiet_seconds"`
}

// Progress returns the run's progress now.
func (g *Gate) Progress() Progress {
	p := Progress{Done: g.done.Load(), Beyond: g.beyond.Load(), InFlight: g.inFlight.Load(), Until: g.until}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	// The range's span starts at its oldest message seen, when that is
	// after --from: a --from before the first message would count the
	// empty stretch as done.
	p.From, p.Frontier = g.from, g.frontier
	if p.From.IsZero() || g.first.After(p.From) {
		p.From = g.first
	}
	if !g.started.IsZero() {
		p.Quiet = now.Sub(later(g.started, g.last))
		p.QuietSecs = p.Quiet.Seconds()
		p.Elapsed = now.Sub(g.started)
		if s := p.Elapsed.Seconds(); s > 0 {
			p.Rate = float64(p.Done) / s
		}
	}
	span := g.until.Sub(p.From)
	if p.Frontier.IsZero() || p.From.IsZero() || span <= 0 {
		return p
	}
	p.Fraction = min(1, max(0, float64(p.Frontier.Sub(p.From))/float64(span)))
	// The frontier's speed since it first moved: publish time covered per
	// second of the run.
	if moved, took := p.Frontier.Sub(g.began), now.Sub(g.beganAt); moved > 0 && took > 0 {
		speed := float64(moved) / float64(took)
		p.Left = time.Duration(float64(g.until.Sub(p.Frontier)) / speed)
		p.LeftSecs = p.Left.Seconds()
	}
	return p
}
