// Package demo runs pubsink's example pipeline fully embedded: an
// in-process Pub/Sub fake (pstest) and Bigtable emulator (bttest) on
// loopback, a realistic stream of sensor readings with duplicates and
// poison messages, and the real pipeline code between them. It backs
// `pubsink demo` and checks its own outcome: it fails if a reading was
// lost, doubled, or a poison message not dead-lettered with its reason.
package demo
