// Package metrics defines every Prometheus metric pubsink exports, in one
// place, with the names docs/reference.md fixes. Each pipeline gets its metrics with
// the pipeline label bound (Metrics.Pipeline), so the per-message path only
// increments counters.
//
// It does not serve them: internal/server does.
//
// # Guarantees
//
// Metrics live in their own registry, never the global one, so that several
// instances (tests, the demo) never collide.
package metrics
