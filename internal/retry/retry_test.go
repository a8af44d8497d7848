package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errBlip = errors.New("blip")
var errFatal = errors.New("fatal")

func TestDoRetriesUntilSuccess(t *testing.T) {
	p := Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	calls, retries := 0, 0
	err := p.Do(context.Background(), func(err error) bool { return errors.Is(err, errBlip) },
		func() error {
			calls++
			if calls < 5 {
				return errBlip
			}
			return nil
		},
		func(attempt int, err error) {
			retries++
			if attempt != retries || !errors.Is(err, errBlip) {
				t.Errorf("onRetry(%d, %v) on retry %d", attempt, err, retries)
			}
		})
	if err != nil || calls != 5 || retries != 4 {
		t.Fatalf("err=%v calls=%d retries=%d, want nil 5 4", err, calls, retries)
	}
}

func TestDoStopsOnPermanentError(t *testing.T) {
	calls := 0
	err := Default.Do(context.Background(), func(err error) bool { return errors.Is(err, errBlip) },
		func() error { calls++; return errFatal }, nil)
	if !errors.Is(err, errFatal) || calls != 1 {
		t.Fatalf("err=%v calls=%d, want errFatal after 1 call", err, calls)
	}
}

func TestDoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	p := Policy{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	calls := 0
	start := time.Now()
	err := p.Do(ctx, func(error) bool { return true }, func() error { calls++; return errBlip }, nil)
	if !errors.Is(err, errBlip) {
		t.Fatalf("err=%v, want the last op error", err)
	}
	if calls < 2 {
		t.Fatalf("calls=%d, want retries before the deadline", calls)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("Do returned %v after its context ended", elapsed)
	}
}

func TestWaitIsCappedAndJittered(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	for attempt := 1; attempt < 80; attempt++ {
		ceiling := min(p.Max, p.Initial<<min(attempt-1, 20))
		seen := map[time.Duration]bool{}
		for range 50 {
			d := p.wait(attempt)
			if d < 0 || d > ceiling {
				t.Fatalf("wait(%d)=%v, want within [0, %v]", attempt, d, ceiling)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("wait(%d) gave one value 50 times: no jitter", attempt)
		}
	}
}

func TestRetryContinuesAFailedFirstAttempt(t *testing.T) {
	p := Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	retryable := func(err error) bool { return errors.Is(err, errBlip) }
	calls, retries := 0, 0
	err := p.Retry(context.Background(), retryable, errBlip, func() error {
		calls++
		if calls < 3 {
			return errBlip
		}
		return nil
	}, func(attempt int, err error) {
		retries++
		if attempt != retries {
			t.Errorf("onRetry(%d) on retry %d: the caller's attempt is the first", attempt, retries)
		}
	})
	if err != nil || calls != 3 || retries != 3 {
		t.Fatalf("err=%v calls=%d retries=%d, want nil 3 3", err, calls, retries)
	}
	for _, first := range []error{nil, errFatal} {
		calls := 0
		err := p.Retry(context.Background(), retryable, first, func() error { calls++; return nil }, nil)
		if err != first || calls != 0 {
			t.Fatalf("Retry after %v: err=%v calls=%d, want %v and no call", first, err, calls, first)
		}
	}
}
