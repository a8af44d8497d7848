// Package metrics defines every Prometheus metric pubsink exports, in one
// place, with the names docs/reference.md fixes. Each pipeline gets its metrics with
// the pipeline label bound (Metrics.Pipeline), so the per-message path only
// increments counters. What is a time (the watermark, its lag, the oldest
// message in flight) or a check (pubsink_ready) is read at scrape time from
// a function the pipeline or app registers (WatchWatermark,
// WatchOldestInFlight, WatchReady), and is absent while unknown. One
// counter is the process's, not a pipeline's: pubsink_bigtable_mutations_total,
// the rows mutated in Bigtable by table and call, counted by gRPC
// interceptors on the data clients app opens (BigtableClientOptions).
//
// Names follow Prometheus' conventions: counters end in _total, units are
// base units in the name (_seconds, _bytes), ratios end in _ratio, a point
// in time is _timestamp_seconds, histogram bounds are 1, 2.5 and 5 times a
// power of ten.
//
// It does not serve them: internal/server does.
//
// # Guarantees
//
// Metrics live in their own registry, never the global one, so that several
// instances (tests, the demo) never collide.
package metrics
