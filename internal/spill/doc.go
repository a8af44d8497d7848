// Package spill sorts more records than fit in memory: an external merge
// sort of (key, value) byte records, stable, by bytes.Compare of the keys.
//
// It exists for `pubsink audit`, which must sort every cell that a range of
// messages gives by (table, row, ...) to compare it with the table in row-key
// order, and must keep its memory bounded whatever the range's size (issue
// 30: a day of a busy topic is far more than a machine's memory). The sorter
// holds at most the memory it is given; past that it sorts what it holds and
// writes it to a temp file (a run), and Sorted merges the runs back.
//
// The entry point is New, then Add for every record, then Sorted and the
// Iterator it returns, then Close, which removes every temp file.
//
// # Guarantees
//
//   - Records come out in bytes.Compare order of their keys; records with
//     equal keys come out in the order they were added.
//   - The records the sorter holds in memory (len(key)+len(value) plus a
//     fixed per-record overhead each) never exceed the memory given to New,
//     but for a single record larger than it, held alone. On top of that, a
//     merge uses one read buffer per open run (64 KiB each).
//   - At most maxOpenRuns (64) run files are open at once: past that many
//     runs, Sorted first merges them into fewer, bigger runs (a 100 GiB
//     range at 64 MiB per run is 1,600 runs, merged in two passes).
//   - A run file that was truncated or corrupted (each run carries its record
//     count and a CRC-32C) ends the iteration with an error wrapping
//     ErrCorrupt from Iterator.Err, never with a silent, short end. The check
//     of the checksum comes at the end of a run, so records read before it
//     are to be trusted only once Err is nil after the last Next.
//   - Close removes every temp file the sorter created, whenever it is
//     called: before Sorted, during or after an iteration, after an error;
//     it can be called more than once.
//
// A Sorter and its Iterator are for one goroutine at a time.
package spill
