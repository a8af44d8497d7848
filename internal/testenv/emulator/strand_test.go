package emulator

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

var flagWithoutAgent = flag.Bool("without-agent", false,
	"start the Pub/Sub emulator without the javaagent fix, to measure the defect: "+
		"TestStreamingPullCancelDoesNotStrandMessages then waits up to 150 s and reports instead of asserting")

// TestStreamingPullCancelDoesNotStrandMessages proves the javaagent fix. A
// subscriber's StreamingPull stream ends uncleanly while it holds messages;
// then 200 new messages must all reach a fresh subscriber within 10 s.
// Without the fix the emulator fails with NoSuchMethodError as the stream
// ends, keeps the dead stream as a consumer, and sends it about half of the
// new messages, which come back only when their lease expires (60 s or
// more). Run with -args -without-agent to see that.
func TestStreamingPullCancelDoesNotStrandMessages(t *testing.T) {
	if *flagWithoutAgent {
		withoutAgent = true
		t.Cleanup(func() { withoutAgent = false })
	}
	p := RequirePubSub(t)
	ctx := context.Background()
	const project = "strand"
	c, err := p.Client(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for i, tc := range []struct {
		name string
		// end ends the Receive of a subscriber on client owner while its
		// callbacks hold messages.
		end func(cancel context.CancelFunc, owner *pubsub.Client)
	}{
		{"a Receive cancelled while messages are outstanding", func(cancel context.CancelFunc, _ *pubsub.Client) {
			cancel()
		}},
		{"a client connection closed mid-stream", func(cancel context.CancelFunc, owner *pubsub.Client) {
			owner.Close()
			cancel()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Fresh names: a subscription left with a dead stream would
			// spoil the next case.
			topic := fmt.Sprintf("projects/%s/topics/strand-%d", project, i)
			sub := fmt.Sprintf("projects/%s/subscriptions/strand-%d", project, i)
			if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
				Name: sub, Topic: topic, AckDeadlineSeconds: 10,
			}); err != nil {
				t.Fatal(err)
			}
			publish(t, c, topic, "before", 50)
			endStreamWhileHolding(t, p, sub, 5, tc.end)

			publish(t, c, topic, "after", 200)
			wait := 10 * time.Second
			if withoutAgent {
				wait = 150 * time.Second
			}
			arrivals := receivePhase(t, c, sub, "after", 200, wait)
			var within, last = 0, time.Duration(0)
			for _, d := range arrivals {
				if d <= 10*time.Second {
					within++
				}
				last = max(last, d)
			}
			t.Logf("%d/200 received, %d within 10s, last after %v", len(arrivals), within, last.Round(time.Millisecond))
			if !withoutAgent && within != 200 {
				t.Errorf("%d of 200 messages arrived within 10s; the emulator kept the dead stream", within)
			}
		})
	}

	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(log), "NoSuchMethodError")
	t.Logf("emulator log: %d NoSuchMethodError", n)
	if !withoutAgent && n > 0 {
		t.Errorf("emulator log has %d NoSuchMethodError; the javaagent did not take effect", n)
	}
	if !withoutAgent && !strings.Contains(string(log), "pubsink-agent: replaced io.grpc.InternalStatus") {
		t.Errorf("emulator log does not show the agent replacing io.grpc.InternalStatus")
	}
}

// publish publishes n messages with attributes phase and i, and waits for
// them all to be accepted.
func publish(t testing.TB, c *pubsub.Client, topic, phase string, n int) {
	t.Helper()
	ctx := context.Background()
	pub := c.Publisher(topic)
	defer pub.Stop()
	results := make([]*pubsub.PublishResult, n)
	for i := range results {
		results[i] = pub.Publish(ctx, &pubsub.Message{
			Data:       []byte("m"),
			Attributes: map[string]string{"phase": phase, "i": strconv.Itoa(i)},
		})
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// endStreamWhileHolding receives on sub with its own client until callbacks
// hold `hold` messages, then calls end, which must make Receive return. The
// subscriber shuts down at once (ShutdownOptions.Timeout 0): the client
// cancels the stream while its callbacks still hold messages, which then
// nack them.
func endStreamWhileHolding(t *testing.T, p *PubSub, sub string, hold int, end func(context.CancelFunc, *pubsub.Client)) {
	t.Helper()
	ctx := context.Background()
	owner, err := p.Client(ctx, "strand")
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	s := owner.Subscriber(sub)
	s.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{Timeout: 0}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	held := 0
	holding := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Receive(rctx, func(ctx context.Context, m *pubsub.Message) {
			mu.Lock()
			if held++; held == hold {
				close(holding)
			}
			mu.Unlock()
			<-ctx.Done()
			m.Nack()
		})
	}()
	select {
	case <-holding:
	case err := <-done:
		t.Fatalf("Receive returned before holding %d messages: %v", hold, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("callbacks never held %d messages", hold)
	}
	end(cancel, owner)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Receive did not return after the stream was ended")
	}
}

// receivePhase receives on sub with a fresh subscriber, acks everything, and
// returns when each message of phase arrived (by its attribute i, counted
// once), stopping when all want have arrived or after wait.
func receivePhase(t *testing.T, c *pubsub.Client, sub, phase string, want int, wait time.Duration) map[string]time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	arrivals := map[string]time.Duration{}
	err := c.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if m.Attributes["phase"] != phase {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, dup := arrivals[m.Attributes["i"]]; !dup {
			arrivals[m.Attributes["i"]] = time.Since(start)
		}
		if len(arrivals) == want {
			cancel()
		}
	})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return arrivals
}
