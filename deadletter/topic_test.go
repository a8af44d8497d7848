package deadletter_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/internal/dltest"
)

// TestTopicCopyCarriesTheContractAttributes checks the attribute set of
// docs/reference.md "Dead letter" on a message published by the Topic
// output.
func TestTopicCopyCarriesTheContractAttributes(t *testing.T) {
	f := dltest.New(t)
	dl := f.Outputs()[deadletter.KindTopic]
	out := open(f, f.Pipeline("orders", dl))
	m := dltest.Message(7)
	if err := out.Send(context.Background(), m, deadletter.MissingField, errors.New(`row_key: attribute "customer" is missing`)); err != nil {
		t.Fatal(err)
	}
	msgs := f.PS.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages published, want 1", len(msgs))
	}
	got := msgs[0]
	want := map[string]string{
		"id":                 "r007",
		"kind":               "test",
		"pubsink_reason":     "missing_field",
		"pubsink_error":      `row_key: attribute "customer" is missing`,
		"pubsink_pipeline":   "orders",
		"pubsink_message_id": "1007",
		// RFC 3339 in UTC, with the precision Pub/Sub gives.
		"pubsink_publish_time": "2026-06-01T00:00:07.123456789Z",
		"pubsink_failed_at":    "2026-06-02T03:04:05.000006Z",
	}
	if !maps.Equal(got.Attributes, want) {
		t.Errorf("attributes:\n got %v\nwant %v", got.Attributes, want)
	}
	if string(got.Data) != string(m.Data) {
		t.Errorf("data %q, want %q", got.Data, m.Data)
	}
	if got.Topic != "projects/p/topics/dlq" {
		t.Errorf("published to %s", got.Topic)
	}
}

// TestTopicWithoutSubscriptionIsRefused: Pub/Sub drops what is published
// to a topic nobody subscribes to, so every copy would be confirmed and
// lost. Open refuses, naming the key, the topic and the fix.
func TestTopicWithoutSubscriptionIsRefused(t *testing.T) {
	f := dltest.New(t)
	f.Topic("lonely")
	out, err := deadletter.Open(context.Background(), zap.NewNop(), f.Cfg, f.Pipeline("orders", config.DeadLetter{Topic: "lonely"}), f.Clients())
	if err == nil {
		out.Close(context.Background())
		t.Fatal("Open accepted a dead-letter topic without subscription: every copy would be lost")
	}
	for _, want := range []string{"dead_letter.topic", "projects/p/topics/lonely", "no subscription", "pubsink setup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open: %v; want it to say %q", err, want)
		}
	}
}

// TestTopicHoldsCopiesWhileItHasNoSubscription runs holdsCopies on pstest.
func TestTopicHoldsCopiesWhileItHasNoSubscription(t *testing.T) {
	f := dltest.New(t)
	holdsCopies(t, f.PubSub, f.Cfg)
}

// holdsCopies deletes the only subscription of a topic output while it
// runs: once the output checked again, Send fails (the pipeline retries and
// never acks the original) and Check fails, naming the topic; once a
// subscription exists again and was seen, the copy goes out and arrives.
func holdsCopies(t *testing.T, ps *pubsub.Client, cfg *config.Config) {
	ctx := context.Background()
	admin := admin{t, ps, cfg}
	admin.topic("held")
	admin.subscription("held-replay", "held")
	out, err := deadletter.Open(ctx, zap.NewNop(), cfg, config.Pipeline{Name: "orders", DeadLetter: config.DeadLetter{Topic: "held"}}, deadletter.Clients{PubSub: ps})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close(ctx)
	clk := newClock(out)
	topic := cfg.TopicName("held")
	m := dltest.Message(1)

	admin.deleteSubscription("held-replay")
	clk.advance(deadletter.SubscriptionCheckPeriod)
	if err := out.Send(ctx, m, deadletter.InvalidPayload, errors.New("not JSON")); err == nil {
		t.Fatal("Send confirmed a copy published to a topic without subscription: Pub/Sub drops it")
	} else if !strings.Contains(err.Error(), topic) || !strings.Contains(err.Error(), "no subscription") {
		t.Errorf("Send: %v; want the topic and the missing subscription named", err)
	}
	check := out.Check
	if err := check(ctx); err == nil || !strings.Contains(err.Error(), topic) {
		t.Errorf("Check with no subscription: %v; want an error naming %s", err, topic)
	}

	admin.subscription("held-again", "held")
	clk.advance(deadletter.SubscriptionCheckPeriod)
	if err := out.Send(ctx, m, deadletter.InvalidPayload, errors.New("not JSON")); err != nil {
		t.Fatalf("Send once a subscription is back: %v", err)
	}
	if err := check(ctx); err != nil {
		t.Errorf("Check once a subscription is back: %v", err)
	}
	if got := admin.pull("held-again"); len(got) != 1 || got[0].Attributes[deadletter.AttrMessageID] != m.ID {
		t.Fatalf("the new subscription holds %v; want the one copy of %s", got, m.ID)
	}
}

