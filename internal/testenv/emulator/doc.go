// Package emulator starts the Google Cloud Pub/Sub and Bigtable emulators
// for tests, the chaos runner, the benchmark command and the developers'
// tools/emulators, and hands out clients that talk to them.
//
// It owns the emulator processes (start, readiness, stop), the javaagent
// that fixes three defects of the Pub/Sub emulator, and the client
// options that reach an emulator without relying on the process environment.
// It does not own topics, subscriptions or tables: callers create those, with
// fresh names per test. Fault injection between a client and an emulator is
// internal/testenv/faultproxy.
//
// Entry points: StartPubSub and StartBigtable, or in tests RequirePubSub and
// RequireBigtable, which start one emulator per test and stop it in
// t.Cleanup. The Require helpers take TB, an interface that *testing.T
// satisfies, so that importing this package does not link the testing
// package into the chaos and benchmark binaries.
//
// Both emulators come with the Google Cloud SDK
// (/usr/lib/google-cloud-sdk/platform/... on the CI image; other SDK roots
// are searched too, see sdkRoots). The Pub/Sub fix needs javac 17 or newer.
//
// # Guarantees
//
//   - Each emulator listens on 127.0.0.1 (or Options.ListenHost) on a port of
//     its own. Pub/Sub gets a free port from the kernel and retries with
//     another if it loses the race for it, deciding from its own log, not
//     from a gRPC answer that another emulator could give. cbtemulator is
//     given port 0 and reports the port it bound. A port given in
//     Options.Port is used as it is: when another process holds it, start-up
//     fails with ErrPortInUse, without retrying.
//   - Start returns only when the emulator answers a gRPC call.
//   - Each emulator is the leader of its own process group. Stop sends
//     SIGTERM to the group, SIGKILL after 5 s, and waits; it never signals
//     anything else. On Linux the emulator also gets SIGKILL if the process
//     that started it dies (a test binary killed by -timeout leaves no JVM
//     behind).
//   - Client and Clients set the endpoint explicitly; PUBSUB_EMULATOR_HOST
//     and BIGTABLE_EMULATOR_HOST in this process do not matter. Env gives the
//     variables for child processes.
//   - The Pub/Sub emulator always runs with the javaagent (below); start-up
//     fails if its log does not show the agent installed.
//
// # Errors
//
// StartPubSub and StartBigtable wrap ErrNotInstalled when the emulator or
// the JDK is missing: RequirePubSub and RequireBigtable then skip the test,
// or fail it when $CI is true. Other errors (start-up timeout, emulator
// exited, javac failed) carry the tail of the emulator's log.
//
// # The javaagent
//
// The installed Pub/Sub emulator (0.8.20) bundles grpc-core classes from two
// grpc-java releases. When a StreamingPull stream ends uncleanly (the client
// cancels it, which the Go client does on every Receive shutdown; the
// connection drops; the client is killed) the newer ServerCallImpl calls
// io.grpc.InternalStatus.asRuntimeException(Status, Metadata, boolean),
// which the older InternalStatus lacks. The NoSuchMethodError aborts the
// cancellation before the emulator's own handler runs, so the emulator keeps
// the dead stream as a consumer of the subscription and keeps giving it a
// share of the messages. Those come back only when their lease expires, and
// then may go to the dead stream again. Measured with
// TestStreamingPullCancelDoesNotStrandMessages -args -without-agent: after
// one unclean end, a fresh subscriber got 100 (once 50) of 200 new messages
// within 10 s and the rest only after 60 s or not within 150 s. With the
// agent it gets all 200 in about 0.1 s and the log has no NoSuchMethodError.
//
// The second defect is in the emulator's own MessageBacklog, the state of
// one subscription, under a retry policy (pubsink setup gives every main
// subscription one). A message whose lease expires, or which is nacked, on
// a delivery attempt after its first is released again only after its
// backoff: its ack ID goes into a map from release time to ack IDs, which a
// timer drains by calling nackMessage(ackId) and dropping the entry. Every
// pull that finds such a lease still expired queues the ack ID again, under
// a later time, unless some entry holds that ack ID alone; so an ack ID can
// wait in two entries. The first release removes it from the delivered
// map; the second throws a NullPointerException before its entry is
// dropped, and since that entry is the oldest, every later drain throws at
// it too: no delayed redelivery of the subscription is ever released again,
// and the emulator logs nothing (its logger has no backend). In the chaos
// campaign on a loaded machine (a process killed during a Bigtable stall,
// its successor stopped as a Pub/Sub stall ended) this left dozens of
// records without a row, nothing to pull at the end, and the watermark held
// by the messages that never came back. The agent patches the class as it
// loads (javaagent/.../BacklogFix.java): a Methodref is appended to its
// constant pool, and each invokespecial of nackMessage becomes an
// invokestatic of a helper with the same stack effect, which skips an ack
// ID that is no longer delivered. TestEmulatorReleasesDelayedRedeliveries
// reproduces it: two messages delivered three times come back after the
// third lease with the agent, and not within 40 s without it.
//
// The third is in OrderedMessageBacklog, the state of a subscription with
// message ordering, which assigns each ordering key to the stream that
// pulls it and keeps it there while the key has messages delivered and not
// acked. When a stream ends (its process killed) the emulator drops every
// assignment to it, whatever the key still has out: the key's later
// messages go to the next stream at once, and the ones the dead stream held
// come back after them, when their lease runs out. Pub/Sub delivers a key
// in order. The agent (javaagent/.../OrderingFix.java) points the one read
// of the assignments in that loop at a helper that returns an empty map, so
// a stream's end drops nothing and the key waits for its held messages.
// TestEmulatorKeepsAKeyOnItsEndedStreamUntilItsHeldMessagesReturn pins it;
// docs/emulator-ordering.md has the rest of the emulator's ordering.
// Both class patches share javaagent/.../ClassPatch.java.
//
// The fixes leave the installed files alone. javaagent/ holds the Java
// sources of a replacement io.grpc.InternalStatus (the same public members,
// plus the missing method) and of an agent whose ClassFileTransformer returns
// the replacement's bytes when the emulator's class loader loads
// io/grpc/InternalStatus, unless the loaded class already has the method.
// The replacement travels in the agent jar as a resource, not a .class
// entry, so that no class loader can define it from the jar. The sources are
// embedded in this package; on first use they are compiled with
// javac --release 17 against the emulator jar, packed into a jar and cached
// in os.UserCacheDir()/pubsink under the hash of the sources, so each machine
// builds it once (a few seconds). Concurrent builders each build in a temporary
// directory and rename the result into place. StartPubSub passes the jar in
// JAVA_OPTS as -javaagent, after any JAVA_OPTS already set.
//
// # Emulator behaviour measured here
//
// Measured on a 2-core machine with the Pub/Sub emulator 0.8.20 (with the
// agent) and the cbtemulator of SDK revision 621ea2d5c3; quirks_test.go pins
// each one, so a changed emulator fails a test instead of making this text
// wrong.
//
//   - StreamingPull delivers about 1.8k small messages per second per stream
//     (3.7k with 2 streams, 6.5k with 4): the limit is per stream, not CPU.
//     Publishing is faster (about 20k msg/s). Use more streams
//     (NumGoroutines) to go faster; see BenchmarkStreamingPullOneStream.
//   - A nacked message is redelivered at once (about 50 ms later), even when
//     the subscription has a retry policy with a 10 s minimum backoff, which
//     the real service would honour. A handler that nacks on a transient
//     error therefore spins against the emulator.
//   - A stream's flow control (max_outstanding_messages and _bytes, which
//     the client announces) is not honoured: every 50 ms the emulator sends
//     up to 1,000 messages of the backlog, each leased for the stream's ack
//     deadline from when it is sent, read or not. The Go client reads a
//     stream's next response only once the last one's messages got flow
//     control, and extends only what it has read; so a message that waits
//     unread for longer than the lease (15 s with pubsink's settings) is
//     sent again under a new ack ID, and the client hands over both copies
//     when it reads on (100 of 100 unread messages after a 13 s hold with a
//     10 s lease; none of the 100 it had read, 50 of them waiting for flow
//     control). Real Pub/Sub stops at the limit. In a pipeline during a
//     20 s Bigtable stall at 740 msg/s this rewrote about 4,000 of 20,000
//     messages (pubsink_messages_resumed_total); docs/emulator-leases.md
//     has the measurement and the mechanism, pinned by
//     source.TestEmulatorLeasesOfReadAndUnreadMessages.
//   - The emulator enforces none of Pub/Sub's message limits (10 MB of data,
//     100 attributes, 256-byte keys, 1024-byte values). Its only limit is
//     gRPC's 11,000,000-byte request cap, and a Publish over it gets no
//     answer at all: the call hangs until its deadline (60 s by default).
//     The Go publisher refuses messages over 10 MB itself ("item size exceeds
//     bundle byte limit"), so only raw Publish calls see this.
//   - Subscriptions keep their backlog and leases for the emulator's life.
//     Tests use fresh topic and subscription names so one test's leftovers
//     (or, without the agent, its dead streams) cannot slow another. A
//     subscriber that disconnects with a large backlog in flight leaves all
//     of it to be redelivered first: after 20,000 messages were outstanding,
//     a new message took about 11 s to arrive at 1.8k msg/s. An earlier
//     observation that a client with unlimited flow control leaves a dead
//     consumer behind did not reproduce with the agent (unlimited or default
//     flow control; cancelled Receive, immediate shutdown or closed
//     connection; 50 or 20,000 messages outstanding); it looks like the
//     defect above.
//   - cbtemulator rejects a cell timestamp that is not a whole millisecond,
//     as real Bigtable does, but with code Unknown ("invalid timestamp N")
//     instead of InvalidArgument, so code that classifies errors sees a
//     transient error where production sees a permanent one. The Go client's
//     Mutation.Set truncates timestamps to milliseconds itself, so only raw
//     MutateRow/MutateRows requests reach this.
package emulator
