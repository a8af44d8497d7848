package watermark

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
)

// Store keeps a pipeline's watermark across restarts. Implementations must
// never let the stored value move backwards: Save of a time before the
// stored one leaves the stored one in place.
type Store interface {
	// Load returns the stored watermark, the zero time if none was ever
	// stored. Errors are transient.
	Load(ctx context.Context) (time.Time, error)
	// Save stores wm (truncated to milliseconds) unless a later value is
	// stored. Errors are transient; ctx bounds the call.
	Save(ctx context.Context, wm time.Time) error
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
// no read-modify-write, and rewriting the same value is idempotent.
type bigtableStore struct {
	table *bigtable.Table
	row   string
}

// newBigtableStore returns the Store of pipeline in the state table.
func newBigtableStore(client *bigtable.Client, table, pipeline string) Store {
	return &bigtableStore{table: client.Open(table), row: state.WatermarkRow(pipeline)}
}

var watermarkFilter = bigtable.ChainFilters(
	bigtable.FamilyFilter("^"+regexp.QuoteMeta(state.FamilyMeta)+"$"),
	bigtable.ColumnFilter("^"+regexp.QuoteMeta(state.WatermarkColumn)+"$"),
	bigtable.LatestNFilter(1),
)

func (s *bigtableStore) Load(ctx context.Context) (time.Time, error) {
	row, err := s.table.ReadRow(ctx, s.row, bigtable.RowFilter(watermarkFilter))
	if err != nil {
		return time.Time{}, fmt.Errorf("read stored watermark (row %s): %w", s.row, err)
	}
	var latest time.Time
	for _, item := range row[state.FamilyMeta] {
		t, err := time.Parse(state.WatermarkFormat, string(item.Value))
		if err != nil {
			// Not ours to repair: start from the cell's timestamp, which
			// Save sets to the same instant.
			t = item.Timestamp.Time()
		}
		if t.After(latest) {
			latest = t
		}
	}
	return latest.UTC(), nil
}

func (s *bigtableStore) Save(ctx context.Context, wm time.Time) error {
	wm = wm.UTC().Truncate(time.Millisecond)
	if wm.Before(time.Unix(0, 0)) {
		return nil // a cell timestamp cannot be negative; nothing useful to store
	}
	m := bigtable.NewMutation()
	m.Set(state.FamilyMeta, state.WatermarkColumn, bigtable.Time(wm), []byte(wm.Format(state.WatermarkFormat)))
	if err := s.table.Apply(ctx, s.row, m); err != nil {
		return fmt.Errorf("store watermark (row %s): %w", s.row, err)
	}
	return nil
}
