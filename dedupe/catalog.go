package dedupe

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
)

// Layout of the catalog in the state table (family state.FamilyDedupe):
//
//	dedupe#PIPELINE#HH#KEY   one row per claimed key
//	dedupe#PIPELINE#HH=SHA   the same, for a key longer than maxRawKey
//
// HH is the top byte of the key's hash in hex: 256 buckets. A row holds
//
//	k:w/MESSAGE_ID   a claim: the delivery that won the key (its Pub/Sub
//	                 message ID, the same in every redelivery), empty, at
//	                 the claim time; written before the row
//	k:c              the record: the winner's row is durable, empty, at the
//	                 commit time; written after the row
//
// with timestamps in milliseconds. Only cells within the window count.
const (
	rowPrefix = "dedupe#"
	// column is the qualifier of a catalog row's record.
	column = "c"
	// claimPrefix starts the qualifier of a claim; the winner follows.
	claimPrefix = "w/"
	// maxRawKey is the longest key kept as it is in a row key. Bigtable
	// rejects row keys over 4 KiB, and long row keys cost on every read:
	// a longer key is replaced by the hex SHA-256 of it, which identifies
	// it as well for this purpose.
	maxRawKey = 1024
	// buckets is the number of hash buckets (HH) of a pipeline's rows.
	buckets = 256
)

// cell is one unconditional write of a catalog row: the claim of row by
// winner, or, with winner "", the record of row; at is its time and h the
// key's hashes, for the journal. A cell with journal set is a journal row
// (journal.go); one with no row only puts its key in its batch's journal
// row (a conditional claim, made apart).
type cell struct {
	row, winner string
	at          bigtable.Timestamp
	h           hashes
	journal     []byte
}

// rowState is what a catalog row says within the window.
type rowState struct {
	recorded  bool     // a record: the key is committed
	claimants []string // the winners named by claims
}

// outcome is what a row means for a delivery that wants the key.
type outcome uint8

const (
	free    outcome = iota // nothing within the window: the key may be claimed
	claimed                // claimed by this delivery, now
	mine                   // claimed by this very message before (a redelivery), no record
	taken                  // claimed by this message and another: an untrusted claim is being withdrawn; look again
	seen                   // claimed by another message, or recorded: a duplicate
)

// decide says what the row means for winner: the first claim decides the
// key (doc.go, "The claim decides").
func (r rowState) decide(winner string) outcome {
	switch {
	case r.recorded:
		return seen
	case len(r.claimants) == 0:
		return free
	}
	own, others := false, false
	for _, c := range r.claimants {
		if c == winner {
			own = true
		} else {
			others = true
		}
	}
	switch {
	case own && others:
		return taken
	case own:
		return mine
	}
	return seen
}

// stateOf reads a row of the catalog, read with recordFilter(since).
func stateOf(r bigtable.Row, since bigtable.Timestamp) rowState {
	var st rowState
	for _, it := range r[state.FamilyDedupe] {
		if it.Timestamp < since {
			continue
		}
		q := it.Column[len(state.FamilyDedupe)+1:]
		switch {
		case q == column:
			st.recorded = true
		case strings.HasPrefix(q, claimPrefix):
			if w := q[len(claimPrefix):]; !slices.Contains(st.claimants, w) {
				st.claimants = append(st.claimants, w)
			}
		}
	}
	return st
}

// catalogID is how a key appears in its row key: as it is, or digested
// when longer than maxRawKey.
type catalogID struct {
	id     string
	digest bool
}

func idOf(key string) catalogID {
	if len(key) <= maxRawKey {
		return catalogID{id: key}
	}
	sum := sha256.Sum256([]byte(key))
	return catalogID{id: hex.EncodeToString(sum[:]), digest: true}
}

// catalog names the rows of one pipeline.
type catalog struct {
	prefix string // dedupe#PIPELINE#
}

func newCatalog(pipeline string) catalog { return catalog{prefix: rowPrefix + pipeline + "#"} }

const hexDigits = "0123456789abcdef"

// row is the row key of id, whose hash is h.
func (c catalog) row(id catalogID, h hashes) string {
	b := byte(h.h1 >> 56)
	sep := byte('#')
	if id.digest {
		sep = '='
	}
	var sb strings.Builder
	sb.Grow(len(c.prefix) + 3 + len(id.id))
	sb.WriteString(c.prefix)
	sb.WriteByte(hexDigits[b>>4])
	sb.WriteByte(hexDigits[b&15])
	sb.WriteByte(sep)
	sb.WriteString(id.id)
	return sb.String()
}

// parse returns the catalog id of a row key of this pipeline.
func (c catalog) parse(row string) (string, bool) {
	rest, ok := strings.CutPrefix(row, c.prefix)
	if !ok || len(rest) < 3 || (rest[2] != '#' && rest[2] != '=') || isJournalRow(rest) || isRulingRow(rest) {
		return "", false
	}
	return rest[3:], true
}

// keyRange is the row keys from start (included) to end (excluded).
type keyRange struct{ start, end string }

