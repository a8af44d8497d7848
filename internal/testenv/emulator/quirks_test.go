package emulator

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// These tests pin the emulator behaviours that doc.go describes, so the
// documentation fails loudly if an emulator upgrade changes them.

func createTopicAndSub(t testing.TB, c *pubsub.Client, name string, retry *pubsubpb.RetryPolicy) (topic, sub string) {
	t.Helper()
	ctx := context.Background()
	topic = fmt.Sprintf("projects/%s/topics/%s", c.Project(), name)
	sub = fmt.Sprintf("projects/%s/subscriptions/%s", c.Project(), name)
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, AckDeadlineSeconds: 10, RetryPolicy: retry,
	}); err != nil {
		t.Fatal(err)
	}
	return topic, sub
}

func TestPubSubEmulatorQuirks(t *testing.T) {
	p := RequirePubSub(t)
	ctx := context.Background()
	c, err := p.Client(ctx, "quirks")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	t.Run("a nacked message comes back at once despite a retry policy", func(t *testing.T) {
		topic, sub := createTopicAndSub(t, c, "nack-quirk", &pubsubpb.RetryPolicy{
			MinimumBackoff: durationpb.New(10 * time.Second),
			MaximumBackoff: durationpb.New(60 * time.Second),
		})
		publish(t, c, topic, "nack", 1)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var deliveries atomic.Int32
		var nackedAt time.Time
		var redelivery time.Duration
		if err := c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			if deliveries.Add(1) == 1 {
				nackedAt = time.Now()
				m.Nack()
				return
			}
			redelivery = time.Since(nackedAt)
			m.Ack()
			cancel()
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("redelivered after %v", redelivery.Round(time.Millisecond))
		if deliveries.Load() < 2 || redelivery > 5*time.Second {
			t.Fatalf("deliveries %d, redelivery after %v; the emulator now honours the 10s minimum backoff: update doc.go",
				deliveries.Load(), redelivery)
		}
	})

	t.Run("messages beyond the real service's limits are accepted", func(t *testing.T) {
		topic, _ := createTopicAndSub(t, c, "size-quirk", nil)
		// The real service takes at most 10 MB per message, 100 attributes,
		// 256-byte keys and 1024-byte values. The Go publisher checks only
		// the 10 MB, so raw Publish calls show what the emulator enforces.
		attrs := map[string]string{}
		for i := range 150 {
			attrs[fmt.Sprintf("%0300d", i)] = strings.Repeat("v", 5000)
		}
		for name, m := range map[string]*pubsubpb.PubsubMessage{
			"10.5 MB of data": {Data: make([]byte, 10_500_000)},
			"150 attributes, 300 B keys, 5000 B values": {Data: []byte("x"), Attributes: attrs},
		} {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := c.TopicAdminClient.Publish(cctx, &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{m}})
			cancel()
			if err != nil {
				t.Errorf("publish %s: %v; the emulator now enforces a limit: update doc.go", name, err)
			}
		}
	})
}

func TestBigtableEmulatorRejectsNonMillisecondTimestampsAsUnknown(t *testing.T) {
	b := RequireBigtable(t)
	ctx := context.Background()
	client, admin, err := b.Clients(ctx, "quirks", "quirks")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer admin.Close()
	if err := admin.CreateTable(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "ts", "f"); err != nil {
		t.Fatal(err)
	}
	const micros = 1_700_000_000_000_123

	// Real Bigtable (and bttest) reject this with InvalidArgument; the
	// installed cbtemulator rejects it with Unknown, a code pubsink treats
	// as transient.
	conn, err := dialBigtable(b.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = btpb.NewBigtableClient(conn).MutateRow(ctx, &btpb.MutateRowRequest{
		TableName: "projects/quirks/instances/quirks/tables/ts",
		RowKey:    []byte("raw"),
		Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
			FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: micros, Value: []byte("v"),
		}}}},
	})
	if code := status.Code(err); code != codes.Unknown {
		t.Fatalf("MutateRow with timestamp %d: %v (code %v), want code Unknown; the emulator changed: update doc.go", micros, err, code)
	}

	t.Run("the Go client's Mutation.Set truncates to milliseconds itself", func(t *testing.T) {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(micros), []byte("v"))
		if err := client.Open("ts").Apply(ctx, "client", m); err != nil {
			t.Fatal(err)
		}
		r, err := client.Open("ts").ReadRow(ctx, "client")
		if err != nil || len(r["f"]) != 1 {
			t.Fatalf("ReadRow = %v, %v", r, err)
		}
		if got, want := r["f"][0].Timestamp, bigtable.Timestamp(micros).TruncateToMilliseconds(); got != want {
			t.Errorf("stored timestamp %d, want %d", got, want)
		}
	})
}

// BenchmarkStreamingPullOneStream measures what one StreamingPull stream
// delivers from a backlog of small messages, acking each at once. On the
// 2-core development machine it is about 1.8k msg/s, and it grows with
// NumGoroutines (about 3.7k with 2 streams, 6.5k with 4), so the limit is per
// stream, not CPU.
func BenchmarkStreamingPullOneStream(b *testing.B) {
	p := RequirePubSub(b)
	ctx := context.Background()
	c, err := p.Client(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const n = 5000
	var received, elapsed time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		topic, sub := createTopicAndSub(b, c, fmt.Sprintf("bench-%d", i), nil)
		publish(b, c, topic, "bench", n)
		b.StartTimer()
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		var got atomic.Int64
		if err := c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			if got.Add(1) == n {
				cancel()
			}
		}); err != nil {
			b.Fatal(err)
		}
		cancel()
		elapsed += time.Since(start)
		received += time.Duration(got.Load())
	}
	b.ReportMetric(float64(received)/elapsed.Seconds(), "msgs/s")
}
