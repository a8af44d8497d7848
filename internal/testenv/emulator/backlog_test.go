package emulator

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestEmulatorReleasesDelayedRedeliveries proves the agent's second fix
// (javaagent/.../BacklogFix.java). On a subscription with a retry policy,
// two messages are delivered three times: nacked after the first delivery,
// left to expire after the second (a lease of 1 s, with pulls while it is
// expired), and left to expire after the third. Each must come back after
// its lease and backoff. Without the fix the emulator queues the expired
// second deliveries twice, fails on the second release, and from then on
// releases no delayed message of the subscription: the third deliveries
// never come back (measured: not within 10 minutes).
func TestEmulatorReleasesDelayedRedeliveries(t *testing.T) {
	p := RequirePubSub(t)
	ctx := context.Background()
	c, err := p.Client(ctx, "backlog")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic, sub := "projects/backlog/topics/events", "projects/backlog/subscriptions/events"
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, AckDeadlineSeconds: 10,
		RetryPolicy: &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(time.Second), MaximumBackoff: durationpb.New(5 * time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	publish(t, c, topic, "backlog", 2)

	// pull returns the ack IDs of what one Pull delivers within a second.
	pull := func() []string {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := c.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 10})
		if err != nil {
			return nil // the deadline: nothing to deliver
		}
		var ids []string
		for _, m := range r.ReceivedMessages {
			ids = append(ids, m.AckId)
		}
		return ids
	}
	modack := func(ids []string, seconds int32) {
		t.Helper()
		if err := c.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: ids, AckDeadlineSeconds: seconds}); err != nil {
			t.Fatal(err)
		}
	}
	// pullAll pulls until n messages came, or within.
	pullAll := func(n int, within time.Duration) []string {
		var ids []string
		for deadline := time.Now().Add(within); len(ids) < n && time.Now().Before(deadline); {
			ids = append(ids, pull()...)
		}
		return ids
	}

	first := pullAll(2, 10*time.Second)
	if len(first) != 2 {
		t.Fatalf("first delivery: %d of 2 messages", len(first))
	}
	modack(first, 0)
	second := pullAll(2, 10*time.Second)
	if len(second) != 2 {
		t.Fatalf("second delivery (after a nack): %d of 2 messages", len(second))
	}
	modack(second, 1)
	time.Sleep(1500 * time.Millisecond)
	third := pullAll(2, 20*time.Second) // pulls while the second deliveries are expired
	if len(third) != 2 {
		t.Fatalf("third delivery (after the lease of the second expired): %d of 2 messages", len(third))
	}
	// The third deliveries' leases (10 s) expire, then their backoff: they
	// must come back.
	start := time.Now()
	fourth := pullAll(2, 40*time.Second)
	t.Logf("fourth delivery: %d of 2 messages, %v after the third", len(fourth), time.Since(start).Round(100*time.Millisecond))
	if len(fourth) != 2 {
		t.Errorf("%d of 2 messages came back within 40 s after the lease of their third delivery expired: the emulator stopped releasing delayed redeliveries", len(fourth))
	}
	if err := c.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: fourth}); err != nil && len(fourth) > 0 {
		t.Fatal(err)
	}

	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !withoutAgent && !strings.Contains(string(log), "pubsink-agent: patched MessageBacklog") {
		t.Errorf("emulator log does not show the agent patching MessageBacklog")
	}
}
