// Command emulators starts the local Pub/Sub and Bigtable emulators the way
// pubsink's tests run them, for a developer or a user trying pubsink
// locally:
//
//	go run ./tools/emulators                    # free ports
//	go run ./tools/emulators --pubsub-port 8085 --bigtable-port 8086
//	eval "$(go run ./tools/emulators --print-only --pubsub-port 8085 --bigtable-port 8086)"
//
// The Pub/Sub emulator runs with the Java agent that fixes its three defects
// (README, "The Pub/Sub emulator fixes"); the stock one started by `gcloud
// beta emulators pubsub start` loses the delayed redeliveries of a
// subscription with a retry policy, which `pubsink setup` gives every main
// subscription. Starting, waiting until each answers a gRPC call, the agent
// (compiled with javac into the user cache on first use) and the stop by
// process group are internal/testenv/emulator's, the same code the tests
// use.
//
// # Output
//
// Once both answer, stdout gets exactly two lines, written at once, for a
// shell to evaluate or a person to paste:
//
//	export PUBSUB_EMULATOR_HOST=127.0.0.1:P BIGTABLE_EMULATOR_HOST=127.0.0.1:B
//	export CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=http://127.0.0.1:P/ CLOUDSDK_AUTH_DISABLE_CREDENTIALS=true
//
// The first points pubsink (and every Google client library) at the
// emulators; the second makes `gcloud pubsub ...` talk to the emulator
// without credentials, so a test message needs no client of its own (for a
// topic with an Avro schema and JSON encoding, the message is the record's
// Avro JSON). Everything else (the pids, the logs, how to stop) goes to
// stderr.
//
// # Flags
//
//	--host H            address both listen on (default 127.0.0.1; 0.0.0.0: every
//	                    interface, the lines then name 127.0.0.1)
//	--pubsub-port P     the Pub/Sub emulator's port (default 0: a free one)
//	--bigtable-port B   the Bigtable emulator's port (default 0: a free one)
//	--log-dir D         keep the emulators' logs in D (default: temporary files,
//	                    removed at the stop)
//	--print-only        print the lines for --host and both ports (both needed) and
//	                    exit 0; start nothing
//
// # Exit codes
//
// 0: stopped by SIGINT or SIGTERM (also during start-up), both emulators
// ended (each is the leader of its process group; the group gets SIGTERM,
// SIGKILL after 5 s); --help; --print-only. 1: an emulator or the JDK is
// missing (the error names the paths searched and the package or gcloud
// component to install), a given port is held by another process, start-up
// failed or timed out (2 minutes; the error ends with the emulator's log),
// or an emulator exited on its own while running (the other is stopped).
// 2: bad flags.
package main
