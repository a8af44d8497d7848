package reprocess

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestAReporterWithoutATerminalLogsTheProgress: piped (a Job's log), the
// progress is a log line at most every LogEvery, and nothing is drawn.
func TestAReporterWithoutATerminalLogsTheProgress(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var w bytes.Buffer
	r := NewReporter(&w, zap.New(core), "reprocess")
	p := Progress{Done: 1200, Fraction: 0.25, Rate: 400, Left: 9 * time.Second, LeftSecs: 9, Frontier: time.Date(2026, 12, 3, 10, 15, 0, 0, time.UTC)}
	r.Show(p)
	r.Show(p) // within LogEvery: no second line
	r.Close()
	if w.Len() != 0 {
		t.Errorf("drew on a writer that is no terminal: %q", w.String())
	}
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("%d log lines, want 1", len(entries))
	}
	msg := entries[0].Message
	if !strings.Contains(msg, "1200 messages done (25% of the range, up to 2026-12-03T10:15:00Z), 400/s, about 9s left") {
		t.Errorf("log line %q", msg)
	}
	if f := entries[0].ContextMap(); f["done"] != int64(1200) || f["seconds_left"] != 9.0 {
		t.Errorf("log fields %v", f)
	}
}
