package bigtable

// The Sink: its construction, Check, Write and Close, and the checks of a
// row against Bigtable's limits before any I/O; flush.go writes the batches.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/internal/warm"
	"github.com/pubsink/pubsink/sinks"
)

// Bigtable's hard limits (https://cloud.google.com/bigtable/quotas#limits-data-size).
// A row over one of them can never be written, so it is rejected before any
// I/O instead of failing, or stalling, the batch it would have joined.
const (
	MaxKeyBytes       = 4 << 10   // row key
	MaxQualifierBytes = 16 << 10  // column qualifier
	MaxCellBytes      = 100 << 20 // one cell value
	MaxRowBytes       = 256 << 20 // all values of one row
	// MaxCells is the most mutations one MutateRows request may carry. The
	// client splits a batch into requests under it, but never splits a row.
	MaxCells = 100_000
)

// Limits are Bigtable's hard size limits, for the pipeline to check before a
// write (and dead-letter as too_large). Write checks them too, and rejects a
// row over them with a *sinks.RejectedError. Read-only.
var Limits = sinks.Limits{MaxKeyBytes: MaxKeyBytes, MaxCellBytes: MaxCellBytes, MaxRowBytes: MaxRowBytes}

// checkKey is the row read by Check, and the row of the schema probe (see
// probeSchema). Reading a row that exists is harmless (one cell, its value
// stripped), but this one almost certainly does not; the probe touches only
// its own cell in it.
const checkKey = "\x00pubsink-check\x00"

// Sink writes the rows of messages to the Bigtable tables its configuration
// names, with ApplyBulk. See the package documentation for its guarantees.
type Sink struct {
	// targets are the (table, column family) pairs of the configuration's
	// mappings (cfg.AllMappings), in their order. Fixed by New, read
	// without a lock.
	targets []*target
	// table and family are the configuration's defaults (cfg.Table,
	// cfg.ColumnFamily), which a row naming no table or family names; own
	// is their pair, or nil when no mapping writes to it.
	table, family string
	own           *target
	instance      string
	log           *zap.Logger
	metrics       Metrics
	batcher       *batch.Batcher[*item]
	timeout       time.Duration // applyTimeout; shorter in tests
	// tombstones is the tombstone family of the tables that change
	// mappings write (cfg.TombstoneFamily), each of which has a target of
	// it; direct tracks the writes of messages with change rows, which
	// calls runs (change.go).
	tombstones string
	direct     directWrites
	calls      *warm.Pool
}

// target is one (table, column family) pair that rows are written to: the
// table, opened once for all the pairs that name it, and what the sink last
// found missing of the pair, while it lasts (schema.go).
type target struct {
	name   string // the table's ID
	table  *cbt.Table
	family string
	log    *zap.Logger // names the table and family
	fault  schemaFault
}

// Metrics are the instruments a Sink records to. A nil field records
// nothing.
type Metrics struct {
	// WriteSeconds observes the duration of each ApplyBulk call, and of
	// each call of a change row (change.go).
	WriteSeconds prometheus.Observer
	// WriteErrors returns the counter of rows whose write failed with the
	// gRPC code named code: a failed call counts once for each of its rows,
	// a row refused in a batch and then alone counts once, for its last
	// error; rows rejected before any I/O do not count.
	WriteErrors func(code string) prometheus.Counter
}

// entry is one row ready for ApplyBulk: its target (table and family), key
// and cell timestamp, and its cells, whose values are one copy of the row's.
// Its mutation is built by the flush (mutation), on the batcher's goroutine:
// the writers' goroutines are the Pub/Sub client's, one per message, whose
// stacks start small and grow (a copy of the stack) when a call goes past
// them, and the allocations of a mutation go deep into the runtime.
type entry struct {
	to   *target
	key  string
	ts   cbt.Timestamp
	cell sinks.Cell   // the first cell: a row has at least one
	more []sinks.Cell // the others
}

// mutation is the entry's mutation: one SetCell per cell.
func (e *entry) mutation() *cbt.Mutation {
	mut := cbt.NewMutation()
	mut.Set(e.to.family, e.cell.Column, e.ts, e.cell.Value)
	for _, c := range e.more {
		mut.Set(e.to.family, c.Column, e.ts, c.Value)
	}
	return mut
}

