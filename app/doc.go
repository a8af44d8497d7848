// Package app is pubsink's composition root: the one place that opens the
// Pub/Sub and Bigtable clients, checks that what a configuration names
// exists, wires the parts (source, sink, dedupe, watermark tracker,
// dead-letter output) into pipelines, and runs the commands of the CLI:
// run (RunFile, Open and App.Run), validate (Validate), test (TestFile:
// package maptest's mapping tests, offline; no client), setup (Setup,
// SetupFile), demo (Demo) and deadletter list, show and replay (ListFile,
// ShowFile, ReplayFile; list and show of a file output open no client, so
// they need no credentials). It also reads the container's memory limit
// (from the cgroup, once per process), which sizes the default flow
// control and the Go runtime's soft memory limit.
//
// The Bigtable data clients it opens itself (not those Options.Bigtable
// gives) count the rows they mutate, by table and call, in
// pubsink_bigtable_mutations_total (metrics.BigtableClientOptions).
//
// It owns the order of a graceful stop (see App.Run). It does not own any
// per-message decision: those are package pipeline's.
//
// # Guarantees
//
// Run returns only after every pipeline stopped receiving, every handler
// returned (acked or nacked), and the parts were closed, all within
// shutdown_timeout after the stop signal plus the time for the last acks to
// be sent.
//
// /healthz answers 503 with one line naming the pipeline and the
// subscription (App.Live) while a pipeline's streams hung and reopening
// them did not help (package source, "Watchdog"), or while its tracking
// subscription has answered no pull for source.stall_timeout (package
// source, "Puller"), so that Kubernetes or Cloud Run restarts the process;
// the watchdog's reopens are counted in pubsink_source_stream_reopens_total,
// the tracking subscription's failed calls in pubsink_tracking_errors_total.
// The tracking subscription is read by unary Pull (source.Puller), whose
// failed pulls are the watermark's breaks; its lease (/status
// tracker.message_lease_seconds) is the longer of source.LeaseExtension and
// the tracking subscription's ack deadline, plus the longer redelivery
// backoff of the two subscriptions.
//
// Setup is idempotent: it never deletes or changes what exists, and running
// it twice reports "exists" for everything the first run created. An
// existing subscription attached to another topic than source.topic is an
// error, not something to fix silently.
//
// The demo runs the example pipeline fully embedded (an in-process Pub/Sub
// fake and Bigtable emulator on loopback, internal/fake) on a stream of
// sensor readings with duplicates and poison messages, and checks its own
// outcome: it fails if a reading was lost or doubled, or a poison message
// was not dead-lettered with its reason.
//
// # Errors
//
// Open fails with an error naming the pipeline and the missing piece
// (subscription, table). Run returns a pipeline's permanent failure. A
// configuration that cannot be used is a *ConfigError (the CLI exits 2).
package app
