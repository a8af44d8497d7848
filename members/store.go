package members

import (
	"context"
	"regexp"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
)

// Row is the row key of a pipeline's members in the state table: one
// column per member in family m (state.FamilyMeta), whose latest cell holds
// the members it acknowledged, comma-separated, at the member's clock.
func Row(pipeline string) string { return "members#" + pipeline }

// cell is a member's latest cell.
type cell struct {
	value string
	at    bigtable.Timestamp
}

// store is the membership row's I/O: the seam tests replace.
type store interface {
	// write sets id's cell to value at timestamp at.
	write(ctx context.Context, id, value string, at bigtable.Timestamp) error
	// read returns every member's latest cell.
	read(ctx context.Context) (map[string]cell, error)
	// remove deletes id's cells; with before > 0, only those older than it.
	remove(ctx context.Context, id string, before bigtable.Timestamp) error
}

type btStore struct {
	table *bigtable.Table
	row   string
}

var metaFamily = bigtable.FamilyFilter("^" + regexp.QuoteMeta(state.FamilyMeta) + "$")

func (s btStore) write(ctx context.Context, id, value string, at bigtable.Timestamp) error {
	m := bigtable.NewMutation()
	m.Set(state.FamilyMeta, id, at, []byte(value))
	return s.table.Apply(ctx, s.row, m)
}

func (s btStore) read(ctx context.Context) (map[string]cell, error) {
	r, err := s.table.ReadRow(ctx, s.row, bigtable.RowFilter(bigtable.ChainFilters(metaFamily, bigtable.LatestNFilter(1))))
	if err != nil {
		return nil, err
	}
	cells := map[string]cell{}
	for _, it := range r[state.FamilyMeta] {
		id := it.Column[len(state.FamilyMeta)+1:]
		if c, ok := cells[id]; !ok || it.Timestamp > c.at {
			cells[id] = cell{value: string(it.Value), at: it.Timestamp}
		}
	}
	return cells, nil
}

func (s btStore) remove(ctx context.Context, id string, before bigtable.Timestamp) error {
	m := bigtable.NewMutation()
	if before > 0 {
		m.DeleteTimestampRange(state.FamilyMeta, id, 0, before)
	} else {
		m.DeleteCellsInColumn(state.FamilyMeta, id)
	}
	return s.table.Apply(ctx, s.row, m)
}
