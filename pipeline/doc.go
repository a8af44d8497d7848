// Package pipeline wires one pipeline: a source's deliveries are mapped
// (filter, event time, dedupe key, rows: package mapping), claimed in the
// dedupe window, checked against the watermark, written to the sink, and
// finished. It owns the order of
// effects and the one place where an outcome becomes an ack or a nack.
//
// It does not own I/O: the source, sink, dedupe catalog, tracker and
// dead-letter output are given to New (Deps), each behind the small
// interface this package needs of it.
//
// The entry points are New, then Run (receive until the context ends) and
// Close; Handle is the per-message path and can be called directly. Ready
// and Stalled are the pipeline's readiness and liveness: Stalled names the
// pipeline and a subscription whose streams hung and could not be reopened
// (the source's watchdog, or the tracker's reads of the tracking
// subscription), and Ready fails with it too, as it does when the sink or
// the dead-letter output fails its Check.
//
// # Guarantees
//
//   - Every delivery ends in exactly one Outcome; only Retry nacks.
//   - Order of effects: in exactly_once mode the dedupe key's claim (which
//     decides the key: package dedupe), then the rows durable in the sink,
//     then the ack. A claim made on the fast path is queued ahead of the
//     rows (ClaimAhead) rather than waited for: the sink sends no row before
//     the claim's Ready returned nil (sinks.Row.After), so the order holds. A redelivery of the message resumes its claim and
//     writes the same cells again (counted in resumed). A message is dead-lettered only for bad input, a late
//     event under late_data: dead_letter, or a sink's proven rejection, and
//     acked only after the dead-letter output confirmed the copy.
//     In exactly_once mode the copy is claimed under its own dedupe key
//     (deadLetterKey: the message ID) and recorded after the output
//     confirmed it, so a redelivery makes no second copy.
//   - Transient failures (everything but a rejection) are retried with
//     capped, jittered backoff for as long as the work context lasts; they
//     are never dead-lettered. When the context ends the message is nacked.
//
// # Error paths
//
// Every failure ends in a dead-letter reason or a retry, and both are
// decided here, in process, where the cause is known (the parts classify:
// a sink proves a rejection, the mapping names bad input; they never
// retry a message):
//
//	where          what                                          outcome
//	map            filter false (before anything else is read)       filtered: acked, finished, no dedupe state
//	map            event time: attribute or template missing,    bad_event_time
//	               unparsable or before 1970
//	map            id_attribute missing or empty, id_template    missing_field
//	               empty
//	map            template: attribute or field missing, null,   missing_field
//	               index out of range, row key renders empty
//	map            payload does not decode by its format and     invalid_payload
//	               schema, nests deeper than 128 levels, holds
//	               more values than its size allows
//	map            topic schema or revision deleted, NotFound,   schema_unavailable
//	               does not compile, or no schema attributes
//	map            topic schema fetch fails otherwise            retry (the mapping again, with backoff)
//	map            an expression fails (missing key, type        expression_failed
//	               error, cost limit)
//	map            more rows than sink.max_rows                  too_many_rows (nothing written)
//	map            a change's op expression gives dead_letter    unsupported_change (nothing written)
//	map            template: time placeholder out of range       bad_event_time
//	map            row key, a cell or a row over sinks.Limits    too_large (before any write)
//	map            no rows (when false, empty lists)             committed, nothing written
//	late check     event time < watermark - allowed_lateness     late (late_data: dead_letter);
//	(before dedupe)                                              written (accept); acked, counted (drop);
//	                                                             exactly_once, drop and dead_letter: a
//	                                                             duplicate if another message claimed the
//	                                                             key, written if its own message did
//	dedupe claim   catalog unreadable                            retry
//	dedupe claim   a claim queued ahead failed, or lost its key     no row written; the key given up
//	(ahead)        once trusted too late                         and claimed again (Claim), waiting
//	sink           any row of the message refused, as below      sink_rejected, the cause naming the row
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
//	               OutOfRange                                    with one of these and the schema probe
//	                                                             (one cell of the family set and deleted
//	                                                             in a sentinel row) then written:
//	                                                             sink_rejected; else retry or committed
//	sink entry     the same while the probe fails (a family      retry, whenever it happens, however many
//	               dropped, a table recreated without it,        writes succeeded before; readiness fails
//	               never created)                                naming the family; error log
//	dedupe commit  the record (message-ID keys, compat) fails     retry (redelivery rewrites the same cells)
//	dead letter    Send fails: topic deleted (NotFound),         retry for DeadLetterWait (1 min), or
//	               PermissionDenied, Unavailable, table or file  until shutdown_timeout after a stop; then
//	               error, fsync error, output closed             nack, and Pub/Sub redelivers: never acked
//	dead letter    exactly_once: a redelivery of a message whose  duplicate: acked, no second copy (the
//	               copy was confirmed                            copy's own dedupe key, recorded once the
//	                                                             output confirmed it)
//	dead letter    exactly_once: catalog unreadable (the copy's  retry; no copy is sent unclaimed
//	               claim)
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
// New fails when the mapping does not compile (a template, an expression,
// a schema file, the timestamp format), when Deps.Mapper is not given. Run
// fails when the source or a background part fails permanently.
package pipeline