// TestTopicChecksForASubscriptionOncePerPeriod: copies and readiness
// probes share one ListTopicSubscriptions per period, however many there
// are; the first of them after the period checks again.
func TestTopicChecksForASubscriptionOncePerPeriod(t *testing.T) {
	f := dltest.New(t)
	var lists atomic.Int32
	ps := interceptedClient(t, f, func(method string) error {
		if strings.HasSuffix(method, "/ListTopicSubscriptions") {
			lists.Add(1)
		}
		return nil
	})
	out, err := deadletter.Open(context.Background(), zap.NewNop(), f.Cfg, f.Pipeline("orders", f.Outputs()[deadletter.KindTopic]), deadletter.Clients{PubSub: ps})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close(context.Background())
	clk := newClock(out)
	check := out.Check
	burst := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, 40)
		for i := range errs {
			wg.Go(func() {
				if i%2 == 0 {
					errs[i] = out.Send(context.Background(), dltest.Message(i), deadletter.Late, nil)
				} else {
					errs[i] = check(context.Background())
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		advance time.Duration
		lists   int32
	}{
		{0, 1}, // the check of Open answers for a period
		{deadletter.SubscriptionCheckPeriod / 2, 1},
		{deadletter.SubscriptionCheckPeriod / 2, 2}, // a period after Open
	} {
		clk.advance(step.advance)
		burst()
		if n := lists.Load(); n != step.lists {
			t.Fatalf("%v later: %d ListTopicSubscriptions, want %d", step.advance, n, step.lists)
		}
	}
}

// TestTopicWithoutListPermissionIsNotWatched: an identity that may
// publish but not list the topic's subscriptions gets a warning at start,
// and its copies go out: a check that can never answer must not hold every
// poison message. It is not retried either.
func TestTopicWithoutListPermissionIsNotWatched(t *testing.T) {
	f := dltest.New(t)
	var lists atomic.Int32
	ps := interceptedClient(t, f, func(method string) error {
		if strings.HasSuffix(method, "/ListTopicSubscriptions") {
			lists.Add(1)
			return status.Error(codes.PermissionDenied, "no pubsub.topics.listSubscriptions")
		}
		return nil
	})
	core, logs := observer.New(zapcore.WarnLevel)
	out, err := deadletter.Open(context.Background(), zap.New(core), f.Cfg, f.Pipeline("orders", f.Outputs()[deadletter.KindTopic]), deadletter.Clients{PubSub: ps})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close(context.Background())
	if logs.FilterMessageSnippet("cannot list the subscriptions").Len() != 1 {
		t.Errorf("no warning; logs: %v", logs.All())
	}
	newClock(out).advance(deadletter.SubscriptionCheckPeriod)
	if err := out.Send(context.Background(), dltest.Message(1), deadletter.Late, nil); err != nil {
		t.Fatal(err)
	}
	if err := out.Check(context.Background()); err != nil {
		t.Errorf("Check: %v", err)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("%d ListTopicSubscriptions, want only the one at start", n)
	}
}

// TestTopicCheckThatFailsKeepsTheLastAnswer: a check that Pub/Sub does not
// answer says nothing about the subscriptions, so the output goes on as the
// last check found, rather than holding every copy. (Internal, which the
// client does not retry: Unavailable is retried until listTimeout.)
func TestTopicCheckThatFailsKeepsTheLastAnswer(t *testing.T) {
	f := dltest.New(t)
	var down atomic.Bool
	ps := interceptedClient(t, f, func(method string) error {
		if down.Load() && strings.HasSuffix(method, "/ListTopicSubscriptions") {
			return status.Error(codes.Internal, "admin API down")
		}
		return nil
	})
	out, err := deadletter.Open(context.Background(), zap.NewNop(), f.Cfg, f.Pipeline("orders", f.Outputs()[deadletter.KindTopic]), deadletter.Clients{PubSub: ps})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close(context.Background())
	down.Store(true)
	newClock(out).advance(deadletter.SubscriptionCheckPeriod)
	if err := out.Send(context.Background(), dltest.Message(1), deadletter.Late, nil); err != nil {
		t.Fatal(err)
	}
	if err := out.Check(context.Background()); err != nil {
		t.Errorf("Check: %v", err)
	}
}

// clock is an output's clock (SetClock), which a test moves on.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

// newClock sets out's clock to one that starts now.
func newClock(out deadletter.Output) *clock {
	c := &clock{now: time.Now()}
	deadletter.SetClock(out, c.read)
	return c
}

func (c *clock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// interceptedClient is a Pub/Sub client of the fake whose unary calls go
// through intercept first, by method name; an error it returns is the
// call's answer.
func interceptedClient(t *testing.T, f *dltest.Fakes, intercept func(method string) error) *pubsub.Client {
	t.Helper()
	conn, err := grpc.NewClient(f.PS.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if err := intercept(method); err != nil {
				return err
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pubsub.NewClient(context.Background(), dltest.Project, option.WithGRPCConn(conn), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	return ps
}

// admin creates and deletes topics and subscriptions, and pulls, through
// any Pub/Sub client (pstest's or the emulator's).
type admin struct {
	t   *testing.T
	ps  *pubsub.Client
	cfg *config.Config
}

func (a admin) topic(name string) {
	a.t.Helper()
	if _, err := a.ps.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: a.cfg.TopicName(name)}); err != nil {
		a.t.Fatal(err)
	}
}

func (a admin) subscription(name, topic string) {
	a.t.Helper()
	_, err := a.ps.SubscriptionAdminClient.CreateSubscription(context.Background(), &pubsubpb.Subscription{
		Name: a.cfg.SubscriptionName(name), Topic: a.cfg.TopicName(topic), AckDeadlineSeconds: 60,
	})
	if err != nil {
		a.t.Fatal(err)
	}
}

func (a admin) deleteSubscription(name string) {
	a.t.Helper()
	if err := a.ps.SubscriptionAdminClient.DeleteSubscription(context.Background(), &pubsubpb.DeleteSubscriptionRequest{Subscription: a.cfg.SubscriptionName(name)}); err != nil {
		a.t.Fatal(err)
	}
}

// pull returns what subscription name holds: every message that arrives
// within pullQuiet of the last one, waiting up to pullWait for the first.
func (a admin) pull(name string) []*pubsubpb.PubsubMessage {
	a.t.Helper()
	const pullWait, pullQuiet = 20 * time.Second, 2 * time.Second
	var out []*pubsubpb.PubsubMessage
	for deadline := time.Now().Add(pullWait); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := a.ps.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: a.cfg.SubscriptionName(name), MaxMessages: 100})
		cancel()
		if err != nil && status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
			a.t.Fatalf("pull %s: %v", name, err)
		}
		for _, rm := range resp.GetReceivedMessages() {
			out = append(out, rm.GetMessage())
			deadline = time.Now().Add(pullQuiet)
		}
		if len(resp.GetReceivedMessages()) == 0 {
			time.Sleep(50 * time.Millisecond) // pstest answers an empty Pull at once
		}
	}
	return out
}
