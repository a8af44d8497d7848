package bigtable

import (
	"testing"
	"time"

	"github.com/pubsink/pubsink/sinks"
)

// BenchmarkNewEntry is the per-row work of the sink but for ApplyBulk: the
// limit checks and one copy of the values (newEntry, in Write), and the
// mutation (in the flush), for a row of one 200-byte column and for a row of
// four columns.
func BenchmarkNewEntry(b *testing.B) {
	value := make([]byte, 200)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_901_000, time.UTC)
	for _, c := range []struct {
		name  string
		cells []sinks.Cell
	}{
		{"columns=1", []sinks.Cell{{Column: "data", Value: value}}},
		{"columns=4", []sinks.Cell{{Column: "data", Value: value}, {Column: "amount", Value: []byte("12.50")},
			{Column: "currency", Value: []byte("EUR")}, {Column: "customer", Value: []byte("c-000042")}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			row := &sinks.Row{Key: "c-000042#9223370269531731807", Cells: c.cells, Timestamp: ts}
			b.ReportAllocs()
			for b.Loop() {
				e, err := newEntry(row, "d")
				if err != nil {
					b.Fatal(err)
				}
				e.mutation()
			}
		})
	}
}
