// Package source runs the Pub/Sub subscriber of one pipeline and hands each
// delivery downstream as a plain Message envelope. It is the only package
// that receives from Pub/Sub; nothing downstream sees the client's types.
//
// The entry point is New, then Run with a Handler: a Source, which
// receives by StreamingPull (the main subscription). NewPuller makes a
// Puller, which reads by unary Pull in large batches (the watermark's
// tracking subscription; see "Puller"). Check verifies the subscription at
// start and names its topic, retry policy and ack deadline. Schemas
// fetches the revisions of a topic's schema (see "Schemas").
//
// # Guarantees
//
//   - The handler is called once per delivery, concurrently, bounded by the
//     flow control of the configuration (max_outstanding_messages and
//     max_outstanding_bytes across all streams).
//   - A message is acked or nacked inside the Receive callback, after the
//     handler returned, as the client library requires for its flow control.
//     The handler's verdict is the only thing that acks.
//   - Lease extension is left on: a message waiting for a batch or a retry
//     keeps its lease (up to the client's MaxExtension of 60 minutes). The
//     client extends what it has read from its streams: the messages in
//     handlers and those of the same response waiting for flow control. It
//     reads a stream's next response only once flow control has room, so
//     a message sent beyond the flow control waits unread, leased from when
//     it was sent, and is sent again if that lease (LeaseExtension) runs
//     out first. Pub/Sub sends a stream no more than its flow control, so
//     that does not happen; the emulator ignores flow control, and a
//     Bigtable stall longer than the lease rewrites a share of the messages
//     published during it (docs/emulator-leases.md).
//   - Stopping is two-phase: cancelling the receive context stops pulling;
//     handlers keep the work context until the caller cancels it; Run
//     returns after every handler returned and its ack or nack was sent.
//
// # Watchdog
//
// A StreamingPull stream can hang without an error: open, and delivering
// nothing. The client library reopens a stream only when it ends, or when
// its server stops answering the library's pings (about 45 s); a stream
// whose server answers and sends nothing, or a client stuck below the
// library, goes unseen, and nothing would restart the process. With
// source.stall_timeout T (default 2m; 0: off), Run watches each Receive (one
// set of streams), checking every T/4:
//
//   - Silence: nothing delivered for T, counted from the last delivery, the
//     start of this Receive, or the last check that found the flow control
//     full, whichever is latest.
//   - Room: a stream whose flow control is full pulls nothing, by design (a
//     Bigtable stall holding every slot). Run counts the handlers in flight
//     and their bytes (as the library's flow control does: the data, at most
//     one stream's budget); since which stream holds which message is
//     unknown, the flow control is taken to have room only if no split of
//     them over the streams could block every stream (hasRoom, for the
//     largest message seen). A check without room is busy: no stall.
//   - Evidence that messages wait: silence is also what an idle topic gives.
//     The watchdog peeks: one unary Pull of at most one message (at most
//     min(T/4, 2s) long), nacked at once with ModifyAckDeadline 0 (a
//     redelivery is harmless: dedupe and at-least-once make it so). Only a
//     message published at least T/4 ago counts: a working stream would
//     have delivered it long since, while a fresh one may have gone to the
//     peek instead of a stream. On an idle topic the peek finds nothing and
//     nothing happens (a silent subscription is peeked every T/4).
//
// Silence, room and evidence: the watchdog reopens. It ends the Receive
// (cancels its context) and starts a new one at once, with new streams and
// a new client ID, logging a warning with the subscription and how long it
// was silent, and calls WatchdogHooks.Reopened (app counts
// pubsink_source_stream_reopens_total). The old Receive's handlers keep the
// work context and ack or nack as before (acks are unary calls, not sent on
// the hung stream); it stops pulling at once, and the library closes its
// streams once its handlers have returned. Until then both Receives hold
// messages, so the pipeline may hold up to what the old one held (below
// its limits, or there would have been no reopen) beyond the flow control.
// Run returns once every Receive has returned.
//
// A reopen is a break for the StreamWatch (WatchdogHooks.Streams): what
// the server had sent on the hung stream and the client never handed to a
// handler stays leased to it until the lease runs out, exactly as on a
// broken stream, so a watermark tracker reading the subscription through
// a Source must hold as for a break, and the startup guard must wait for
// what a main subscription's hung stream held (app installs a StreamWatch
// on its client for the main subscriptions; its tracker reads through a
// Puller, which reports its own breaks). The
// library's cancel is a clean end for the watch, so the watchdog marks the
// break itself (StreamWatch.MarkBroken) when it ends the streams, and again
// once the last of them has closed.
//
// If the new streams are still silent, with room and a message waiting,
// after another T, a reopen did not help: Stalled returns an error naming
// the subscription and how long it has been silent (app fails /healthz with
// it, so that Kubernetes or Cloud Run restarts the process, and /readyz),
// and the streams are reopened again every T meanwhile. The first delivery
// clears it; so does the end of Run. A hung stream is so reopened within
// about T + T/4 of its last delivery, and the process declared unhealthy
// within about 2T + T/2.
//
// Limits:
//
//   - The peek can only see messages that no stream holds. On Pub/Sub a
//     hung stream holds at most its flow-control share, and the rest of a
//     backlog stays visible. The emulator ignores flow control and pushes a
//     whole backlog onto the open streams, read or not (measured: 200
//     messages on 8 unread streams limited to 250 each, and on 2 limited to
//     10 each: a Pull every 1.5 s saw none of them for 60 s and 16 s; the
//     one message it got had been published while the Pull waited). So on
//     the emulator a stream that hangs on the client side (the server sends,
//     nobody reads) leaves no evidence and is not reopened; one that the
//     server never serves (its requests lost, as through a proxy that
//     swallowed the stream) is. For the same reason a busy pipeline on the
//     emulator never shows evidence either: the busy rule is what keeps it
//     alone on Pub/Sub.
//   - A peeked message counts one delivery attempt: under a Pub/Sub
//     dead-letter policy (max_delivery_attempts, at least 5), Pub/Sub could
//     forward a message only the watchdog ever saw. A hung subscription is
//     peeked successfully about once per T (the first reopen comes after
//     one peek, each later one after another T of silence), and the process
//     is unhealthy after the second; a working one only when a message
//     published just then goes to the peek (it is too young to count, and
//     is nacked at once).
//
// # Puller
//
// A Puller reads a subscription whose handler takes microseconds and needs
// no lease extension: the watermark tracker's, which records a message's
// ID, publish time and event time. StreamingPull's machinery (a goroutine,
// flow-control accounting and lease bookkeeping per message, acks batched
// by the library) costs many times what such a handler does; a Puller has
// none of it. Each of its loops (PullerConfig.Loops, app runs 3):
//
//   - pulls up to MaxMessages (1000; the emulator answers at most 100, and
//     pstest everything it has), bounded by PullTimeout (a quarter of the
//     stall timeout, from 2 s to 30 s), with the client library's own
//     retries of Pull turned off (see below);
//   - calls the handler for each message in turn, in the loop's goroutine,
//     with one Message reused;
//   - then sends one Acknowledge for what the handler accepted and one
//     ModifyAckDeadline 0 for what it refused, in runs of at most 1000 IDs
//     and 400 KiB, under Pub/Sub's 512 KB request limit; a failed
//     Acknowledge is logged (at most once a minute) and counted
//     (PullerConfig.OnError): its messages come back after the ack
//     deadline, which the handler must take calmly;
//   - pauses 100 ms after an answer with nothing in it (the emulator
//     answers an idle Pull after about 4 s, pstest after 0.5 s, Pub/Sub
//     not until its deadline), or in which the handler accepted nothing, so
//     that nothing spins.
//
// There is no flow control: a handler that blocks (the tracker at its
// memory bound) stops its loop, which is the back-pressure. The messages
// of its batch, those already handled included (their acks go at the end
// of the batch), are redelivered once the subscription's ack deadline
// passes; a handler that keys by message ID, as the tracker does, takes
// them for what they are.
//
// Breaks. A Pull that fails may have leased messages whose answer was
// lost: nothing names them, and they stay out of sight until the
// subscription's ack deadline passes (then its retry policy's backoff).
// State reports this in a StreamWatch's shape, for the watermark: Open is
// the number of loops whose last Pull did not fail, Broke the time of the
// last failed Pull, or of a nack that could not be sent (refused messages
// that stay leased are out of sight the same way). Every failed attempt
// must show, so a Puller turns off the client's retries of Pull (it would
// retry Unavailable, Internal, Unknown and Aborted inside one call and
// hide them) and retries itself, with a jittered backoff from 100 ms to
// 5 s, counting each failure.
//
// A Pull that ends with a deadline (its own, or one the service reports)
// is not a failure in itself: on Pub/Sub an idle Pull ends no other way.
// So an immediate Pull (ReturnImmediately, bounded by 2 s) checks the
// subscription, and its answer decides:
//
//   - it fails: the Pull failed (the service or the way to it is down);
//   - it returns a message published more than a quarter second before the
//     timed-out Pull began: that Pull should have returned it, and hung instead
//     (its request or its answer was lost): a break, and the messages are
//     handled;
//   - otherwise the subscription was idle: no break, and what the check
//     returned is handled.
//
// What this cannot see: an idle Pull whose answer the service sent in the
// last moment before the deadline, lost with the call. Its messages come
// back after the ack deadline; watermark/doc.go ("Stream breaks") says why
// the watermark tolerates that.
//
// Stalled returns an error, naming the subscription and the last error,
// when no Pull has been answered (an answer, or a timeout the check found
// idle) for the stall timeout while Run runs and no loop is inside its
// handlers (a handler that waits is back-pressure, not a stall); app fails
// /healthz with it. Run stops like a Source's: when the receive context
// ends, the loops stop pulling (a Pull cut short may have leased messages
// that come back after the ack deadline, which the next reader's startup
// guard waits for), finish their batch with the work context, send its
// acks and nacks (within 10 s), and Run returns. A Pull that fails with
// NotFound, PermissionDenied, Unauthenticated, InvalidArgument,
// FailedPrecondition or Unimplemented ends Run with that error, as it ends
// a Receive.
//
// # Schemas
//
// A topic with a Pub/Sub schema (Avro or Protocol Buffers) sets three
// attributes on every message: SchemaNameAttribute (projects/P/schemas/S),
// SchemaRevisionAttribute (the id of the revision that validated it) and
// SchemaEncodingAttribute ("JSON" or "BINARY"). Schemas, made by NewSchemas
// from the Schema API's client (cloud.google.com/go/pubsub/v2/apiv1
// SchemaClient, which app opens), fetches one revision with Get(ctx, name,
// revision): one GetSchema of "NAME@REVISION" with the full view. Get does
// not cache; the caller (package mapping) caches what it compiled by name
// and revision and fetches a new revision once however many messages need
// it at the same time. So each message is decoded with its own revision,
// and one committed while pubsink runs needs no restart.
//
// Errors: a revision that can never be had wraps ErrSchemaGone, and the
// message is bad input (dead-lettered): the attributes carry DeletedSchema
// or DeletedRevision (Pub/Sub's markers once the schema or the revision is
// deleted; no call is made), the name or revision is not one, or the API
// answers NotFound (a revision id is never reused and a deleted revision
// never comes back). Any other failure (Unavailable, DeadlineExceeded,
// PermissionDenied, ...) is transient and keeps its status code: the
// pipeline retries the message.
//
// Get checks that the answer is the revision it asked for and otherwise
// looks it up in ListSchemaRevisions. The Pub/Sub emulator and pstest both
// answer the revision asked for; what the emulator does with schemas
// (Avro only; the revision tag is the newest revision that reads the
// message, which need not be the writer's; JSON is Avro's JSON encoding;
// the deleted markers appear only on messages already in a subscription)
// is in docs/emulator-schemas.md, pinned by schemas_emulator_test.go.
//
// # Errors
//
// Check returns a clear error when the subscription does not exist. Run
// returns an error when the service fails permanently; transient stream
// errors are retried inside the client library, transient Pull errors by
// the Puller.
package source
