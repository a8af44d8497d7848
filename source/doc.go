// Package source runs the Pub/Sub subscriber of one pipeline and hands each
// delivery downstream as a plain Message envelope. It is the only package
// that receives from Pub/Sub; nothing downstream sees the client's types.
//
// The entry point is New, then Run with a Handler. Check verifies the
// subscription at start and names its topic.
//
// # Guarantees
//
//   - The handler is called once per delivery, concurrently, bounded by the
//     flow control of the configuration (max_outstanding_messages and
//     max_outstanding_bytes across all streams).
//   - A message is acked or nacked inside the Receive callback, after the
//     handler returned, as the client library requires for its flow control.
//     The handler's verdict is the only thing that acks.
//   - Lease extension is left on: a message waiting for a batch or a retry
//     keeps its lease (up to the client's MaxExtension of 60 minutes).
//   - Stopping is two-phase: cancelling the receive context stops pulling;
//     handlers keep the work context until the caller cancels it; Run
//     returns after every handler returned and its ack or nack was sent.
//
// # Errors
//
// Check returns a clear error when the subscription does not exist. Run
// returns an error when the service fails permanently; transient stream
// errors are retried inside the client library.
package source
