package sinks

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Cell is one column value of a row. Column is the qualifier; the family is
// the row's (Row.Family).
type Cell struct {
	Column string
	Value  []byte
}

// Row is one row a message becomes; a message may become several (one per
// element of an array, rows in other tables), written together by one
// Sink.Write. Timestamp is the explicit cell timestamp (event time or
// publish time); sinks that keep versions truncate it to whole milliseconds
// so that writing the same row twice yields the same cells.
//
// Table and Family name where the row goes; empty means the sink's
// configured table (config.Sink.Table) and column family
// (config.Sink.ColumnFamily). A sink that has tables writes only to those its
// configuration names (config.Sink.AllMappings): a row naming another is a
// programming error, which it rejects.
type Row struct {
	Table     string
	Family    string
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

// Sink writes the rows of a message durably.
type Sink interface {
	// Write writes rows, all the rows of one message, and blocks until
	// every one of them is durable, or the write failed. It is safe for
	// concurrent use; a sink may batch concurrent writes together, and
	// sends the rows of one call in the same batch where they fit. With no
	// rows it writes nothing and returns nil.
	//
	// Exactly-once holds for the message as a whole: nil means every row is
	// durable, and only then may the caller record the message as done. A
	// failure that may pass (unavailable, timeout, cancelled ctx) is
	// returned as is, even when other rows were written: the caller retries
	// the whole call, which rewrites the same cells. When a row can never
	// be written, the error is a *RejectedError whose Row is the index in
	// rows of the (first) row refused. The other rows of the message may
	// then have been written, or not (a sink that checks rows before any
	// I/O writes none; Bigtable applies each row on its own, so those of a
	// row refused by Bigtable itself are written): that is harmless, since
	// the caller dead-letters the whole message, and a redelivery or a
	// replay rewrites the same cells.
	//
	// Write must not retain rows, their cells or values after it returns.
	Write(ctx context.Context, rows []Row) error
	// Close flushes what is pending and releases the sink. It is idempotent
	// and bounded by ctx.
	Close(ctx context.Context) error
	// Check returns nil when the sink's backend answers and every table its
	// configuration names exists; readiness (/readyz) asks it. It writes
	// nothing.
	Check(ctx context.Context) error
}

// ErrClosed is returned, wrapped, by Write once Close has been called: no
// row was written.
var ErrClosed = errors.New("sinks: sink is closed")

// RejectedError marks a write the sink can never accept: one row of the
// message can never be written (a row key over the limit, a cell too large,
// an invalid argument, a table the configuration does not name). The
// pipeline dead-letters the whole message with reason sink_rejected instead
// of retrying it.
type RejectedError struct {
	// Row is the index, in the rows given to Write, of the row refused (the
	// first one, when several were).
	Row int
	Err error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("sink rejected row %d of the message: %v", e.Row, e.Err)
}
func (e *RejectedError) Unwrap() error { return e.Err }

// IsRejected reports whether err says a row can never be written.
func IsRejected(err error) bool {
	var r *RejectedError
	return errors.As(err, &r)
}

// Limits are the sizes a sink accepts for one row; zero means no limit. The
// pipeline checks them before writing, so that an oversized row is
// dead-lettered as too_large instead of failing the batch it would have
// joined.
type Limits struct {
	MaxKeyBytes  int
	MaxCellBytes int
	MaxRowBytes  int
}
