package sinks

import (
	"context"
	"errors"
	"time"
)

// Cell is one column value of a row. Column is the qualifier; the family
// comes from the sink's configuration.
type Cell struct {
	Column string
	Value  []byte
}

// Row is what one message becomes. Timestamp is the explicit cell timestamp
// (event time or publish time); sinks that keep versions truncate it to whole
// milliseconds so that writing the same row twice yields the same cells.
type Row struct {
	Key       string
	Cells     []Cell
	Timestamp time.Time
}

// Size is the number of bytes the row adds to a batch (key and values).
func (r *Row) Size() int {
	n := len(r.Key)
	for _, c := range r.Cells {
		n += len(c.Column) + len(c.Value)
	}
	return n
}

// Sink writes rows durably.
type Sink interface {
	// Write blocks until the row is durable, or its write failed. It is safe
	// for concurrent use; a sink may batch concurrent writes together. A
	// failure that may pass (unavailable, timeout, cancelled ctx) is
	// returned as is; a failure that can never pass for this row is wrapped
	// in *RejectedError. Write must not retain row after it returns.
	Write(ctx context.Context, row *Row) error
	// Close flushes what is pending and releases the sink. It is idempotent
	// and bounded by ctx.
	Close(ctx context.Context) error
	// Check returns nil when the sink's backend answers and its table
	// exists; readiness (/readyz) asks it. It writes nothing.
	Check(ctx context.Context) error
}

// ErrClosed is returned, wrapped, by Write once Close has been called: the
// row was not written.
var ErrClosed = errors.New("sinks: sink is closed")

// RejectedError marks a write the sink can never accept for this row (a row
// key over the limit, a cell too large, an invalid argument). The pipeline
// dead-letters such a row with reason sink_rejected instead of retrying it.
type RejectedError struct {
	Err error
}

func (e *RejectedError) Error() string { return "sink rejected the row: " + e.Err.Error() }
func (e *RejectedError) Unwrap() error { return e.Err }

// IsRejected reports whether err says the row can never be written.
func IsRejected(err error) bool {
	var r *RejectedError
	return errors.As(err, &r)
}

// Limits are the sizes a sink accepts; zero means no limit. The pipeline
// checks them before writing, so that an oversized row is dead-lettered as
// too_large instead of failing the batch it would have joined.
type Limits struct {
	MaxKeyBytes  int
	MaxCellBytes int
	MaxRowBytes  int
}
