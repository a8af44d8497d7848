// Package reprocess is the logic of `pubsink reprocess` that is not the
// pipeline itself: the run's record and lock in the state table, the gate
// that bounds the run to its range of publish times and says when it is
// done, and its progress. app wires a pipeline of the current
// configuration behind the gate, on a subscription of the run's own, under
// a dedupe scope of its own (the run's name), and stops it when the gate
// says the range is done.
//
// # The record and the lock
//
// The row reprocess#PIPELINE of the state table (family m) holds two
// cells: run, the Record (JSON: the run's name, range, subscription and
// restore point), and lock, "HOLDER@EXPIRY" (unix milliseconds). A run
// takes the lock by a conditional mutation on the cell's value, renews it
// every LockRenew, and renews it and writes or deletes the record only by
// a conditional mutation on the cell naming its own holder (an id unique
// to the process), whatever expiry the cell carries: a renewal applied
// whose answer was lost does not cost the run its lock, and a process that
// lost the lock (paused past its expiry, taken over by a restart) can
// change nothing, and stops. A
// second run while the lock is renewed is refused (ErrLocked); a lock that
// lapsed (its holder was killed) is taken over after its expiry, and the
// record found again, so that the run resumes where it was: its
// subscription kept what was not acked, and its dedupe scope (the catalog
// under the run's name) what was committed.
//
// # The live pipeline's end of the range
//
// A message of the range that the live pipeline commits after the run
// wrote it puts the live mapping back over the run's (the same cells at the
// same timestamps). WaitForLive holds the run until the live pipeline has
// finished the range (the live subscription holds no unacked message
// published at or before its end: Live.Finished) or does not run (no
// member renewed lately): app reads both, the first from a probe snapshot
// of the live subscription, the second from the live membership.
//
// # The end of the range
//
// The run's subscription is attached to the live topic and keeps receiving
// new messages; the range ends at Record.Until (the first start, or
// --until). The gate acks every message published after it unprocessed
// (counted as beyond), and reports the range done once no message of the
// range arrived for the idle period and none is in flight. A message the
// pipeline nacks (a retry) is in flight until it comes back and is
// finished. Under --rate (Gate.Limit, RateCap) a message of the range waits
// for its token in flight too, so a capped run is not done while messages
// wait; what follows the range takes no token.
package reprocess
