package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/state"
)

const setupYAML = `
project: p
state: {instance: i}
pipelines:
  - name: orders
    source: {topic: orders, subscription: orders-sub, tracking_subscription: orders-tracking}
    dedupe: {window: 15m}
    sink: {table: orders, row_key: "{message_id}"}
    dead_letter: {topic: orders-dlq}
  - name: clicks
    mode: at_least_once
    source: {topic: clicks, subscription: clicks-sub}
    sink: {table: clicks, row_key: "{message_id}"}
    dead_letter: {bigtable_table: clicks_dead}
`

// stateAdmin is an admin client of instance i of f's Bigtable fake.
func stateAdmin(t *testing.T, f *fakes) *bigtable.AdminClient {
	t.Helper()
	ac, err := f.admin(context.Background(), "i")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ac.Close() })
	return ac
}

func TestSetupCreatesEverythingOnceAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	ac := stateAdmin(t, f)
	cfg, err := config.Parse([]byte(setupYAML))
	if err != nil {
		t.Fatal(err)
	}
	var first bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &first); err != nil {
		t.Fatalf("setup: %v\n%s", err, first.String())
	}
	// Main subscriptions get the retry policy (a nack is no hot loop);
	// the tracking and replay ones, which nack nothing, none.
	// The tracking subscription, read by unary Pull, gets the shortest ack
	// deadline: the watermark waits for it after a failed pull.
	for _, sub := range []struct {
		name, topic string
		retry       bool
		deadline    int32
	}{
		{"orders-sub", "orders", true, ackDeadlineSeconds}, {"orders-tracking", "orders", false, trackingAckDeadlineSeconds},
		{"orders-dlq-replay", "orders-dlq", false, ackDeadlineSeconds}, {"clicks-sub", "clicks", true, ackDeadlineSeconds},
	} {
		got, err := f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/" + sub.name})
		if err != nil || got.Topic != "projects/p/topics/"+sub.topic || got.AckDeadlineSeconds != sub.deadline {
			t.Errorf("subscription %s: %v, %v", sub.name, got, err)
			continue
		}
		rp := got.GetRetryPolicy()
		if sub.retry && (rp.GetMinimumBackoff().AsDuration() != time.Second || rp.GetMaximumBackoff().AsDuration() != 5*time.Second) {
			t.Errorf("subscription %s: retry policy %v, want a backoff of 1s to 5s", sub.name, rp)
		}
		if !sub.retry && rp != nil {
			t.Errorf("subscription %s: retry policy %v, want none", sub.name, rp)
		}
	}
	for table, fams := range map[string][]string{
		"orders":        {"d"},
		"clicks":        {"d"},
		"clicks_dead":   {state.FamilyDeadLetter},
		"pubsink_state": {state.FamilyDedupe, state.FamilyMeta, state.FamilySnapshot},
	} {
		info, err := ac.TableInfo(ctx, table)
		if err != nil {
			t.Errorf("table %s: %v", table, err)
			continue
		}
		for _, fam := range fams {
			if !strings.Contains(strings.Join(info.Families, ","), fam) {
				t.Errorf("table %s lacks family %s (has %v)", table, fam, info.Families)
			}
		}
	}
	// The catalog's max-age rule covers the longest window.
	info, _ := ac.TableInfo(ctx, "pubsink_state")
	found := false
	for _, fi := range info.FamilyInfos {
		if fi.Name == state.FamilyDedupe {
			found = true
			if want := bigtable.MaxAgePolicy(15*time.Minute + time.Hour).String(); fi.GCPolicy != want {
				t.Errorf("catalog GC rule %q, want %q", fi.GCPolicy, want)
			}
		}
	}
	if !found {
		t.Error("no family info for the catalog")
	}

	var second bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &second); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	if strings.Contains(second.String(), "created") {
		t.Errorf("the second run created something:\n%s", second.String())
	}
	if !strings.Contains(first.String(), "created subscription projects/p/subscriptions/orders-tracking") {
		t.Errorf("the first run's report lacks the tracking subscription:\n%s", first.String())
	}
}

