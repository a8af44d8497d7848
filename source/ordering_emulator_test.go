package source

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// These tests run on the real Pub/Sub emulator and pin what it does with
// message ordering (source.ordering), as a Source receives it:
// docs/emulator-ordering.md names the test of each fact, so that a changed
// emulator fails a test instead of making the page wrong. A message's data
// is its tag, KEY-N: the N-th message published with ordering key KEY.

// orderingEmulator is a Pub/Sub emulator with a client in a project named
// after the test.
type orderingEmulator struct {
	project string
	client  *pubsub.Client
}

func newOrderingEmulator(t *testing.T) *orderingEmulator {
	t.Helper()
	e := emulator.RequirePubSub(t)
	project := "ordering-" + strings.ToLower(strings.TrimPrefix(t.Name(), "TestEmulatorOrdering"))
	client, err := e.Client(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return &orderingEmulator{project: project, client: client}
}

// topic creates the topic id and a subscription on it for each of subs,
// named after it, ordered as it says; it returns the topic and the
// subscriptions' full names. Each subscription has pubsink setup's retry
// policy and a lease longer than any test, so that nothing comes back by
// expiry unless a test asks for it (ackDeadline, 0: 60 s).
func (oe *orderingEmulator) topic(t *testing.T, id string, ackDeadline int32, subs map[string]bool) (string, map[string]string) {
	t.Helper()
	ctx := context.Background()
	topic := "projects/" + oe.project + "/topics/" + id
	if _, err := oe.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if ackDeadline == 0 {
		ackDeadline = 60
	}
	names := map[string]string{}
	for sub, ordered := range subs {
		name := "projects/" + oe.project + "/subscriptions/" + sub
		got, err := oe.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
			Name: name, Topic: topic, AckDeadlineSeconds: ackDeadline, EnableMessageOrdering: ordered,
			RetryPolicy: &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(time.Second), MaximumBackoff: durationpb.New(5 * time.Second)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.EnableMessageOrdering != ordered {
			t.Fatalf("CreateSubscription(%s, ordering %v) answered ordering %v", sub, ordered, got.EnableMessageOrdering)
		}
		names[sub] = name
	}
	return topic, names
}

// publish publishes n messages with ordering key key, tagged key-0 to
// key-(n-1), in requests of at most three (Pub/Sub wants one key per
// request); key "" publishes them without one, tagged none-N.
func (oe *orderingEmulator) publish(t *testing.T, topic, key string, n int) {
	t.Helper()
	tag := key
	if tag == "" {
		tag = "none"
	}
	for i := 0; i < n; i += 3 {
		req := &pubsubpb.PublishRequest{Topic: topic}
		for j := i; j < min(i+3, n); j++ {
			req.Messages = append(req.Messages, &pubsubpb.PubsubMessage{Data: []byte(fmt.Sprintf("%s-%d", tag, j)), OrderingKey: key})
		}
		if _, err := oe.client.TopicAdminClient.Publish(context.Background(), req); err != nil {
			t.Fatalf("publish %s: %v", tag, err)
		}
	}
}

// tags returns want's tags key-from to key-(to-1).
func tags(key string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", key, i))
	}
	return out
}

// handoffs records what a Source hands its handler: the tags in the order
// the handler got them, per ordering key, and the most handlers of one key
// that ran at once.
type handoffs struct {
	mu      sync.Mutex
	seq     map[string][]string
	running map[string]int
	most    map[string]int
}

func newHandoffs() *handoffs {
	return &handoffs{seq: map[string][]string{}, running: map[string]int{}, most: map[string]int{}}
}

// handler records each message, holds it for hold (so that handlers of one
// key would overlap if the client let them), and acks it unless nack says
// otherwise (given the tag and how often it was handed over already).
func (h *handoffs) handler(hold time.Duration, nack func(tag string, seen int) bool) Handler {
	return func(_ context.Context, m *Message) bool {
		tag := string(m.Data)
		h.mu.Lock()
		seen := 0
		for _, s := range h.seq[m.OrderingKey] {
			if s == tag {
				seen++
			}
		}
		h.seq[m.OrderingKey] = append(h.seq[m.OrderingKey], tag)
		h.running[m.OrderingKey]++
		h.most[m.OrderingKey] = max(h.most[m.OrderingKey], h.running[m.OrderingKey])
		h.mu.Unlock()
		time.Sleep(hold)
		h.mu.Lock()
		h.running[m.OrderingKey]--
		h.mu.Unlock()
		return nack == nil || !nack(tag, seen)
	}
}

