// Package bigtable is the Bigtable sink: it writes rows to one table and one
// column family with idempotent, batched ApplyBulk calls, and classifies
// what Bigtable answers.
//
// It owns the mutation of a row (family, qualifiers, cell timestamps), the
// batching of concurrent writes (internal/batch, bounded by the pipeline's
// sink.batch), and the classification of errors. It does not own the client
// (injected, and not closed by Close), the table or its families (created by
// `pubsink setup`), nor retries across calls: the pipeline retries what Write
// returns as transient, with backoff.
//
// The entry point is New; Check at start-up; Write from any number of
// goroutines; Close on shutdown.
//
// # Guarantees
//
//   - Idempotent writes: every SetCell carries an explicit timestamp, the
//     row's Timestamp in microseconds truncated to whole milliseconds; never
//     the server's time. Writing the same row again replaces the same cell
//     versions, so a redelivered message or a retried batch adds no version.
//   - Write returns nil only once Bigtable acknowledged the row's mutation,
//     which it applies atomically.
//   - Concurrent writes are batched (sink.batch: max_messages, max_bytes,
//     max_delay) into one ApplyBulk, at most four at a time; each writer
//     receives the result of its own row.
//   - Each ApplyBulk call, the client's internal retries included, is bounded
//     by a 30 s timeout, so a stalled connection cannot hold a batch.
//   - The sink never retries in a loop: a batch is sent once, and an entry
//     refused with a permanent code once more alone.
//
// # Errors
//
// Write returns a *sinks.RejectedError, which the pipeline dead-letters as
// sink_rejected, only when the row can provably never be written:
//
//   - before any I/O, when the row breaks one of Bigtable's hard limits:
//     a row key over 4 KiB (or empty), a column qualifier over 16 KiB, a
//     value over 100 MiB, values over 256 MiB in all, more than 100,000
//     cells, or a timestamp before 1970;
//   - after I/O, when Bigtable refused the entry with InvalidArgument,
//     FailedPrecondition, NotFound or OutOfRange, and refused it again with
//     one of those codes when retried alone, and some write to this sink has
//     succeeded (in the same batch or earlier). Without that success, the
//     refusal may be the configuration's fault rather than the row's (a
//     column family that does not exist refuses every row with NotFound),
//     so the error is returned as transient and logged at warn level:
//     the pipeline stalls and retries instead of dead-lettering everything.
//
// Every other error is transient and returned wrapped, with its gRPC status
// intact: a failed ApplyBulk call as a whole (whatever its code: a missing
// table fails every call with NotFound, which is not the rows' fault), and
// per-entry Unavailable, DeadlineExceeded, ResourceExhausted, Aborted,
// Internal, Unknown, Canceled, Unauthenticated and PermissionDenied, and
// errors without a gRPC status (a lost connection). A writer whose ctx ended
// gets ctx.Err(); its row may still be written. After Close, Write returns an
// error wrapping sinks.ErrClosed.
//
// Check returns an error naming the table and instance when the table does
// not exist, or when Bigtable cannot be reached.
package bigtable
