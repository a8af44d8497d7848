package bigtable

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/sinks"
)

// FuzzNewItem builds items from messages of arbitrary keys, qualifiers,
// values and timestamps: a message either becomes an item of one entry per
// row, each for its own key, or is rejected before any I/O (a
// sinks.RejectedError naming the row, so that it is dead-lettered rather
// than sent to fail on every retry), and what is rejected breaks one of
// Bigtable's documented limits.
// Run: go test -fuzz=FuzzNewItem ./sinks/bigtable
func FuzzNewItem(f *testing.F) {
	f.Add("r1", "data", []byte("v"), int64(1780272007123456789), uint16(1), uint32(0), uint8(1))
	f.Add("", "data", []byte("v"), int64(0), uint16(1), uint32(0), uint8(2))
	f.Add("r2", "q", []byte{}, int64(-1), uint16(0), uint32(0), uint8(1))
	f.Add("r3", "q", []byte("x"), int64(0), uint16(3), uint32(MaxKeyBytes), uint8(3))
	f.Add("r4", "q", []byte("x"), int64(0), uint16(2), uint32(MaxQualifierBytes), uint8(2))
	s := entrySink()
	f.Fuzz(func(t *testing.T, key, qualifier string, value []byte, tsNanos int64, cells uint16, pad uint32, nrows uint8) {
		switch pad % 3 { // stretch one part to its limit and past it
		case 1:
			key += strings.Repeat("k", int(pad%(MaxKeyBytes+2)))
		case 2:
			qualifier += strings.Repeat("q", int(pad%(MaxQualifierBytes+2)))
		}
		// Rows 0..n-1: row i has key key+i (row 0 key itself) and cells-i
		// cells, so that a later row may break a limit an earlier one does
		// not.
		rows := make([]sinks.Row, 1+int(nrows%4))
		for i := range rows {
			r := &rows[i]
			r.Key, r.Timestamp = key+strings.Repeat("+", i), time.Unix(0, tsNanos)
			for j := range max(int(cells%8)-i, 0) {
				r.Cells = append(r.Cells, sinks.Cell{Column: qualifier + strings.Repeat("#", j), Value: value})
			}
		}
		valid := func(r *sinks.Row) bool {
			longest := 0
			for _, c := range r.Cells {
				longest = max(longest, len(c.Column))
			}
			return r.Key != "" && len(r.Key) <= MaxKeyBytes && len(r.Cells) > 0 && tsNanos >= 0 && longest <= MaxQualifierBytes
		}
		it, _, err := s.newItem(rows)
		if err != nil {
			var rejected *sinks.RejectedError
			if !errors.As(err, &rejected) {
				t.Fatalf("newItem error %v is not a rejection", err)
			}
			if rejected.Row < 0 || rejected.Row >= len(rows) {
				t.Fatalf("rejection of row %d of %d", rejected.Row, len(rows))
			}
			if valid(&rows[rejected.Row]) {
				t.Fatalf("row %d, within every limit, was rejected: %v", rejected.Row, err)
			}
			for i := range rejected.Row {
				if !valid(&rows[i]) {
					t.Fatalf("row %d rejected, but row %d before it breaks a limit", rejected.Row, i)
				}
			}
			return
		}
		if it.rows() != len(rows) {
			t.Fatalf("item of %d entries for %d rows", it.rows(), len(rows))
		}
		for i := range rows {
			e, r := it.entry(i), &rows[i]
			if !valid(r) || e.key != r.Key || 1+len(e.more) != len(r.Cells) {
				t.Fatalf("entry %d for %q (%d bytes, %d cells, ts %d) accepted", i, r.Key[:min(len(r.Key), 20)], len(r.Key), len(r.Cells), tsNanos)
			}
		}
	})
}
