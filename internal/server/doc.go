// Package server serves pubsink's operational HTTP endpoints: Prometheus
// text at /metrics, liveness at /healthz (200 while the process runs and
// Probes.Live finds nothing wrong; 503 with Live's reason, on one line,
// when a pipeline's streams hung and reopening them did not help),
// readiness at /readyz (200 once every pipeline is receiving and its sink
// answers), and /status (JSON, per pipeline: counts, watermark and its lag,
// oldest in-flight publish time, dedupe state).
//
// It owns no state: what it reports comes from the Probes it is given.
//
// # Guarantees
//
// A readiness check never takes longer than about a second; Shutdown
// behaves as net/http's.
package server
