package bigtable

// Flushing a batch: its rows grouped into one ApplyBulk per table, and
// each row's result made of the call's and the entries' errors (written,
// transient, or rejected once proven the row's own fault).

import (
	"context"
	"fmt"
	"sync"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/sinks"
)

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
//
// A batch whose rows go to several tables is one ApplyBulk per table, all
// started at once, each bounded by it: so a batch, the calls of all its
// tables together, waits at most this long for its calls, however many
// tables its messages write to (the solo retries and probes of a refused
// row come after, each bounded by it too).
const applyTimeout = 30 * time.Second

// bulk is the entries of one batch for one table: one ApplyBulk call.
type bulk struct {
	name    string // the table's ID
	table   *cbt.Table
	targets []*target // the distinct pairs of its entries
	keys    []string
	muts    []*cbt.Mutation
	refs    []ref   // where each entry comes from
	out     []error // each entry's result; nil when every entry was written
}

// ref locates an entry of a bulk: its item in the batch, its row in the
// item, and its pair in bulk.targets.
type ref struct {
	item, row, to int
}

// add appends e, row row of item item, to b.
func (b *bulk) add(e *entry, item, row int) {
	to := len(b.targets)
	for k, t := range b.targets {
		if t == e.to {
			to = k
			break
		}
	}
	if to == len(b.targets) {
		b.targets = append(b.targets, e.to)
	}
	b.keys = append(b.keys, e.key)
	b.muts = append(b.muts, e.mutation())
	b.refs = append(b.refs, ref{item: item, row: row, to: to})
}

// group flattens the items of a batch into one bulk per table, in the order
// the tables first appear; the entries of an item are in the order of its
// rows. The first bulk is sized for every entry: most batches have one
// table.
func group(items []*item) []bulk {
	n := 0
	for _, it := range items {
		n += it.rows()
	}
	bulks := make([]bulk, 1, 2)
	first := items[0].first.to
	bulks[0] = bulk{name: first.name, table: first.table,
		keys: make([]string, 0, n), muts: make([]*cbt.Mutation, 0, n), refs: make([]ref, 0, n)}
	for i, it := range items {
		for j := range it.rows() {
			e := it.entry(j)
			k := 0
			for k < len(bulks) && bulks[k].table != e.to.table {
				k++
			}
			if k == len(bulks) {
				bulks = append(bulks, bulk{name: e.to.name, table: e.to.table})
			}
			bulks[k].add(e, i, j)
		}
	}
	return bulks
}

// awaitAfter waits for what the items' rows wait for (item.after: their
// messages' dedupe claims, queued ahead of them and nearly always durable
// long before the batch goes), and returns nil when every item may be
// written, or each item's error (nil for those that may).
func awaitAfter(ctx context.Context, items []*item) []error {
	var errs []error
	for i, it := range items {
		if it.after == nil {
			continue
		}
		if err := it.after.Wait(ctx); err != nil {
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = err
		}
	}
	return errs
}

// flushReady flushes the items whose after allowed it (errs[i] nil) and
// returns every item's result: after's error for the others.
func (s *Sink) flushReady(ctx context.Context, items []*item, errs []error) []error {
	ready := make([]*item, 0, len(items))
	for i, it := range items {
		if errs[i] == nil {
			ready = append(ready, it)
		}
	}
	if len(ready) == 0 {
		return errs
	}
	out := s.flush(ctx, ready) // their after is done: no wait again
	if out == nil {
		return errs // every ready item was written
	}
	k := 0
	for i := range items {
		if errs[i] == nil {
			errs[i] = out[k]
			k++
		}
	}
	return errs
}

// flush is the batcher's FlushFunc: the batch's rows, flattened into one
// ApplyBulk per table (run at once when there are several), each call's
// per-entry results classified and the rows not written counted, and then
// each item's result made of its rows' (results).
func (s *Sink) flush(ctx context.Context, items []*item) []error {
	if errs := awaitAfter(ctx, items); errs != nil {
		return s.flushReady(ctx, items, errs)
	}
	bulks := group(items)
	if len(bulks) == 1 {
		s.flushBulk(ctx, &bulks[0])
	} else {
		s.flushAll(ctx, bulks)
	}
	return results(len(items), bulks)
}

