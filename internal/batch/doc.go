// Package batch groups items added by concurrent callers into batches and
// gives each caller the result of its own item. It is the only place in
// pubsink where a caller waits for others: the Bigtable sink, the dedupe
// catalog and the Bigtable dead-letter table batch their writes with it.
//
// It owns the batching (bounds, timer, flush concurrency); it does not own
// what a flush does, nor retries: a FlushFunc classifies its errors and the
// caller of Add decides what to do with them.
//
// The entry point is New, then Add (or AddN) from any number of goroutines,
// then Close. Enqueue queues an item without waiting and returns a Ticket,
// whose Wait gives the item's result later, from any goroutine: the dedupe
// catalog's claims go ahead of their message's rows that way, and the sink
// waits for them.
//
// # Guarantees
//
//   - A batch is sent when it holds Config.MaxItems items, when the sizes of
//     its items reach Config.MaxBytes (an item larger than MaxBytes goes in a
//     batch of its own), or Config.MaxDelay after its first item, whichever
//     comes first. An item added with AddN counts as n items against
//     MaxItems, and goes in a batch of its own when n is over MaxItems; an
//     item is never split. No batch is ever sent empty.
//   - At most Config.MaxInFlight flushes run at once. While all are busy, one
//     more batch waits for a slot and the following batch keeps filling up to
//     its bounds; once that one is full too, Add blocks before queuing
//     (backpressure), and returns ctx.Err() if its ctx ends while blocked.
//   - Every item added is flushed exactly once, and its caller receives that
//     item's error (or nil), unless its ctx ended first.
//   - Flushes run with a context owned by the batcher, so a caller giving up
//     never fails the other items of its batch. The batcher allocates per
//     batch, not per item.
//   - Every goroutine the batcher starts (one flush loop per busy slot, one
//     timer callback per open batch) is waited for by Close.
//
// # Errors
//
// Add returns the flush's error for its item as is, ctx.Err() if its ctx
// ended first (its item may still be flushed later: batch only idempotent
// work), or ErrClosed after Close. A FlushFunc that returns a slice of the
// wrong length fails every item of that batch. Close returns ctx.Err() if
// ctx ended before every flush finished; the flushes then see a cancelled
// context.
package batch
