package dedupe

import (
	"context"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
)

// ClaimedBetween counts the keys the processes of pipeline claimed or
// recorded from from until until (their cells' times, the writers' clocks),
// as the pipeline's journal in table lists them: what reprocess asks when a
// range brought no message, to tell an empty range from one the topic no
// longer gives. It reads the journal rows only (one per batch of catalog
// writes), never the catalog; keys older than the catalog's max age are
// gone, and a pipeline in at_least_once mode has no journal (0).
func ClaimedBetween(ctx context.Context, table *bigtable.Table, pipeline string, from, until time.Time) (int64, error) {
	j := newJournal(newCatalog(pipeline).prefix)
	lo := bigtable.Time(from.Truncate(time.Millisecond))
	hi := bigtable.Time(until.Truncate(time.Millisecond).Add(time.Millisecond)) // until included
	col := state.FamilyDedupe + ":" + journalColumn
	var n int64
	err := table.ReadRows(ctx, j.rows(), func(r bigtable.Row) bool {
		for _, it := range r[state.FamilyDedupe] {
			if it.Column == col && it.Timestamp >= lo && it.Timestamp < hi {
				n += int64(len(it.Value) / journalHashBytes)
			}
		}
		return true
	}, bigtable.RowFilter(bigtable.TimestampRangeFilterMicros(lo, hi)))
	return n, err
}
