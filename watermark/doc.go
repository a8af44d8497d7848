// Package watermark reports the current event time of a pipeline: it reads
// event times from messages (EventTime), and estimates the pipeline's
// event-time watermark from a second, tracking subscription on the same
// topic (Tracker), as docs/reference.md "Watermark and late data" describes. It does not judge
// late data: the pipeline compares event times with Tracker.Watermark and
// applies late_data itself. It does not own the tracking subscription's
// Pub/Sub client (package source does) nor the state table's layout
// (internal/state).
//
// The entry points are NewEventTime, and NewTracker, then
// Tracker.WatchInFlight with the pipeline's in-flight bookkeeping,
// Tracker.Run in the background, Tracker.Finished for every message the
// pipeline finishes (ack only once it returned nil), and Tracker.Close
// after the pipeline stopped.
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
//     delivered nothing for an idle period (2s) while its reader was up
//     and not held (see "Stream breaks"), and answered a probe since (its
//     metadata is read once a second while it is silent), Tc = the probe's
//     time minus transit: the topic is idle. Otherwise Tc holds. Tc is then
//     capped at the oldest publish second holding an early message
//     published after tracking began: the pipeline finished it and the
//     tracker has not received it yet, so the tracker is behind at least
//     that far, whatever its deliveries suggest. "After tracking began" is
//     from the first whole second after start + transit: a message
//     published before that may have been received and acked by the
//     previous leader's tracker and never come to this one (the startup
//     guard covers those), and seconds are the buckets' resolution.
//   - the candidate W = min(Tc - band, the minimum event time of every
//     bucket with a pending message, the minimum event time of every bucket
//     published within the last band). Messages not yet received by the
//     tracker were published after Tc, so by the band's assumption their
//     event times are after Tc - band; the received and unfinished ones are
//     the pending buckets; and the last band of publications is included as
//     the contract says (so a straggler that arrives within reach holds the
//     watermark for one band, even once finished).
//   - the watermark = max(previous watermark, stored watermark, W): it never
//     goes backwards, also across restarts. While the startup guard is on
//     (see "Restart"), W is not computed: the watermark stays where it was.
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
// TestMemoryPerMillionTrackedMessages. The received-and-unfinished part is
// bounded by Config.MaxPending (app gives max_outstanding_bytes / 32
// entries, about half that budget): at the bound the tracking handler waits,
// so its pull loop stops pulling (a stream's flow control, with a
// source.Source), silence meanwhile is no evidence of an idle topic, and the
// watermark holds (it could not pass the oldest pending message anyway)
// until the pipeline catches up. The bound is checked against the count of
// the last tick plus the deliveries since (one atomic counter), so a batch
// of a thousand cannot pass it; the finishes since count only at the next
// tick, so a pause may begin up to a tick early, and handlers that check at
// once may each take one more (TestTheTrackerPausesAtItsPendingBudget).
// While a loop waits, the rest of its batch, and the acks of what it
// handled, wait with it: past the tracking subscription's ack deadline
// those messages are redelivered, which changes nothing (a second delivery
// of a message is counted once, and one below the floor is ignored; it
// only holds Tc for an idle period, as an old delivery does).
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
// are still in the main subscription, and nothing tells the new tracker
// their event times. The messages the previous process held when it died
// come back only when their lease expires (on the main subscription
// source.LeaseExtension, 15s after it died at the latest; on the tracking
// one, its ack deadline); those it never received come whenever the main
// subscription delivers them, in no promised order (the emulator, after a
// large backlog, is out of publish order by far more than the band). So no
// frontier estimated from the ages of what the pipeline finishes is safe,
// and the startup guard does not estimate one: while it is on, the
// watermark does not move at all (it stays at the stored value, or unknown
// with none stored, so that nothing is judged late). The guard drops, for
// good, at the first tick at which both hold:
//
//   - lease + transit + idle (18s by default; app's lease is the longer of
//     15s and the tracking subscription's ack deadline, plus the
//     subscriptions' redelivery backoff: 23s with setup's) have passed since tracking
//     began: every message the dead process held has had its lease expire
//     and the transit to arrive, and one idle period to show;
//   - for an idle period (2s), the pipeline has held no message published
//     before the start and finished none. The pipeline reports the oldest
//     publish time it holds (Tracker.WatchInFlight, read once a tick; the
//     per-message path is unchanged) and the finishes carry their publish
//     times. "Before the start" means before start + transit (a service
//     clock ahead of the host's), to the second for what is in flight.
//
// The price: after a restart the watermark holds for at least 18s, and
// with a backlog on the main subscription until the pipeline has worked
// through everything published before the start, plus 2s. Measured in the
// chaos campaign (seed 4242 and three short seeds: the 12 processes that
// lived past their guard, some started during Bigtable stalls of up to
// 27s): 18.1-18.3s after the start. A
// pipeline that never finishes an old message (a transient sink error
// retried for ever, a poison message nacked without a dead-letter output)
// keeps the guard on, as a pending message holds the watermark: the
// tracker warns once a minute after 5 minutes.
// Stats.PreStartFinishedAfterGuard counts the ticks at which an old
// message was finished after the guard dropped: usually a redelivery of a
// finished message (a lost ack); if one of them was judged late, the guard
// dropped too early.
//
// The same guard covers a tracking subscription created after messages were
// already waiting in the main one, and a restart after the tracking
// subscription's retention expired.
//
// A restarted tracker may also be redelivered, on the tracking
// subscription, messages whose ack its predecessor had not sent yet (a
// Puller acks a batch once it handled all of it) while its predecessor's pipeline finished
// them: nobody will finish them again. So once the guard has been off for
// two leases (30s), the messages published before the start that are still
// pending and that no member holds in flight are forgotten (Stats.Forgotten
// counts them): the guard's own assumption says they were finished.
//
// Right after start, a subscription must stay silent for five idle periods
// (10s), not one, to count as drained: the first pulls (or opening the
// streams) and receiving a first backlog can take seconds.
//
// # Stream breaks
//
// The tracking subscription's reader can lose sight of messages for a
// while without the process dying. app reads it with a source.Puller
// (unary Pull in large batches): a Pull that fails (a reset connection, an
// unavailable service, a call that hung) may have leased messages whose
// answer was lost. Nothing names them, and they come back only once the
// tracking subscription's ack deadline has passed (10s with setup's),
// while the next Pull delivers newer messages at once. (With a
// source.Source, StreamingPull, the same befalls what the server had sent
// on a stream that broke, until its lease expires: up to 15s.) The
// tracker's frontier, taken from the ages of fresh deliveries or from
// silence, would pass those stranded messages, and the main subscription's
// copies, delayed by the same fault, would come back behind the watermark.
// A probe that the subscription exists (the metadata read) proves nothing
// here, and neither would another Pull, which cannot see messages leased
// to a lost answer.
//
// So the tracker is told of breaks (Config.Streams, which app wires to the
// Puller's State). The Puller reports, in
// the shape of a source.StreamWatch's state, how many of its pull loops
// are up (their last Pull did not fail) and when a Pull last failed or
// hung, or a refused message could not be released (package source,
// "Puller"). After a break at B:
//
//   - until B + lease + transit (16s by default, 21s in app with setup's
//     subscriptions), Tc does not pass min(Tc at the time the break was
//     noticed, B - transit): whatever was in flight at B has had its lease
//     run out and the transit to arrive again before the frontier moves
//     past it. A second break within the hold extends it and keeps the
//     lower cap;
//   - silence counts as an idle topic only from the end of the hold, and
//     only while at least one loop (stream) is up: while none is, messages
//     wait in the subscription and a subscription that answers probes is
//     not an empty one.
//
// On Pub/Sub an idle Pull ends with its deadline (30s by default). That
// alone is no break, or an idle topic, where every Pull ends so, would
// hold the watermark for ever (each break within a hold keeps the lower
// cap). The Puller checks a Pull that timed out with an immediate one: if
// that fails, or returns a message published before the timed-out Pull
// began (which that Pull should have returned: it hung), it is a break;
// otherwise the subscription was idle. What this cannot see is an idle
// Pull whose answer the service sent in the last moment before its
// deadline, lost with the call: the tracking copies of the messages
// published in that moment stay out of sight for an ack deadline, with no
// break. Then nothing else is wrong (the fault that makes a break costly
// delays the main subscription too): the main subscription delivers their
// copies within transit, and once the pipeline finished them they are
// early messages, which cap Tc until the tracker receives them. The
// watermark can pass such a message only if the pipeline holds its copy
// unfinished for longer than transit (a backlog on the main subscription)
// while the frontier passes it, within that ack deadline.
//
// With a source.Source as the reader, source.StreamWatch, installed on its
// Pub/Sub client, counts the open StreamingPull streams of each
// subscription and notes when one ended while the client still wanted it;
// its watchdog (package source, "Watchdog") ends hung streams itself to
// reopen them, and marks a break on the StreamWatch (StreamWatch.MarkBroken)
// when it ends them and again once they have closed.
//
// The price: after each break the watermark stops advancing for the hold,
// then catches up (it never goes back). A Pull fails on Pub/Sub now and
// then (the client library, which would otherwise retry it unseen, is told
// not to); each failure costs a pause.
//
// Breaks of the main subscription matter only while the startup guard is
// on. Afterwards the tracker has seen every message they can strand (those
// published after the start), which stay pending until finished. Before,
// a stream that broke may have been sent messages published before the
// start, which the tracker never saw, and which come back only when their
// lease runs out, while the pipeline holds nothing old and the guard would
// drop (issue 21: on-time records dead-lettered as late after a restart
// and a Pub/Sub reset). So a member counts as holding a message published
// before the start (Tracker.oldestHeld: the epoch) for Lease + Transit
// after a break of its main subscription's streams (Config.MainStreams:
// app's source.StreamWatch on its Pub/Sub client, which also sees the
// watchdog's reopens), and a follower says so in its reports; the guard
// then drops an idle period after that at the earliest.
//
// The same holds from the opening of a member's main streams: until they
// open, and for Lease + Transit after, the member counts as holding a
// message published before the start. On Pub/Sub this only costs the wait
// of a member whose streams open after its tracker started (a restart that
// waits for its peers to see it); on the emulator it covers what it leases
// to a stream as the stream opens and hands over only when that lease runs
// out (tools/chaos, seed 1796098390: messages a stopped process was sent
// came back 15 s after its successor's streams opened, 10 s after its
// tracker, and were judged late).
//
// # Assumptions
//
//   - One member of the pipeline at a time reads the tracking
//     subscription: the leader (see "Replicas"). A paused leader that wakes
//     after its lease was taken acks nothing more (it checks its own lease
//     before it accepts each message, and a batch's acks go out within
//     milliseconds of the last check), but an ack it was about to send
//     when it paused may still land, and the new leader never sees that
//     message.
//   - The tracking subscription is on the same topic as the main one
//     (checked at start), has no filter the main one lacks, and retains
//     messages while pubsink is down (Pub/Sub's default retention is 7
//     days). Messages it never delivers stop holding the tracker's frontier
//     after 10 minutes (maxEarlyAge).
//   - Event times trail their publication by at most estimation_band. A
//     message further behind may be judged late on arrival: the watermark
//     does not go back for it.
//   - A caught-up subscription delivers within transit (1s), and
//     deliveries of a backlog on the tracking subscription come roughly
//     oldest first, so that the ages of recent deliveries reflect the
//     backlog. Pub/Sub does not promise order; a message delivered much
//     later than its peers, after the frontier passed it, is ignored by the
//     tracker if its bucket retired. (The startup guard assumes no order of
//     the main subscription, only that it keeps delivering old messages
//     while it has some: a pause of an idle period with none in flight
//     ends the guard.)
//   - A message leased to a process, a stream or a Pull answer that died
//     is redelivered within a lease (Config.Lease) plus transit: pubsink
//     never asks for a longer lease than source.LeaseExtension (15s) at a
//     time on the main subscription, a message pulled from the tracking
//     subscription is leased for its ack deadline (10s with setup's), app
//     takes the longer of the two and adds the longest maximum backoff of
//     the two subscriptions' retry policies (a redelivery after an expired
//     lease waits for it; 5s with setup's).
//   - Clocks: publish times are the service's, the tracker's clock is the
//     host's. Skew adds to transit; NTP-synchronised hosts (Cloud Run, GKE)
//     are well within it.
//
// # Replicas
//
// Any number of processes may run a pipeline (package members); one of
// them, the leader, keeps the watermark, and the others follow it.
//
//  1. The lease. Row watermark#PIPELINE holds, beside m:watermark, one
//     cell m:leader = "EPOCH/SEQ/MEMBER". Every StoreEvery each member
//     reads both cells. A member takes a vacant lease (no cell, or no
//     member: a leader that stopped cleanly vacates it) at once, and one
//     held by another member only once the value has stayed unchanged for
//     a leader lease (10s) on its own monotonic clock; the leader renews
//     every quarter lease, writing SEQ+1. Every write of the cell is a
//     conditional mutation on the exact value read, so of members racing
//     for a lease one wins, and a renewal that finds another value means
//     the lease was taken.
//  2. Fencing. The leader stores the watermark with a conditional mutation
//     on its own lease value (same row): once anyone took the lease, the
//     old leader's writes change nothing, however late they arrive. The
//     leader trusts itself only until its last successful write's send
//     time plus three quarters of a lease, and then stops reading the
//     tracking subscription and acks nothing on it: a follower takes over
//     only a full lease after it first read that write.
//  3. Reports. A follower's Finished adds the message (ID, publish time,
//     event time) to a batch that is written, within 5ms, as one column of
//     its row finished#PIPELINE#MEMBER, with the oldest publish second the
//     follower holds in flight; Finished returns once that write is
//     durable, and only then is the message acked. An idle follower writes
//     an empty report every tick. The leader reads every such row each
//     tick, applies the finishes to its histogram as its own, and deletes
//     the columns it applied. A report read twice (a leader that died
//     before deleting it) changes nothing: the histogram counts a message
//     once.
//  4. The watermark. Only the leader computes it, from the tracking
//     subscription and every member's finishes: the exact accounting of a
//     single process. A follower's Watermark is the stored value, read
//     every StoreEvery, so a follower's late-data decisions lag the
//     leader's by about a second, on the safe side. Each member's
//     watermark never goes backwards.
//  5. A new leader starts with an empty histogram and the startup guard on
//     (see "Restart"), as a restarted process does: what the old leader
//     had seen is gone. For the guard, "the pipeline" is every member: it
//     drops only once every live member (Config.Peers) has reported within
//     an idle period and none holds a message published before the start.
//
// So after the leader dies, another member leads within a lease (10s) plus
// one StoreEvery, and its watermark moves again after the startup guard
// (18s); after a clean stop the lease is vacated and taken within a
// StoreEvery. Cost: a follower writes one report per batch of finishes
// (the ack waits up to 5ms for it), the leader reads and deletes them; a
// process alone leads, renews its lease every 2.5s and reads the (empty)
// reports every tick.
//
// What it does not cover: a follower's in-flight state reaches the leader
// up to a tick plus a Bigtable round trip late, which adds that much to
// the guard's assumption that the main subscription keeps delivering old
// messages while it has some; and a follower of an older version, which
// stores the watermark unconditionally and reports nothing (during a
// rolling update from such a version the watermark may hold until the old
// processes are gone).
//
// # Failure modes
//
//   - The main subscription never delivers a message the tracker received
//     (it was deleted and recreated, it has a dead-letter policy that
//     forwarded it, another process took it): the watermark holds at that
//     message's event time for ever. The tracker logs a warning once a
//     minute when the oldest unfinished message is more than 5 minutes old;
//     Stats reports it.
//   - The tracking subscription stops delivering while its reader looks
//     up and its metadata still answers (Pulls that hang while the
//     immediate check finds nothing old; with a Source, a stuck stream
//     that neither ends nor errs): if the pipeline keeps finishing
//     messages, the early messages cap Tc and the watermark holds; if the
//     pipeline receives nothing either, the topic looks idle and the
//     watermark advances, and messages published meanwhile may be late
//     when they arrive. If the service does not answer, the watermark
//     holds.
//   - Every Pull fails (the service or the way to it is down): no loop is
//     up, so the watermark holds; after source.stall_timeout Stalled
//     reports it (/healthz fails).
//   - A reader without Config.Streams (tests): breaks go unnoticed, and
//     messages stranded on a broken stream may be judged late when they
//     come back. (app wires its Puller's State.)
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
//     the pipeline has not finished, also across restarts and stream breaks;
//     without them, it never passes the event time of a message the tracker
//     received and the pipeline has not finished, unless its bucket had
//     retired first.
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
// Finished returns a follower's report error, or its context's: the
// message must not be acked then.
// Run returns an error when the tracking subscription fails permanently or
// the state table does not exist; it returns nil when its context ends.
// Close returns the context's error if it was cut short, else the error of
// the last write.
package watermark
