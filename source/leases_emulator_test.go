package source

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// TestEmulatorLeasesOfReadAndUnreadMessages pins what docs/emulator-leases.md
// says of a Source whose handlers hold messages for longer than a lease (a
// Bigtable stall): the client extends the lease of every message it has
// read from its stream, those in the handlers and those of the same
// response waiting for flow control, so none of them is delivered again;
// the emulator, which ignores flow control, leases a message when it sends
// it, and a message that waits unread in the stream (the client reads the
// next response only once flow control has room) loses its lease and is
// sent again. On Pub/Sub, which stops sending at the stream's flow control,
// no message waits unread like that.
//
// The lease is 10 s here instead of LeaseExtension (15 s), the shortest
// stream ack deadline the emulator (and Pub/Sub) takes, so that the hold
// is shorter; everything else is New's.
func TestEmulatorLeasesOfReadAndUnreadMessages(t *testing.T) {
	const lease = 10 * time.Second
	const limit, batch = 50, 100 // each batch is one response of twice the flow control
	e := emulator.RequirePubSub(t)
	ctx := context.Background()
	client, err := e.Client(ctx, "leases")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	topic, sub := "projects/leases/topics/stall", "projects/leases/subscriptions/stall"
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	publish := func(tag string) {
		t.Helper()
		req := &pubsubpb.PublishRequest{Topic: topic}
		for i := range batch {
			req.Messages = append(req.Messages, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "%s-%d", tag, i)})
		}
		if _, err := client.TopicAdminClient.Publish(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	src := New(client, zap.NewNop(), sub, config.Source{Streams: 1, MaxOutstandingMessages: limit}, 1<<20)
	src.settings.MaxDurationPerAckExtension = lease // also the stream's ack deadline: the lease of what the emulator sends
	var mu sync.Mutex
	handed := map[string]int{}
	release := make(chan struct{})
	r := runSource(src, ctx, func(_ context.Context, m *Message) bool {
		mu.Lock()
		handed[string(m.Data)]++
		mu.Unlock()
		<-release
		return true
	})
	count := func() (messages, deliveries int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range handed {
			deliveries += n
		}
		return len(handed), deliveries
	}
	// read: one response, read at once; half of it goes to the handlers,
	// half waits for flow control in the client. unread: sent while the
	// client waits, so it stays in the stream.
	publish("read")
	waitFor(t, "the handlers full", 10*time.Second, func() bool { n, _ := count(); return n == limit })
	publish("unread")
	const hold = lease + 3*time.Second
	time.Sleep(hold)
	close(release)
	waitFor(t, "every message handed over", 30*time.Second, func() bool { n, _ := count(); return n == 2*batch })
	for last := -1; ; { // until the late copies have come
		time.Sleep(time.Second)
		if _, d := count(); d == last {
			break
		} else {
			last = d
		}
	}
	r.stop(t, 10*time.Second)

	mu.Lock()
	defer mu.Unlock()
	var readAgain, unreadAgain int
	for tag, n := range handed {
		switch {
		case n > 1 && strings.HasPrefix(tag, "read-"):
			readAgain++
		case n > 1:
			unreadAgain++
		}
	}
	t.Logf("held for %v, a lease of %v: %d of %d messages the client had read handed over again, %d of %d it had not read",
		hold, lease, readAgain, batch, unreadAgain, batch)
	if readAgain != 0 {
		t.Errorf("%d messages the client had read were handed over again: their leases were not kept", readAgain)
	}
	if unreadAgain == 0 {
		t.Errorf("no message that waited unread in the stream was handed over again: the emulator no longer leases what it sends before it is read (honours flow control?); update docs/emulator-leases.md")
	}
}
