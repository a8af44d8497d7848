// Package stdout is a sink for local debugging: it writes each row as one
// JSON line to an io.Writer, usually os.Stdout, instead of Bigtable.
//
// It owns the line format only. The writer is injected and stays the
// caller's. The entry point is New.
//
// # Guarantees
//
//   - One row is one line, a JSON object with "key", "timestamp" (RFC 3339,
//     UTC, milliseconds) and "cells" (column to value), plus "table" and
//     "family" when the row names them (Row.Table, Row.Family), and "base64"
//     naming the columns whose values were not valid UTF-8 and are
//     base64-encoded.
//   - Writes are serialized: the lines of one Write, all the rows of one
//     message, go to the writer in one Write call, and lines never
//     interleave. Write returns after its lines were written, and flushed
//     when the writer has a Flush() error method.
//   - Writing the same row twice writes two identical lines: a reader that
//     applies lines as upserts by (key, column, timestamp), as Bigtable does,
//     gets the same result, so the sink is idempotent in the same sense.
//
// # Errors
//
// Write never rejects a row. It returns the writer's error (transient),
// ctx.Err() when ctx ends first, and an error wrapping sinks.ErrClosed after
// Close. Close returns the flush's error, or ctx.Err() if a blocked Write
// holds the writer until ctx ends.
package stdout
