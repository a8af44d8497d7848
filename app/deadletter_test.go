package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
)

// dlYAML is yaml with a dead-letter topic, which setup creates with its
// replay subscription orders-dlq-replay.
const dlYAML = yaml + "    dead_letter: {topic: orders-dlq}\n"

// openFails opens cfg after setup ran for setupYAML and undo undid part of
// it, and returns Open's error, which must be a start-up failure (exit 1),
// not a configuration error (exit 2): the file is valid, the project is not
// ready for it.
func openFails(t *testing.T, setupYAML, runYAML string, undo func(*fakes)) error {
	t.Helper()
	f := newFakes(t)
	ctx := context.Background()
	if err := Setup(ctx, parse(t, setupYAML), f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if undo != nil {
		undo(f)
	}
	opts := f.opts
	opts.HTTPAddr = "-"
	a, err := Open(ctx, zap.NewNop(), parse(t, runYAML), opts)
	if err == nil {
		stopped, cancel := context.WithCancel(ctx)
		cancel()
		a.Run(stopped)
		t.Fatal("Open succeeded")
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		t.Errorf("Open = %v, a configuration error; want a start-up failure, as for a missing subscription", err)
	}
	return err
}

func wantAll(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("Open = %v; want it to say %q", err, p)
		}
	}
}

// TestOpenRefusesADeadLetterTopicWithoutSubscription: Pub/Sub discards what
// is published to a topic nobody subscribes to, so every dead-lettered
// message would be acked and lost.
func TestOpenRefusesADeadLetterTopicWithoutSubscription(t *testing.T) {
	err := openFails(t, dlYAML, dlYAML, func(f *fakes) {
		if err := f.ps.SubscriptionAdminClient.DeleteSubscription(context.Background(), &pubsubpb.DeleteSubscriptionRequest{Subscription: "projects/p/subscriptions/orders-dlq-replay"}); err != nil {
			t.Fatal(err)
		}
	})
	wantAll(t, err, "pipeline orders", "dead_letter.topic", "projects/p/topics/orders-dlq", "no subscription", "pubsink setup")
}

// TestOpenRefusesTheSubscriptionsOwnTopicAsDeadLetter: without
// source.topic, validation cannot see that dead_letter.topic is the topic
// the pipeline reads; run can, once it checked the subscription, and each
// poison message would otherwise come back to the pipeline for ever.
func TestOpenRefusesTheSubscriptionsOwnTopicAsDeadLetter(t *testing.T) {
	loop := strings.Replace(yaml, "topic: orders, ", "", 1) + "    dead_letter: {topic: orders}\n"
	err := openFails(t, yaml, loop, nil)
	wantAll(t, err, "pipeline orders", "dead_letter.topic", "projects/p/topics/orders", "orders-sub")
}
