// Package app runs a whole configuration in one process: it connects the
// clients, builds every pipeline, serves the HTTP endpoints, and owns the
// order of a graceful stop (see App.Run). main.go and the demo use it.
//
// # Guarantees
//
// Run returns only after every pipeline stopped receiving, every handler
// returned (acked or nacked), and the parts were closed, all within
// shutdown_timeout after the stop signal plus the time for the last acks to
// be sent.
//
// # Errors
//
// Open fails with an error naming the pipeline and the missing piece
// (subscription, table). Run returns a pipeline's permanent failure.
package app
