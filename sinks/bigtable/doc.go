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
//   - A missing table or column family is never a row's fault, whenever it
//     happens (before the first write, or after a family is dropped or the
//     table recreated without it): every row gets a transient error, Check
//     fails naming what is missing, and an error line says it when it
//     starts and once a minute while it lasts. Once it is back, the retried
//     rows are written; nothing was dead-lettered.
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
//     FailedPrecondition, NotFound or OutOfRange, refused it again with one
//     of those codes when retried alone, and then accepted the schema probe.
//
// The schema probe tells a refusal of the row from one of the table or its
// family, which a per-entry code cannot (production Bigtable refuses every
// row with NotFound when the family is missing): it sets one cell of the
// configured family in the row "\x00pubsink-check\x00" and deletes it in the
// same atomic mutation (one MutateRow, leaving no cell). Nothing about a row
// can make it fail, so when it fails no row is rejected. It runs only on
// suspicion: before the solo retries when nothing in a batch was written and
// an entry failed with a permanent code, Internal or Unknown (cbtemulator's
// and bttest's answers for a missing family); before any rejection; and from
// Check while a fault is known.
//
// Every other error is transient and returned wrapped, with its gRPC status
// intact: a failed ApplyBulk call as a whole (whatever its code: a missing
// table fails every call with NotFound, which is not the rows' fault), a
// permanent refusal while the probe fails (the message then names the
// family and says it is not the row's fault), and
// per-entry Unavailable, DeadlineExceeded, ResourceExhausted, Aborted,
// Internal, Unknown, Canceled, Unauthenticated and PermissionDenied, and
// errors without a gRPC status (a lost connection). A writer whose ctx ended
// gets ctx.Err(); its row may still be written. After Close, Write returns an
// error wrapping sinks.ErrClosed.
//
// Check returns an error naming the table and instance when the table does
// not exist, or when Bigtable cannot be reached; and, while a write found the
// table or family unusable and the probe still fails, one naming the column
// family. Without such a finding it does not verify the family (a read
// cannot tell, and a probe on every readiness check would be a mutation every
// few seconds in the user's table and its change stream): a family missing at
// start-up shows at the first write.
//
// With Metrics.WriteErrors, every row Bigtable did not write is counted by
// the gRPC code of its last error (pubsink_sink_write_errors_total).
package bigtable
