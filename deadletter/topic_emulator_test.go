package deadletter_test

import (
	"context"
	"testing"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// TestTopicHoldsCopiesOnTheEmulator runs holdsCopies against the Pub/Sub
// emulator, which, like Pub/Sub and unlike pstest, discards what is
// published to a topic without subscription: there, a copy confirmed while
// the subscription was gone is lost, and the new subscription would not
// hold it.
func TestTopicHoldsCopiesOnTheEmulator(t *testing.T) {
	e := emulator.RequirePubSub(t)
	const project = "deadletter"
	ps, err := e.Client(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	holdsCopies(t, ps, &config.Config{Project: project})
}
