package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTimesAreAbsentUntilKnown: the watermark and its lag are not exported
// before the watermark is known (0 would read as 56 years of lag and fire
// any lag alert), then are the watermark and now − watermark; the oldest
// in-flight age is 0 with nothing in flight.
func TestTimesAreAbsentUntilKnown(t *testing.T) {
	m := New()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m.times.now = func() time.Time { return now }
	p := m.Pipeline("orders")
	var wm time.Time
	var oldest time.Time
	p.WatchWatermark(func() time.Time { return wm })
	p.WatchOldestInFlight(func() (time.Time, bool) { return oldest, !oldest.IsZero() })

	names := "pubsink_watermark_timestamp_seconds pubsink_watermark_lag_seconds pubsink_oldest_in_flight_age_seconds"
	want := `
# HELP pubsink_oldest_in_flight_age_seconds Age since publication of the oldest message being processed, in seconds (to the second); 0 when none is.
# TYPE pubsink_oldest_in_flight_age_seconds gauge
pubsink_oldest_in_flight_age_seconds{pipeline="orders"} 0
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), strings.Fields(names)...); err != nil {
		t.Fatalf("before the watermark is known: %v", err)
	}

	wm = now.Add(-90 * time.Second)
	oldest = now.Add(-7 * time.Second)
	want = `
# HELP pubsink_oldest_in_flight_age_seconds Age since publication of the oldest message being processed, in seconds (to the second); 0 when none is.
# TYPE pubsink_oldest_in_flight_age_seconds gauge
pubsink_oldest_in_flight_age_seconds{pipeline="orders"} 7
# HELP pubsink_watermark_lag_seconds How far the watermark is behind this process's clock, in seconds; absent until it is known.
# TYPE pubsink_watermark_lag_seconds gauge
pubsink_watermark_lag_seconds{pipeline="orders"} 90
# HELP pubsink_watermark_timestamp_seconds Event-time watermark of the pipeline, in seconds since the Unix epoch; absent until it is known.
# TYPE pubsink_watermark_timestamp_seconds gauge
pubsink_watermark_timestamp_seconds{pipeline="orders"} 1.79612631e+09
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), strings.Fields(names)...); err != nil {
		t.Fatalf("once known: %v", err)
	}
}

func TestReadyAndBuildInfo(t *testing.T) {
	m := New()
	var err error
	if got := m.readyValue(); got != 0 {
		t.Errorf("pubsink_ready with nothing to ask = %v, want 0", got)
	}
	m.WatchReady(func(context.Context) error { return err })
	if got := m.readyValue(); got != 1 {
		t.Errorf("pubsink_ready of a ready process = %v, want 1", got)
	}
	err = errors.New("starting")
	if got := m.readyValue(); got != 0 {
		t.Errorf("pubsink_ready of a process not ready = %v, want 0", got)
	}
	n, gerr := testutil.GatherAndCount(m.Registry, "pubsink_build_info")
	if gerr != nil || n != 1 {
		t.Errorf("pubsink_build_info: %d series, %v; want 1", n, gerr)
	}
}

// TestBucketsAreReadable: every histogram bound is 1, 2.5 or 5 times a
// power of ten, so that le labels read as numbers a person would choose.
func TestBucketsAreReadable(t *testing.T) {
	for _, b := range stageBuckets { // latencyBuckets and below
		ok := false
		for p := 1e-4; p <= 1e3; p *= 10 {
			for _, f := range []float64{1, 2.5, 5} {
				if d := b - f*p; d < 1e-12 && d > -1e-12 {
					ok = true
				}
			}
		}
		if !ok {
			t.Errorf("bucket bound %v is not 1, 2.5 or 5 times a power of ten", b)
		}
	}
}

// TestChangeCountsAreExportedAtZero: a pipeline's counts of changes exist
// from the start, every operation with every result and every policy, so
// that a rate over them is defined before the first change.
func TestChangeCountsAreExportedAtZero(t *testing.T) {
	m := New()
	p := m.Pipeline("orders")
	for name, want := range map[string]int{
		"pubsink_row_operations_total":   len(Operations) * len(OperationResults), // 4 × 2
		"pubsink_missing_values_total":   len(MissingPolicies),                    // 3
		"pubsink_cells_superseded_total": 1,
	} {
		if n, err := testutil.GatherAndCount(m.Registry, name); err != nil || n != want {
			t.Errorf("%s: %d series, %v; want %d", name, n, err, want)
		}
	}
	if len(Operations) != 4 || len(OperationResults) != 2 || len(MissingPolicies) != 3 {
		t.Errorf("operations %q, results %q, policies %q", Operations, OperationResults, MissingPolicies)
	}
	p.RowOperations("delete", "applied").Add(2)
	p.MissingValues("skip").Inc()
	p.CellsSuperseded.Add(3)
	if Value(p.RowOperations("delete", "applied")) != 2 || Value(p.MissingValues("skip")) != 1 || Value(p.CellsSuperseded) != 3 {
		t.Error("the counters do not count")
	}
	if n, _ := testutil.GatherAndCount(m.Registry, "pubsink_row_operations_total"); n != 8 {
		t.Errorf("counting made %d series of pubsink_row_operations_total, want the 8 there from the start", n)
	}
}
