// Package dedupe claims and commits the dedupe keys of one exactly_once
// pipeline: a key committed within the window (dedupe.window, processing
// time) makes every later delivery of it a duplicate. It owns a rolling
// ring of Bloom filters (github.com/bits-and-blooms/bloom/v3) in memory and
// the durable key catalog in the state table (family k). It does not own
// retries (the pipeline retries the transient errors it returns), the data
// rows, or the ack.
//
// The entry point is New, which returns the pipeline's *Keys. The pipeline
// calls Claim with the key and the delivery's message ID, defers the
// Claim's Release, writes the row, then Commits;
// it runs Run in the background and calls Close after it stopped. A Claim
// is a value naming its hold by key and token, so Release is safe after
// Commit and twice: a stale Claim can never end another's hold.
//
// # Claims across processes
//
// Any number of processes may run a pipeline (replicas, a rolling update);
// package members tells each whether it is alone. Every hold is durable
// before Claim returns it: a claim cell k:w/MESSAGE_ID in the key's catalog
// row names the delivery that won the key. Pub/Sub gives every redelivery
// of a message the same ID, so the winner's redelivery, in any process,
// recognizes the key as its own and finishes the job; a rival delivery
// (another message with the same key) waits while the key is claimed and
// not recorded, and is a duplicate once it is.
//
//  1. Not alone: the claim is one conditional mutation (CheckAndMutateRow)
//     whose predicate is "a cell within the window other than this
//     message's claims" and whose false branch writes the claim. Of
//     concurrent claims of a key exactly one applies; Bigtable decides,
//     atomically, per row. When the predicate matched, the row is read: a
//     record makes a duplicate, another's claim makes Claim wait (20 ms
//     doubling to 1 s between looks). Apply does not retry a conditional
//     mutation, and an error leaves it unknown whether it was applied: the
//     row is read back, and a claim by this message means it was.
//  2. Alone: the filters answer as below, and the claim is an
//     unconditional write, batched like the records. It is trusted only if
//     the membership still says alone once the write returned, and the
//     fast path had not expired: such a claim was durable before this
//     process acknowledged any newcomer, so the newcomer's conditional
//     claims see it. A claim confirmed later is made again conditionally.
//  3. The record k:c follows the row, as before. Release (the row was
//     rejected, the message late or the stop came first) deletes the claim
//     in the background, so that a rival may take the key; if that fails,
//     rivals wait for the window.
//
// So a process that is paused or cut off and resumes can only write the
// row of the message its claim names: the same bytes as that message's
// redelivery. A crash between the row and the record leaves the claim, and
// the rival that arrives first waits for the winner's redelivery instead
// of writing its own payload. What this costs: one claim cell per new key
// alone, batched with the records (one ApplyBulk carries the claims of new
// keys and the records of committed ones), one conditional mutation per key
// shared.
//
// # How a key is checked
//
// While alone, Claim hashes the key once (64-bit xxhash, double hashing for
// the bit locations) and probes every live filter. "Not present" in all of
// them means new: no read. "Maybe present" is confirmed by a
// batched point read of the catalog (ReadRows with a RowList, one batch
// per 2 ms, at most 4 at once); only a record whose cell timestamp is
// within the window makes the key a duplicate. Commit writes the record
// (batched ApplyBulk, in the same batches as the claims: a batch gathers
// for a millisecond, then goes as soon as one of 4 call slots is free and
// grows while they are all busy; the commit time in milliseconds is the
// explicit cell timestamp, so the client's retries are idempotent), then
// adds the key to the filter of the current slice, then ends the hold.
// Every record within the window thus has its key in a live filter (put
// there by Commit, or by the rebuild after a restart), which is what lets
// a Claim that finds a bit unset answer "new". The order of effects is the
// pipeline's: row, record, ack.
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
//	k:w/MESSAGE_ID = "" @ claim time (ms)    the winning delivery
//	k:c = "" @ commit time (ms)               the winner's row is durable
//	dedupe#PIPELINE#~j#SS#NONCE#SEQ          a batch's journal row (Restart)
//	k:j = 8-byte hashes @ the batch's latest time
//	dedupe#PIPELINE#~journal                 the journal's marker
//	k:since = 8-byte Unix ms @ write time    one version per refresh; the largest counts
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
// came first), the second looks again and may take the key. A failed
// Commit keeps the hold until it is retried with success or released. A
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
//   - A key committed within the window is a duplicate: the filters hold
//     every key this process committed within the window, and keys
//     committed before the start once the rebuild is done; until then the
//     catalog answers.
//   - A key with no record younger than the window is new; a false
//     positive of the filters costs one catalog read, never a wrong answer.
//   - Of concurrent Claims of one key, at most one holds it at a time.
//   - Claims, Commits and Releases are safe for concurrent use.
//   - With any number of processes, each key is held by at most one
//     delivery's message at a time within the window: the one its claim
//     names. What is not covered: a claim older than the window (a holder
//     stalled for longer than dedupe.window) no longer stops a rival, as a
//     duplicate arriving after the window is new.
//   - A Commit whose record write fails keeps the key held while the
//     pipeline retries it, so a delivery of the same key waiting meanwhile
//     stays waiting. If the pipeline gives up (shutdown) it releases the
//     key; the message is nacked, and its redelivery rewrites its row.
//
// # Errors
//
// Claim and Commit return the Bigtable client's errors wrapped once, which
// are transient unless the state table is missing (Check reports that at
// start), or ctx's error. Nothing here retries them or loops; Run retries
// the rebuild's scans in the background until its ctx ends.
package dedupe
