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
	// Change is how a change mapping's row meets what its row holds
	// (docs/reference.md, "Changes"); its zero value is a plain row, whose
	// cells are set as they come, which is all a row was before changes.
	Change Change
	// After, when not nil, is what the row waits for before it is written:
	// its message's dedupe claim, queued ahead of its rows (dedupe's
	// ClaimAhead), which must be durable first. Every row of one Write has
	// the same After (sinks read the first row's).
	After Ready
}

// Ready is what rows wait for before they are written. Wait blocks until
// they may be, and returns nil then; an error says they may not (the claim
// behind them failed or lost its key), or that ctx ended first. It is safe
// to call from several goroutines, and again.
type Ready interface {
	Wait(ctx context.Context) error
}

// Change is what a change mapping's row does, by event time (the row's
// Timestamp, T): sinks that keep versions apply it so that the table ends
// the same whatever order the rows of several messages arrive in, and
// applying one again changes nothing.
type Change struct {
	// Op is the row's operation; Mode how a set meets the row.
	Op   Op
	Mode Mode
	// Delete names the columns that are deleted at T: those of
	// OpDeleteColumns, or, for OpSet, the columns whose value was missing
	// under the policy delete. Set: Cells are set; Delete: these go, in
	// the same row mutation.
	Delete []string
	// Applied is what Write did with the row: filled by Write for a change
	// row when it returns nil.
	Applied Applied
}

// IsChange reports whether the row is a change mapping's.
func (c *Change) IsChange() bool { return c.Op != OpSet || c.Mode != ModePlain }

// Op is the operation of a row.
type Op uint8

const (
	// OpSet sets the row's cells at T.
	OpSet Op = iota
	// OpDelete deletes every cell of the row at T or before, in every
	// family, and leaves a tombstone so that no older change brings them
	// back.
	OpDelete
	// OpDeleteFamily does the same for the cells of the row's family.
	OpDeleteFamily
	// OpDeleteColumns does the same for the columns named in
	// Change.Delete.
	OpDeleteColumns
)

func (o Op) String() string {
	switch o {
	case OpDelete:
		return "delete"
	case OpDeleteFamily:
		return "delete_family"
	case OpDeleteColumns:
		return "delete_columns"
	}
	return "set"
}

// Mode is how an OpSet row of a change mapping meets what the row holds.
type Mode uint8

const (
	// ModePlain sets the cells unconditionally: a plain row (not a change).
	ModePlain Mode = iota
	// ModeUpsert sets each cell unless its column holds a newer one or a
	// tombstone covers it, and keeps one version of it.
	ModeUpsert
	// ModeInsert sets the row only if its family holds nothing of T or
	// before (the earliest insert wins), and no tombstone covers it.
	ModeInsert
	// ModeReplaceIfNewer makes the row's family exactly the row's cells,
	// unless it holds a newer cell or a tombstone covers it.
	ModeReplaceIfNewer
)

func (m Mode) String() string {
	switch m {
	case ModeUpsert:
		return "upsert"
	case ModeInsert:
		return "insert"
	case ModeReplaceIfNewer:
		return "replace_if_newer"
	}
	return "plain"
}

// Applied is what a sink did with a change row.
type Applied struct {
	// Superseded: nothing of the row was set, because the row held newer
	// changes, a tombstone covered it, or, for an insert, an earlier row
	// was there. Only an OpSet row can be superseded; its Delete columns
	// are deleted all the same.
	Superseded bool
	// SkippedCells counts the row's Cells that were not set (all of them
	// when Superseded) for the same reasons.
	SkippedCells int
}

// Size is the number of bytes the row adds to a batch (key, values, and
// the columns it deletes).
func (r *Row) Size() int {
	n := len(r.Key)
	for _, c := range r.Cells {
		n += len(c.Column) + len(c.Value)
	}
	for _, c := range r.Change.Delete {
		n += len(c)
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
	// Write writes no row before its After's Wait returned nil: a row
	// whose After fails is not written, and Write returns After's error
	// (the caller gives its claim up; nothing is dead-lettered).
	//
	// Write must not retain rows, their cells or values after it returns.
	//
	// A change row (Row.Change.IsChange) is applied by event time against
	// what its row holds (docs/reference.md, "Changes"): whatever order the
	// change rows of a row are written in, and however often each is, the
	// row ends the same. Write fills each change row's Change.Applied when
	// it returns nil. A sink that cannot apply changes (stdout) writes them
	// as they are, saying what they are.
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
