package bigtable

import (
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
	"github.com/pubsink/pubsink/sinks"
)

// Bigtable's hard limits (https://cloud.google.com/bigtable/quotas#limits-data-size).
// A row over one of them can never be written, so it is rejected before any
// I/O instead of failing, or stalling, the batch it would have joined.
const (
	MaxKeyBytes       = 4 << 10   // row key
	MaxQualifierBytes = 16 << 10  // column qualifier
	MaxCellBytes      = 100 << 20 // one cell value
	MaxRowBytes       = 256 << 20 // all values of one row (of one write, here)
	// MaxCells is the most mutations one MutateRows request may carry. The
	// client splits a batch into requests under it, but never splits a row.
	MaxCells = 100_000
)

// Limits are Bigtable's hard size limits, for the pipeline to check before a
// write (and dead-letter as too_large). Write checks them too, and rejects a
// row over them with a *sinks.RejectedError. Read-only.
var Limits = sinks.Limits{MaxKeyBytes: MaxKeyBytes, MaxCellBytes: MaxCellBytes, MaxRowBytes: MaxRowBytes}

// applyTimeout bounds one ApplyBulk call, the client's own retries included.
//
// The client retries inside ApplyBulk: a whole-call failure, or entries that
// failed with Unavailable, DeadlineExceeded or Aborted, are sent again with
// backoff (100 ms growing to 2 s) as long as every SetCell has an explicit
// timestamp, which ours always have (mutationsAreRetryable in the client's
// bigtable.go; getApplyBulkRetries in apply_bulk.go). It has no attempt
// limit: it stops only when ctx ends. Without this bound, a stalled
// connection or an outage would hold a batch, and every caller waiting on
// it, until shutdown. With it, after 30 s the call fails with
// DeadlineExceeded, the callers get a transient error, and the pipeline's
// own backoff decides when to try again while Pub/Sub's ack deadline is
// extended. So the two layers do not multiply: within one call the client
// retries the codes it knows; between calls only the pipeline retries, and
// the sink never loops. 30 s is well beyond a healthy ApplyBulk (tens of
// milliseconds) and well within the ack-deadline extension of the source.
const applyTimeout = 30 * time.Second

// checkKey is the row read by Check, and the row of the schema probe (see
// probeSchema). Reading a row that exists is harmless (one cell, its value
// stripped), but this one almost certainly does not; the probe touches only
// its own cell in it.
const checkKey = "\x00pubsink-check\x00"

// Sink writes rows to one Bigtable table with ApplyBulk. See the package
// documentation for its guarantees.
type Sink struct {
	table     *cbt.Table
	tableName string
	instance  string
	family    string
	log       *zap.Logger
	metrics   Metrics
	batcher   *batch.Batcher[*entry]
	timeout   time.Duration // applyTimeout; shorter in tests

	// fault is the table or family found missing, while it lasts: see
	// schema.go.
	fault schemaFault
}

// Metrics are the instruments a Sink records to. A nil field records
// nothing.
type Metrics struct {
	// WriteSeconds observes the duration of each ApplyBulk call.
	WriteSeconds prometheus.Observer
	// WriteErrors returns the counter of rows whose write failed with the
	// gRPC code named code: a failed call counts once for each of its rows,
	// a row refused in a batch and then alone counts once, for its last
	// error; rows rejected before any I/O do not count.
	WriteErrors func(code string) prometheus.Counter
}

// entry is one row ready for ApplyBulk: its key, family and cell timestamp,
// and its cells, whose values are one copy of the row's. Its mutation is
// built by the flush (mutation), on the batcher's goroutine: the writers'
// goroutines are the Pub/Sub client's, one per message, whose stacks start
// small and grow (a copy of the stack) when a call goes past them, and the
// allocations of a mutation go deep into the runtime. The batcher holds
// pointers, so that Write passes one word down to the batch.
type entry struct {
	key    string
	family string
	ts     cbt.Timestamp
	cell   sinks.Cell   // the first cell: a row has at least one
	more   []sinks.Cell // the others
}

// mutation is the entry's mutation: one SetCell per cell.
func (e *entry) mutation() *cbt.Mutation {
	mut := cbt.NewMutation()
	mut.Set(e.family, e.cell.Column, e.ts, e.cell.Value)
	for _, c := range e.more {
		mut.Set(e.family, c.Column, e.ts, c.Value)
	}
	return mut
}

