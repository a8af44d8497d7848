package dedupe

import (
	"context"
	"testing"

	"cloud.google.com/go/bigtable"
)

// TestCatalogWriteRecordsEachRowAtItsOwnTime: records of one batch that
// share a commit millisecond share a mutation, and the others do not take
// on a neighbour's time.
func TestCatalogWriteRecordsEachRowAtItsOwnTime(t *testing.T) {
	client := bttestClient(t)
	s := btStore{client.Open(testTable)}
	ctx := context.Background()
	t1 := bigtable.Time(newClock().Now()).TruncateToMilliseconds()
	t2 := t1 + 1000
	rows := []string{"dedupe#p#00#a", "dedupe#p#00#b", "dedupe#p#00#c", "dedupe#p#00#d", "dedupe#p#00#e"}
	at := []bigtable.Timestamp{t1, t1, t2, t1, t2}
	cells := make([]cell, len(rows))
	for i := range rows {
		cells[i] = cell{row: rows[i], at: at[i]}
	}
	if errs, err := s.put(ctx, cells); err != nil || errs != nil {
		t.Fatal(err, errs)
	}
	for i, row := range rows {
		found := false
		err := s.scan(ctx, bigtable.NewRange(row, row+"\x00"), 0, func(key string, got bigtable.Timestamp) bool {
			found = true
			if got != at[i] {
				t.Errorf("%s recorded at %d, want %d", key, got, at[i])
			}
			return true
		})
		if err != nil || !found {
			t.Errorf("%s: found %v, %v", row, found, err)
		}
	}
}
