package source

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pubsink/pubsink/config"
	fakes "github.com/pubsink/pubsink/internal/fake"
)

const project = "p"

// fake is a pstest server with a topic and a subscription on it.
type fake struct {
	srv    *pstest.Server
	client *pubsub.Client
	topic  string
	sub    string
}

func newFake(t *testing.T) *fake {
	t.Helper()
	b, err := fakes.Start()
	if err != nil {
		t.Fatal(err)
	}
	srv := b.PubSub
	client, err := b.PubSubClient(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{srv: srv, client: client, topic: "projects/p/topics/t", sub: "projects/p/subscriptions/s"}
	t.Cleanup(func() { client.Close(); b.Close() })
	ctx := context.Background()
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: f.topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: f.sub, Topic: f.topic, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fake) source() *Source {
	return New(f.client, zap.NewNop(), f.sub, config.Source{Streams: 2, MaxOutstandingMessages: 100}, 1<<20)
}

func TestCheckNamesTheTopicAndTheRedeliveryBackoff(t *testing.T) {
	f := newFake(t)
	info, err := f.source().Check(context.Background())
	if err != nil || info != (Info{Topic: f.topic, AckDeadline: 10 * time.Second}) {
		t.Fatalf("Check = %+v, %v; want topic %q, no backoff (no retry policy) and the 10 s ack deadline", info, err, f.topic)
	}
	ctx := context.Background()
	for _, c := range []struct {
		policy *pubsubpb.RetryPolicy
		want   time.Duration
	}{
		{&pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(time.Second), MaximumBackoff: durationpb.New(5 * time.Second)}, 5 * time.Second},
		{&pubsubpb.RetryPolicy{}, 600 * time.Second}, // Pub/Sub's default maximum
	} {
		sub := fmt.Sprintf("%s-%d", f.sub, c.want)
		if _, err := f.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: f.topic, RetryPolicy: c.policy}); err != nil {
			t.Fatal(err)
		}
		info, err := New(f.client, zap.NewNop(), sub, config.Source{Streams: 1, MaxOutstandingMessages: 1}, 1<<20).Check(ctx)
		if err != nil || info.RedeliveryBackoff != c.want {
			t.Errorf("retry policy %v: Check = %+v, %v; want a backoff of %v", c.policy, info, err, c.want)
		}
	}
}

func TestCheckExplainsAMissingSubscription(t *testing.T) {
	f := newFake(t)
	s := New(f.client, zap.NewNop(), "projects/p/subscriptions/nope", config.Source{Streams: 1, MaxOutstandingMessages: 1}, 1<<20)
	_, err := s.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "pubsink setup") {
		t.Fatalf("Check = %v; want a 'does not exist … pubsink setup' error", err)
	}
}

func TestHandlerVerdictAcksOrNacks(t *testing.T) {
	f := newFake(t)
	ackID := f.srv.Publish(f.topic, []byte("ack me"), map[string]string{"k": "v"})
	nackID := f.srv.Publish(f.topic, []byte("nack me"), nil)

	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := f.source()
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, context.Background(), func(_ context.Context, m *Message) bool {
			mu.Lock()
			defer mu.Unlock()
			seen[m.ID]++
			if m.ID == ackID && (string(m.Data) != "ack me" || m.Attributes["k"] != "v" || m.PublishTime.IsZero()) {
				t.Errorf("envelope %+v does not carry the message", m)
			}
			// Nack the second message twice, then ack it.
			return m.ID == ackID || seen[m.ID] > 2
		})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := seen[nackID]
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nacked message delivered %d times, want 3", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !s.Receiving() {
		t.Error("Receiving() is false while Run pulls")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if s.Receiving() {
		t.Error("Receiving() is true after Run returned")
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[ackID] != 1 {
		t.Errorf("acked message delivered %d times, want 1", seen[ackID])
	}
	for _, id := range []string{ackID, nackID} {
		if m := f.srv.Message(id); m == nil || m.Acks != 1 {
			t.Errorf("message %s: fake server recorded %+v, want one ack", id, m)
		}
	}
}

func TestStoppingWaitsForHandlersWithTheWorkContext(t *testing.T) {
	f := newFake(t)
	id := f.srv.Publish(f.topic, []byte("slow"), nil)
	receiveCtx, stopReceiving := context.WithCancel(context.Background())
	workCtx, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()
	started := make(chan struct{})
	var workAliveAfterStop atomic.Bool
	s := f.source()
	done := make(chan error, 1)
	go func() {
		done <- s.Run(receiveCtx, workCtx, func(ctx context.Context, m *Message) bool {
			close(started)
			<-receiveCtx.Done()
			time.Sleep(100 * time.Millisecond) // still working after the stop
			workAliveAfterStop.Store(ctx.Err() == nil)
			return true
		})
	}()
	<-started
	stopReceiving()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the handler finished")
	}
	if !workAliveAfterStop.Load() {
		t.Error("the handler's context ended with receiving; it must last until the work context ends")
	}
	if m := f.srv.Message(id); m == nil || m.Acks != 1 {
		t.Errorf("the message finished during the stop was not acked: %+v", m)
	}
}

func TestFlowControlIsSplitAcrossStreams(t *testing.T) {
	f := newFake(t)
	s := New(f.client, zap.NewNop(), f.sub, config.Source{Streams: 4, MaxOutstandingMessages: 1000}, 64<<20)
	if got := s.settings.MaxOutstandingMessages * s.settings.NumGoroutines; got != 1000 {
		t.Errorf("messages across streams = %d, want 1000", got)
	}
	if got := s.settings.MaxOutstandingBytes * s.settings.NumGoroutines; got != 64<<20 {
		t.Errorf("bytes across streams = %d, want 64 MiB", got)
	}
	if !s.settings.EnablePerStreamFlowControl || s.settings.MaxDurationPerAckExtension != LeaseExtension {
		t.Errorf("settings %+v", s.settings)
	}
}

func TestDefaultMaxOutstandingBytes(t *testing.T) {
	cases := []struct {
		limit     int64
		pipelines int
		want      int64
	}{
		{512 << 20, 1, 128 << 20}, // Cloud Run 512 MiB: a quarter
		{512 << 20, 2, 64 << 20},  // shared by two pipelines
		{16 << 20, 1, 8 << 20},    // tiny: the floor
		{64 << 30, 1, 1 << 30},    // huge: the client's own 1 GB ceiling
		{0, 1, unknownLimitBytes}, // no limit known
		{512 << 20, 0, 128 << 20}, // nonsense pipeline count
	}
	for _, c := range cases {
		if got := DefaultMaxOutstandingBytes(c.limit, c.pipelines); got != c.want {
			t.Errorf("DefaultMaxOutstandingBytes(%d, %d) = %d, want %d", c.limit, c.pipelines, got, c.want)
		}
	}
}
