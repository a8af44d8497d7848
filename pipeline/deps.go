package pipeline

import (
	"context"
	"time"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/source"
)

// Deduper claims dedupe keys (package dedupe). It is nil in at_least_once
// mode.
type Deduper interface {
	// Claim reports whether key was committed within the window (dup). If
	// not, the caller holds key until it calls Commit or Release on the
	// returned Claim; a concurrent Claim of the same key waits for that.
	// Errors are transient (the catalog could not be read) or ctx's.
	Claim(ctx context.Context, key string) (c Claim, dup bool, err error)
}

// Claim is a held dedupe key.
type Claim interface {
	// Commit records the key durably and releases it. Call it only after
	// the row is durable: a key recorded for data that never landed loses
	// the message. On error the key stays held: retry Commit, or Release.
	Commit(ctx context.Context) error
	// Release gives the key up without recording it; a waiter proceeds.
	Release()
}

// Tracker is the event-time watermark of the pipeline (package watermark).
// It is nil when the pipeline has no tracking subscription.
type Tracker interface {
	// Watermark is the current watermark; the zero time until known.
	Watermark() time.Time
	// Finished tells the tracker that a message left the pipeline
	// (committed, duplicate, dead-lettered or dropped).
	Finished(m *source.Message, eventTime time.Time)
	// WatchInFlight hands the tracker a way to read the oldest publish time
	// (to the second) among the messages the pipeline is processing, false
	// when it holds none. The tracker reads it at its own pace, not per
	// message. New calls it once, before any message is handled.
	WatchInFlight(oldest func() (time.Time, bool))
}

// DeadLetter sends copies of messages that can never be written (package
// deadletter). When nil, such messages are nacked and logged: never acked.
type DeadLetter interface {
	// Send returns nil once the output confirmed a durable copy of m.
	Send(ctx context.Context, m *source.Message, reason deadletter.Reason, cause error) error
}