// item is what one Write queues: the entries of all the rows of one
// message, in the order of its rows, so that they travel in the same batch
// (an item is never split). The batcher holds pointers, so that Write passes
// one word down to the batch; the first entry is in the item itself, so
// that a message of one row, the common case, costs a single allocation for
// the item and its entry.
type item struct {
	first entry
	more  []entry // the rows after the first
	// after is what the item's rows wait for before they are sent (the
	// rows' sinks.Row.After); nil: nothing.
	after sinks.Ready
}

// rows is the number of rows of the item.
func (it *item) rows() int { return 1 + len(it.more) }

// entry is the entry of row i.
func (it *item) entry(i int) *entry {
	if i == 0 {
		return &it.first
	}
	return &it.more[i-1]
}

// New returns a sink writing to the tables and column families of cfg's
// mappings (cfg.AllMappings); a row that names no table or family names
// cfg.Table and cfg.ColumnFamily, the mappings' defaults. It batches by
// cfg.Batch. Each table is opened once (client.Open, which does no I/O);
// New does no I/O: call Check to verify the tables. The client stays the
// caller's: Close does not close it. m, if not nil, receives the sink's
// metrics.
func New(client *cbt.Client, log *zap.Logger, cfg config.Sink, m *Metrics) *Sink {
	s := &Sink{
		table:    cfg.Table,
		family:   cfg.ColumnFamily,
		instance: cfg.Instance,
		log:      log.Named("bigtable"),
		timeout:  applyTimeout,
	}
	for _, mp := range cfg.AllMappings() {
		s.addTarget(client, mp.Table, mp.ColumnFamily)
	}
	s.own = s.lookup(s.table, s.family)
	if tables := cfg.ChangeTables(); len(tables) > 0 {
		s.tombstones = cfg.TombstoneFamily
		for _, t := range tables {
			s.addTarget(client, t, s.tombstones)
		}
	}
	s.direct.init()
	// The calls of change rows run on goroutines whose stacks have grown
	// already, not on the Pub/Sub client's, which start small for each
	// message (see entry).
	s.calls = warm.New(MaxChangeCalls, 0)
	if m != nil {
		s.metrics = *m
	}
	s.batcher = batch.New(batch.Config{
		// A message counts as its rows: max_messages bounds the entries of
		// an ApplyBulk (AddN in Write).
		MaxItems: cfg.Batch.MaxMessages,
		MaxBytes: int(cfg.Batch.MaxBytes),
		MaxDelay: cfg.Batch.MaxDelay,
		// Twice the batcher's default: a handful of concurrent ApplyBulk
		// calls per pipeline keeps one slow call from stalling the others,
		// and a batch whose rows wait for their dedupe claims (Row.After)
		// holds its slot while it waits, so that as many slots again keep
		// that many calls going (measured: at 10 streams, with 4 slots,
		// exactly_once drained about a fifth slower than when the callers
		// waited for their claims before the batch). config.Batch has no
		// setting for it.
		MaxInFlight: 2 * batch.DefaultMaxInFlight,
	}, s.flush)
	return s
}

// addTarget adds the pair (table, family) unless it is there, opening the
// table unless another pair did.
func (s *Sink) addTarget(client *cbt.Client, table, family string) {
	var tbl *cbt.Table
	for _, t := range s.targets {
		if t.name == table {
			if t.family == family {
				return
			}
			tbl = t.table
		}
	}
	if tbl == nil {
		tbl = client.Open(table)
	}
	s.targets = append(s.targets, &target{
		name: table, table: tbl, family: family,
		log: s.log.With(zap.String("table", table), zap.String("family", family)),
	})
}

// target returns the pair row names (empty: the configuration's default
// table or family), or nil when the configuration does not name it.
func (s *Sink) target(row *sinks.Row) *target {
	if row.Table == "" && row.Family == "" {
		return s.own
	}
	return s.lookup(cmp.Or(row.Table, s.table), cmp.Or(row.Family, s.family))
}

// lookup returns the pair (table, family), or nil when the configuration
// does not name it.
func (s *Sink) lookup(table, family string) *target {
	for _, t := range s.targets {
		if t.name == table && t.family == family {
			return t
		}
	}
	return nil
}

