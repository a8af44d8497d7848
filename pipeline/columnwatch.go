package pipeline

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/mapping"
)

// DefaultColumnWarnAfter is how long a column's value must have been
// missing in every committed message that made its mapping's row, while
// such messages were committed, before the pipeline warns. A misspelt path
// under on_missing skip, empty or delete misses from the first message; a
// column that is merely often null (a nullable field) is filled by some
// message within minutes on a pipeline with traffic. The same five minutes
// as the filter's warning (DefaultFilterWarnAfter), for the same reasons.
const DefaultColumnWarnAfter = DefaultFilterWarnAfter

// ColumnWarning is the warning of a column whose value has been missing in
// every committed message that made its mapping's row, for ColumnWarnAfter
// or longer: an element of /status's columns_never_filled.
type ColumnWarning struct {
	// Column is the column's key in the pipeline (sink.columns.last_name,
	// sink.mappings[1].columns.x), Template its template as configured,
	// OnMissing the policy that applied.
	Column    string `json:"column"`
	Template  string `json:"template"`
	OnMissing string `json:"on_missing"`
	// Since is when the first of the messages that missed it was
	// committed; Messages counts them (this process's).
	Since    time.Time `json:"since"`
	Messages int64     `json:"messages"`
	Warning  string    `json:"warning"`
}

// columnWatch notices a column that no committed message fills: a misspelt
// path under a policy other than dead_letter (skip, empty, delete), which
// would otherwise only show in pubsink_missing_values_total. It follows
// every column whose policy is not dead_letter (a missing value under
// dead_letter dead-letters the message, which is seen).
//
// Per column, an episode starts at a committed message that missed the
// column's value (its index is in mapping.Result.MissingColumns) and ends
// at a committed message that filled it (a row of its mapping holds its
// cell with a value); a message that made no row of its mapping (a
// mapping's when was false, a delete row has no cells) neither starts nor
// ends one, and a message that both missed and filled it (rows of an each
// mapping) fills it. It is a warning once a committed message that missed
// it arrives `after` or more after the episode's first, logged once per
// episode, and its gauge (pubsink_column_never_filled) is 1 until the
// episode ends.
//
// Only committed messages count: a duplicate, dead-lettered, dropped or
// filtered message wrote no row of the mapping.
//
// The common case, a message that missed no column while no episode is
// on, costs a length check and an atomic load (committed); the rest takes
// the lock.
type columnWatch struct {
	after time.Duration
	now   func() time.Time
	log   *zap.Logger

	open atomic.Int32 // episodes on: committed takes the lock only then, or for a message that missed a column
	mu   sync.Mutex
	// cols are indexed by the column's index in mapping.Columns; those
	// whose policy is dead_letter are not followed (gauge nil).
	cols []watchedColumn
	// seq numbers the messages the slow path saw, so that a column an each
	// mapping missed in several rows counts the message once.
	seq uint64
}

type watchedColumn struct {
	mapping.Column
	gauge prometheus.Gauge // nil: not followed (dead_letter)

	ep     ColumnWarning // Since is zero while no episode is on
	warned bool
	// seen is the seq of the last message that missed the column.
	seen uint64
}

// newColumnWatch returns the watch of columns, nil when none has a policy
// other than dead_letter: then the pipeline pays nothing for it. Each
// followed column's gauge is exported at 0.
func newColumnWatch(after time.Duration, now func() time.Time, log *zap.Logger, m *metrics.Pipeline, columns []mapping.Column) *columnWatch {
	if after <= 0 {
		after = DefaultColumnWarnAfter
	}
	if now == nil {
		now = time.Now
	}
	w := &columnWatch{after: after, now: now, log: log, cols: make([]watchedColumn, len(columns))}
	followed := false
	for i, c := range columns {
		w.cols[i].Column = c
		if c.OnMissing == config.MissingDeadLetter || c.OnMissing == "" {
			continue
		}
		followed = true
		w.cols[i].gauge = m.ColumnNeverFilled(c.Key)
		w.cols[i].gauge.Set(0)
	}
	if !followed {
		return nil
	}
	return w
}

// committed follows the columns of r, a committed message's result. It is
// safe for concurrent use.
func (w *columnWatch) committed(r *mapping.Result) {
	if len(r.MissingColumns) == 0 && w.open.Load() == 0 {
		return
	}
	w.update(r)
}

// update is committed's slow path: a message that missed a column, or any
// message while an episode is on.
//
//go:noinline
func (w *columnWatch) update(r *mapping.Result) {
	type logged struct {
		c      *watchedColumn
		ep     ColumnWarning
		warned bool // false: the episode ended
	}
	var logs []logged
	w.mu.Lock()
	now := w.now()
	w.seq++
	for _, i := range r.MissingColumns {
		if int(i) >= len(w.cols) || w.cols[i].gauge == nil {
			continue
		}
		w.cols[i].seen = w.seq
	}
	for i := range w.cols {
		c := &w.cols[i]
		missed := c.seen == w.seq
		if c.gauge == nil || (!missed && c.ep.Since.IsZero()) {
			continue
		}
		if r.Filled(i, c.Column) > 0 {
			if c.ep.Since.IsZero() {
				continue
			}
			if c.warned {
				c.gauge.Set(0)
				logs = append(logs, logged{c: c, ep: c.ep})
			}
			c.ep, c.warned = ColumnWarning{}, false
			w.open.Add(-1)
			continue
		}
		if !missed {
			continue // no row of its mapping: neither
		}
		if c.ep.Since.IsZero() {
			c.ep.Since = now
			w.open.Add(1)
		}
		c.ep.Messages++
		if !c.warned && now.Sub(c.ep.Since) >= w.after {
			c.warned = true
			c.gauge.Set(1)
			logs = append(logs, logged{c: c, ep: c.ep, warned: true})
		}
	}
	w.mu.Unlock()
	for _, l := range logs {
		if l.warned {
			w.log.Warn(l.c.text(l.ep, now), zap.String("column", l.c.Key), zap.String("template", l.c.Template),
				zap.Time("since", l.ep.Since), zap.Int64("messages", l.ep.Messages))
		} else {
			w.log.Info("a committed message filled the column again", zap.String("column", l.c.Key),
				zap.Time("since", l.ep.Since), zap.Int64("messages", l.ep.Messages))
		}
	}
}

// warnings returns the columns warned, in Columns order; nil when none is.
func (w *columnWatch) warnings() []ColumnWarning {
	if w.open.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	var out []ColumnWarning
	for i := range w.cols {
		c := &w.cols[i]
		if !c.warned {
			continue
		}
		ep := c.ep
		ep.Column, ep.Template, ep.OnMissing = c.Key, c.Template, c.OnMissing
		ep.Warning = c.text(ep, now)
		out = append(out, ep)
	}
	return out
}

func (c *watchedColumn) text(ep ColumnWarning, now time.Time) string {
	return fmt.Sprintf("column %s has been missing in every committed message for %s (%d since %s, on_missing: %s): check its template %q against the messages",
		c.Key, now.Sub(ep.Since).Round(time.Second), ep.Messages, ep.Since.UTC().Format(time.RFC3339), c.OnMissing, c.Template)
}
