// Package watermark reports the current event time of a pipeline: it reads
// event times from messages (EventTime), and estimates the pipeline's
// event-time watermark from a second, tracking subscription on the same
// topic (Tracker), as DESIGN.md "Watermark" describes. It does not judge
// late data: the pipeline compares event times with Tracker.Watermark and
// applies late_data itself. It does not own the tracking subscription's
// Pub/Sub client (package source does) nor the state table's layout
// (internal/state).
//
// The entry points are NewEventTime, and NewTracker, then Tracker.Run in the
// background, Tracker.Finished for every message the pipeline finishes, and
// Tracker.Close after the pipeline stopped.
//
// # Algorithm
//
// The method is Dataflow's for Pub/Sub: assume that event times are out of
// order by at most estimation_band, read a tracking subscription as fast as
// possible, and keep each message's (publish time, event time) in a
// histogram bucketed by publish time. Where Dataflow learns which messages
// are not finished from a private Pub/Sub API (the oldest unacked message of
// the main subscription), pubsink is told by its own pipeline: Finished.
//
// The histogram has one bucket per publish second (split in 8 shards by
// message ID, each with its own lock). A bucket records, per message, whether
// the tracker has seen it and whether the pipeline has finished it (a 64-bit
// hash of the message ID with two flag bits, in an open-addressing table:
// see idset), the minimum event time of its messages, and two counts:
// pending (seen, not finished) and early (finished, not yet seen). Keeping
// the IDs, not just counts, is what makes redeliveries harmless: a second
// delivery to the tracker or a second finish of the same message (a
// redelivery on the main subscription, finished again as a duplicate)
// changes nothing, where a count would let it cancel another message of the
// same second and release the watermark past it.
//
// Every tick (200ms) the tracker computes, at time now:
//
//   - Tc, the tracker's frontier: the publish time before which the tracker
//     is estimated to have received every message. While the tracking
//     subscription delivers, Tc = now - max(transit, the largest age,
//     receive time minus publish time, of the messages delivered in the
//     last idle period): a backlog shows as old deliveries. When it has
//     delivered nothing for an idle period (2s) and answered a probe since
//     (its metadata is read once a second while it is silent), Tc = probe
//     time - transit: the topic is idle. Otherwise Tc holds. Tc is then
//     capped at the oldest publish second holding an early message
//     published after tracking began: the pipeline finished it and the
//     tracker has not received it yet, so the tracker is behind at least
//     that far, whatever its deliveries suggest.
//   - the candidate W = min(Tc - band, the minimum event time of every
//     bucket with a pending message, the minimum event time of every bucket
//     published within the last band). Messages not yet received by the
//     tracker were published after Tc, so by the band's assumption their
//     event times are after Tc - band; the received and unfinished ones are
//     the pending buckets; and the last band of publications is included as
//     the contract says (so a straggler that arrives within reach holds the
//     watermark for one band, even once finished).
//   - the watermark = max(previous watermark, stored watermark, W): it never
//     goes backwards, also across restarts.
//
// Then the buckets published before min(Tc, now - band) that hold no
// pending message are retired (their tables are recycled), and that second
// becomes the shards' floor: a later arrival for a second below the floor
// whose bucket is gone is ignored (it is a redelivery of a finished message,
// or breaks the assumptions below; Stats counts them). Memory is therefore
// proportional to the messages of the last band and transit, plus the
// messages the tracker received and the pipeline has not finished (a backlog
// on the main subscription), plus those finished and not yet received (a
// backlog on the tracking subscription): about 13 bytes per message at
// 10,000 messages a second, 17 at 1,000, measured by
// TestMemoryPerMillionTrackedMessages.
//
// When caught up under steady traffic the watermark is about band + transit
// (11s by default) behind real time when event times equal publish times;
// with event times that trail their publication by up to a band it is up to
// two bands behind, because the last band of publications counts. When the
// topic is idle it follows real time about band + transit + one probe
// interval behind. While the main subscription drains a backlog, it trails
// the oldest unfinished event time by at most one bucket (a second): the
// accounting is exact, not sampled.
//
// # Restart
//
// The stored watermark is read at start (Check, or Run) and the watermark is
// never below it. The histogram starts empty, which hides the messages that
// the previous process's tracker acked but its pipeline never finished: they
// are still in the main subscription. Until the pipeline has caught up with
// the moment tracking began, a startup guard also bounds the watermark by
// Tm - band, where Tm is the pipeline's frontier, estimated as Tc is from
// the ages of the messages it finishes (or now - transit once it has held
// nothing in flight and finished nothing for an idle period). Once Tm passes
// the start, every message of the previous run has been through the
// pipeline and the guard is dropped for good. The same guard covers a
// tracking subscription created after messages were already waiting in the
// main one.
//
// Right after start, a subscription must stay silent for five idle periods
// (10s), not one, to count as drained: opening the streams and receiving a
// first backlog can take seconds. So the watermark of a restarted pipeline
// on an idle topic stays at the stored value for about ten seconds.
//
// # Assumptions
//
//   - One process per pipeline reads both subscriptions (the manifests run
//     one instance). Two processes would each see part of each
//     subscription: their trackers would wait for finishes that happen in
//     the other process, and hold the watermark (safe but stuck), or miss
//     messages the other tracker acked.
//   - The tracking subscription is on the same topic as the main one
//     (checked at start), has no filter the main one lacks, and retains
//     messages while pubsink is down (Pub/Sub's default retention is 7
//     days). Messages it never delivers stop holding the tracker's frontier
//     after 10 minutes (maxEarlyAge).
//   - Event times trail their publication by at most estimation_band. A
//     message further behind may be judged late on arrival: the watermark
//     does not go back for it.
//   - A caught-up subscription delivers within transit (1s), and
//     deliveries of a backlog come roughly oldest first, so that the ages
//     of recent deliveries reflect the backlog. Pub/Sub does not promise
//     order; a message delivered much later than its peers, after the
//     frontier passed it, is ignored by the tracker if its bucket retired.
//   - Clocks: publish times are the service's, the tracker's clock is the
//     host's. Skew adds to transit; NTP-synchronised hosts (Cloud Run, GKE)
//     are well within it.
//
// # Failure modes
//
//   - The main subscription never delivers a message the tracker received
//     (it was deleted and recreated, it has a dead-letter policy that
//     forwarded it, another process took it): the watermark holds at that
//     message's event time for ever. The tracker logs a warning once a
//     minute when the oldest unfinished message is more than 5 minutes old;
//     Stats reports it.
//   - The tracking subscription stops delivering while its metadata still
//     answers (a stuck stream): if the pipeline keeps finishing messages,
//     the early messages cap Tc and the watermark holds; if the pipeline
//     receives nothing either, the topic looks idle and the watermark
//     advances, and messages published meanwhile may be late when they
//     arrive. If the service does not answer, the watermark holds.
//   - The state table cannot be read at start: the watermark stays unknown
//     (nothing is judged late) while Run retries; a missing table makes Run
//     fail. A failed write is retried at the next period; a write cannot
//     move the stored value backwards (see Store).
//   - Stopped for long enough that the tracking subscription's retention
//     expires: the tracker never sees the expired messages; the startup
//     guard still holds the watermark until the pipeline has caught up.
//
// # Guarantees
//
//   - Watermark never goes backwards, and never below the stored value once
//     that was read; it is the zero time until known.
//   - Under the assumptions, it never passes the event time of a message
//     the pipeline has not finished; without them, it never passes the event
//     time of a message the tracker received and the pipeline has not
//     finished, unless its bucket had retired first.
//   - It advances when the backlog drains, also on an idle topic.
//   - The stored value (row watermark#PIPELINE, column m:watermark, RFC 3339
//     UTC with milliseconds, truncated) never moves backwards: the cell's
//     timestamp is the watermark, and the family keeps the newest version.
//   - Watermark is an atomic load; Finished and the tracking handler take one
//     shard lock and do not allocate in steady state (BenchmarkPerMessage).
//
// # Errors
//
// NewTracker rejects a configuration it cannot use (an unknown timestamp
// format, no metrics). Check returns the error of reading the stored value.
// Run returns an error when the tracking subscription fails permanently or
// the state table does not exist; it returns nil when its context ends.
// Close returns the context's error if it was cut short, else the error of
// the last write.
package watermark
