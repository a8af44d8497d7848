package pipeline

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultFilterWarnAfter is how long a pipeline's filter must have dropped
// every message, while messages kept arriving, before the pipeline warns.
// A filter that is wrong (a misspelt field, a value of the wrong case)
// drops everything from its first message; a right one on a topic of
// mostly heartbeats lets a reading through within a minute or two. Five
// minutes is past such gaps, and short enough to be seen in the session
// that deployed the filter.
const DefaultFilterWarnAfter = 5 * time.Minute

// FilterWarning is the warning of a filter that has dropped every message
// for FilterWarnAfter or longer while messages arrived: /status's
// filtered_everything.
type FilterWarning struct {
	// Since is when the first of the messages was filtered; Messages
	// counts them (this process's).
	Since    time.Time `json:"since"`
	Messages int64     `json:"messages"`
	Warning  string    `json:"warning"`
}

// filterWatch notices a filter that drops every message. An episode starts
// with a filtered message after one that passed (or the start) and ends
// when a message passes; it is a warning once a filtered message arrives
// after: the episode lasted `after`. The warning is logged once per
// episode. A message passes when its outcome is another than filtered
// (committed, duplicate, dead-lettered, dropped): it got past the filter,
// or was not judged by it.
type filterWatch struct {
	after  time.Duration
	now    func() time.Time
	log    *zap.Logger
	filter string

	open atomic.Bool // an episode is on: passed takes the lock only then
	mu   sync.Mutex
	ep   FilterWarning
	warn bool
}

func newFilterWatch(after time.Duration, now func() time.Time, log *zap.Logger, filter string) *filterWatch {
	if after <= 0 {
		after = DefaultFilterWarnAfter
	}
	if now == nil {
		now = time.Now
	}
	return &filterWatch{after: after, now: now, log: log, filter: filter}
}

// filtered counts a filtered message.
func (w *filterWatch) filtered() {
	w.mu.Lock()
	now := w.now()
	if w.ep.Since.IsZero() {
		w.ep.Since = now
		w.open.Store(true)
	}
	w.ep.Messages++
	start := !w.warn && now.Sub(w.ep.Since) >= w.after
	if start {
		w.warn = true
	}
	ep := w.ep
	w.mu.Unlock()
	if start {
		w.log.Warn(w.text(ep, now), zap.Time("since", ep.Since), zap.Int64("filtered", ep.Messages), zap.String("filter", w.filter))
	}
}

// passed ends the episode, if one is on.
func (w *filterWatch) passed() {
	if !w.open.Load() {
		return
	}
	w.mu.Lock()
	ep, warned := w.ep, w.warn
	w.ep, w.warn = FilterWarning{}, false
	w.open.Store(false)
	w.mu.Unlock()
	if warned {
		w.log.Info("a message passed the filter again", zap.Time("since", ep.Since), zap.Int64("filtered", ep.Messages))
	}
}

// warning returns the episode's warning, nil when there is none.
func (w *filterWatch) warning() *FilterWarning {
	if !w.open.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.warn {
		return nil
	}
	ep := w.ep
	ep.Warning = w.text(ep, w.now())
	return &ep
}

func (w *filterWatch) text(ep FilterWarning, now time.Time) string {
	return fmt.Sprintf("the filter has dropped every message for %s (%d since %s, none passed): check filter %q against the messages",
		now.Sub(ep.Since).Round(time.Second), ep.Messages, ep.Since.UTC().Format(time.RFC3339), w.filter)
}
