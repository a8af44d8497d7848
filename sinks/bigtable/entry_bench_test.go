package bigtable

import (
	"testing"
	"time"

	"github.com/pubsink/pubsink/sinks"
)

// entrySink is a sink with one (table, family) pair, "t" and "d", the
// default, enough for newItem; it does no I/O.
func entrySink() *Sink {
	t := &target{name: "t", family: "d"}
	return &Sink{targets: []*target{t}, table: "t", family: "d", own: t}
}

// BenchmarkNewItem is the per-message work of the sink but for ApplyBulk:
// the limit checks and one copy of the values (newItem, in Write), and the
// mutations (in the flush), for a row of one 200-byte column, a row of four
// columns, and a message of three rows of one column.
func BenchmarkNewItem(b *testing.B) {
	value := make([]byte, 200)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_901_000, time.UTC)
	four := []sinks.Cell{{Column: "data", Value: value}, {Column: "amount", Value: []byte("12.50")},
		{Column: "currency", Value: []byte("EUR")}, {Column: "customer", Value: []byte("c-000042")}}
	s := entrySink()
	for _, c := range []struct {
		name string
		rows []sinks.Row
	}{
		{"rows=1/columns=1", []sinks.Row{{Key: "c-000042#9223370269531731807", Cells: []sinks.Cell{{Column: "data", Value: value}}, Timestamp: ts}}},
		{"rows=1/columns=4", []sinks.Row{{Key: "c-000042#9223370269531731807", Cells: four, Timestamp: ts}}},
		{"rows=3/columns=1", []sinks.Row{
			{Key: "c-000042#9223370269531731807#0", Cells: []sinks.Cell{{Column: "data", Value: value}}, Timestamp: ts},
			{Key: "c-000042#9223370269531731807#1", Cells: []sinks.Cell{{Column: "data", Value: value}}, Timestamp: ts},
			{Key: "c-000042#9223370269531731807#2", Cells: []sinks.Cell{{Column: "data", Value: value}}, Timestamp: ts},
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				it, _, err := s.newItem(c.rows)
				if err != nil {
					b.Fatal(err)
				}
				for i := range it.rows() {
					it.entry(i).mutation()
				}
			}
		})
	}
}