// Write sends rows, all the rows of one message, as one item of the next
// batch (where each row is one ApplyBulk entry, and counts as one against
// max_messages), and blocks until the batch was applied, or ctx ended. Every
// cell of a row gets the row's Timestamp, truncated to whole milliseconds,
// as its explicit timestamp; its table and family are those it names, or
// the configured ones.
//
// It returns nil once every row is durable in Bigtable; a
// *sinks.RejectedError, whose Row is the row's index, when a row can never
// be written: before any I/O (over a size limit, or naming a table and
// family the configuration does not), in which case no row was written; or
// refused by Bigtable twice with a permanent code, the second time alone, in
// which case the other rows may have been written. It returns ctx.Err() if
// ctx ended first (the rows may still be written afterwards, harmlessly); an
// error wrapping sinks.ErrClosed after Close; any other error is transient
// (some rows may have been written: rewriting them is harmless). Write is
// safe for concurrent use and does not retain rows.
func (s *Sink) Write(ctx context.Context, rows []sinks.Row) error {
	if len(rows) == 0 {
		return nil
	}
	if hasChange(rows) {
		return s.writeChanges(ctx, rows)
	}
	// The errors are made apart, so that the frames on the path of a
	// message that is written stay small (the pipeline calls Write from a
	// goroutine of the Pub/Sub client's, whose stack starts small).
	it, size, err := s.newItem(rows)
	if err != nil {
		return s.rejected(rows, err)
	}
	if err = s.batcher.AddN(ctx, it, len(rows), size); err != nil && errors.Is(err, batch.ErrClosed) {
		return s.closed()
	}
	return err
}

// rejected logs and returns err, newItem's rejection of a row of rows.
func (s *Sink) rejected(rows []sinks.Row, err error) error {
	if r, ok := err.(*sinks.RejectedError); ok && r.Row < len(rows) {
		s.log.Debug("row rejected before writing", zap.Int("row", r.Row), zap.String("key", rows[r.Row].Key), zap.Error(err))
	}
	return err
}

// closed is the error of a Write after Close.
func (s *Sink) closed() error {
	return fmt.Errorf("bigtable sink of table %q: %w", s.targets[0].name, sinks.ErrClosed) // AllMappings has one at least
}

// Close applies the rows already queued and waits for the calls in flight.
// It is idempotent and bounded by ctx: if ctx ends first, the calls in
// flight are cancelled (their writers get a transient error), and Close
// returns ctx.Err() once they returned. It does not close the client.
func (s *Sink) Close(ctx context.Context) error {
	errDirect := s.direct.close(ctx)
	errBatch := s.batcher.Close(ctx)
	return cmp.Or(errDirect, errBatch)
}

