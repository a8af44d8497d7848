package emulator

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// TestEmulatorKeepsAKeyOnItsEndedStreamUntilItsHeldMessagesReturn proves
// the agent's third fix (javaagent/.../OrderingFix.java). On an ordered
// subscription a stream receives a key's k-0 … k-3 and acks k-0, and ends
// (as a killed process's does) holding k-1 … k-3; k-4 and k-5 are
// published after it ended, and a second stream opens at once. It must get
// the key from its first unacked message, in publish order: k-1 … k-5,
// once the held messages' lease (10 s) has run out. Without the fix the
// emulator drops the key's stream as the first ends and the second gets
// k-4 and k-5 at once, then k-1 … k-3 after the lease (measured: every
// run).
func TestEmulatorKeepsAKeyOnItsEndedStreamUntilItsHeldMessagesReturn(t *testing.T) {
	p := RequirePubSub(t)
	ctx := context.Background()
	c, err := p.Client(ctx, "ordering")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic, sub := "projects/ordering/topics/events", "projects/ordering/subscriptions/events"
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, AckDeadlineSeconds: 10, EnableMessageOrdering: true,
	}); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		t.Helper()
		var msgs []*pubsubpb.PubsubMessage
		for i := from; i < to; i++ {
			msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte("k-" + strconv.Itoa(i)), OrderingKey: "k"})
		}
		if _, err := c.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{Topic: topic, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	// open starts a raw StreamingPull (no lease extension: a killed
	// process extends nothing) and returns a receive of n messages.
	open := func(sctx context.Context, id string) func(n int) []*pubsubpb.ReceivedMessage {
		t.Helper()
		stream, err := c.SubscriptionAdminClient.StreamingPull(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&pubsubpb.StreamingPullRequest{Subscription: sub, StreamAckDeadlineSeconds: 10, MaxOutstandingMessages: 100, ClientId: id}); err != nil {
			t.Fatal(err)
		}
		return func(n int) []*pubsubpb.ReceivedMessage {
			t.Helper()
			var got []*pubsubpb.ReceivedMessage
			for len(got) < n {
				res, err := stream.Recv()
				if err != nil {
					t.Fatalf("%s: StreamingPull after %d of %d messages: %v", id, len(got), n, err)
				}
				got = append(got, res.ReceivedMessages...)
				if n == 1 {
					break
				}
			}
			return got
		}
	}
	data := func(ms []*pubsubpb.ReceivedMessage) []string {
		var out []string
		for _, m := range ms {
			out = append(out, string(m.Message.Data))
		}
		return out
	}

	publish(0, 4)
	actx, endA := context.WithCancel(ctx)
	first := open(actx, "a")(4)
	if got, want := data(first), []string{"k-0", "k-1", "k-2", "k-3"}; !slices.Equal(got, want) {
		t.Fatalf("first stream got %v, want %v", got, want)
	}
	if err := c.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: []string{first[0].AckId}}); err != nil {
		t.Fatal(err)
	}
	endA()
	time.Sleep(200 * time.Millisecond) // the emulator sees the stream end
	publish(4, 6)
	bctx, endB := context.WithTimeout(ctx, 60*time.Second)
	defer endB()
	start := time.Now()
	recvB := open(bctx, "b")
	second := recvB(1)
	firstAfter := time.Since(start)
	for len(second) < 5 {
		second = append(second, recvB(1)...)
	}
	t.Logf("second stream: %v, the first after %v", data(second), firstAfter.Round(100*time.Millisecond))
	if got, want := data(second), []string{"k-1", "k-2", "k-3", "k-4", "k-5"}; !slices.Equal(got, want) {
		t.Errorf("second stream got %v, want %v: the key's messages held by the ended stream first, in publish order", got, want)
	}

	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !withoutAgent && !strings.Contains(string(log), "pubsink-agent: patched OrderedMessageBacklog") {
		t.Errorf("emulator log does not show the agent patching OrderedMessageBacklog")
	}
}