func (h *handoffs) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.seq {
		n += len(s)
	}
	return n
}

func (h *handoffs) of(key string) ([]string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seq[key]), h.most[key]
}

// receiveAll runs a Source of sub (streams streams) with h's handler until
// it has handed over n messages and then nothing for quiet, and stops it.
func (oe *orderingEmulator) receiveAll(t *testing.T, sub string, streams int, h *handoffs, handler Handler, n int, quiet time.Duration) {
	t.Helper()
	src := New(oe.client, zap.NewNop(), sub, config.Source{Streams: streams, MaxOutstandingMessages: 100}, 1<<20)
	r := runSource(src, context.Background(), handler)
	waitFor(t, fmt.Sprintf("%d messages handed over from %s", n, sub), 30*time.Second, func() bool { return h.count() >= n })
	for last := h.count(); ; {
		time.Sleep(quiet)
		if now := h.count(); now == last {
			break
		} else {
			last = now
		}
	}
	r.stop(t, 10*time.Second)
}

// TestEmulatorOrderingSubscriptionFlag: the emulator keeps a
// subscription's enable_message_ordering (CreateSubscription's answer and
// GetSubscription), and every StreamingPull response carries it in
// subscription_properties.message_ordering_enabled, where the Go client
// takes it from.
func TestEmulatorOrderingSubscriptionFlag(t *testing.T) {
	oe := newOrderingEmulator(t)
	ctx := context.Background()
	topic, subs := oe.topic(t, "flag", 0, map[string]bool{"flag-ordered": true, "flag-unordered": false})
	oe.publish(t, topic, "k", 3)
	for id, ordered := range map[string]bool{"flag-ordered": true, "flag-unordered": false} {
		sub := subs[id]
		got, err := oe.client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
		if err != nil || got.EnableMessageOrdering != ordered {
			t.Errorf("GetSubscription(%s) = ordering %v, %v; want %v", id, got.GetEnableMessageOrdering(), err, ordered)
		}
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		stream, err := oe.client.SubscriptionAdminClient.StreamingPull(sctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := stream.Send(&pubsubpb.StreamingPullRequest{Subscription: sub, StreamAckDeadlineSeconds: 60, MaxOutstandingMessages: 100, ClientId: "flag"}); err != nil {
			cancel()
			t.Fatal(err)
		}
		n := 0
		for n < 3 {
			res, err := stream.Recv()
			if err != nil {
				cancel()
				t.Fatalf("%s: StreamingPull: %v", id, err)
			}
			n += len(res.ReceivedMessages)
			if res.GetSubscriptionProperties().GetMessageOrderingEnabled() != ordered {
				t.Errorf("%s: a StreamingPull response with %d messages has message_ordering_enabled %v; want %v",
					id, len(res.ReceivedMessages), res.GetSubscriptionProperties().GetMessageOrderingEnabled(), ordered)
			}
		}
		cancel()
	}
}

// TestEmulatorOrderingSourceHandsAKeyOverOneAtATime: on an ordered
// subscription a Source (two streams) hands the messages of each ordering
// key to its handler one at a time, each after the previous one's handler
// returned, in publish order; messages without a key, and the keys between
// them, run concurrently. On a subscription without ordering, the same
// messages of one key are handed over concurrently.
func TestEmulatorOrderingSourceHandsAKeyOverOneAtATime(t *testing.T) {
	oe := newOrderingEmulator(t)
	topic, subs := oe.topic(t, "handover", 0, map[string]bool{"handover-ordered": true, "handover-unordered": false})
	const perKey = 20
	for _, key := range []string{"a", "b"} {
		oe.publish(t, topic, key, perKey)
	}
	oe.publish(t, topic, "", 5)

	ordered := newHandoffs()
	oe.receiveAll(t, subs["handover-ordered"], 2, ordered, ordered.handler(10*time.Millisecond, nil), 2*perKey+5, time.Second)
	for _, key := range []string{"a", "b"} {
		seq, most := ordered.of(key)
		if !slices.Equal(seq, tags(key, 0, perKey)) {
			t.Errorf("ordered: key %s handed over as %v; want publish order, each once", key, seq)
		}
		if most != 1 {
			t.Errorf("ordered: up to %d messages of key %s were in the handler at once; want 1", most, key)
		}
	}
	if _, most := ordered.of(""); most < 2 {
		t.Logf("ordered: the messages without a key never overlapped (%d at most); nothing requires them to", most)
	}

	unordered := newHandoffs()
	oe.receiveAll(t, subs["handover-unordered"], 2, unordered, unordered.handler(10*time.Millisecond, nil), 2*perKey+5, time.Second)
	for _, key := range []string{"a", "b"} {
		if _, most := unordered.of(key); most < 2 {
			t.Errorf("unordered: key %s was handed over one at a time (%d at most); want concurrently", key, most)
		}
	}
}

// TestEmulatorOrderingNackRedeliversOnlyTheNackedMessage: on an ordered
// subscription, a Source's nack of a key's message does not stop the
// key's later messages, which the client already holds: they are handed
// over (one at a time, in order) and acked. The emulator then redelivers
// the nacked message alone, after them: the key's later messages do not
// come again. (Pub/Sub documents that it redelivers a key's later
// messages, acked ones included, after the redelivered one.)
func TestEmulatorOrderingNackRedeliversOnlyTheNackedMessage(t *testing.T) {
	oe := newOrderingEmulator(t)
	topic, subs := oe.topic(t, "nack", 0, map[string]bool{"nack-ordered": true})
	oe.publish(t, topic, "k", 8)
	h := newHandoffs()
	nackOnce := func(tag string, seen int) bool { return tag == "k-3" && seen == 0 }
	oe.receiveAll(t, subs["nack-ordered"], 1, h, h.handler(5*time.Millisecond, nackOnce), 9, 2*time.Second)
	seq, most := h.of("k")
	if want := append(tags("k", 0, 8), "k-3"); !slices.Equal(seq, want) {
		t.Errorf("handed over %v; want %v (the nacked message alone, after the key's later ones)", seq, want)
	}
	if most != 1 {
		t.Errorf("up to %d messages of the key were in the handler at once; want 1", most)
	}
}

// TestEmulatorOrderingExpiryRedeliversTheKeyFromTheFirstUnacked: on an
// ordered subscription, when the lease of a key's oldest unacked message
// runs out, the emulator sends that message and every later message of the
// key it had sent, in publish order, those acked meanwhile included (as
// Pub/Sub documents for any redelivery). A raw StreamingPull that extends
// no lease, since a Source's client extends them.
func TestEmulatorOrderingExpiryRedeliversTheKeyFromTheFirstUnacked(t *testing.T) {
	oe := newOrderingEmulator(t)
	topic, subs := oe.topic(t, "expiry", 10, map[string]bool{"expiry-ordered": true})
	oe.publish(t, topic, "k", 8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := oe.client.SubscriptionAdminClient.StreamingPull(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pubsubpb.StreamingPullRequest{Subscription: subs["expiry-ordered"], StreamAckDeadlineSeconds: 10, MaxOutstandingMessages: 100, ClientId: "expiry"}); err != nil {
		t.Fatal(err)
	}
	recv := func(n int) []*pubsubpb.ReceivedMessage {
		var got []*pubsubpb.ReceivedMessage
		for len(got) < n {
			res, err := stream.Recv()
			if err != nil {
				t.Fatalf("StreamingPull after %d of %d messages: %v", len(got), n, err)
			}
			got = append(got, res.ReceivedMessages...)
		}
		return got
	}
	data := func(ms []*pubsubpb.ReceivedMessage) []string {
		var out []string
		for _, m := range ms {
			out = append(out, string(m.Message.Data))
		}
		return out
	}
	first := recv(8)
	if got := data(first); !slices.Equal(got, tags("k", 0, 8)) {
		t.Fatalf("first delivery %v; want publish order", got)
	}
	// Ack all but k-3, k-6 and k-7: the acks of k-4 and k-5 wait behind k-3.
	var acks []string
	for _, i := range []int{0, 1, 2, 4, 5} {
		acks = append(acks, first[i].AckId)
	}
	if err := stream.Send(&pubsubpb.StreamingPullRequest{AckIds: acks}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	again := recv(5)
	if got := data(again); !slices.Equal(got, tags("k", 3, 8)) {
		t.Errorf("after the lease ran out: %v; want %v (from the first unacked, the acked k-4 and k-5 included)", got, tags("k", 3, 8))
	}
	if d := time.Since(start); d < 5*time.Second {
		t.Errorf("redelivered %v after the acks; want about the 10 s lease", d)
	}
}