// Check verifies that Bigtable is reachable and that every table the
// configuration names exists, with a single-row read in each of a key that
// is almost certainly absent. While a write has found a table or one of its
// column families unusable, it also applies the schema probe of that pair
// (which leaves no cell): it fails, naming the family, until the probe
// succeeds. It does not verify the families otherwise: a read cannot tell,
// and a probe on every readiness check would be a mutation every few
// seconds in the user's tables (and their change streams).
func (s *Sink) Check(ctx context.Context) error {
	for i, t := range s.targets {
		if s.firstOfTable(i) {
			if err := s.checkTable(ctx, t); err != nil {
				return err
			}
		}
	}
	for _, t := range s.targets {
		if t.schemaErr() == nil {
			continue
		}
		if err := s.probeSchema(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// firstOfTable reports whether targets[i] is the first pair of its table.
func (s *Sink) firstOfTable(i int) bool {
	for _, t := range s.targets[:i] {
		if t.table == s.targets[i].table {
			return false
		}
	}
	return true
}

// checkTable is the read of Check in the table of t.
func (s *Sink) checkTable(ctx context.Context, t *target) error {
	_, err := t.table.ReadRow(ctx, checkKey, cbt.RowFilter(cbt.ChainFilters(cbt.CellsPerRowLimitFilter(1), cbt.StripValueFilter())))
	switch {
	case err == nil:
		return nil
	case status.Code(err) == codes.NotFound:
		return fmt.Errorf("bigtable table %q in instance %q does not exist (pubsink setup creates it): %w", t.name, s.instance, err)
	default:
		return fmt.Errorf("bigtable table %q in instance %q cannot be read: %w", t.name, s.instance, err)
	}
}

// newItem checks rows against the configuration and Bigtable's limits,
// makes their item, and returns it with its size for the batch (the sum of
// the rows'). The values are copied, so that rows queued by a writer whose
// ctx ended cannot change under the batch; the copies take one allocation
// for the values of every row, one for the cells after each row's first
// (when there are any) and one for the entries after the first (when there
// are several rows). A row that can never be written makes a
// *sinks.RejectedError naming its index.
func (s *Sink) newItem(rows []sinks.Row) (*item, int, error) {
	it := &item{}
	if len(rows) > 1 {
		it.more = make([]entry, len(rows)-1)
	}
	values, cells, size := 0, 0, 0
	for i := range rows {
		row, e := &rows[i], it.entry(i)
		if e.to = s.target(row); e.to == nil {
			return nil, 0, s.unknownTarget(i, row)
		}
		ts, total, err := checkRow(row)
		if err != nil {
			return nil, 0, rejectRow(i, err)
		}
		e.key, e.ts = row.Key, ts
		values += total
		cells += len(row.Cells) - 1
		size += row.Size()
	}
	it.copyCells(rows, cells, values)
	it.after = rows[0].After
	return it, size, nil
}

// copyCells sets the cells of the item's entries, rows' cells with their
// values copied: cells is the number of cells after each row's first,
// values the size of all the values.
func (it *item) copyCells(rows []sinks.Row, cells, values int) {
	var more []sinks.Cell
	if cells > 0 {
		more = make([]sinks.Cell, cells)
	}
	buf := make([]byte, values) // one copy of every value, one allocation
	for i := range rows {
		e, rc := it.entry(i), rows[i].Cells
		e.more, more = more[:len(rc)-1:len(rc)-1], more[len(rc)-1:]
		for j, c := range rc {
			n := copy(buf, c.Value)
			c.Value, buf = buf[:n:n], buf[n:]
			if j == 0 {
				e.cell = c
			} else {
				e.more[j-1] = c
			}
		}
	}
}

// rejectRow is the rejection of row i, which breaks a limit (err).
func rejectRow(i int, err error) error {
	return &sinks.RejectedError{Row: i, Err: err}
}

// unknownTarget is the rejection of row i, which names a table and family
// that the configuration does not: a bug of the caller, which must not make
// the sink open a table it was not configured with (nor write one).
func (s *Sink) unknownTarget(i int, row *sinks.Row) error {
	return &sinks.RejectedError{Row: i, Err: fmt.Errorf("bigtable: the row names table %q and column family %q, which the sink's configuration does not",
		cmp.Or(row.Table, s.table), cmp.Or(row.Family, s.family))}
}

// checkRow checks row against Bigtable's limits, and returns the timestamp
// of its cells and the size of its values, or the limit it breaks.
func checkRow(row *sinks.Row) (ts cbt.Timestamp, total int, err error) {
	switch {
	case row.Key == "":
		return 0, 0, overLimit("bigtable: empty row key")
	case len(row.Key) > MaxKeyBytes:
		return 0, 0, overLimit("bigtable: row key of %d bytes is over the limit of %d", len(row.Key), MaxKeyBytes)
	case len(row.Cells) == 0:
		return 0, 0, overLimit("bigtable: row has no cells")
	case len(row.Cells) > MaxCells:
		return 0, 0, overLimit("bigtable: row has %d cells, over the limit of %d mutations per request", len(row.Cells), MaxCells)
	}
	// Explicit, millisecond-aligned timestamps make the write idempotent:
	// writing it again replaces the same cell version. UnixMicro rather than
	// cbt.Time, whose UnixNano overflows outside 1678-2262.
	ts = cbt.Timestamp(row.Timestamp.UnixMicro()).TruncateToMilliseconds()
	if ts < 0 {
		// Negative timestamps are invalid, and -1 would mean server time.
		return 0, 0, overLimit("bigtable: cell timestamp %s is before 1970", row.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	for _, c := range row.Cells {
		switch {
		case len(c.Column) > MaxQualifierBytes:
			return 0, 0, overLimit("bigtable: column qualifier of %d bytes is over the limit of %d", len(c.Column), MaxQualifierBytes)
		case len(c.Value) > MaxCellBytes:
			return 0, 0, overLimit("bigtable: value of column %q has %d bytes, over the limit of %d", c.Column, len(c.Value), MaxCellBytes)
		}
		total += len(c.Value)
	}
	if total > MaxRowBytes {
		return 0, 0, overLimit("bigtable: row values total %d bytes, over the limit of %d", total, MaxRowBytes)
	}
	return ts, total, nil
}

// overLimit is the error of a row that breaks a limit.
func overLimit(format string, args ...any) error {
	return fmt.Errorf(format, args...)
}
