package bigtable

// change.go applies the rows of change mappings (sinks.Change): each on its
// own, by event time, with a conditional mutation of its row and tombstones
// in the row itself, so that the table ends the same whatever order the
// changes arrive in and however often each is applied. The package
// documentation ("Changes") says what each operation and mode does; the
// reference ("Changes") says it for users.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/sinks"
)

// millisecond is one millisecond in Bigtable's microseconds: cell times are
// whole milliseconds, so "newer than T" starts at T + millisecond.
const millisecond = cbt.Timestamp(1000)

// Tombstone qualifiers, in the tombstone family: the row (OpDelete), a
// family (OpDeleteFamily, and ModeReplaceIfNewer at T − 1 ms), or one
// column of a family ("FAMILY:COLUMN"). A family name has no '*' nor ':'
// ([-_.a-zA-Z0-9]+), so the three never meet.
const rowTombstone = "*"

// columnTombstone is the qualifier of the tombstone of column of family.
func columnTombstone(family, column string) string { return family + ":" + column }

// maxRounds bounds the conditional writes of one set row: each round after
// the first follows a read that found what covers some of its columns, and
// sets the others; another round is needed only when the row changed between
// the read and the write. Past it the row is retried as a transient failure.
const maxRounds = 8

// MaxChangeCalls bounds the change rows being applied at once by one sink:
// they are one call each, on the goroutines of a warm pool (see New), whose
// grown stacks it bounds too (a few MiB at most). A change row is not
// batched, so its rate is this bound over a call's latency: at 64 the
// bench's change connectors ran within 10% of 64 / 12 ms on a loaded
// emulator, waiting for a slot; 256 leaves the pipeline's flow control
// (1,000 messages by default) to be the bound, as it is for plain rows.
const MaxChangeCalls = 256

// changeRow is one row of a message that holds a change row, checked.
type changeRow struct {
	i    int        // its index in the message's rows
	row  *sinks.Row // the caller's, read and (Applied) written during Write
	to   *target    // its table and family
	tomb *target    // its table's tombstone family; nil for a plain row
	ts   cbt.Timestamp
}

// hasChange reports whether a row of rows is a change row: then the whole
// message takes the change path, which applies its rows in order, row by
// row, rather than the batch (a message of plain rows, the common case,
// costs this loop only).
func hasChange(rows []sinks.Row) bool {
	for i := range rows {
		if rows[i].Change.IsChange() {
			return true
		}
	}
	return false
}

// writeChanges writes rows, a message with change rows, and blocks until
// each is applied or failed. Rows of one (table, key) are applied in their
// order, one after the other; rows of different keys at once. The result is
// that of Write: nil, a rejection of the first row refused, or a transient
// error.
func (s *Sink) writeChanges(ctx context.Context, rows []sinks.Row) error {
	crs := make([]changeRow, len(rows))
	for i := range rows {
		if err := s.checkChange(i, &rows[i], &crs[i]); err != nil {
			return s.rejected(rows, err)
		}
	}
	if after := rows[0].After; after != nil {
		if err := after.Wait(ctx); err != nil {
			return err
		}
	}
	if !s.direct.begin() {
		return s.closed()
	}
	defer s.direct.end()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.direct.cut, cancel) // Close ran out of time
	defer stop()

	errs := make([]error, len(rows))
	groups := byKey(crs)
	run := func(g []int) {
		s.calls.Do(func() {
			for _, i := range g {
				if errs[i] = s.applyRow(ctx, &crs[i]); errs[i] != nil {
					return // the rest of the key waits for the retry, in order
				}
			}
		})
	}
	if len(groups) == 1 {
		run(groups[0])
	} else {
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Go(func() { run(g) })
		}
		wg.Wait()
	}
	var out error
	for _, err := range errs {
		if err != nil {
			out = worse(out, err)
		}
	}
	return out
}

// byKey groups the indexes of crs by table and row key, in the order each
// first appears.
func byKey(crs []changeRow) [][]int {
	groups := make([][]int, 0, 1)
	for i := range crs {
		k := 0
		for k < len(groups) {
			first := &crs[groups[k][0]]
			if first.to.table == crs[i].to.table && first.row.Key == crs[i].row.Key {
				break
			}
			k++
		}
		if k == len(groups) {
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], i)
	}
	return groups
}

