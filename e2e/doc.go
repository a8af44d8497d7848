// Package e2e holds pubsink's end-to-end tests: the real Pub/Sub emulator
// and cbtemulator, the built pubsink binary as a child process (killed,
// stopped and restarted mid-stream), and in-process runs with injected
// faults. They need the emulators; with CI=true a missing emulator fails
// the run instead of skipping it.
package e2e
