// Package pipeline wires one pipeline: a source's deliveries are decoded
// (event time, dedupe key, row), checked against the watermark, claimed in
// the dedupe window, written to the sink, and finished. It owns the order of
// effects and the one place where an outcome becomes an ack or a nack.
//
// It does not own I/O: the source, sink, dedupe catalog, tracker and
// dead-letter output are given to New (Deps), each behind the small
// interface this package needs of it.
//
// The entry points are New, then Run (receive until the context ends) and
// Close; Handle is the per-message path and can be called directly.
//
// # Guarantees
//
//   - Every delivery ends in exactly one Outcome; only Retry nacks.
//   - Order of effects: row durable in the sink, then the dedupe record,
//     then the ack. A message is dead-lettered only for bad input, a late
//     event under late_data: dead_letter, or a sink's proven rejection, and
//     acked only after the dead-letter output confirmed the copy.
//   - Transient failures (everything but a rejection) are retried with
//     capped, jittered backoff for as long as the work context lasts; they
//     are never dead-lettered. When the context ends the message is nacked.
//
// # Errors
//
// New fails when a template or the timestamp format does not compile. Run
// fails when the source or a background part fails permanently.
package pipeline
