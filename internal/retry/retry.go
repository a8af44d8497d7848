package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff with full jitter: the n-th wait is
// uniform in [0, min(Max, Initial·2ⁿ)]. Full jitter spreads the retries of
// many messages that failed together (one failed batch) so that they do not
// come back as one burst.
type Policy struct {
	Initial time.Duration
	Max     time.Duration
}

// Default is the policy of writes to Bigtable and the dead-letter output:
// quick first retries for a blip, and at most 10 s between attempts during
// a long outage, so that recovery is noticed within seconds.
var Default = Policy{Initial: 50 * time.Millisecond, Max: 10 * time.Second}

// Do calls op until it returns nil, an error that retryable rejects, or ctx
// ends. It returns op's last error, or ctx's error if ctx ended first (with
// op's last error wrapped into it by the caller if it wants both).
// onRetry, if not nil, is called before each wait with the attempt number
// (1 for the first retry) and the error that caused it.
func (p Policy) Do(ctx context.Context, retryable func(error) bool, op func() error, onRetry func(attempt int, err error)) error {
	return p.Retry(ctx, retryable, op(), op, onRetry)
}

// Retry is Do after its first call of op, which the caller made itself and
// which returned err: it returns err at once if it is nil or not retryable,
// and otherwise waits and calls op again exactly as Do would. A hot path
// calls op directly and Retry only when it failed, so that its success
// costs no closure and no frame of Do.
func (p Policy) Retry(ctx context.Context, retryable func(error) bool, err error, op func() error, onRetry func(attempt int, err error)) error {
	for attempt := 1; ; attempt++ {
		if err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if onRetry != nil {
			onRetry(attempt, err)
		}
		t := time.NewTimer(p.wait(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = op()
	}
}

// wait is the jittered delay before retry number attempt (1-based).
func (p Policy) wait(attempt int) time.Duration {
	ceiling := p.Max
	if attempt < 32 {
		if d := p.Initial << (attempt - 1); d > 0 && d < p.Max {
			ceiling = d
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1)
}