// flushAll flushes bulks at once: a goroutine per table but the first,
// which the flush's own goroutine takes; never one per row.
func (s *Sink) flushAll(ctx context.Context, bulks []bulk) {
	var wg sync.WaitGroup
	for k := 1; k < len(bulks); k++ {
		b := &bulks[k]
		wg.Go(func() { s.flushBulk(ctx, b) })
	}
	s.flushBulk(ctx, &bulks[0])
	wg.Wait()
}

// flushBulk applies b and sets b.out.
func (s *Sink) flushBulk(ctx context.Context, b *bulk) {
	errs, err := s.apply(ctx, b.table, b.keys, b.muts)
	switch {
	case err != nil:
		b.out = s.callFailed(b, err)
	case errs == nil:
		for _, t := range b.targets {
			t.schemaUsable()
		}
		return
	default:
		b.out = s.classifyEntries(ctx, b, errs)
	}
	s.countErrors(b.out)
}

// results gives each item of a batch the result of its rows: nil when
// every one was written; when one was rejected, the rejection of the first
// of its rows rejected (the message can never be written in full, so
// retrying its other rows is pointless: it is dead-lettered, and the rows
// that were written are rewritten, the same cells, if it is ever replayed);
// else the first transient error of its rows, so that the whole message is
// retried.
func results(items int, bulks []bulk) []error {
	var out []error
	for k := range bulks {
		b := &bulks[k]
		for i, err := range b.out {
			if err == nil {
				continue
			}
			if out == nil {
				out = make([]error, items)
			}
			r := b.refs[i]
			out[r.item] = worse(out[r.item], err)
		}
	}
	return out
}

// worse is the result of an item whose rows so far failed with cur (nil if
// none did) when one more failed with err: a rejection wins over a
// transient error, and the rejection of the first row over the others.
func worse(cur, err error) error {
	rej, ok := err.(*sinks.RejectedError)
	switch {
	case !ok && cur != nil:
		return cur
	case !ok:
		return err
	}
	if c, ok := cur.(*sinks.RejectedError); ok && c.Row < rej.Row {
		return cur
	}
	return rej
}

// callFailed is the result of every row of a bulk whose ApplyBulk failed as
// a whole: nothing says it is any row's fault (a missing table, an outage,
// our timeout). Every row gets the error, and its message is retried by the
// pipeline; rows that did land are rewritten harmlessly. A permanent code
// for the whole call is the table's (NotFound: it does not exist), recorded
// as a fault of each of its pairs in the bulk, like a missing family.
func (s *Sink) callFailed(b *bulk, err error) []error {
	if classify(err) == permanent {
		ferr := fmt.Errorf("bigtable table %q in instance %q is missing or cannot be written (pubsink setup creates it): %w",
			b.name, s.instance, err)
		for _, t := range b.targets {
			t.schemaFailed(ferr)
		}
	} else {
		s.log.Warn("ApplyBulk failed", zap.String("table", b.name), zap.Int("rows", len(b.keys)), zap.Error(err))
	}
	err = fmt.Errorf("bigtable table %q: ApplyBulk of %d rows: %w", b.name, len(b.keys), err)
	out := make([]error, len(b.keys))
	for i := range out {
		out[i] = err
	}
	return out
}

// pairState is what one ApplyBulk's results say of one (table, family)
// pair of its entries.
type pairState struct {
	written bool  // an entry of the pair was written: the pair is usable
	suspect bool  // an entry failed with a code a missing family may cause
	refused bool  // an entry was refused again alone
	err     error // the probe failed: no entry of the pair is at fault
}