// New returns a sink writing to table cfg.Table, column family
// cfg.ColumnFamily, through client, batching by cfg.Batch. It does no I/O:
// call Check to verify the table. The client stays the caller's: Close does
// not close it. m, if not nil, receives the sink's metrics.
func New(client *cbt.Client, log *zap.Logger, cfg config.Sink, m *Metrics) *Sink {
	s := &Sink{
		table:     client.Open(cfg.Table),
		tableName: cfg.Table,
		instance:  cfg.Instance,
		family:    cfg.ColumnFamily,
		log:       log.Named("bigtable").With(zap.String("table", cfg.Table)),
		timeout:   applyTimeout,
	}
	if m != nil {
		s.metrics = *m
	}
	s.batcher = batch.New(batch.Config{
		MaxItems: cfg.Batch.MaxMessages,
		MaxBytes: int(cfg.Batch.MaxBytes),
		MaxDelay: cfg.Batch.MaxDelay,
		// MaxInFlight: the batcher's default. config.Batch has no setting
		// for it; a handful of concurrent ApplyBulk calls per pipeline keeps
		// one slow call from stalling the others.
	}, s.flush)
	return s
}

// Write sends row in the next batch and blocks until the batch was applied,
// or ctx ended. Every cell gets row.Timestamp, truncated to whole
// milliseconds, as its explicit timestamp; the family is the configured one.
//
// It returns nil once the row is durable in Bigtable; a *sinks.RejectedError
// when the row can never be written (over a size limit, or refused by
// Bigtable twice with a permanent code, the second time alone); ctx.Err() if
// ctx ended first (the row may still be written afterwards, harmlessly);
// an error wrapping sinks.ErrClosed after Close; any other error is
// transient. Write is safe for concurrent use and does not retain row.
func (s *Sink) Write(ctx context.Context, row *sinks.Row) error {
	// The errors are made apart, so that the frames on the path of a row
	// that is written stay small (the pipeline calls Write from a goroutine
	// of the Pub/Sub client's, whose stack starts small).
	e, err := newEntry(row, s.family)
	if err != nil {
		return s.rejected(row, err)
	}
	if err = s.batcher.Add(ctx, e, row.Size()); err != nil && errors.Is(err, batch.ErrClosed) {
		return s.closed()
	}
	return err
}

// rejected logs and returns err, newEntry's rejection of row.
func (s *Sink) rejected(row *sinks.Row, err error) error {
	s.log.Debug("row rejected before writing", zap.String("key", row.Key), zap.Error(err))
	return err
}

// closed is the error of a Write after Close.
func (s *Sink) closed() error {
	return fmt.Errorf("bigtable table %q: %w", s.tableName, sinks.ErrClosed)
}

// Close applies the rows already queued and waits for the calls in flight.
// It is idempotent and bounded by ctx: if ctx ends first, the calls in
// flight are cancelled (their writers get a transient error), and Close
// returns ctx.Err() once they returned. It does not close the client.
func (s *Sink) Close(ctx context.Context) error {
	return s.batcher.Close(ctx)
}

// Check verifies that Bigtable is reachable and the table exists, with a
// single-row read of a key that is almost certainly absent. While a write
// has found the table or the column family unusable, it also applies the
// schema probe (which leaves no cell): it fails, naming the family, until
// the probe succeeds. It does not verify the family otherwise: a read cannot
// tell, and a probe on every readiness check would be a mutation every few
// seconds in the user's table (and its change stream).
func (s *Sink) Check(ctx context.Context) error {
	if err := s.checkTable(ctx); err != nil {
		return err
	}
	if s.schemaErr() == nil {
		return nil
	}
	return s.probeSchema(ctx)
}

// checkTable is the read of Check.
func (s *Sink) checkTable(ctx context.Context) error {
	_, err := s.table.ReadRow(ctx, checkKey, cbt.RowFilter(cbt.ChainFilters(cbt.CellsPerRowLimitFilter(1), cbt.StripValueFilter())))
	switch {
	case err == nil:
		return nil
	case status.Code(err) == codes.NotFound:
		return fmt.Errorf("bigtable table %q in instance %q does not exist (pubsink setup creates it): %w", s.tableName, s.instance, err)
	default:
		return fmt.Errorf("bigtable table %q in instance %q cannot be read: %w", s.tableName, s.instance, err)
	}
}

// newEntry checks row against Bigtable's limits and makes its entry. The
// values are copied, so that a row queued by a writer whose ctx ended cannot
// change under the batch.
func newEntry(row *sinks.Row, family string) (*entry, error) {
	ts, total, err := checkRow(row)
	if err != nil {
		return nil, err
	}
	e := &entry{key: row.Key, family: family, ts: ts}
	if len(row.Cells) > 1 {
		e.more = make([]sinks.Cell, len(row.Cells)-1)
	}
	buf := make([]byte, total) // one copy of every value, one allocation
	for i, c := range row.Cells {
		n := copy(buf, c.Value)
		c.Value, buf = buf[:n:n], buf[n:]
		if i == 0 {
			e.cell = c
		} else {
			e.more[i-1] = c
		}
	}
	return e, nil
}