// checkChange checks row i of a message against the configuration and
// Bigtable's limits, as newItem does for the batch, and fills cr. A change
// row may have no cells (a delete, or a set whose values were all
// missing); its table must be one the configuration has change mappings
// for, whose tombstone family the sink knows.
func (s *Sink) checkChange(i int, row *sinks.Row, cr *changeRow) error {
	*cr = changeRow{i: i, row: row}
	if cr.to = s.target(row); cr.to == nil {
		return s.unknownTarget(i, row)
	}
	c := &row.Change
	if c.IsChange() {
		if cr.tomb = s.lookup(cr.to.name, s.tombstones); cr.tomb == nil || s.tombstones == "" {
			return &sinks.RejectedError{Row: i, Err: fmt.Errorf("bigtable: a change row for table %q, which no change mapping of the configuration writes (it has no tombstone family)", cr.to.name)}
		}
		c.Applied = sinks.Applied{}
	}
	var err error
	if c.IsChange() {
		cr.ts, err = checkChangeRow(row)
	} else {
		cr.ts, _, err = checkRow(row)
	}
	if err != nil {
		return rejectRow(i, err)
	}
	return nil
}

// checkChangeRow is checkRow for a change row: it may have no cells, and the
// columns it deletes count as mutations and qualifiers too.
func checkChangeRow(row *sinks.Row) (cbt.Timestamp, error) {
	if len(row.Cells) > 0 {
		ts, _, err := checkRow(row)
		if err != nil {
			return 0, err
		}
		if n := 2*len(row.Cells) + 2*len(row.Change.Delete) + 3; n > MaxCells {
			return 0, overLimit("bigtable: row makes %d mutations, over the limit of %d", n, MaxCells)
		}
		return ts, checkDeletes(row)
	}
	probe := *row
	probe.Cells = []sinks.Cell{{}}
	ts, _, err := checkRow(&probe)
	if err != nil {
		return 0, err
	}
	if n := 2*len(row.Change.Delete) + 3; n > MaxCells {
		return 0, overLimit("bigtable: row deletes %d columns, over the limit of %d mutations", len(row.Change.Delete), MaxCells/2)
	}
	return ts, checkDeletes(row)
}

func checkDeletes(row *sinks.Row) error {
	for _, c := range row.Change.Delete {
		if len(c)+len(row.Family)+1 > MaxQualifierBytes {
			return overLimit("bigtable: deleted column qualifier of %d bytes is over the limit of %d", len(c), MaxQualifierBytes)
		}
	}
	return nil
}

// applyRow applies one row of a message with change rows.
func (s *Sink) applyRow(ctx context.Context, cr *changeRow) error {
	c := &cr.row.Change
	switch {
	case !c.IsChange():
		// A plain row of the message, applied in its order (a plain
		// mapping beside a change mapping).
		mut := cbt.NewMutation()
		for _, cell := range cr.row.Cells {
			mut.Set(cr.to.family, cell.Column, cr.ts, cell.Value)
		}
		return s.mutate(ctx, cr, mut)
	case c.Op == sinks.OpDeleteColumns:
		mut := cbt.NewMutation()
		s.deleteColumns(mut, cr, c.Delete)
		return s.mutate(ctx, cr, mut)
	case c.Op == sinks.OpDelete, c.Op == sinks.OpDeleteFamily:
		return s.deleteScope(ctx, cr)
	default:
		return s.setRow(ctx, cr)
	}
}

// deleteColumns adds to mut the deletion of columns at the row's time or
// before, and their tombstones at the row's time: unconditional, since it
// leaves later cells alone and an older write finds the tombstone.
func (s *Sink) deleteColumns(mut *cbt.Mutation, cr *changeRow, columns []string) {
	f := cr.to.family
	for _, col := range columns {
		mut.DeleteTimestampRange(f, col, 0, cr.ts+millisecond)
		mut.Set(cr.tomb.family, columnTombstone(f, col), cr.ts, nil)
	}
}

