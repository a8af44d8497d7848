package source

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// TestPullerDrainsTheEmulator: on the real Pub/Sub emulator, a few
// thousand messages are each delivered and acked: once the Puller stopped
// and the ack deadline (10 s) has passed, a Pull finds none of them again,
// as it would every message whose ack was lost. No pull failed meanwhile.
func TestPullerDrainsTheEmulator(t *testing.T) {
	e := emulator.RequirePubSub(t)
	ctx := context.Background()
	client, err := e.Client(ctx, "puller")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	topic, sub := "projects/puller/topics/events", "projects/puller/subscriptions/events-tracking"
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	pub := client.Publisher(topic)
	results := make([]*pubsub.PublishResult, n)
	for i := range results {
		results[i] = pub.Publish(ctx, &pubsub.Message{Data: fmt.Appendf(nil, "%d", i), Attributes: map[string]string{"i": fmt.Sprint(i)}})
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pub.Stop()

	var errs errorCounts
	p := NewPuller(client, zap.NewNop(), sub, PullerConfig{Loops: 3, OnError: errs.on})
	info, err := p.Check(ctx)
	if err != nil || info.Topic != topic || info.AckDeadline != 10*time.Second {
		t.Fatalf("Check = %+v, %v; want the topic and the 10 s ack deadline", info, err)
	}
	var seen seenSet
	start := time.Now()
	r := runPuller(p, func(_ context.Context, m *Message) bool {
		if string(m.Data) != m.Attributes["i"] {
			t.Errorf("message %s: data %q, attribute %q", m.ID, m.Data, m.Attributes["i"])
		}
		seen.add(m.ID)
		return true
	})
	waitFor(t, "every message delivered", 60*time.Second, func() bool { return seen.distinct() == n })
	took := time.Since(start)
	r.stop(t, 10*time.Second)
	if st := p.State(); !st.Broke.IsZero() || errs.get("Pull")+errs.get("Acknowledge") != 0 {
		t.Errorf("state %+v, %d failed pulls, %d failed acks; want none", st, errs.get("Pull"), errs.get("Acknowledge"))
	}

	// An unacked message comes back once its ack deadline passed.
	time.Sleep(info.AckDeadline + time.Second)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := client.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000})
	if err != nil && pctx.Err() == nil {
		t.Fatal(err)
	}
	if got := len(resp.GetReceivedMessages()); got != 0 {
		t.Fatalf("%d messages came back after the ack deadline: their acks were lost", got)
	}
	redelivered := 0
	seen.mu.Lock()
	for _, c := range seen.n {
		redelivered += c - 1
	}
	seen.mu.Unlock()
	t.Logf("%d messages in %v (%.0f/s), %d redelivered", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), redelivered)
}
