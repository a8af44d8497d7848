package watermark

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
)

// Store keeps a pipeline's watermark across restarts, and the lease of
// its leader. Implementations must never let the stored value move
// backwards: a Save of a time before the stored one leaves the stored one
// in place.
type Store interface {
	// Load returns the stored watermark (the zero time if none was ever
	// stored) and the leader cell ("" if there is none). Errors are
	// transient.
	Load(ctx context.Context) (Stored, error)
	// Take replaces the leader cell by next if it holds expect ("": if
	// there is no leader cell), atomically, and reports whether it did. An
	// error leaves it unknown: read the cell again.
	Take(ctx context.Context, expect, next string) (bool, error)
	// Save stores wm (truncated to milliseconds), unless a later value is
	// stored, if the leader cell holds leader; it reports whether the cell
	// did (false: another member took the lease, nothing was written).
	// Errors are transient; ctx bounds the call.
	Save(ctx context.Context, leader string, wm time.Time) (bool, error)
}

// Stored is what Store.Load reads.
type Stored struct {
	Watermark time.Time
	Leader    string
}

// bigtableStore is the Store of a pipeline in the state table: row
// watermark#PIPELINE, column m:watermark, the value RFC 3339 UTC with
// milliseconds (docs/reference.md, "State table").
//
// The cell's timestamp is the watermark itself, so that the newest version
// of the cell is always the greatest watermark ever written: the family
// keeps one version (state.Families), and Bigtable keeps the one with the
// highest timestamp. A stale or racing writer (a process still stopping
// while its successor starts) cannot move the stored value backwards, with
// no read-modify-write, and rewriting the same value is idempotent. On top
// of that, Save is fenced: a conditional mutation that writes only while
// the leader cell (m:leader, same row) holds the writer's lease.
type bigtableStore struct {
	table *bigtable.Table
	row   string
}

// newBigtableStore returns the Store of pipeline in the state table.
func newBigtableStore(client *bigtable.Client, table, pipeline string) Store {
	return &bigtableStore{table: client.Open(table), row: state.WatermarkRow(pipeline)}
}

// metaColumn selects the newest cell of one column of family m.
func metaColumn(column string) bigtable.Filter {
	return bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+regexp.QuoteMeta(state.FamilyMeta)+"$"),
		bigtable.ColumnFilter("^"+regexp.QuoteMeta(column)+"$"),
		bigtable.LatestNFilter(1),
	)
}

var (
	watermarkFilter = metaColumn(state.WatermarkColumn)
	leaderFilter    = metaColumn(state.LeaderColumn)
	storedFilter    = bigtable.InterleaveFilters(watermarkFilter, leaderFilter)
)

// leaderIs matches the leader cell when it holds exactly value.
func leaderIs(value string) bigtable.Filter {
	return bigtable.ChainFilters(leaderFilter, bigtable.ValueFilter("^"+regexp.QuoteMeta(value)+"$"))
}

func (s *bigtableStore) Load(ctx context.Context) (Stored, error) {
	row, err := s.table.ReadRow(ctx, s.row, bigtable.RowFilter(storedFilter))
	if err != nil {
		return Stored{}, fmt.Errorf("read stored watermark (row %s): %w", s.row, err)
	}
	var st Stored
	for _, item := range row[state.FamilyMeta] {
		if item.Column == state.FamilyMeta+":"+state.LeaderColumn {
			st.Leader = string(item.Value)
			continue
		}
		t, err := time.Parse(state.WatermarkFormat, string(item.Value))
		if err != nil {
			// Not ours to repair: start from the cell's timestamp, which
			// Save sets to the same instant.
			t = item.Timestamp.Time()
		}
		if t.After(st.Watermark) {
			st.Watermark = t
		}
	}
	st.Watermark = st.Watermark.UTC()
	return st, nil
}

// Take writes the leader cell as one cell: the column is cleared first, so
// that no older version can ever be read back as the current one.
func (s *bigtableStore) Take(ctx context.Context, expect, next string) (bool, error) {
	set := bigtable.NewMutation()
	set.DeleteCellsInColumn(state.FamilyMeta, state.LeaderColumn)
	set.Set(state.FamilyMeta, state.LeaderColumn, bigtable.Now().TruncateToMilliseconds(), []byte(next))
	var cm *bigtable.Mutation
	if expect == "" {
		cm = bigtable.NewCondMutation(leaderFilter, nil, set) // applied when there is no cell
	} else {
		cm = bigtable.NewCondMutation(leaderIs(expect), set, nil)
	}
	var matched bool
	if err := s.table.Apply(ctx, s.row, cm, bigtable.GetCondMutationResult(&matched)); err != nil {
		return false, fmt.Errorf("write the leader lease (row %s): %w", s.row, err)
	}
	return matched == (expect != ""), nil
}

func (s *bigtableStore) Save(ctx context.Context, leader string, wm time.Time) (bool, error) {
	wm = wm.UTC().Truncate(time.Millisecond)
	if wm.Before(time.Unix(0, 0)) {
		return true, nil // a cell timestamp cannot be negative; nothing useful to store
	}
	m := bigtable.NewMutation()
	m.Set(state.FamilyMeta, state.WatermarkColumn, bigtable.Time(wm), []byte(wm.Format(state.WatermarkFormat)))
	var matched bool
	if err := s.table.Apply(ctx, s.row, bigtable.NewCondMutation(leaderIs(leader), m, nil), bigtable.GetCondMutationResult(&matched)); err != nil {
		return false, fmt.Errorf("store watermark (row %s): %w", s.row, err)
	}
	return matched, nil
}
