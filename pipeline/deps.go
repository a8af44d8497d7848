package pipeline

import (
	"context"
	"time"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/retry"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/watermark"
)

// Deps are the parts a Pipeline is wired from, each named by what the
// pipeline needs of it. Sink and Metrics are required; Dedupe, Tracker and
// DeadLetter may be nil (at_least_once mode, no tracking subscription, no
// dead-letter output): leave them unset rather than setting a typed nil.
type Deps struct {
	// Source delivers the messages; Run needs it, Handle does not.
	Source Source
	// Mapper makes the rows of a message (package mapping); nil: New
	// compiles the pipeline's configuration into one, without topic
	// schemas (what tests need).
	Mapper Mapper
	Sink   sinks.Sink
	// Limits are the sink's sizes, checked before a write so that an
	// oversized row is too_large instead of failing the batch it joins.
	Limits sinks.Limits
	Dedupe Deduper
	// Members is the pipeline's membership among the processes running
	// it (package members), with Dedupe; nil: no handshake.
	Members    Members
	Tracker    Tracker
	DeadLetter DeadLetter
	Metrics    *metrics.Pipeline
	// Retry is the backoff of transient failures; zero means retry.Default.
	Retry retry.Policy
	// DeadLetterWait bounds how long a message waits for a failing
	// dead-letter output before it is nacked; zero means
	// DefaultDeadLetterWait.
	DeadLetterWait time.Duration
	// FilterWarnAfter is how long the filter must drop every message
	// before the pipeline warns; zero means DefaultFilterWarnAfter.
	// ColumnWarnAfter is how long a column's value must be missing in
	// every committed message before it warns; zero means
	// DefaultColumnWarnAfter. WarnClock is the clock of both warnings;
	// nil: time.Now.
	FilterWarnAfter time.Duration
	ColumnWarnAfter time.Duration
	WarnClock       func() time.Time
}

// The lifecycle a part may have. Each part's interface below says which of
// them it has; the pipeline calls them in a fixed order (Run, Close).

// Runner is a part with background work of its own. Run blocks until ctx
// ends, then returns nil; an error is a permanent failure of the part.
type Runner interface {
	Run(ctx context.Context) error
}

// Closer is a part that holds buffered work or connections. Close flushes
// and releases; it is idempotent and bounded by ctx, whose error it
// returns when cut short.
type Closer interface {
	Close(ctx context.Context) error
}

// Source delivers a subscription's messages (package source).
type Source interface {
	// Run calls h for each delivery until receiveCtx ends, gives each
	// handler workCtx, and returns once every handler has returned.
	Run(receiveCtx, workCtx context.Context, h source.Handler) error
	// Receiving reports whether the subscription is being pulled.
	Receiving() bool
	// Stalled returns nil unless the subscription's streams deliver nothing
	// while messages wait and reopening them did not help (the watchdog):
	// then the process is unhealthy. Stalled and Ready ask it.
	Stalled() error
}

// Mapper turns a message into its event time, dedupe key and rows
// (package mapping).
type Mapper interface {
	// Map fills r from m. Its error is a *mapping.BadInput (dead-letter the
	// message with its reason), or transient (a topic schema that could not
	// be fetched yet) or ctx's. r.Filtered says the filter was false.
	Map(ctx context.Context, m *source.Message, r *mapping.Result) error
	// Stats are the format and the schema revisions met, for /status.
	Stats() mapping.Stats
	// Columns lists the columns of the mappings, which a Result's
	// MissingColumns indexes (mapping.Mapper.Columns); the pipeline
	// reads it once, in New.
	Columns() []mapping.Column
}

// Deduper claims dedupe keys (package dedupe).
type Deduper interface {
	// Claim decides which message key belongs to: the first claim within
	// the window names winner (the delivery's message ID, the same in every
	// redelivery). A key another message claimed is a duplicate (dup);
	// otherwise the caller holds key until it calls Commit or Release on
	// the returned Claim (Resumed when an earlier delivery of winner had
	// claimed it: its rows are written again); a concurrent Claim of the
	// same key waits for that. Errors are transient (the catalog could not
	// be read) or ctx's.
	Claim(ctx context.Context, key, winner string) (c dedupe.Claim, dup bool, err error)
	// ClaimAhead is Claim, but a claim it can make without waiting for it
	// (a process alone, a new key) it queues: the Claim's Ready is then
	// what the message's rows wait for in the sink (sinks.Row.After), and
	// its Wait and Commit wait for it too. An error of Wait says that the
	// claim decided nothing: give the key up and Claim it again.
	ClaimAhead(ctx context.Context, key, winner string) (c dedupe.Claim, dup bool, err error)
	// ClaimOnce is Claim for a key only winner's message can have (its
	// message ID, its dead-letter copy's key): no claim; Commit records
	// the key, and a redelivery of winner after it is a duplicate.
	ClaimOnce(ctx context.Context, key, winner string) (c dedupe.Claim, dup bool, err error)
	// Resume holds key only if winner claimed it already, reports dup if
	// another message did, and neither (writing nothing) if nobody did.
	Resume(ctx context.Context, key, winner string) (c dedupe.Claim, dup bool, err error)
	// Run rebuilds the filters, then keeps them rotating.
	Runner
	// Close flushes the catalog records still queued.
	Closer
	// Stats are the filters' and the catalog's figures, for /status.
	Stats() dedupe.Stats
}

// Members is this process's membership of the pipeline (package members).
type Members interface {
	// Joined blocks until every other live member acknowledged this one:
	// the source starts only then.
	Joined(ctx context.Context) error
	// Run registers and renews the membership.
	Runner
	// Close removes this process from the members, on a clean stop.
	Closer
	// Stats are the members as this process sees them, for /status.
	Stats() members.Stats
}

// Tracker is the event-time watermark of the pipeline (package watermark).
type Tracker interface {
	// Watermark is the current watermark; the zero time until known.
	Watermark() time.Time
	// Finished tells the tracker that a message left the pipeline
	// (committed, duplicate, dead-lettered or dropped). It returns nil
	// once the tracker's leader will know (at once in the leader; a
	// follower's report must be durable first): until then the message
	// must not be acked, or the leader would wait for it for ever.
	Finished(ctx context.Context, m *source.Message, eventTime time.Time) error
	// WatchInFlight hands the tracker a way to read the oldest publish time
	// (to the second) among the messages the pipeline is processing, false
	// when it holds none. The tracker reads it at its own pace, not per
	// message. New calls it once, before any message is handled.
	WatchInFlight(oldest func() (time.Time, bool))
	// Run reads the tracking subscription and advances the watermark.
	Runner
	// Close stores the final watermark.
	Closer
	// Stats are the tracker's bookkeeping figures, for /status.
	Stats() watermark.Stats
	// Stalled is the source's Stalled for the tracking subscription: nil
	// unless its reads fail or hang for longer than they may.
	Stalled() error
}

// DeadLetter sends copies of messages that can never be written (package
// deadletter). When nil, such messages are nacked and logged: never acked.
type DeadLetter interface {
	// Send returns nil once the output confirmed a durable copy of m.
	Send(ctx context.Context, m *source.Message, reason deadletter.Reason, cause error) error
	// Check returns an error while the output would refuse copies (a topic
	// without a subscription); it is part of the pipeline's readiness.
	// Outputs that cannot tell return nil.
	Check(ctx context.Context) error
	// Close flushes the copies being sent.
	Closer
}
