// Package fake starts pubsink's in-process backends — the Pub/Sub fake
// (pstest) and the Bigtable emulator (bttest) — on loopback, and hands out
// clients wired to them. The demo and the fast tests use it; behaviour that
// depends on the real services (redelivery timing, ack deadlines, ApplyBulk
// errors) is tested on the real emulators instead (internal/testenv/emulator).
//
// Each client gets its own gRPC connection, which closing the client
// closes.
package fake
