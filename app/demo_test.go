package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoDrainsTheSampleStream runs the demo on a smaller stream. Run
// checks its own outcome (every reading committed once, every poison
// message dead-lettered with its reason), so an error is a failure.
func TestDemoDrainsTheSampleStream(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	if err := Demo(context.Background(), &out, DemoOptions{Messages: 600, Dir: dir, Timeout: time.Minute}); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"committed      600", "duplicate      30", "filtered       60", "dead-lettered  40", "temperature_f", "sample rows"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "dead-letter.jsonl"))
	if err != nil || bytes.Count(b, []byte("\n")) != 40 {
		t.Errorf("dead-letter file: %v, %d lines; want 40", err, bytes.Count(b, []byte("\n")))
	}
}

func TestSampleStreamIsDeterministicAndOrderedByPublishTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := sampleStream(300, now, 7), sampleStream(300, now, 7)
	if len(a) != len(b) || len(a) != 300+15+60+40 {
		t.Fatalf("lengths %d, %d; want %d", len(a), len(b), 300+15+60+40)
	}
	for i := range a {
		if string(a[i].data) != string(b[i].data) || !a[i].publishAt.Equal(b[i].publishAt) {
			t.Fatalf("message %d differs between runs with one seed", i)
		}
		if i > 0 && a[i].publishAt.Before(a[i-1].publishAt) {
			t.Fatalf("message %d published before message %d", i, i-1)
		}
	}
	if got := tally(a); got["reading"] != 300 || got["duplicate"] != 15 || got["invalid_payload"] != 15 || got["missing_field"] != 15 || got["bad_event_time"] != 10 || got["filtered"] != 60 {
		t.Fatalf("tally %v", got)
	}
}