// ranges splits the pipeline's rows into n contiguous ranges of buckets,
// scanned in parallel by a rebuild.
func (c catalog) ranges(n int) []keyRange {
	n = max(1, min(n, buckets))
	out := make([]keyRange, 0, n)
	for i := 0; i < n; i++ {
		lo, hi := i*buckets/n, (i+1)*buckets/n
		r := keyRange{start: c.prefix + fmt.Sprintf("%02x", lo), end: c.prefix + fmt.Sprintf("%02x", hi)}
		if hi == buckets {
			r.end = c.prefix[:len(c.prefix)-1] + "$" // '#'+1: just past every row of the pipeline
		}
		out = append(out, r)
	}
	return out
}

// store is the catalog's I/O, the narrow seam that tests replace to inject
// failures. Times are Bigtable timestamps (microseconds, whole
// milliseconds). Errors are the client's, as they are.
type store interface {
	// read returns, for each row, its records and claims at or after
	// since.
	read(ctx context.Context, rows []string, since bigtable.Timestamp) ([]rowState, error)
	// put writes each cell, unconditionally: a claim of its row by its
	// winner (only a process alone may), or the record of its row at its
	// commit time; nil, or one error per cell.
	put(ctx context.Context, cells []cell) ([]error, error)
	// claimIf claims row for winner at at, in one conditional mutation,
	// unless the row holds anything at or after since; it reports whether
	// that condition held (then it wrote nothing). An error leaves it unknown whether the claim was written.
	claimIf(ctx context.Context, row, winner string, at, since bigtable.Timestamp) (blocked bool, err error)
	// unclaim deletes winner's claims of row (a claim that was not
	// trusted, withdrawn).
	unclaim(ctx context.Context, row, winner string) error
	// scan calls fn for every row of rng with a record at or after since,
	// with its latest commit time, in row order. It stops early if fn
	// returns false.
	scan(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(row string, at bigtable.Timestamp) bool) error
	// journal calls fn with every journal cell of rng at or after since.
	journal(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(at bigtable.Timestamp, v []byte) bool) error
	// readSince returns the journal marker's value in row: the largest of
	// its versions; false if it has none.
	readSince(ctx context.Context, row string) (time.Time, bool, error)
	// writeSince writes a version of the journal marker, at at.
	writeSince(ctx context.Context, row string, since time.Time, at bigtable.Timestamp) error
	// rule writes each ruling (rulings.go); nil, or one error per ruling.
	rule(ctx context.Context, rs []ruling) ([]error, error)
	// winners returns, for each row, the messages its claims (whatever
	// their age) and rulings name.
	winners(ctx context.Context, rows []string) ([][]string, error)
	// check returns an error if the table cannot be read.
	check(ctx context.Context) error
}

// btStore is the catalog in a Bigtable table.
type btStore struct {
	table *bigtable.Table
}

// recordFilter keeps the cells at or after since: a row whose latest
// record is older than the window is not returned at all. It is the only
// filter: the rows under dedupe# hold nothing but the one empty cell k:c
// (versions of it, when a key is committed again after its window), and on
// the emulator every further filter in a chain doubles the cost of a scan.
func recordFilter(since bigtable.Timestamp) bigtable.ReadOption {
	return bigtable.RowFilter(bigtable.TimestampRangeFilterMicros(since, 0))
}

// latest is the latest time of a record or claim of a row read with
// recordFilter, and false if it holds none at or after since (checked again
// here, so that the answer does not rest on the server's filter alone). A
// rebuild puts the key of such a row in the filters: a claim without its
// record yet also makes a later delivery of the key ask the catalog.
func latest(r bigtable.Row, since bigtable.Timestamp) (bigtable.Timestamp, bool) {
	var at bigtable.Timestamp
	found := false
	for _, it := range r[state.FamilyDedupe] {
		if it.Timestamp >= since && it.Timestamp > at {
			at, found = it.Timestamp, true
		}
	}
	return at, found
}

func (s btStore) read(ctx context.Context, rows []string, since bigtable.Timestamp) ([]rowState, error) {
	states := make(map[string]rowState, 4)
	err := s.table.ReadRows(ctx, bigtable.RowList(rows), func(r bigtable.Row) bool {
		states[r.Key()] = stateOf(r, since)
		return true
	}, recordFilter(since))
	if err != nil {
		return nil, err
	}
	out := make([]rowState, len(rows))
	for i, row := range rows {
		out[i] = states[row]
	}
	return out, nil
}

func (s btStore) claimIf(ctx context.Context, row, winner string, at, since bigtable.Timestamp) (bool, error) {
	set := bigtable.NewMutation()
	set.Set(state.FamilyDedupe, claimPrefix+winner, at, nil)
	var blocked bool
	// Apply does not retry a conditional mutation: the caller reads the row
	// back after an error. The predicate is the read filter: any cell within
	// the window, winner's own claims too, so that a redelivery learns that
	// it resumes.
	err := s.table.Apply(ctx, row, bigtable.NewCondMutation(bigtable.TimestampRangeFilterMicros(since, 0), nil, set), bigtable.GetCondMutationResult(&blocked))
	return blocked, err
}

