package bigtable

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/sinks"
)

// FuzzNewEntry builds entries from rows of arbitrary keys, qualifiers,
// values and timestamps: a row either becomes an entry for its own key or
// is rejected before any I/O (a sinks.RejectedError, so that it is
// dead-lettered rather than sent to fail on every retry), and what is
// rejected breaks one of Bigtable's documented limits.
// Run: go test -fuzz=FuzzNewEntry ./sinks/bigtable
func FuzzNewEntry(f *testing.F) {
	f.Add("r1", "data", []byte("v"), int64(1780272007123456789), uint16(1), uint32(0))
	f.Add("", "data", []byte("v"), int64(0), uint16(1), uint32(0))
	f.Add("r2", "q", []byte{}, int64(-1), uint16(0), uint32(0))
	f.Add("r3", "q", []byte("x"), int64(0), uint16(3), uint32(MaxKeyBytes))
	f.Add("r4", "q", []byte("x"), int64(0), uint16(2), uint32(MaxQualifierBytes))
	f.Fuzz(func(t *testing.T, key, qualifier string, value []byte, tsNanos int64, cells uint16, pad uint32) {
		switch pad % 3 { // stretch one part to its limit and past it
		case 1:
			key += strings.Repeat("k", int(pad%(MaxKeyBytes+2)))
		case 2:
			qualifier += strings.Repeat("q", int(pad%(MaxQualifierBytes+2)))
		}
		row := &sinks.Row{Key: key, Timestamp: time.Unix(0, tsNanos)}
		for i := range int(cells % 8) {
			row.Cells = append(row.Cells, sinks.Cell{Column: qualifier + strings.Repeat("#", i), Value: value})
		}
		e, err := newEntry(row, "d")
		if err != nil {
			var rejected *sinks.RejectedError
			if !errors.As(err, &rejected) {
				t.Fatalf("newEntry error %v is not a rejection", err)
			}
			longest := 0
			for _, c := range row.Cells {
				longest = max(longest, len(c.Column))
			}
			if key != "" && len(key) <= MaxKeyBytes && len(row.Cells) > 0 && tsNanos >= 0 && longest <= MaxQualifierBytes {
				t.Fatalf("a row within every limit was rejected: %v", err)
			}
			return
		}
		if e.key != key || len(key) == 0 || len(key) > MaxKeyBytes || tsNanos < 0 || len(row.Cells) == 0 {
			t.Fatalf("entry for %q (%d bytes, %d cells, ts %d) accepted", key[:min(len(key), 20)], len(key), len(row.Cells), tsNanos)
		}
	})
}
