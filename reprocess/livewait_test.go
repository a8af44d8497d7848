package reprocess

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitForLiveWaitsWhileTheLiveRunsBehindTheRange: the run waits while
// the live pipeline runs and holds a message of the range, and starts once
// the oldest message it holds is past the range, or once it does not run.
func TestWaitForLiveWaitsWhileTheLiveRunsBehindTheRange(t *testing.T) {
	until := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	behind := Live{Oldest: until.Add(-time.Minute), Running: true}
	for name, c := range map[string]struct {
		reads []Live
		waits int
	}{
		"finished at once":              {reads: []Live{{Oldest: until.Add(time.Millisecond), Running: true}}},
		"nothing unacked":               {reads: []Live{{Running: true}}},
		"a message at the end is in it": {reads: []Live{{Oldest: until, Running: true}, {}}, waits: 1},
		"behind, then past":             {reads: []Live{behind, behind, {Oldest: until.Add(time.Second), Running: true}}, waits: 2},
		"behind, but not running":       {reads: []Live{{Oldest: until.Add(-time.Hour)}}},
		"behind, then stops running":    {reads: []Live{behind, {Oldest: behind.Oldest}}, waits: 1},
	} {
		i, waits := 0, 0
		got, err := WaitForLive(context.Background(), until, time.Millisecond, func(context.Context) (Live, error) {
			l := c.reads[i]
			i++
			return l, nil
		}, func(l Live) {
			if l.Finished(until) || !l.Running {
				t.Errorf("%s: told it waits on %+v", name, l)
			}
			waits++
		})
		if err != nil || i != len(c.reads) || waits != c.waits || got != c.reads[len(c.reads)-1] {
			t.Errorf("%s: %+v, %v after %d reads and %d waits; want the last of %d reads, %d waits", name, got, err, i, waits, len(c.reads), c.waits)
		}
	}
}

// TestWaitForLiveStopsWithItsContextAndFailsWithItsRead: a stop while
// waiting is ctx's error; a read that fails is the run's error.
func TestWaitForLiveStopsWithItsContextAndFailsWithItsRead(t *testing.T) {
	until := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := WaitForLive(ctx, until, time.Hour, func(context.Context) (Live, error) {
		return Live{Oldest: until.Add(-time.Second), Running: true}, nil
	}, func(Live) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("stopped while waiting: %v, want context.Canceled", err)
	}
	boom := errors.New("no permission to take a snapshot")
	if _, err := WaitForLive(context.Background(), until, time.Millisecond, func(context.Context) (Live, error) { return Live{}, boom }, func(Live) {}); !errors.Is(err, boom) {
		t.Errorf("a failed read: %v, want it", err)
	}
}
