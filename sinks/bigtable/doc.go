// Package bigtable is the Bigtable sink: it writes the rows of each message,
// to the tables and column families its configuration names, with
// idempotent, batched ApplyBulk calls, and classifies what Bigtable answers.
//
// It owns the mutation of a row (family, qualifiers, cell timestamps), the
// batching of concurrent writes (internal/batch, bounded by the pipeline's
// sink.batch), and the classification of errors. It does not own the client
// (injected, and not closed by Close), the tables or their families (created
// by `pubsink setup`), nor retries across calls: the pipeline retries what
// Write returns as transient, with backoff.
//
// The entry point is New; Check at start-up; Write from any number of
// goroutines, once per message with all its rows; Close on shutdown.
//
// # Tables and families
//
// A row goes to the table and family it names (sinks.Row.Table, Family);
// one it leaves empty is the configuration's default (config.Sink.Table,
// ColumnFamily). The (table, family) pairs are those of the configuration's
// mappings (config.Sink.AllMappings), fixed by New, which opens each table
// once (client.Open, no I/O). A row naming a pair the configuration does
// not is a bug of the caller: it is rejected, and no table is opened for
// it.
//
// # Guarantees
//
//   - Idempotent writes: every SetCell carries an explicit timestamp, the
//     row's Timestamp in microseconds truncated to whole milliseconds; never
//     the server's time. Writing the same row again replaces the same cell
//     versions, so a redelivered message or a retried batch adds no version.
//   - Write returns nil only once Bigtable acknowledged the mutation of every
//     row of the message; it applies each row's atomically, and the rows of
//     a message each on their own.
//   - The rows of one Write are one item of a batch, never split: they
//     travel in the same batch. Concurrent writes are batched (sink.batch:
//     max_messages, which counts rows, the entries of an ApplyBulk;
//     max_bytes, the sum of the rows' sizes; max_delay); a message over
//     either bound goes in a batch of its own. A batch is one ApplyBulk per
//     table it writes to, run at once, at most four batches at a time; each
//     writer receives the result of its own rows.
//   - Each ApplyBulk call, the client's internal retries included, is bounded
//     by a 30 s timeout, so a stalled connection cannot hold a batch.
//   - The sink never retries in a loop: a batch is sent once, and an entry
//     refused with a permanent code once more alone.
//   - A missing table or column family is never a row's fault, whenever it
//     happens (before the first write, or after a family is dropped or the
//     table recreated without it): every row of that table or family gets a
//     transient error, and so its message; Check fails naming what is
//     missing, and an error line says it when it starts and once a minute
//     while it lasts. Once it is back, the retried rows are written; nothing
//     was dead-lettered. This is judged per (table, family) pair: rows of
//     other pairs written in the same batch prove nothing of it.
//
// # Changes
//
// A message with a row of a change mapping (sinks.Change) does not join the
// batch: its rows are applied by the message's own Write, row by row, on the
// goroutines of a warm pool (at most 256 calls at once), the rows of one
// (table, key) in their order and those of different keys at once
// (change.go). Each is one call, or a few, of its own row, so that whatever
// order the changes of a row arrive in, and however often each does, the
// row ends as their event times say. T is the row's timestamp:
//
//   - Tombstones live in the row, in the tombstone family that setup adds to
//     each table a change mapping writes (sink.tombstone_family, with a
//     max-age GC rule of sink.tombstone_retention): qualifier "*" for the
//     row, FAMILY for a family, FAMILY:COLUMN for a column; empty values at
//     the time they cover. A tombstone at D covers its scope at D and
//     before.
//   - set, upsert: one CheckAndMutateRow whose predicate finds a cell of the
//     row's columns newer than T, or a tombstone covering T; when it finds
//     none, each column's older versions are deleted and the cell set at T
//     (one version per cell). When it finds some, a read of the same filter
//     says which columns are covered, and the next round sets the others
//     (at most 8 rounds: more means the row changes under every round, a
//     transient failure). Columns the row deletes (Change.Delete) are
//     deleted in either branch.
//   - set, insert: the predicate finds a cell of the family at T or before
//     (an earlier insert won) or a covering tombstone; when it finds none,
//     the family's later cells (a later insert's) are deleted and the row set
//     at T: the earliest insert wins. An insert dropped for an earlier one
//     is dropped for good. Its Change.Delete columns are only left unset
//     (no tombstone: it would cover the earlier insert's cells).
//   - set, replace_if_newer: the predicate finds a newer cell of the family
//     or a covering tombstone; when it finds none, the family is deleted, its
//     tombstone set at T − 1 ms (so that an older change arriving later
//     changes nothing, while one of the same millisecond still replaces), and
//     the cells set at T.
//   - delete, delete_family: when nothing of the scope is newer than T, one
//     conditional mutation deletes the row (or family) and sets its tombstone
//     at T; otherwise it sets the tombstone only and then, with the
//     tombstone durable, reads the columns holding cells at T or before and
//     deletes those cells (an older change cannot land after the tombstone:
//     each checks it atomically).
//   - delete_columns (and a set's Change.Delete): unconditional, each
//     column's cells at T or before deleted and its tombstone set at T.
//   - A plain row in such a message is set as the batch would, by one
//     MutateRow, in its order.
//
// Write fills Change.Applied of each change row. A single-row call's error
// is the row's own, so a permanent code rejects the row once the schema
// probes of its family and of the tombstone family pass; when one fails, the
// row is retried as for the batch, and Check names the family. Change rows
// are checked against the limits before any I/O as batched rows are (they
// may have no cells); a change row for a table that no change mapping of the
// configuration writes is rejected.
//
// # Errors
//
// Write returns a *sinks.RejectedError, which the pipeline dead-letters as
// sink_rejected (the whole message), only when a row of the message can
// provably never be written; its Row is that row's index (the first, when
// several are):
//
//   - before any I/O, when the row breaks one of Bigtable's hard limits:
//     a row key over 4 KiB (or empty), a column qualifier over 16 KiB, a
//     value over 100 MiB, values over 256 MiB in all, more than 100,000
//     cells, or a timestamp before 1970; or when it names a table and family
//     the configuration does not. No row of the message is written then.
//   - after I/O, when Bigtable refused the entry with InvalidArgument,
//     FailedPrecondition, NotFound or OutOfRange, refused it again with one
//     of those codes when retried alone, and then accepted the schema probe
//     of its table and family. The other rows of the message may then have
//     been written (Bigtable applies each row on its own): harmless, since
//     the message is dead-lettered, and a replay or a redelivery rewrites
//     the same cells.
//
// A rejection of one row wins over a transient failure of another: the
// message can never be written in full, so retrying it is pointless.
//
// The schema probe tells a refusal of the row from one of its table or
// family, which a per-entry code cannot (production Bigtable refuses every
// row with NotFound when the family is missing): it sets one cell of the
// row's family in the row "\x00pubsink-check\x00" of its table and deletes
// it in the same atomic mutation (one MutateRow, leaving no cell). Nothing
// about a row can make it fail, so when it fails no row of that table and
// family is rejected. It runs only on suspicion, per (table, family) pair:
// before the solo retries when nothing of the pair was written in a batch
// and an entry of it failed with a permanent code, Internal or Unknown
// (cbtemulator's and bttest's answers for a missing family); before any
// rejection; and from Check while a fault of the pair is known.
//
// Every other error is transient and returned wrapped, with its gRPC status
// intact (that of the first row of the message that failed): a failed
// ApplyBulk call as a whole (whatever its code: a missing table fails every
// call with NotFound, which is not the rows' fault), a permanent refusal
// while the probe fails (the message then names the family and says it is
// not the row's fault), and per-entry Unavailable, DeadlineExceeded,
// ResourceExhausted, Aborted, Internal, Unknown, Canceled, Unauthenticated
// and PermissionDenied, and errors without a gRPC status (a lost
// connection). Other rows of the message may have been written; the
// pipeline retries the whole message, which rewrites them harmlessly. A
// writer whose ctx ended gets ctx.Err(); its rows may still be written.
// After Close, Write returns an error wrapping sinks.ErrClosed. A Write of
// no rows returns nil.
//
// Check returns an error naming the table and instance when one of the
// tables the configuration names does not exist, or when Bigtable cannot be
// reached; and, while a write found a table or family unusable and its
// probe still fails, one naming the column family. Without such a finding
// it does not verify the families (a read cannot tell, and a probe on every
// readiness check would be a mutation every few seconds in the user's tables
// and their change streams): a family missing at start-up shows at the
// first write.
//
// With Metrics.WriteErrors, every row Bigtable did not write is counted by
// the gRPC code of its last error (pubsink_sink_write_errors_total).
package bigtable