func (s btStore) unclaim(ctx context.Context, row, winner string) error {
	m := bigtable.NewMutation()
	m.DeleteCellsInColumn(state.FamilyDedupe, claimPrefix+winner)
	return s.table.Apply(ctx, row, m)
}

func (s btStore) put(ctx context.Context, cells []cell) ([]error, error) {
	rows := make([]string, len(cells))
	muts := make([]*bigtable.Mutation, len(cells))
	var rec *bigtable.Mutation // the last record's mutation, at recAt
	var recAt bigtable.Timestamp
	for i, c := range cells {
		rows[i] = c.row
		if c.journal != nil {
			m := bigtable.NewMutation()
			m.Set(state.FamilyDedupe, journalColumn, c.at, c.journal)
			muts[i] = m
			continue
		}
		if c.winner != "" {
			m := bigtable.NewMutation()
			m.Set(state.FamilyDedupe, claimPrefix+c.winner, c.at, nil)
			muts[i] = m
			continue
		}
		// Records committed in the same millisecond (most of a batch: the
		// commits of one sink batch arrive together) share one mutation:
		// ApplyBulk only reads it, so the requests are the same as with
		// one mutation each, for a fraction of the allocations.
		if rec == nil || c.at != recAt {
			rec, recAt = bigtable.NewMutation(), c.at
			// An explicit timestamp makes the write idempotent: the client
			// retries it, and a retry sets the same cell.
			rec.Set(state.FamilyDedupe, column, c.at, nil)
		}
		muts[i] = rec
	}
	return s.table.ApplyBulk(ctx, rows, muts)
}

func (s btStore) scan(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(string, bigtable.Timestamp) bool) error {
	return s.table.ReadRows(ctx, rng, func(r bigtable.Row) bool {
		if at, ok := latest(r, since); ok {
			return fn(r.Key(), at)
		}
		return true
	}, recordFilter(since))
}

func (s btStore) journal(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(bigtable.Timestamp, []byte) bool) error {
	col := state.FamilyDedupe + ":" + journalColumn
	return s.table.ReadRows(ctx, rng, func(r bigtable.Row) bool {
		for _, it := range r[state.FamilyDedupe] {
			if it.Column == col && it.Timestamp >= since && !fn(it.Timestamp, it.Value) {
				return false
			}
		}
		return true
	}, recordFilter(since))
}

func (s btStore) readSince(ctx context.Context, row string) (time.Time, bool, error) {
	r, err := s.table.ReadRow(ctx, row, bigtable.RowFilter(bigtable.ColumnFilter(sinceColumn)))
	if err != nil {
		return time.Time{}, false, err
	}
	var ms int64
	found := false
	for _, it := range r[state.FamilyDedupe] {
		if len(it.Value) == 8 {
			ms, found = max(ms, int64(binary.BigEndian.Uint64(it.Value))), true
		}
	}
	return time.UnixMilli(ms), found, nil
}

func (s btStore) writeSince(ctx context.Context, row string, since time.Time, at bigtable.Timestamp) error {
	m := bigtable.NewMutation()
	m.Set(state.FamilyDedupe, sinceColumn, at, binary.BigEndian.AppendUint64(nil, uint64(since.UnixMilli())))
	return s.table.Apply(ctx, row, m)
}

func (s btStore) check(ctx context.Context) error {
	_, err := s.table.ReadRow(ctx, rowPrefix+"check", bigtable.RowFilter(bigtable.FamilyFilter(state.FamilyDedupe)))
	return err
}

// flushReads reads one batch of catalog rows into their lookups.
func (d *Keys) flushReads(ctx context.Context, ls []lookup) []error {
	since := bigtable.Time(d.now().Add(-d.cfg.Window)).TruncateToMilliseconds()
	rows := make([]string, len(ls))
	for i, l := range ls {
		rows[i] = l.row
	}
	states, err := d.store.read(ctx, rows, since)
	errs := make([]error, len(ls))
	for i, l := range ls {
		if err != nil {
			errs[i] = err
			continue
		}
		*l.out = states[i]
	}
	return errs
}

// flushWrites writes one batch of claims and records, and its journal row
// (journal.go). A cell's write succeeds only if its journal row did too:
// the journal must never miss a key whose claim or record is durable.
func (d *Keys) flushWrites(ctx context.Context, cells []cell) []error {
	out := make([]cell, 0, len(cells)+1)
	for _, c := range cells {
		if c.row != "" { // not a key for the journal row alone
			out = append(out, c)
		}
	}
	if !d.cfg.NoJournal {
		out = append(out, d.jrn.entry(cells))
	}
	errs, err := d.store.put(ctx, out)
	if err == nil && errs == nil {
		return nil
	}
	res := make([]error, len(cells))
	var jerr error
	if err == nil && !d.cfg.NoJournal && errs[len(out)-1] != nil {
		jerr = fmt.Errorf("journal: %w", errs[len(out)-1])
	}
	k := 0 // index in out of the next cell with a row
	for i, c := range cells {
		switch {
		case err != nil:
			res[i] = err
		case c.row != "" && errs[k] != nil:
			res[i] = errs[k]
		default:
			res[i] = jerr
		}
		if c.row != "" {
			k++
		}
	}
	return res
}
