package emulator_test

import (
	"context"
	"log"
	"os"
	"os/exec"
	"testing"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// A test that needs both emulators, with clients for itself and the
// environment for a child process.
func ExampleRequirePubSub() {
	var t *testing.T // the test's t
	ps := emulator.RequirePubSub(t)
	bt := emulator.RequireBigtable(t)

	ctx := context.Background()
	pubsubClient, err := ps.Client(ctx, "test-project")
	if err != nil {
		t.Fatal(err)
	}
	defer pubsubClient.Close()
	btClient, btAdmin, err := bt.Clients(ctx, "test-project", "test-instance")
	if err != nil {
		t.Fatal(err)
	}
	defer btClient.Close()
	defer btAdmin.Close()

	cmd := exec.Command("pubsink", "run", "--config", "testdata/config.yaml")
	cmd.Env = append(append(os.Environ(), ps.Env()...), bt.Env()...)
}

// Outside tests (the chaos runner, the benchmark), start and stop the
// emulators directly and keep their logs.
func ExampleStartPubSub() {
	ctx := context.Background()
	ps, err := emulator.StartPubSub(ctx, emulator.Options{LogDir: "chaos-logs"})
	if err != nil {
		log.Fatal(err)
	}
	defer ps.Stop()
	log.Printf("Pub/Sub emulator on %s, log in %s", ps.Host, ps.LogPath())
}
