package dedupe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
)

// Layout of the catalog in the state table (family state.FamilyDedupe):
//
//	dedupe#PIPELINE#HH#KEY   one row per committed key
//	dedupe#PIPELINE#HH=SHA   the same, for a key longer than maxRawKey
//
// with one cell k:c, empty, whose timestamp is the commit time in
// milliseconds. HH is the top byte of the key's hash in hex: 256 buckets.
const (
	rowPrefix = "dedupe#"
	// column is the qualifier of the one cell of a catalog row.
	column = "c"
	// maxRawKey is the longest key kept as it is in a row key. Bigtable
	// rejects row keys over 4 KiB, and long row keys cost on every read:
	// a longer key is replaced by the hex SHA-256 of it, which identifies
	// it as well for this purpose.
	maxRawKey = 1024
	// buckets is the number of hash buckets (HH) of a pipeline's rows.
	buckets = 256
)

// errSeen is the flush result of a catalog read whose key was committed
// within the window. It never leaves the package.
var errSeen = errors.New("dedupe: key committed within the window")

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
	if !ok || len(rest) < 3 || (rest[2] != '#' && rest[2] != '=') {
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
	// read reports, for each row, whether it holds a record at or after
	// since.
	read(ctx context.Context, rows []string, since bigtable.Timestamp) ([]bool, error)
	// write records each row at its commit time; nil, or one error per row.
	write(ctx context.Context, rows []string, at []bigtable.Timestamp) ([]error, error)
	// scan calls fn for every row of rng with a record at or after since,
	// with its latest commit time, in row order. It stops early if fn
	// returns false.
	scan(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(row string, at bigtable.Timestamp) bool) error
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

// latest is the latest commit time of a row read with recordFilter, and
// false if it holds none at or after since (checked again here, so that the
// answer does not rest on the server's filter alone).
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

func (s btStore) read(ctx context.Context, rows []string, since bigtable.Timestamp) ([]bool, error) {
	seen := make(map[string]struct{}, 4)
	err := s.table.ReadRows(ctx, bigtable.RowList(rows), func(r bigtable.Row) bool {
		if _, ok := latest(r, since); ok {
			seen[r.Key()] = struct{}{}
		}
		return true
	}, recordFilter(since))
	if err != nil {
		return nil, err
	}
	found := make([]bool, len(rows))
	for i, row := range rows {
		_, found[i] = seen[row]
	}
	return found, nil
}

func (s btStore) write(ctx context.Context, rows []string, at []bigtable.Timestamp) ([]error, error) {
	muts := make([]*bigtable.Mutation, len(rows))
	var m *bigtable.Mutation
	for i := range rows {
		// Records committed in the same millisecond (most of a batch: the
		// commits of one sink batch arrive together) share one mutation:
		// ApplyBulk only reads it, so the requests are the same as with
		// one mutation each, for a fraction of the allocations.
		if m == nil || at[i] != at[i-1] {
			m = bigtable.NewMutation()
			// An explicit timestamp makes the write idempotent: the client
			// retries it, and a retry sets the same cell.
			m.Set(state.FamilyDedupe, column, at[i], nil)
		}
		muts[i] = m
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

func (s btStore) check(ctx context.Context) error {
	_, err := s.table.ReadRow(ctx, rowPrefix+"check", bigtable.RowFilter(bigtable.FamilyFilter(state.FamilyDedupe)))
	return err
}
