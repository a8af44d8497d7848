// Package faultproxy is a TCP proxy for fault injection between a client and
// a server, typically an emulator: it stalls, delays or resets the traffic
// on demand, so that tests can show what pubsink does when Bigtable or
// Pub/Sub hangs or drops connections ("a Bigtable stall for 20 s
// dead-letters nothing and loses nothing").
//
// It owns the listening socket and every connection it accepts. It does not
// understand the protocol: it works on TCP bytes, so one Stall holds gRPC
// data, pings and new streams alike. Emulators are internal/testenv/emulator; point
// a client at the proxy with, for example,
// (&emulator.Bigtable{Host: proxy.Addr()}).Clients(ctx, project, instance).
//
// Entry point: Start, then Stall/Resume, ResetAll and SetLatency while the
// test runs, and Close.
//
// # Guarantees
//
//   - Bytes are forwarded in order and never dropped, except by ResetAll and
//     Close, which end the connections that held them.
//   - While stalled nothing is written in either direction on any connection
//     (one write already in progress may complete), and a new connection is
//     accepted but not dialled to the target; both directions stay open.
//     After Resume the held bytes go out first. Like a real network, this
//     means a request whose client gave up during a stall (DeadlineExceeded)
//     may still reach the server after Resume: measured with Bigtable, the
//     timed-out write landed in 2 of 3 runs. Tests must not treat a
//     deadline error as proof that a write did not happen.
//   - ResetAll ends every current connection with a TCP RST on both sides
//     (SO_LINGER 0): peers see ECONNRESET, gRPC sees Unavailable, and clients
//     reconnect through the proxy.
//   - SetLatency delays each chunk (up to 32 KiB) by the given time in each
//     direction, measured from when the proxy read it; chunks are pipelined,
//     so latency does not cap throughput.
//   - A half-close (EOF) is passed on as a half-close. A target that cannot
//     be reached gives the client a reset.
//   - All methods are safe for concurrent use. Close waits for every
//     goroutine the proxy started.
//
// # Errors
//
// Only Start (the listener) and Close (closing it) return errors. Failures
// on a single connection end that connection, as the network would.
package faultproxy