// TestSetupSaysWhenAnExistingSubscriptionHasNoRetryPolicy: setup leaves a
// user's subscription as it is, and says what it lacks: the main one's
// retry policy, the tracking one's short ack deadline.
func TestSetupSaysWhenAnExistingSubscriptionHasNoRetryPolicy(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	stateAdmin(t, f)
	cfg, err := config.Parse([]byte(setupYAML))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/orders"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: "projects/p/subscriptions/orders-sub", Topic: "projects/p/topics/orders"}); err != nil {
		t.Fatal(err)
	}
	tracking := "projects/p/subscriptions/orders-tracking"
	if _, err := f.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: tracking, Topic: "projects/p/topics/orders", AckDeadlineSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "orders-sub exists\n  note: it has no retry policy") {
		t.Errorf("setup did not say the existing subscription lacks a retry policy:\n%s", out.String())
	}
	got, _ := f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/orders-sub"})
	if got.GetRetryPolicy() != nil {
		t.Errorf("setup changed the user's subscription: retry policy %v", got.GetRetryPolicy())
	}
	if !strings.Contains(out.String(), "orders-tracking exists\n  note: its ack deadline is 60 s;") {
		t.Errorf("setup did not say the existing tracking subscription's ack deadline is long:\n%s", out.String())
	}
	got, _ = f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: tracking})
	if got.GetAckDeadlineSeconds() != 60 {
		t.Errorf("setup changed the user's tracking subscription: ack deadline %d s", got.GetAckDeadlineSeconds())
	}
	if strings.Contains(out.String(), "orders-sub exists\n  note: its ack deadline") {
		t.Errorf("setup notes the main subscription's ack deadline, which the client's leases make irrelevant:\n%s", out.String())
	}
}

// TestSetupCreatesTheTopicWithItsMessageRetention: with
// source.topic_message_retention, setup creates the topic retaining its
// messages that long (so that reprocess --from can seek back), and says
// when an existing topic retains less, changing nothing.
func TestSetupCreatesTheTopicWithItsMessageRetention(t *testing.T) {
	ctx := context.Background()
	for _, existing := range []bool{false, true} {
		f := newFakes(t)
		stateAdmin(t, f)
		yaml := strings.Replace(setupYAML, "subscription: orders-sub,", "subscription: orders-sub, topic_message_retention: 24h,", 1)
		cfg, err := config.Parse([]byte(yaml))
		if err != nil || cfg.Pipelines[0].Source.TopicMessageRetention != 24*time.Hour {
			t.Fatalf("config: %v; the YAML changed?\n%s", err, yaml)
		}
		topic := "projects/p/topics/orders"
		if existing {
			if _, err := f.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
			t.Fatalf("setup: %v\n%s", err, out.String())
		}
		got, err := f.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		keeps := got.GetMessageRetentionDuration().AsDuration()
		switch {
		case !existing && (keeps != 24*time.Hour || !strings.Contains(out.String(), "created topic "+topic+" (message retention 24h0m0s)")):
			t.Errorf("new topic: retention %v, output:\n%s", keeps, out.String())
		case existing && (keeps != 0 || !strings.Contains(out.String(), "topic "+topic+" exists\n  note: it retains messages for 0s, less than source.topic_message_retention 24h0m0s")):
			t.Errorf("existing topic: retention %v (setup must not change it), output:\n%s", keeps, out.String())
		}
	}
}

func TestSetupRefusesASubscriptionOnAnotherTopic(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	if _, err := f.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: "projects/p/subscriptions/orders-sub", Topic: "projects/p/topics/other"}); err != nil {
		t.Fatal(err)
	}
	cfg, _ := config.Parse([]byte(setupYAML))
	err := Setup(ctx, cfg, f.ps, f.admin, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "attached to projects/p/topics/other") {
		t.Fatalf("setup = %v; want a clear mismatch error", err)
	}
}

func TestSetupNeedsATopicToCreateASubscription(t *testing.T) {
	f := newFakes(t)
	cfg, _ := config.Parse([]byte(strings.ReplaceAll(setupYAML, "topic: clicks, ", "")))
	err := Setup(context.Background(), cfg, f.ps, f.admin, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "source.topic is not set") {
		t.Fatalf("setup = %v; want the missing source.topic named", err)
	}
}

// TestSetupWidensTheCatalogGCRule: lengthening dedupe.window after setup
// ran must not leave the catalog's max-age rule shorter than the window.
func TestSetupWidensTheCatalogGCRule(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	ac := stateAdmin(t, f)
	for _, window := range []string{"15m", "2h", "30m"} {
		cfg, err := config.Parse([]byte(strings.Replace(setupYAML, "window: 15m", "window: "+window, 1)))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
			t.Fatalf("setup with window %s: %v\n%s", window, err, out.String())
		}
	}
	info, err := ac.TableInfo(ctx, "pubsink_state")
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range info.FamilyInfos {
		if fi.Name != state.FamilyDedupe {
			continue
		}
		// Widened to 2h by the second run; not narrowed by the third.
		if got, ok := state.MaxAge(fi.FullGCPolicy); !ok || got != state.CatalogMaxAge(2*time.Hour) {
			t.Fatalf("catalog GC rule %v, want max age %v", fi.FullGCPolicy, state.CatalogMaxAge(2*time.Hour))
		}
		return
	}
	t.Fatalf("no catalog family in %+v", info.FamilyInfos)
}
