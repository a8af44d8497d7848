// Package replay is `pubsink deadletter replay`: once the cause of a
// pipeline's dead letters is fixed, it republishes their originals to the
// pipeline's topic and removes the copies. It owns the replay run — which
// copies are republished, skipped, removed as duplicates or left in place,
// and the Summary the CLI prints — and the republishing. Reading and
// removing the copies is package deadletter's Reader (deadletter.OpenReader);
// replay imports deadletter, never the other way round.
//
// The entry point is Run, with Options; app's ReplayFile calls it.
//
// # Replay
//
// Run reads the output (the replay subscription, the pipeline's rows of
// the table, or the file), republishes each original to the pipeline's
// topic (source.topic, else the topic of source.subscription) with its
// data and its attributes without any pubsink_* one, and only after Pub/Sub
// confirmed the republish acks the copy, deletes its row, or marks it as
// replayed in FILE.replayed (the daemon may be appending to the file, so
// replay only appends too). --reason replays one reason and leaves the
// others, --limit stops after N, --dry-run changes nothing. A message
// dead-lettered twice (after a redelivery) is republished once per run;
// copies of other pipelines sharing the output are left alone. It works in
// batches of 100 copies: read, republish, then remove those republished.
//
// # Guarantees
//
//   - A dead-letter copy is removed by replay only after its republish was
//     confirmed. If removing fails, a later replay republishes it again
//     (harmless with an id_attribute, which dedupe recognises).
//   - Copies that are not replayed (skipped, of another pipeline,
//     unreadable, truncated, or whose republish failed) stay in the output,
//     and are released back to it when the run ends, even if its ctx ended.
//   - A truncated copy (pubsink_truncated) is never republished.
//   - The lines written to Options.Out name message IDs, reasons and sizes,
//     never a payload.
//
// # Errors
//
// Run fails with deadletter.ErrNoOutput when the pipeline names no output,
// and with an error naming the cause when the pipeline's topic cannot be
// found, the output cannot be opened or read, or a replayed copy cannot be
// removed; the Summary returned with the error says how far it got.
// Republishes that fail are not errors: they are counted in
// Summary.Failed, and their copies stay.
package replay
