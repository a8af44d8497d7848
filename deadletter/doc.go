// Package deadletter keeps durable copies of the messages a pipeline can
// never write, with the reason why, and reads them back. It owns the three
// outputs a pipeline's dead_letter section chooses from, each in one file
// with its send side and its read side (topic.go, table.go, file.go), and
// the pubsink_* attributes. It does not decide what is dead-lettered nor
// retry a failed send: the pipeline classifies (see "Error paths" below)
// and retries. Replaying the copies, `pubsink deadletter replay`, is
// package deadletter/replay, which reads them through this package; looking
// at them, `pubsink deadletter list` and `show`, is package
// deadletter/inspect, which reads them with OpenReaderWith (a Reader that
// only looks: see ReaderOptions).
//
// The entry points are Open, which returns the Output a pipeline sends to
// (its Send is the pipeline's DeadLetter), and OpenReader, which returns
// the Reader of the same output that replay walks: Next reads copies back
// as Entry values, Remove takes replayed ones out, Release gives the others
// back.
//
// Besides package source, deadletter and deadletter/replay are the only
// packages that move messages through Pub/Sub (app opens the client): the
// Topic output publishes, its Reader pulls the replay subscription, and
// replay republishes. Nothing Pub/Sub-typed leaves them; the client comes
// in through Clients.
//
// # Outputs
//
//   - Topic (dead_letter.topic; the production default) publishes the
//     original data with the original attributes plus pubsink_reason,
//     pubsink_error, pubsink_pipeline, pubsink_message_id,
//     pubsink_publish_time and pubsink_failed_at (RFC 3339, UTC), and, on a
//     copy a reprocess run wrote (Clients.Reprocess), pubsink_reprocess, the
//     run's name. Send returns once Pub/Sub confirmed the publish; the
//     client's publisher batches concurrent sends. Open fails if the topic
//     does not exist or has no subscription, because Pub/Sub discards what
//     is published to a topic nobody subscribes to and still confirms it:
//     every copy would be lost. `pubsink setup` creates the replay
//     subscription (dead_letter.subscription, default TOPIC-replay) that the
//     topic's Reader pulls. While running, the output asks again once its
//     last answer is 30 s old (one ListTopicSubscriptions per period, shared
//     by every send and readiness probe, not one per copy): while the topic
//     has no subscription, or no longer exists, Send fails (the pipeline
//     keeps the original unacked and retries) and Check, the output's part
//     of the pipeline's readiness, fails naming the topic. A copy sent
//     within a period of the last subscription's deletion is still lost. A
//     check that fails keeps the last answer; without permission to list the
//     topic's subscriptions, Open warns and nothing is checked.
//   - Table (dead_letter.bigtable_table, in state.instance, family
//     state.FamilyDeadLetter) writes one row per message: columns data,
//     attributes (JSON), reason, error, pipeline, message_id, publish_time,
//     failed_at, and reprocess on a reprocess run's copy (the live output
//     deletes it, so the row describes the copy written last). The row key
//     PIPELINE#HHHH#MESSAGE_ID spreads a burst over the pipeline's key range
//     (HHHH hashes the message ID, whose own order follows time); every cell
//     carries the publish time (milliseconds) as its explicit timestamp, so
//     a second copy of one message rewrites the same cells. Concurrent sends
//     share an ApplyBulk.
//   - File (dead_letter.file, for local runs) appends one JSON object per
//     line: the pubsink_* fields under their attribute names
//     (pubsink_reprocess only on a reprocess run's copy), "attributes" and
//     "data" (base64), and fsyncs before Send returns. Concurrent sends
//     share one write and one fsync (a group commit), so a burst of poison
//     costs a few fsyncs, not one per message.
//
// pubsink_error is the cause's text, cut to 1 KiB (MaxErrorBytes, Pub/Sub's
// limit for an attribute value). Neither it nor any log line of this
// package holds the payload: logs carry the message ID and the reason.
// Original attributes named pubsink_* are reserved and not carried over.
// A Topic copy publishes the original's goog* attributes (Pub/Sub reserves
// the prefix; a schema'd topic's messages carry googclient_schema*) as
// pubsink_goog*, and reading it back restores their keys (see googPrefix).
// Ordering keys are not kept (pubsink does not use them).
//
// # Messages larger than an output accepts
//
// The Table (a cell holds 100 MiB) and the File hold any message Pub/Sub can
// deliver (10 MB) whole. A Topic copy adds about 300 bytes of attributes
// plus the error text, so an original within about 1 KiB of Pub/Sub's 10 MB
// limit, or with more than 94 attributes, does not fit whole (93 on a
// reprocess run's copy). Such a copy is still made, never dropped and never
// left to block the pipeline: the error text is shortened first, then the
// end of the data or the last attributes (in key order) are cut, and the
// copy gets pubsink_truncated saying what was cut; the cut is logged at
// error level. Package replay does not republish a truncated copy: it
// reports it and leaves it.
// Pipelines that expect messages that large should use a bigtable_table.
//
// # Reading back
//
// A Reader reads the copies of one output in its own order: the replay
// subscription of a topic output (pulled, each copy held until it is
// removed or released), the pipeline's rows of a table output (a prefix
// scan, in key order), or a file output line by line. Remove acks a copy,
// deletes its row, or marks it as replayed in FILE.replayed (one JSON
// object per line: pubsink_pipeline, pubsink_message_id, replayed_at); the
// daemon may be appending to the file, so the reader only appends too.
// Delete a file and its marker file together once nothing in them is
// wanted any more. A line the file reader cannot read (torn by a failed
// write, or edited) is an Entry with Err, as is a foreign message or row.
// A Reader opened to look (OpenReaderWith, ReaderOptions.Look: list, show
// and audit) reads the same way but releases a topic's copies as soon as
// it pulls them, so that concurrent readers do not hide copies from each
// other, and waits about 1 s, not 3 s, per pull that brings nothing new; with
// ReaderOptions.MessageID a table reader reads that message's row alone.
//
// # Guarantees
//
//   - Send returns nil only once the output holds a durable copy; with any
//     error the pipeline does not ack the original. Copies are at least
//     once: a retried Send may leave two, never none.
//   - Close is idempotent and bounded by its ctx; it closes no client.
//   - A Reader changes the output only in Remove (and, for a topic, by
//     acking redeliveries of copies it removed): Next and Release leave
//     every copy in place, and a Reader never returns one copy twice.
//
// # Error paths
//
// Which failures are dead-lettered with which reason, and which are
// retried, is decided in package pipeline; see the error-path table in
// pipeline/doc.go.
//
// # Errors
//
// Open fails with an error naming what is missing: the topic, the topic's
// subscription (naming dead_letter.topic), the table, the file's
// directory; ErrNoOutput when the pipeline names no output. Send's errors
// are transient by definition: the pipeline retries them, a topic's
// missing subscription included.
// OpenReader fails likewise when the replay subscription, the table or the
// file is missing, and with ErrNoOutput. A Reader's Next fails when the
// output cannot be read, Remove when a copy could not be removed; a copy
// that does not read back is not an error but an Entry with Err.
package deadletter
