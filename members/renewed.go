package members

import (
	"context"
	"time"

	"cloud.google.com/go/bigtable"
)

// RenewedSince reports whether a member of pipeline wrote its cell in
// table at or after since, by the cells' timestamps (each writer's clock):
// whether the pipeline runs, for a command beside it (a reprocess waits
// for a running live pipeline to finish its range). A member's clock that
// runs behind since's makes it look stopped.
func RenewedSince(ctx context.Context, table *bigtable.Table, pipeline string, since time.Time) (bool, error) {
	cells, err := btStore{table: table, row: Row(pipeline)}.read(ctx)
	if err != nil {
		return false, err
	}
	at := bigtable.Time(since)
	for _, c := range cells {
		if c.at >= at {
			return true, nil
		}
	}
	return false, nil
}
