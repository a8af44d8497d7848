package reprocess

import (
	"context"
	"time"
)

// Live is what a run reads of the live pipeline before it starts writing.
type Live struct {
	// Oldest is the publish time of the oldest message the live
	// subscription holds unacked; zero when it holds none, or when it was
	// not read (the live pipeline does not run).
	Oldest time.Time
	// Running says a process of the live pipeline renewed its membership
	// lately (LiveRecently): it is writing, or about to.
	Running bool
}

// Finished reports whether the live pipeline has finished every message
// published at or before until: it acks a message only once its outcome is
// durable, so none of the range's can still be written by it.
func (l Live) Finished(until time.Time) bool {
	return l.Oldest.IsZero() || l.Oldest.After(until)
}

// LiveRecently is how lately a live process must have renewed its
// membership (every 2.5 s) for the live pipeline to count as running.
const LiveRecently = 15 * time.Second

// LivePoll is how often WaitForLive reads the live pipeline's progress.
const LivePoll = 5 * time.Second

// WaitForLive returns once the live pipeline has finished the range that
// ends at until, or does not run (then nothing of it writes the range
// while the run does), with the last Live it read. It reads read every
// poll; waiting is told each Live the run waits on. A message the live
// pipeline committed after the run wrote it would put the live mapping
// back over the run's (the same cells, the same timestamps): so the run
// starts only after the live pipeline has finished the range. It returns
// read's error, or ctx's when stopped.
func WaitForLive(ctx context.Context, until time.Time, poll time.Duration, read func(context.Context) (Live, error), waiting func(Live)) (Live, error) {
	for {
		l, err := read(ctx)
		if err != nil {
			return l, err
		}
		if l.Finished(until) || !l.Running {
			return l, nil
		}
		waiting(l)
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(poll):
		}
	}
}
