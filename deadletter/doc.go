// Package deadletter keeps durable copies of the messages a pipeline can
// never write, with the reason why, and replays them once the cause is
// fixed. It owns the three outputs a pipeline's dead_letter section
// chooses from, the pubsink_* attributes, and `pubsink deadletter replay`.
// It does not decide what is dead-lettered nor retry a failed send: the
// pipeline classifies (see "Error paths" below) and retries.
//
// The entry points are Open, which returns the Output a pipeline sends to
// (its Send is the pipeline's DeadLetter), and Replay.
//
// Besides package source, this is the only package that imports the Pub/Sub
// client: the Topic output publishes, and replay pulls the replay
// subscription and republishes. Nothing Pub/Sub-typed leaves the package.
//
// # Outputs
//
//   - Topic (dead_letter.topic; the production default) publishes the
//     original data with the original attributes plus pubsink_reason,
//     pubsink_error, pubsink_pipeline, pubsink_message_id,
//     pubsink_publish_time and pubsink_failed_at (RFC 3339, UTC). Send
//     returns once Pub/Sub confirmed the publish; the client's publisher
//     batches concurrent sends. Open fails if the topic does not exist and
//     warns if it has no subscription, because Pub/Sub discards what is
//     published to a topic nobody subscribes to; `pubsink setup` creates
//     the replay subscription (dead_letter.subscription, default
//     TOPIC-replay) that replay reads.
//   - Table (dead_letter.bigtable_table, in state.instance, family
//     state.FamilyDeadLetter) writes one row per message: columns data,
//     attributes (JSON), reason, error, pipeline, message_id, publish_time,
//     failed_at. The row key PIPELINE#HHHH#MESSAGE_ID spreads a burst over
//     the pipeline's key range (HHHH hashes the message ID, whose own order
//     follows time); every cell carries the publish time (milliseconds) as
//     its explicit timestamp, so a second copy of one message rewrites the
//     same cells. Concurrent sends share an ApplyBulk.
//   - File (dead_letter.file, for local runs) appends one JSON object per
//     line: the pubsink_* fields under their attribute names, "attributes"
//     and "data" (base64), and fsyncs before Send returns. Concurrent sends
//     share one write and one fsync (a group commit), so a burst of poison
//     costs a few fsyncs, not one per message.
//
// pubsink_error is the cause's text, cut to 1 KiB (MaxErrorBytes, Pub/Sub's
// limit for an attribute value). Neither it nor any log line of this
// package holds the payload: logs carry the message ID and the reason.
// Original attributes named pubsink_* are reserved and not carried over.
// Ordering keys are not kept (pubsink does not use them).
//
// # Messages larger than an output accepts
//
// The Table (a cell holds 100 MiB) and the File hold any message Pub/Sub
// can deliver (10 MB) whole. A Topic copy adds about 300 bytes of
// attributes plus the error text, so an original within about 1 KiB of
// Pub/Sub's 10 MB limit, or with more than 94 attributes, does not fit
// whole. Such a copy is still made, never dropped and never left to block
// the pipeline: the error text is shortened first, then the end of the
// data or the last attributes (in key order) are cut, and the copy gets
// pubsink_truncated saying what was cut; the cut is logged at error level.
// Replay does not republish a truncated copy: it reports it and leaves it.
// Pipelines that expect messages that large should use a bigtable_table.
//
// # Replay
//
// Replay reads the output (the replay subscription, the pipeline's rows of
// the table, or the file), republishes each original to the pipeline's
// topic (source.topic, else the topic of source.subscription) with its
// data and its attributes without any pubsink_* one, and only after Pub/Sub
// confirmed the republish acks the copy, deletes its row, or marks it as
// replayed in FILE.replayed (the daemon may be appending to the file, so
// replay only appends too). --reason replays one reason and leaves the
// others, --limit stops after N, --dry-run changes nothing. A message
// dead-lettered twice (after a redelivery) is republished once per run;
// copies of other pipelines sharing the output are left alone.
//
// # Guarantees
//
//   - Send returns nil only once the output holds a durable copy; with any
//     error the pipeline does not ack the original. Copies are at least
//     once: a retried Send may leave two, never none.
//   - A dead-letter copy is removed by replay only after its republish was
//     confirmed. If removing fails, a later replay republishes it again
//     (harmless with an id_attribute, which dedupe recognises).
//   - Close is idempotent and bounded by its ctx; it closes no client.
//
// # Error paths
//
// Classification happens once for the whole pipeline, where the cause is
// known; every path ends in a reason or a retry:
//
//	where          what                                          outcome
//	decode         timestamp attribute missing or unparsable     bad_event_time
//	decode         id_attribute missing or empty                 missing_field
//	decode         template: attribute or JSON field missing,    missing_field
//	               JSON null, row key renders empty
//	decode         template: {data.…} of a payload not JSON      invalid_payload
//	               (or not an object/array where one is indexed)
//	decode         template: time placeholder out of range       bad_event_time
//	decode         row key, a cell or the row over sinks.Limits  too_large (before any write)
//	late check     event time < watermark - allowed_lateness     late (late_data: dead_letter);
//	                                                             written (accept); acked, counted (drop)
//	dedupe claim   catalog unreadable                            retry
//	sink, before   key over 4 KiB, cell over 100 MiB, row over   sink_rejected (too_large first when
//	any I/O        256 MiB, qualifier over 16 KiB, >100k cells,  the app passes the sink's Limits)
//	               empty key, timestamp before 1970
//	sink ApplyBulk whole call fails, whatever the code            retry
//	sink entry     Unavailable, DeadlineExceeded, Aborted,       retry
//	               ResourceExhausted, Internal, Unknown,
//	               Canceled, Unauthenticated, PermissionDenied
//	               (token refresh, IAM), no status (connection
//	               lost), our 30 s call timeout
//	sink entry     InvalidArgument, NotFound, FailedPrecondition, applied alone once more; refused again
//	               OutOfRange, once a write on the sink has       with one of these: sink_rejected;
//	               succeeded                                      else retry or committed
//	sink entry     the same, before any write succeeded (a        retry (our configuration, not the row)
//	               missing column family refuses every row)
//	dedupe commit  catalog write fails                           retry (redelivery rewrites the same cells)
//	dead letter    Send fails: topic deleted (NotFound),         retry; after shutdown_timeout nack, and
//	               PermissionDenied, Unavailable, table or file  Pub/Sub redelivers: never acked
//	               error, fsync error, output closed
//	dead letter    no output configured                          nack and log an error (never acked)
//	dead letter    copy over Pub/Sub's limits (Topic only)       truncated copy, pubsink_truncated
//	any stage      work context ends (shutdown_timeout)          nack; Pub/Sub redelivers
//
// "retry" means capped exponential backoff with jitter (internal/retry) for
// as long as the pipeline's work context lasts, the client extending the
// ack deadline meanwhile; a transient failure is never dead-lettered,
// however long it lasts.
//
// # Errors
//
// Open fails with an error naming what is missing: the topic, the table,
// the file's directory; ErrNoOutput when the pipeline names no output.
// Send's errors are transient by definition: the pipeline retries them.
// Replay fails when the output cannot be read or a replayed copy cannot be
// removed; republishes that fail are counted in Summary.Failed.
package deadletter
