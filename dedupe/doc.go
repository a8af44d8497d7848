// Package dedupe claims and commits the dedupe keys of one exactly_once
// pipeline: a key committed within the window (dedupe.window, processing
// time) makes every later delivery of it a duplicate. It owns a rolling
// ring of Bloom filters (github.com/bits-and-blooms/bloom/v3) in memory and
// the durable key catalog in the state table (family k). It does not own
// retries (the pipeline retries the transient errors it returns), the data
// rows, or the ack.
//
// The entry point is New, which returns the pipeline's *Keys. The pipeline
// judges lateness, calls Claim with the key and the delivery's message ID
// (Resume for a late message), defers the Claim's Release, writes the rows,
// then Commits; it runs Run in the background and calls Close after it
// stopped. A Claim is a value naming its hold by key and token, so Release
// is safe after Commit and twice: a stale Claim can never end another's
// hold.
//
// # The claim decides
//
// Any number of processes may run a pipeline (replicas, a rolling update);
// package members tells each whether it is alone. A claim cell k:w/MESSAGE_ID
// in the key's catalog row names the message that won the key, and it is
// durable before Claim returns. The first claim of a key within the window
// decides it: there is no record after the rows (one state write per new
// key, not two). What a delivery finds in the row:
//
//   - nothing within the window: it claims the key (new);
//   - another message's claim: a duplicate, at once;
//   - its own message's claim: it resumes (Claim.Resumed), writing the
//     message's rows again, the same cells;
//   - a record (a dead-letter copy's, or a peer of an earlier version's):
//     a duplicate.
//
// Why another's claim makes a duplicate at once, path by path of the
// winner (the message its claim names):
//
//  1. Committed: its rows are durable; the rival is a duplicate of it.
//  2. Crashed, killed or paused after the claim, before the ack; nacked at
//     the stop (shutdown_timeout) or after a write that failed until then:
//     it was not acked, so Pub/Sub redelivers it (to any process) until it
//     is, and the redelivery finds its own claim and finishes the job. The
//     claim is never deleted, so a rival can never take the key meanwhile
//     and write another payload. A paused winner that resumes writes the
//     same cells as its redelivery (idempotent writes, explicit
//     timestamps).
//  3. Its ack was lost after it committed: its redelivery resumes and
//     writes the same cells again (pubsink_messages_resumed_total).
//  4. Its row was rejected (dead-lettered): the key's outcome is that dead
//     letter; a rival of the key is its duplicate. A redelivery resumes,
//     is rejected again, and finds its copy recorded (below): a duplicate.
//  5. Late: never a winner. The pipeline judges lateness before the claim,
//     so a claim means "on time"; a late message under drop or dead_letter
//     only looks (Resume): another's claim makes it a duplicate, its own
//     message's claim (an earlier delivery was on time, claimed, and
//     crashed or lost its ack) makes it write, and an unclaimed key makes
//     it late, with no claim written.
//  6. A key that only one message can have, its message ID (a pipeline
//     without id_attribute or id_template) or its dead-letter copy's key
//     (the message ID behind 0xff), has no rival to decide against:
//     ClaimOnce writes no claim, and Commit writes a record once the rows
//     (or the copy) are durable, so that a redelivery after it, or every
//     message again after a seek back, is a duplicate and writes nothing.
//     Shared, its lookup is a batched read, not a conditional mutation. A
//     crash between the effect and the record repeats the effect: the same
//     cells, or a second copy.
//  7. A claim older than the window no longer decides: a winner stalled
//     for longer than dedupe.window, and a rival after it, may both write,
//     as a duplicate arriving after the window is new.
//  8. Pub/Sub gives up on the winner (the subscription's own dead-letter
//     policy, or its retention ran out) before a delivery of it committed:
//     the rivals of the key were duplicates of a message that is lost.
//     Nothing of pubsink's can see that; a subscription dead-letter topic
//     is a place to look.
//
// How a claim is made:
//
//  1. Not alone: one conditional mutation (CheckAndMutateRow) whose
//     predicate is "any cell within the window" and whose false branch
//     writes the claim. Of concurrent claims of a key exactly one applies;
//     Bigtable decides, atomically, per row. When the predicate matched,
//     the row is read and says which case above it is. Apply does not
//     retry a conditional mutation, and an error leaves it unknown whether
//     it was applied: the row is read back, and a claim by this message
//     means it was. The call runs on a goroutine of an internal/warm pool:
//     its depth grew the Pub/Sub callback's fresh stack once or twice per
//     message, 11% of the process's CPU.
//
//  2. Alone: the filters answer as below, and the claim is an
//     unconditional write, batched. It is trusted only if the membership
//     still says alone once the write returned, and the fast path had not
//     expired: such a claim was durable before this process acknowledged
//     any newcomer, so the newcomer's conditional claims see it. A claim
//     confirmed later is made again conditionally; if it then finds
//     another message's claim beside its own (the newcomer won), it deletes
//     its own and is a duplicate. Meanwhile a row names two claimants, and
//     a delivery that finds its own claim beside another's looks again
//     (20 ms doubling to 1 s).
//
//     The pipeline claims with ClaimAhead: on this path (alone, a key the
//     filters answer "new" for) the claim's write is queued in a batch of
//     its own and ClaimAhead returns at once; the Claim's Ready goes with
//     the message's rows (sinks.Row.After), and the sink sends none of
//     them before Ready's Wait returned nil, which it does once the claim
//     is durable and trusted (the check above, and the conditional
//     mutation of a claim trusted too late, run in that Wait). So the
//     order of effects is the same, claim then rows then ack, but the
//     message waits once, for its rows' batch, not for the claim's first:
//     the claims gather for Config.ClaimDelay (a quarter of the sink's
//     batch delay, at most 5 ms) while the rows gather for the whole of
//     it. A claim whose Wait fails decided nothing (its write failed; or,
//     trusted too late, it found another message's claim and withdrew):
//     none of its rows was written, and the pipeline gives the key up
//     (Release) and claims it again with Claim, which waits.
//
//  3. Commit writes nothing for a Claim: it ends the hold, so that the
//     deliveries of the key waiting in this process are duplicates. While
//     a live peer lacks MemberTag (a process of the version before, whose
//     rivals wait for a record), Commit writes the record k:c too, so a
//     rolling upgrade holds.
//
// So a process that is paused or cut off and resumes can only write the
// rows of the message its claim names: the same bytes as that message's
// redelivery. Such a rewrite changes nothing unless someone else wrote one
// of its cells (row, column, timestamp) in between, and only three writers
// can: another message mapped to the same row, column and millisecond
// (the collision the reference warns of, where the later write wins with
// or without a rewrite), a process with another mapping (a rolling update
// that changes it: the message may end with either version's cells), or a
// writer outside pubsink. Later messages' cells at later timestamps are
// other versions, which a rewrite neither adds to nor reorders. This is
// why no fence guards the sink's writes: one would cost a conditional
// mutation per row, the collision happens with or without a rewrite, and
// a mapping change is settled by stopping the old version before the new
// one starts, where it matters. What this costs: one claim cell per new key (alone, batched;
// shared, one conditional mutation) and a share of a journal row, about
// 1.01 state writes per committed message in the bench.
//
// # How a key is checked
//
// While alone, Claim hashes the key once (64-bit xxhash, double hashing for
// the bit locations) and probes every live filter. "Not present" in all of
// them means new: no read. "Maybe present" is confirmed by a
// batched point read of the catalog (ReadRows with a RowList, one batch
// per 2 ms, at most 4 at once); only a claim or record whose cell
// timestamp is within the window makes the key a duplicate (or resumes
// it). The claim
// is written in a batched ApplyBulk (a batch gathers for a millisecond,
// then goes as soon as one of 4 call slots is free and grows while they
// are all busy; the claim time in milliseconds is the explicit cell
// timestamp, so the client's retries are idempotent); once it is durable
// the key goes into the filter of the current slice. Every claim within
// the window thus has its key in a live filter (put there by Claim, or by
// the rebuild after a restart), which is what lets a Claim that finds a
// bit unset answer "new". The order of effects is the pipeline's: claim,
// rows, ack.
//
// The library's Test hashes the key once per filter (murmur3, k locations);
// a lookup probes N+1 filters or more, so the locations are computed once
// here and given to TestLocations, and Commit sets the same bits in the
// filter's bitset. The filters come from bloom.New with the m and k of
// bloom.EstimateParameters.
//
// # Slices and sizing
//
// The window is cut into N slices of processing time (Config.Slices, 10 by
// default, at least 6). A key goes into the slice of its commit time; the
// ring keeps N+1 slices (the current one and the N before it, the oldest
// partly outside the window), so every key committed within the window is
// in a live filter, and a key leaves the filters between one window and
// (N+1)/N windows after its commit. Rotation happens on the hot path when
// the clock enters a new slice, and every 10 s in Run.
//
// The target false-positive rate P (0.1% by default) is the probability
// that a lookup of a new key costs a catalog read, all live filters
// together. Each of the N+1 slices gets P/(N+1); its first filter gets
// three quarters of that and is sized for the expected keys of a slice
// (Config.ExpectedRate × window/N, or 5/4 of what the previous slice took,
// whichever is more). A slice that takes more keys than its filter was
// sized for chains another filter, twice as large, with half the remaining
// budget (a scalable Bloom filter): the slice never exceeds its share, so
// the lookup never exceeds P, whatever the traffic. At the defaults a
// filter costs −ln(0.75·P/11)/(ln 2)² ≈ 20.0 bits per key against 14.4 for
// one filter at P: 5.0 bits pay for splitting P over 11 slices, 0.6 for the
// chaining reserve. The benchmarks measure it.
//
// # Catalog rows
//
//	dedupe#PIPELINE#HH#KEY      (a key over 1 KiB: dedupe#PIPELINE#HH=SHA256HEX)
//	k:w/MESSAGE_ID = "" @ claim time (ms)    the winning message: decides the key
//	k:c = "" @ commit time (ms)               a record: a ClaimOnce's effect is durable
//	                                          (and every key's, while a peer needs it)
//	dedupe#PIPELINE#~j#SS#NONCE#SEQ          a batch's journal row (Restart)
//	k:j = 8-byte hashes @ the batch's latest time
//	dedupe#PIPELINE#~journal                 the journal's marker
//	k:since = 8-byte Unix ms @ write time    one version per refresh; the largest counts
//	dedupe#PIPELINE#~r#HH#KEY                a ruling (family r, kept 31 days): a rival
//	r:w/MESSAGE_ID = "" @ ruling time (ms)   of the key was a duplicate of this winner
//
// A ruling outlives the claim so that a reprocess run (Rerun) writes the
// message the live pipeline wrote for each key, however old the range
// (rulings.go).
//
// HH is the top byte of the key's hash in hex: 256 buckets. Keys are often
// sequential (Pub/Sub message IDs increase; order IDs usually do), so rows
// keyed by the bare key, or by time, would send every write of a pipeline
// to the tablet at the end of its range. Within a pipeline the buckets
// spread consecutive keys over 256 places in the key space that Bigtable
// can split between tablets, and the pipeline's rows stay one contiguous
// range, which the rebuild scans as 8 bucket ranges in parallel. The
// dedupe# prefix keeps the catalog apart from the other rows of the state
// table (watermark#PIPELINE). A point read needs only the key: the bucket
// is computed from it. The family's max-age GC rule (created by setup)
// removes old records eventually; reads filter them out by timestamp
// regardless, since Bigtable collects garbage lazily.
//
// # Keys in flight
//
// A claimed key is held until Commit or Release. A second Claim of it
// waits (bounded by its ctx): if the first commits, the second is a
// duplicate; if it releases (its row could not be written, or the stop
// came first), the second looks again and finds the claim: a duplicate,
// or, for a delivery of the same message, it resumes. A failed record
// (ClaimOnce's Commit) keeps the hold until it is retried with success or
// released. A
// Claim that reads the catalog holds the key during
// the read, so concurrent deliveries of one key cost one read.
//
// # Restart
//
// New starts with empty filters that are not trusted: every Claim reads the
// catalog. Run rebuilds the filters, then trusts them for the membership's
// alone epoch in which the rebuild began: a process that has seen others
// since, and is alone again, rebuilds before it trusts them again.
//
// The rebuild reads the journal (journal.go): every batch of catalog
// writes carries one more row, dedupe#PIPELINE#~j#..., whose one cell
// lists the 64-bit hashes of the keys the batch claims or records, at the
// batch's latest cell time; a conditional claim, made apart from the
// batches, puts its key in a journal row of its own batches (gathered
// for 5 ms, since they come one per conditional mutation) before Claim
// returns. A claim or record counts as durable only if its journal row
// was written too, so the journal rows of the window hold every key that a
// claim or record of the window names. Reading them is a few thousand rows
// per million keys: 0.22 s for 1M keys on cbtemulator against 10.9 s for a
// scan of the catalog (BenchmarkRebuild). Claims that would use the filters
// wait for it (up to 10 s) instead of reading the catalog.
//
// The journal is trusted only when it covers the window: the marker row
// dedupe#PIPELINE#~journal says since when every process writing the
// catalog has journaled (written at the first start, carried forward every
// minute), and it must be a window old. A process of an earlier version
// writes catalog cells the journal misses: processes that journal end their
// member ID with MemberTag, and while a peer without it is live the marker
// moves to a minute past now, so the journal is trusted again only a
// window after the last such peer was seen. Otherwise, or when the marker
// is missing (the first window after an upgrade, or after every process
// was down for longer than the catalog's max age), the rebuild scans the
// pipeline's catalog rows claimed or committed within the window (a
// server-side timestamp-range filter) as before, in 8 bucket ranges, and
// Claims read the catalog meanwhile. What the marker cannot see: a process
// of an earlier version that ran and stopped while no journaling process
// was live, within a window before a journaling one starts (a downgrade,
// and an upgrade again within dedupe.window): delete the marker row
// before such an upgrade.
//
// # Guarantees
//
//   - A key claimed within the window is decided: the filters hold every
//     key this process claimed within the window, and keys claimed before
//     the start, or by other processes, once the rebuild is done; until
//     then, and while not alone, the catalog answers.
//   - A key with no claim or record younger than the window is new; a false
//     positive of the filters costs one catalog read, never a wrong answer.
//   - Of concurrent Claims of one key, at most one holds it at a time.
//   - Claims, Commits and Releases are safe for concurrent use.
//   - With any number of processes, each key is held by at most one
//     delivery's message at a time within the window: the one its claim
//     names. What is not covered: a claim older than the window (a holder
//     stalled for longer than dedupe.window) no longer stops a rival, as a
//     duplicate arriving after the window is new.
//   - A ClaimOnce's Commit whose record write fails keeps the key held
//     while the pipeline retries it, so a delivery of the same key waiting
//     meanwhile stays waiting. If the pipeline gives up (shutdown) it
//     releases the key; the message is nacked, and its redelivery resumes.
//
// # Errors
//
// Claim and Commit return the Bigtable client's errors wrapped once, which
// are transient unless the state table is missing (Check reports that at
// start), or ctx's error. Nothing here retries them or loops; Run retries
// the rebuild's scans in the background until its ctx ends.
package dedupe