// classifyEntries turns the per-entry errors of one ApplyBulk into the
// rows' results. A transient error is returned (wrapped) for the pipeline
// to retry. An entry refused with a permanent code is rejected only on two
// proofs:
//
//   - that the row is at fault, not its batch: it is applied once more,
//     alone, and refused again with a permanent code (the MutateRows API
//     allows one entry to fail with another entry's error, and then reports
//     the same error for both);
//   - that its table and family are not: the schema probe of its pair
//     (schema.go) succeeds after the row was refused alone. A family
//     dropped, or a table recreated without it, refuses every row of the
//     pair with NotFound, however many writes succeeded before; rejecting
//     then would dead-letter every message.
//
// The schema is judged per (table, family) pair: a row written proves its
// own pair, not another family's. When nothing of a pair was written and an
// entry of it failed with a code a missing family may cause, the pair's
// probe runs first too: if it fails, none of its rows is at fault, and none
// is retried alone.
func (s *Sink) classifyEntries(ctx context.Context, b *bulk, errs []error) []error {
	out := make([]error, len(b.keys))
	st := make([]pairState, len(b.targets))
	for i, err := range errs {
		p := &st[b.refs[i].to]
		if err == nil {
			p.written = true
			continue
		}
		out[i] = fmt.Errorf("bigtable table %q: %w", b.name, err)
		p.suspect = p.suspect || mayBeSchema(err)
	}
	for k, t := range b.targets {
		switch {
		case st[k].written:
			t.schemaUsable()
		case st[k].suspect:
			st[k].err = s.probeSchema(ctx, t)
		}
	}
	var refused []int
	for i, err := range errs {
		p := &st[b.refs[i].to]
		if err == nil || classify(err) == transient || p.err != nil {
			continue
		}
		var again bool
		if again, out[i] = s.retryAlone(ctx, b, i, err); again {
			refused = append(refused, i)
			p.refused = true
		}
	}
	for k, t := range b.targets {
		if st[k].refused {
			st[k].err = s.probeSchema(ctx, t)
		}
	}
	for i, err := range out {
		switch p := &st[b.refs[i].to]; {
		case err == nil:
		case p.err != nil:
			out[i] = notTheRow(err, p.err)
		}
	}
	for _, i := range refused {
		if st[b.refs[i].to].err == nil {
			out[i] = s.reject(b, i, out[i])
		}
	}
	return out
}

// notTheRow marks err, a row's failure, as caused by schemaErr, its table
// or family unusable: it stays transient, with its own status, and says
// what to fix.
func notTheRow(err, schemaErr error) error {
	return fmt.Errorf("%w (not the row's fault: %v)", err, schemaErr)
}

// retryAlone applies entry i of b in an ApplyBulk of its own after it
// failed with first, a permanent code, in a batch. It returns a nil error
// when the row was written; refused reports that it was refused again with
// a permanent code, which makes it a rejection once its pair is proven
// usable.
func (s *Sink) retryAlone(ctx context.Context, b *bulk, i int, first error) (refused bool, err error) {
	errs, err := s.apply(ctx, b.table, b.keys[i:i+1], b.muts[i:i+1])
	switch {
	case err != nil:
		// The call failed as a whole: transient, whatever its code.
	case errs == nil || errs[0] == nil:
		return false, nil
	case classify(errs[0]) == permanent:
		return true, fmt.Errorf("bigtable table %q refused the row twice, the second time alone: %w", b.name, errs[0])
	default:
		err = errs[0]
	}
	return false, fmt.Errorf("bigtable table %q: retrying alone a row refused with %v: %w", b.name, status.Code(first), err)
}

// reject turns err, a refusal of entry i of b proven to be the row's own,
// into a rejection naming the row's index in its message.
func (s *Sink) reject(b *bulk, i int, err error) error {
	r := b.refs[i]
	t := b.targets[r.to]
	t.log.Info("Bigtable rejected a row, also alone", zap.Stringer("code", status.Code(err)))
	t.log.Debug("rejected row", zap.Int("row", r.row), zap.String("key", b.keys[i]), zap.Error(err))
	return &sinks.RejectedError{Row: r.row, Err: err}
}

// apply is one ApplyBulk call to table, bounded by applyTimeout and timed.
func (s *Sink) apply(ctx context.Context, table *cbt.Table, keys []string, muts []*cbt.Mutation) ([]error, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	errs, err := table.ApplyBulk(ctx, keys, muts)
	if s.metrics.WriteSeconds != nil {
		s.metrics.WriteSeconds.Observe(time.Since(start).Seconds())
	}
	return errs, err
}

// countErrors counts the rows of a bulk that were not written, by code.
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