// checkRow checks row against Bigtable's limits, and returns the timestamp
// of its cells and the size of its values, or a *sinks.RejectedError.
func checkRow(row *sinks.Row) (ts cbt.Timestamp, total int, err error) {
	switch {
	case row.Key == "":
		return 0, 0, rejectRow("bigtable: empty row key")
	case len(row.Key) > MaxKeyBytes:
		return 0, 0, rejectRow("bigtable: row key of %d bytes is over the limit of %d", len(row.Key), MaxKeyBytes)
	case len(row.Cells) == 0:
		return 0, 0, rejectRow("bigtable: row has no cells")
	case len(row.Cells) > MaxCells:
		return 0, 0, rejectRow("bigtable: row has %d cells, over the limit of %d mutations per request", len(row.Cells), MaxCells)
	}
	// Explicit, millisecond-aligned timestamps make the write idempotent:
	// writing it again replaces the same cell version. UnixMicro rather than
	// cbt.Time, whose UnixNano overflows outside 1678-2262.
	ts = cbt.Timestamp(row.Timestamp.UnixMicro()).TruncateToMilliseconds()
	if ts < 0 {
		// Negative timestamps are invalid, and -1 would mean server time.
		return 0, 0, rejectRow("bigtable: cell timestamp %s is before 1970", row.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	for _, c := range row.Cells {
		switch {
		case len(c.Column) > MaxQualifierBytes:
			return 0, 0, rejectRow("bigtable: column qualifier of %d bytes is over the limit of %d", len(c.Column), MaxQualifierBytes)
		case len(c.Value) > MaxCellBytes:
			return 0, 0, rejectRow("bigtable: value of column %q has %d bytes, over the limit of %d", c.Column, len(c.Value), MaxCellBytes)
		}
		total += len(c.Value)
	}
	if total > MaxRowBytes {
		return 0, 0, rejectRow("bigtable: row values total %d bytes, over the limit of %d", total, MaxRowBytes)
	}
	return ts, total, nil
}

// rejectRow is the rejection of a row that can never be written.
func rejectRow(format string, args ...any) error {
	return &sinks.RejectedError{Err: fmt.Errorf(format, args...)}
}

// flush is the batcher's FlushFunc: one ApplyBulk for the batch, then the
// per-entry results classified, and the rows not written counted.
func (s *Sink) flush(ctx context.Context, es []*entry) []error {
	keys := make([]string, len(es))
	muts := make([]*cbt.Mutation, len(es))
	for i := range es {
		keys[i], muts[i] = es[i].key, es[i].mutation()
	}
	errs, err := s.apply(ctx, keys, muts)
	var out []error
	switch {
	case err != nil:
		out = s.callFailed(len(es), err)
	case errs == nil:
		s.schemaUsable()
		return nil
	default:
		out = s.classifyEntries(ctx, keys, muts, errs)
	}
	s.countErrors(out)
	return out
}

// callFailed is the result of every row of a batch whose ApplyBulk failed as
// a whole: nothing says it is any row's fault (a missing table, an outage,
// our timeout). Every row gets the error, and is retried by the pipeline;
// rows that did land are rewritten harmlessly. A permanent code for the
// whole call is the table's (NotFound: it does not exist), recorded as a
// fault like a missing family.
func (s *Sink) callFailed(rows int, err error) []error {
	if classify(err) == permanent {
		s.schemaFailed(fmt.Errorf("bigtable table %q in instance %q is missing or cannot be written (pubsink setup creates it): %w",
			s.tableName, s.instance, err))
	} else {
		s.log.Warn("ApplyBulk failed", zap.Int("rows", rows), zap.Error(err))
	}
	err = fmt.Errorf("bigtable table %q: ApplyBulk of %d rows: %w", s.tableName, rows, err)
	out := make([]error, rows)
	for i := range out {
		out[i] = err
	}
	return out
}

// classifyEntries turns the per-entry errors of one ApplyBulk into the
// writers' results. A transient error is returned (wrapped) for the pipeline
// to retry. An entry refused with a permanent code is rejected only on two
// proofs:
//
//   - that the row is at fault, not its batch: it is applied once more,
//     alone, and refused again with a permanent code (the MutateRows API
//     allows one entry to fail with another entry's error, and then reports
//     the same error for both);
//   - that the table and family are not: the schema probe (schema.go)
//     succeeds after the row was refused alone. A family dropped, or a table
//     recreated without it, refuses every row with NotFound, however many
//     writes succeeded before; rejecting then would dead-letter every
//     message.
//
// When nothing in the batch was written and an entry failed with a code a
// missing family may cause, the probe runs first too: if it fails, no row is
// at fault, and none is retried alone.
func (s *Sink) classifyEntries(ctx context.Context, keys []string, muts []*cbt.Mutation, errs []error) []error {
	out := make([]error, len(keys))
	written, suspect := false, false
	for i, err := range errs {
		if err == nil {
			written = true
			continue
		}
		out[i] = fmt.Errorf("bigtable table %q: %w", s.tableName, err)
		suspect = suspect || mayBeSchema(err)
	}
	switch {
	case written:
		s.schemaUsable()
	case suspect:
		if err := s.probeSchema(ctx); err != nil {
			return notTheRows(out, err)
		}
	}
	var refused []int
	for i, err := range errs {
		if err == nil || classify(err) == transient {
			continue
		}
		var again bool
		if again, out[i] = s.retryAlone(ctx, keys[i], muts[i], err); again {
			refused = append(refused, i)
		}
	}
	if len(refused) == 0 {
		return out
	}
	if err := s.probeSchema(ctx); err != nil {
		return notTheRows(out, err)
	}
	for _, i := range refused {
		out[i] = s.reject(keys[i], out[i])
	}
	return out
}

// notTheRows marks the failures in out as caused by schemaErr, the table or
// family unusable: they stay transient, with their own status, and say what
// to fix.
func notTheRows(out []error, schemaErr error) []error {
	for i, err := range out {
		if err != nil {
			out[i] = fmt.Errorf("%w (not the row's fault: %v)", err, schemaErr)
		}
	}
	return out
}

// retryAlone applies the row key's mutation in an ApplyBulk of its own
// after it failed with first, a permanent code, in a batch. It returns a nil
// error when the row was written; refused reports that it was refused again
// with a permanent code, which makes it a rejection once the schema is
// proven usable.
func (s *Sink) retryAlone(ctx context.Context, key string, mut *cbt.Mutation, first error) (refused bool, err error) {
	errs, err := s.apply(ctx, []string{key}, []*cbt.Mutation{mut})
	switch {
	case err != nil:
		// The call failed as a whole: transient, whatever its code.
	case errs == nil || errs[0] == nil:
		return false, nil
	case classify(errs[0]) == permanent:
		return true, fmt.Errorf("bigtable table %q refused the row twice, the second time alone: %w", s.tableName, errs[0])
	default:
		err = errs[0]
	}
	return false, fmt.Errorf("bigtable table %q: retrying alone a row refused with %v: %w", s.tableName, status.Code(first), err)
}

// reject turns err, a refusal proven to be the row key's own, into a
// rejection.
func (s *Sink) reject(key string, err error) error {
	s.log.Info("Bigtable rejected a row, also alone", zap.Stringer("code", status.Code(err)))
	s.log.Debug("rejected row", zap.String("key", key), zap.Error(err))
	return &sinks.RejectedError{Err: err}
}

// apply is one ApplyBulk call, bounded by applyTimeout and timed.
func (s *Sink) apply(ctx context.Context, keys []string, muts []*cbt.Mutation) ([]error, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	errs, err := s.table.ApplyBulk(ctx, keys, muts)
	if s.metrics.WriteSeconds != nil {
		s.metrics.WriteSeconds.Observe(time.Since(start).Seconds())
	}
	return errs, err
}

// countErrors counts the rows of a batch that were not written, by code.
func (s *Sink) countErrors(out []error) {
	if s.metrics.WriteErrors == nil {
		return
	}
	for _, err := range out {
		if err != nil {
			s.metrics.WriteErrors(codeOf(err).String()).Inc()
		}
	}
}

// codeOf is the gRPC code of err. A context error, which carries none, gets
// the code gRPC gives it; any other error without a status is Unknown.
func codeOf(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

// class is what an error from Bigtable says about retrying the same write.
type class int

const (
	// transient errors may pass: the write is retried.
	transient class = iota
	// permanent errors are the request's own fault and will not pass by
	// retrying it unchanged (for one entry, once proven by retrying alone).
	permanent
)

// classify sorts an error returned by ApplyBulk, for the whole call or for
// one entry. Only codes that describe the request itself are permanent;
// everything else, including errors that carry no gRPC status (a lost
// connection, a context error), is transient: a permanent error must be
// proven. PermissionDenied and Unauthenticated are transient on purpose:
// they follow token refreshes and IAM propagation, and are fixed by an
// operator, not by dead-lettering the data.
func classify(err error) class {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.OutOfRange:
		return permanent
	default:
		return transient
	}
}
