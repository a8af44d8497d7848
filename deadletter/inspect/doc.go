// Package inspect is `pubsink deadletter list` and `pubsink deadletter
// show`: it reads a pipeline's dead-letter output and prints its copies,
// changing nothing, so that a person can see why messages were
// dead-lettered before fixing the cause and replaying them. It owns which
// copies are printed (the pipeline's, --reason, --limit), the text and JSON
// forms of a copy, and the summary line. Reading is package deadletter's
// Reader, opened to look (deadletter.ReaderOptions.Look); inspect imports
// deadletter, never the other way round.
//
// The entry points are List and Show; app's ListFile and ShowFile call
// them.
//
// # What a look does to the output
//
//   - Topic: the copies are pulled from the replay subscription
//     (dead_letter.subscription), as replay reads them, and released as
//     soon as they are pulled (ModifyAckDeadline 0), so that Pub/Sub
//     delivers them again at once: a concurrent look (another list, an
//     audit) or replay is kept from a copy only for that instant, and
//     replay still gets every one. Each pull of a copy counts one delivery
//     more (its delivery attempt, which shows only under a dead-letter
//     policy on that subscription, which setup does not give it).
//   - Table: a prefix scan of the pipeline's rows (show reads the one row of
//     its message); read only.
//   - File: the file read to its current end, skipping lines marked in
//     FILE.replayed, as replay does; read only.
//
// # Guarantees
//
//   - List and Show leave every copy in place, released even when their
//     ctx ended.
//   - They print the copies of the pipeline asked for only; copies of other
//     pipelines sharing the output are read and skipped. A copy that does
//     not read back (a torn line, a foreign message) is listed as
//     unreadable, since replay reports it too.
//   - The payload is printed as text when it is valid UTF-8 without control
//     characters other than tab, newline and carriage return, else in
//     standard base64; data_encoding says which.
//
// # Errors
//
// List and Show fail with deadletter.ErrNoOutput for a pipeline without an
// output, with the Reader's errors when the output cannot be opened or
// read, and Show with ErrNotFound when no copy of the message is there.
package inspect