// deleteScope applies OpDelete (the row) or OpDeleteFamily (the row's
// family) at T. When nothing of the scope is newer than T, one conditional
// mutation deletes the scope whole and sets its tombstone; otherwise it sets
// the tombstone only, and, the tombstone durable (so that no change of T or
// before can land after it), reads the columns that hold cells of T or
// before and deletes those cells.
func (s *Sink) deleteScope(ctx context.Context, cr *changeRow) error {
	f, tomb, after := cr.to.family, cr.tomb.family, cr.ts+millisecond
	newer := cbt.TimestampRangeFilterMicros(after, 0)
	onFalse, onTrue := cbt.NewMutation(), cbt.NewMutation()
	var old cbt.Filter
	if cr.row.Change.Op == sinks.OpDelete {
		onFalse.DeleteRow()
		onFalse.Set(tomb, rowTombstone, cr.ts, nil)
		onTrue.Set(tomb, rowTombstone, cr.ts, nil)
		old = cbt.ChainFilters(cbt.TimestampRangeFilterMicros(0, after), cbt.StripValueFilter())
	} else {
		newer = cbt.ChainFilters(cbt.FamilyFilter(exact(f)), newer)
		onFalse.DeleteCellsInFamily(f)
		onFalse.Set(tomb, f, cr.ts, nil)
		onTrue.Set(tomb, f, cr.ts, nil)
		old = cbt.ChainFilters(cbt.FamilyFilter(exact(f)), cbt.TimestampRangeFilterMicros(0, after), cbt.StripValueFilter())
	}
	matched, err := s.condApply(ctx, cr, newer, onTrue, onFalse)
	if err != nil || !matched {
		return err
	}
	found, err := s.read(ctx, cr, old)
	if err != nil {
		return err
	}
	mut, n := cbt.NewMutation(), 0
	for fam, items := range found {
		if fam == tomb {
			continue // older tombstones: the new one covers what they do
		}
		for _, it := range items {
			mut.DeleteTimestampRange(fam, qualifier(fam, it.Column), 0, after)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return s.mutate(ctx, cr, mut)
}

// setRow applies an OpSet row of a change mapping by its mode. Each round is
// one conditional mutation: its predicate finds what would make the write
// wrong (a newer cell, a tombstone that covers T, for an insert an earlier
// row); when it finds nothing, the row is written. When it finds something,
// a read of the same filter says what: the whole row is superseded, or some
// columns are, and the next round writes the others.
func (s *Sink) setRow(ctx context.Context, cr *changeRow) error {
	c := &cr.row.Change
	cells, deletes := cr.row.Cells, c.Delete
	total := len(cells)
	for round := 1; ; round++ {
		if len(cells) == 0 && c.Mode != sinks.ModeReplaceIfNewer {
			// Nothing to set (every value missing, or every column
			// covered): an upsert's deletes stand alone; an insert of no
			// cells writes nothing, as a row of no cells does not exist.
			// (A replace of no cells still empties the family.)
			if len(deletes) > 0 && c.Mode == sinks.ModeUpsert {
				mut := cbt.NewMutation()
				s.deleteColumns(mut, cr, deletes)
				if err := s.mutate(ctx, cr, mut); err != nil {
					return err
				}
			}
			c.Applied = sinks.Applied{Superseded: total > 0, SkippedCells: total}
			return nil
		}
		pred, onTrue, onFalse := s.setPlan(cr, cells, deletes)
		matched, err := s.condApply(ctx, cr, pred, onTrue, onFalse)
		if err != nil {
			return err
		}
		if !matched {
			c.Applied = sinks.Applied{SkippedCells: total - len(cells)}
			return nil
		}
		if c.Mode == sinks.ModeUpsert {
			deletes = nil // applied by onTrue already
		}
		found, err := s.read(ctx, cr, cbt.ChainFilters(pred, cbt.StripValueFilter()))
		if err != nil {
			return err
		}
		whole, covered := s.covers(cr, found)
		if whole {
			c.Applied = sinks.Applied{Superseded: true, SkippedCells: total}
			return nil
		}
		kept := cells[:0:0]
		for _, cell := range cells {
			if !covered[cell.Column] {
				kept = append(kept, cell)
			}
		}
		if round >= maxRounds {
			return fmt.Errorf("bigtable table %q: the row changed under %d conditional writes in a row (others write it at once): %w",
				cr.to.name, maxRounds, errRowBusy)
		}
		cells = kept
	}
}

// errRowBusy is the transient failure of a row that changed under every
// round of its conditional writes.
var errRowBusy = status.Error(codes.Aborted, "row busy")

// setPlan is one round of setRow: the predicate, what to apply when it
// matches, and what to apply when it does not.
func (s *Sink) setPlan(cr *changeRow, cells []sinks.Cell, deletes []string) (pred cbt.Filter, onTrue, onFalse *cbt.Mutation) {
	f, after := cr.to.family, cr.ts+millisecond
	columns := make([]string, len(cells))
	for i, c := range cells {
		columns[i] = c.Column
	}
	covering := cbt.ChainFilters(cbt.FamilyFilter(exact(cr.tomb.family)), cbt.ColumnFilter(tombstonesOf(f, columns)),
		cbt.TimestampRangeFilterMicros(cr.ts, 0))
	onFalse = cbt.NewMutation()
	switch cr.row.Change.Mode {
	case sinks.ModeInsert:
		// Anything of the family at T or before: an earlier insert won.
		pred = cbt.InterleaveFilters(cbt.ChainFilters(cbt.FamilyFilter(exact(f)), cbt.TimestampRangeFilterMicros(0, after)), covering)
		onFalse.DeleteCellsInFamily(f) // a later insert's, if any
	case sinks.ModeReplaceIfNewer:
		pred = cbt.InterleaveFilters(cbt.ChainFilters(cbt.FamilyFilter(exact(f)), cbt.TimestampRangeFilterMicros(after, 0)), covering)
		onFalse.DeleteCellsInFamily(f)
		if cr.ts >= millisecond {
			// What the family held before T is gone: an older replace or
			// upsert arriving later finds this and changes nothing. (At T
			// itself a replace of the same millisecond still applies: the
			// later applied wins a tie.)
			onFalse.Set(cr.tomb.family, f, cr.ts-millisecond, nil)
		}
	default: // ModeUpsert
		newer := cbt.ChainFilters(cbt.FamilyFilter(exact(f)), cbt.ColumnFilter(anyOf(columns)), cbt.TimestampRangeFilterMicros(after, 0))
		pred = cbt.InterleaveFilters(newer, covering)
		if len(deletes) > 0 {
			onTrue = cbt.NewMutation()
			s.deleteColumns(onTrue, cr, deletes)
		}
	}
	for _, c := range cells {
		if cr.row.Change.Mode == sinks.ModeUpsert {
			onFalse.DeleteTimestampRange(f, c.Column, 0, cr.ts) // one version per cell
		}
		onFalse.Set(f, c.Column, cr.ts, c.Value)
	}
	if cr.row.Change.Mode != sinks.ModeInsert {
		// An insert's deletes are its cells not set: the family it
		// writes holds nothing older to delete, and a tombstone would
		// cover an earlier insert that arrives later and wins the row.
		s.deleteColumns(onFalse, cr, deletes)
	}
	return pred, onTrue, onFalse
}

// covers reads what setRow's read found, all of which covers the row's
// columns at T: whole when a tombstone of the row or its family covers it,
// or when a cell of the family does (insert: one of T or before;
// replace_if_newer: a newer one); else the columns covered by a newer cell
// (upsert) or by their own tombstone.
func (s *Sink) covers(cr *changeRow, found cbt.Row) (whole bool, covered map[string]bool) {
	f, tomb := cr.to.family, cr.tomb.family
	covered = map[string]bool{}
	for fam, items := range found {
		for _, it := range items {
			q := qualifier(fam, it.Column)
			switch {
			case fam == tomb && (q == rowTombstone || q == f):
				return true, nil
			case fam == tomb:
				covered[strings.TrimPrefix(q, f+":")] = true
			case cr.row.Change.Mode != sinks.ModeUpsert:
				return true, nil
			default:
				covered[q] = true
			}
		}
	}
	return false, covered
}

// qualifier is the qualifier of a ReadItem's Column, "family:qualifier".
func qualifier(family, column string) string { return strings.TrimPrefix(column, family+":") }

// exact is a regular expression that matches s and nothing else: Bigtable's
// family and qualifier filters take RE2 patterns.
func exact(s string) string { return `^` + regexp.QuoteMeta(s) + `$` }

// anyOf matches any of names exactly.
func anyOf(names []string) string {
	var b strings.Builder
	b.WriteString(`^(?:`)
	for i, n := range names {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(regexp.QuoteMeta(n))
	}
	b.WriteString(`)$`)
	return b.String()
}

// tombstonesOf matches the qualifiers of the tombstones that cover columns
// of family: the row's, the family's, and each column's own.
func tombstonesOf(family string, columns []string) string {
	var b strings.Builder
	b.WriteString(`^(?:\*|`)
	b.WriteString(regexp.QuoteMeta(family))
	if len(columns) > 0 {
		b.WriteString(`|`)
		b.WriteString(regexp.QuoteMeta(family + ":"))
		b.WriteString(`(?:`)
		for i, n := range columns {
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(regexp.QuoteMeta(n))
		}
		b.WriteString(`)`)
	}
	b.WriteString(`)$`)
	return b.String()
}

// condApply applies one conditional mutation to cr's row and reports
// whether its predicate matched.
func (s *Sink) condApply(ctx context.Context, cr *changeRow, pred cbt.Filter, onTrue, onFalse *cbt.Mutation) (bool, error) {
	var matched bool
	cm := cbt.NewCondMutation(pred, onTrue, onFalse)
	err := s.call(ctx, cr, func(ctx context.Context) error {
		return cr.to.table.Apply(ctx, cr.row.Key, cm, cbt.GetCondMutationResult(&matched))
	})
	return matched, err
}

// mutate applies mut to cr's row.
func (s *Sink) mutate(ctx context.Context, cr *changeRow, mut *cbt.Mutation) error {
	return s.call(ctx, cr, func(ctx context.Context) error { return cr.to.table.Apply(ctx, cr.row.Key, mut) })
}

// read reads cr's row through filter.
func (s *Sink) read(ctx context.Context, cr *changeRow, filter cbt.Filter) (cbt.Row, error) {
	var row cbt.Row
	err := s.call(ctx, cr, func(ctx context.Context) (err error) {
		row, err = cr.to.table.ReadRow(ctx, cr.row.Key, cbt.RowFilter(filter))
		return err
	})
	return row, err
}

// call makes one Bigtable call for cr, bounded by the sink's timeout and
// timed, and classifies its failure: a permanent code, or one a missing
// family may cause, runs the schema probe of the row's family and tombstone
// family; if one fails, nothing is the row's fault (transient, and Check
// fails until it is fixed); if both pass, a permanent code rejects the row.
// A single-row call's error is the row's own: unlike an entry of
// MutateRows, it needs no retry alone to prove it.
func (s *Sink) call(ctx context.Context, cr *changeRow, fn func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	start := time.Now()
	err := fn(cctx)
	cancel()
	if s.metrics.WriteSeconds != nil {
		s.metrics.WriteSeconds.Observe(time.Since(start).Seconds())
	}
	if err == nil {
		cr.to.schemaUsable()
		if cr.tomb != nil {
			cr.tomb.schemaUsable()
		}
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.countErrors([]error{err})
	err = fmt.Errorf("bigtable table %q: %w", cr.to.name, err)
	if !mayBeSchema(err) {
		return err
	}
	for _, t := range []*target{cr.to, cr.tomb} {
		if t == nil {
			continue
		}
		if perr := s.probeSchema(ctx, t); perr != nil {
			return notTheRow(err, perr)
		}
	}
	if classify(err) != permanent {
		return err
	}
	cr.to.log.Info("Bigtable rejected a change row", zap.Stringer("code", status.Code(err)))
	cr.to.log.Debug("rejected row", zap.Int("row", cr.i), zap.String("key", cr.row.Key), zap.Error(err))
	return &sinks.RejectedError{Row: cr.i, Err: err}
}

// directWrites tracks the change writes in progress, which do not go
// through the batcher, so that Close waits for them and refuses new ones.
type directWrites struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// cut is cancelled when Close runs out of time: the writes in progress
	// are then cancelled, as the batcher's calls are.
	cut     context.Context
	cutNow  context.CancelFunc
	initOne sync.Once
}

func (d *directWrites) init() {
	d.initOne.Do(func() { d.cut, d.cutNow = context.WithCancel(context.Background()) })
}

// begin registers a write; false after close.
func (d *directWrites) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

func (d *directWrites) end() { d.wg.Done() }

// close refuses new writes and waits for those in progress; if ctx ends
// first, it cancels them and still waits for them to return.
func (d *directWrites) close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		d.cutNow()
		<-done
		return ctx.Err()
	}
}
