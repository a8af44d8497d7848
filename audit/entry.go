package audit

// What the audit expects of the table and what it found there: the types
// the read pass, the comparison and the report share.

import "github.com/pubsink/pubsink/sinks"

// Role is what the live pipeline did with the message an Entry comes from,
// as the audit judges it before reading the table.
type Role uint8

const (
	// Winner: the message's rows must be in the table (the live catalog
	// names it for its key, names nothing for the key, or the pipeline
	// has no rivals: at_least_once, or keyed by the message ID).
	Winner Role = iota
	// Rival: the live catalog names another message for the key; the
	// message's cells must not be in the table, unless the winner writes
	// the same bytes at the same place.
	Rival
)

// Op and Mode are the sink's (sinks.Op, sinks.Mode): what a change row does
// and how a set meets its row; ModePlain is a plain mapping's row (a
// version per distinct timestamp, no tombstones).
type (
	Op   = sinks.Op
	Mode = sinks.Mode
)

const (
	OpSet              = sinks.OpSet
	OpDelete           = sinks.OpDelete
	OpDeleteFamily     = sinks.OpDeleteFamily
	OpDeleteColumns    = sinks.OpDeleteColumns
	ModePlain          = sinks.ModePlain
	ModeUpsert         = sinks.ModeUpsert
	ModeInsert         = sinks.ModeInsert
	ModeReplaceIfNewer = sinks.ModeReplaceIfNewer
)

// Entry is one cell a message's mapping gives (or, for a change row with
// no cell, such as a delete, the row's operation alone, with Column "").
// Entries are sorted by (Table, Row, Family, Column, Timestamp, MessageID)
// before they are compared with the table, so that one row's entries come
// together.
type Entry struct {
	Table  string
	Row    string
	Family string
	// Column is the qualifier; "" for an operation with no cell.
	Column string
	// Timestamp is the cell's Bigtable timestamp in microseconds, whole
	// milliseconds (as the sink writes it).
	Timestamp int64
	Value     []byte

	// The message the entry comes from.
	MessageID   string
	PublishTime int64 // Unix microseconds
	Key         string
	Role        Role
	// MayBeLate: the live pipeline may have dropped the message as late
	// (late_data: drop, and its catalog names nothing for the key): its
	// absent cells are accounted for as late-dropped, not missing.
	MayBeLate bool

	// The row's change, for a change mapping (Mode != ModePlain or
	// Op != OpSet): what the row's operation is, how a set meets the row,
	// and the columns it deletes (delete_columns, or a missing value under
	// on_missing: delete).
	Op     Op
	Mode   Mode
	Delete []string
}

// IsChange reports whether the entry is a change mapping's.
func (e *Entry) IsChange() bool { return e.Op != OpSet || e.Mode != ModePlain }

// Version is one version of a cell the table holds.
type Version struct {
	Timestamp int64 // microseconds
	Value     []byte
}

// Row is what the table holds in one row: family → column → versions,
// newest first. A row the table does not hold is an empty Row.
type Row map[string]map[string][]Version

// Kind is the kind of a finding.
type Kind string

const (
	// Missing: a winner's cell that is not in the table.
	Missing Kind = "missing"
	// Doubled: a cell with a version no winner explains (a rival's, or one
	// no message of the range wrote, within the range's span), or more
	// than one version of a change mapping's cell.
	Doubled Kind = "doubled"
	// Different: the cell is there at its timestamp, with other bytes than
	// the current mapping gives (expected after a mapping change).
	Different Kind = "different"
	// LateDropped: a MayBeLate winner's absent cell; accounted for.
	LateDropped Kind = "late_dropped"
)

// Finding is one line of the report.
type Finding struct {
	Kind   Kind
	Table  string
	Row    string
	Family string
	Column string
	// Timestamp is the cell's timestamp (microseconds), 0 when none.
	Timestamp int64
	Expected  []byte
	Found     []byte
	// MessageID is the message the finding is about: the winner whose
	// cell is missing or different, the rival whose cell is there; ""
	// for a version no message of the range wrote.
	MessageID   string
	PublishTime int64
	Key         string
	// Detail says why, in a sentence.
	Detail string
}

// Span is the range of cell timestamps (microseconds, inclusive) the
// range's messages write: a version within it that no entry explains is a
// doubling; one outside it belongs to messages outside the range.
type Span struct{ From, Until int64 }
