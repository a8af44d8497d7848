package watermark

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestStatsReadAsSnakeCaseJSON: /status shows Stats as they marshal; the
// names are snake_case and a time not known yet is absent, not year 1.
func TestStatsReadAsSnakeCaseJSON(t *testing.T) {
	b, err := json.Marshal(Stats{Pending: 3, StartupGuard: true})
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{`"pending":3`, `"startup_guard":true`, `"stream_breaks":0`, `"ignored_finished":0`} {
		if !strings.Contains(got, want) {
			t.Errorf("Stats JSON %s lacks %s", got, want)
		}
	}
	for _, absent := range []string{"Pending", "held_until", "oldest_pending", "tracker_frontier", "0001-01-01"} {
		if strings.Contains(got, absent) {
			t.Errorf("Stats JSON %s has %s", got, absent)
		}
	}
	b, _ = json.Marshal(Stats{HeldUntil: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	if !strings.Contains(string(b), `"held_until":"2026-01-02T03:04:05Z"`) {
		t.Errorf("Stats JSON %s: a known time must be there", b)
	}
}
