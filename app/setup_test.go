package app

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"google.golang.org/protobuf/types/known/durationpb"

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
		// An expiration policy without a TTL: it never expires (without
		// one, Pub/Sub deletes it after 31 days without activity).
		if ep := got.GetExpirationPolicy(); ep == nil || ep.GetTtl() != nil {
			t.Errorf("subscription %s: expiration policy %v, want one without a TTL (never)", sub.name, ep)
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
	if strings.Contains(second.String(), "created") || strings.Contains(second.String(), "expires after") {
		t.Errorf("the second run created something, or found what it created expiring:\n%s", second.String())
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
	for _, sub := range []string{"orders-sub", "orders-tracking"} {
		if !strings.Contains(out.String(), "  note: it expires after 31 days without activity, so a pipeline whose topic is quiet that long loses it; setup changes nothing (gcloud pubsub subscriptions update projects/p/subscriptions/"+sub+" --expiration-period=never)") {
			t.Errorf("setup did not say that %s, made without an expiration policy, expires:\n%s", sub, out.String())
		}
	}
	if strings.Contains(out.String(), "orders-sub exists\n  note: its ack deadline") {
		t.Errorf("setup notes the main subscription's ack deadline, which the client's leases make irrelevant:\n%s", out.String())
	}
}

// TestSetupCreatesTheTopicWithItsMessageRetention: with
// source.topic_message_retention, setup creates the topic retaining its
// messages that long (so that reprocess --from can seek back), and widens
// an existing topic that retains less, saying that only what is published
// from then on is retained.
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
		case existing && (keeps != 24*time.Hour || !strings.Contains(out.String(), "topic "+topic+" exists: widened its message retention from none to 24h0m0s\n"+
			"  note: Pub/Sub retains only messages published from now on, so reprocess and audit --from cannot reach before now; the emulator gives a subscription created after this change no history at all (to try them locally, create the topic with its retention)\n")):
			t.Errorf("existing topic: retention %v, want widened to 24h; output:\n%s", keeps, out.String())
		}
	}
}

// TestSetupNeverNarrowsATopicsMessageRetention: an existing topic that
// retains longer than source.topic_message_retention keeps its retention,
// and a second setup, with the retention already as asked, says only that
// the topic exists.
func TestSetupNeverNarrowsATopicsMessageRetention(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	stateAdmin(t, f)
	topic := "projects/p/topics/orders"
	if _, err := f.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic, MessageRetentionDuration: durationpb.New(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(strings.Replace(setupYAML, "subscription: orders-sub,", "subscription: orders-sub, topic_message_retention: 24h,", 1)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	got, err := f.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if keeps := got.GetMessageRetentionDuration().AsDuration(); keeps != 48*time.Hour || !strings.Contains(out.String(), "topic "+topic+" exists\n") {
		t.Errorf("retention %v, want 48h kept; output:\n%s", keeps, out.String())
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

// changeYAML has a pipeline whose sink writes two tables: orders, by a
// plain mapping, and order_changes, by a change mapping (its write mode,
// set in the test).
const changeYAML = `
project: p
state: {instance: i}
pipelines:
  - name: orders
    mode: at_least_once
    source: {topic: orders, subscription: orders-sub}
    sink:
      mappings:
        - {table: orders, row_key: "{message_id}", columns: {v: "{data}"}}
        - {table: order_changes, row_key: "{message_id}", columns: {v: "{data}"}}
`

// changeConfig is changeYAML with its second mapping a change mapping
// (replace_if_newer), tombstones kept for retention (0: the default).
func changeConfig(t *testing.T, retention time.Duration) *config.Config {
	t.Helper()
	cfg := parse(t, changeYAML)
	sink := &cfg.Pipelines[0].Sink
	sink.Mappings[1].WriteMode = config.WriteReplaceIfNewer
	if retention != 0 {
		sink.TombstoneRetention = retention
	}
	if got := sink.ChangeTables(); len(got) != 1 || got[0] != "order_changes" {
		t.Fatalf("change tables %v; want [order_changes]", got)
	}
	return cfg
}

// familyRule returns the GC rule of table's family fam, and whether the
// family exists.
func familyRule(t *testing.T, ac *bigtable.AdminClient, table, fam string) (bigtable.GCPolicy, bool) {
	t.Helper()
	info, err := ac.TableInfo(context.Background(), table)
	if err != nil {
		t.Fatalf("table %s: %v", table, err)
	}
	for _, fi := range info.FamilyInfos {
		if fi.Name == fam {
			return fi.FullGCPolicy, true
		}
	}
	return nil, false
}

// TestSetupGivesTheTablesOfChangeMappingsATombstoneFamily: a table that a
// change mapping writes gets the family sink.tombstone_family, with the
// max-age rule sink.tombstone_retention, when setup creates the table and
// when it exists already; a table only plain mappings write gets none; the
// mappings' own family keeps no GC rule.
func TestSetupGivesTheTablesOfChangeMappingsATombstoneFamily(t *testing.T) {
	ctx := context.Background()
	for _, existing := range []bool{false, true} {
		f := newFakes(t)
		ac := stateAdmin(t, f)
		if existing {
			if err := ac.CreateTable(ctx, "order_changes"); err != nil {
				t.Fatal(err)
			}
			if err := ac.CreateColumnFamily(ctx, "order_changes", "d"); err != nil {
				t.Fatal(err)
			}
		}
		cfg := changeConfig(t, 48*time.Hour)
		var out bytes.Buffer
		if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
			t.Fatalf("setup: %v\n%s", err, out.String())
		}
		if gc, ok := familyRule(t, ac, "order_changes", "tombstone"); !ok || gc.String() != bigtable.MaxAgePolicy(48*time.Hour).String() {
			t.Errorf("existing table %v: order_changes:tombstone has rule %v (exists: %v); want max age 48h\n%s", existing, gc, ok, out.String())
		}
		if !strings.Contains(out.String(), "created column family order_changes:tombstone (GC rule age() > 2d)\n") {
			t.Errorf("existing table %v: setup did not report the tombstone family:\n%s", existing, out.String())
		}
		for _, table := range []string{"orders", "order_changes"} {
			if gc, ok := familyRule(t, ac, table, "d"); !ok || gc.String() != "" {
				t.Errorf("%s:d has rule %q (exists: %v); want no GC rule", table, gc, ok)
			}
		}
		if _, ok := familyRule(t, ac, "orders", "tombstone"); ok {
			t.Error("orders, which no change mapping writes, got a tombstone family")
		}
		var again bytes.Buffer
		if err := Setup(ctx, cfg, f.ps, f.admin, &again); err != nil {
			t.Fatalf("second setup: %v", err)
		}
		if strings.Contains(again.String(), "created") || strings.Contains(again.String(), "note") || strings.Contains(again.String(), "widened") {
			t.Errorf("the second run changed or noted something:\n%s", again.String())
		}
	}
}

// TestSetupWidensTheTombstoneRuleAndReportsAnother: an existing tombstone
// family whose max age is shorter than sink.tombstone_retention is widened,
// never narrowed; one with a rule of another kind, or none, is reported and
// left as it is.
func TestSetupWidensTheTombstoneRuleAndReportsAnother(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	ac := stateAdmin(t, f)
	if err := ac.CreateTable(ctx, "order_changes"); err != nil {
		t.Fatal(err)
	}
	if err := ac.CreateColumnFamily(ctx, "order_changes", "tombstone"); err != nil {
		t.Fatal(err)
	}
	if err := ac.SetGCPolicy(ctx, "order_changes", "tombstone", bigtable.MaxAgePolicy(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, retention := range []time.Duration{0, 24 * time.Hour} { // the default (168h), then shorter
		out.Reset()
		if err := Setup(ctx, changeConfig(t, retention), f.ps, f.admin, &out); err != nil {
			t.Fatalf("setup: %v\n%s", err, out.String())
		}
		if retention == 0 && !strings.Contains(out.String(), "widened the GC rule of order_changes:tombstone from age() > 1h to age() > 7d\n") {
			t.Errorf("setup did not report the widening:\n%s", out.String())
		}
		if gc, _ := familyRule(t, ac, "order_changes", "tombstone"); gc.String() != bigtable.MaxAgePolicy(168*time.Hour).String() {
			t.Errorf("after setup with retention %v: tombstone rule %v; want widened to 7d, never narrowed\n%s", retention, gc, out.String())
		}
	}
	if strings.Contains(out.String(), "widened") || strings.Contains(out.String(), "note") {
		t.Errorf("a shorter retention changed or noted something:\n%s", out.String())
	}

	for _, c := range []struct {
		rule bigtable.GCPolicy
		note string
	}{
		{bigtable.MaxVersionsPolicy(1), "its GC rule is versions() > 1, not a max age; setup leaves it as it is (sink.tombstone_retention asks for age() > 7d"},
		{nil, "it has no GC rule; setup leaves it as it is (sink.tombstone_retention asks for age() > 7d"},
	} {
		f := newFakes(t)
		ac := stateAdmin(t, f)
		if err := ac.CreateTable(ctx, "order_changes"); err != nil {
			t.Fatal(err)
		}
		if err := ac.CreateColumnFamily(ctx, "order_changes", "tombstone"); err != nil {
			t.Fatal(err)
		}
		want := ""
		if c.rule != nil {
			if err := ac.SetGCPolicy(ctx, "order_changes", "tombstone", c.rule); err != nil {
				t.Fatal(err)
			}
			want = c.rule.String()
		}
		var out bytes.Buffer
		if err := Setup(ctx, changeConfig(t, 0), f.ps, f.admin, &out); err != nil {
			t.Fatalf("setup: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "column family order_changes:tombstone exists\n  note: "+c.note) {
			t.Errorf("rule %q: setup did not report it:\n%s", want, out.String())
		}
		if gc, _ := familyRule(t, ac, "order_changes", "tombstone"); gc.String() != want {
			t.Errorf("setup changed the rule %q to %q", want, gc)
		}
	}
}

// TestSetupCreatesTheSubscriptionWithMessageOrdering: the main
// subscription of a pipeline with source.ordering gets message ordering;
// its tracking and dead-letter subscriptions, and the main subscription of
// a pipeline without it, do not.
func TestSetupCreatesTheSubscriptionWithMessageOrdering(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	stateAdmin(t, f)
	cfg, err := config.Parse([]byte(setupYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pipelines[0].Source.Ordering = true
	var out bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	for sub, want := range map[string]bool{"orders-sub": true, "orders-tracking": false, "orders-dlq-replay": false, "clicks-sub": false} {
		got, err := f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/" + sub})
		if err != nil || got.EnableMessageOrdering != want {
			t.Errorf("subscription %s: message ordering %v (%v); want %v", sub, got.GetEnableMessageOrdering(), err, want)
		}
	}
	if !strings.Contains(out.String(), "created subscription projects/p/subscriptions/orders-sub on projects/p/topics/orders (message ordering)\n") {
		t.Errorf("setup did not say the subscription orders messages:\n%s", out.String())
	}
	var again bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &again); err != nil || strings.Contains(again.String(), "note") {
		t.Errorf("second setup = %v, with a note where the subscriptions match:\n%s", err, again.String())
	}
}

// TestSetupReportsAnExistingSubscriptionWhoseOrderingDiffers: Pub/Sub
// cannot change a subscription's message ordering, so setup changes
// nothing. A subscription without the ordering source.ordering asks for is
// an error (run would refuse it) naming the fix, after the rest is set up;
// one that orders unasked is a note.
func TestSetupReportsAnExistingSubscriptionWhoseOrderingDiffers(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	ac := stateAdmin(t, f)
	cfg, err := config.Parse([]byte(setupYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pipelines[0].Source.Ordering = true
	for _, s := range []struct {
		topic, sub string
		ordering   bool
	}{{"orders", "orders-sub", false}, {"clicks", "clicks-sub", true}} {
		topic := "projects/p/topics/" + s.topic
		if _, err := f.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: "projects/p/subscriptions/" + s.sub, Topic: topic, EnableMessageOrdering: s.ordering}); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	err = Setup(ctx, cfg, f.ps, f.admin, &out)
	for _, want := range []string{
		"pipeline orders: subscription projects/p/subscriptions/orders-sub has no message ordering, and source.ordering is true (run refuses it)",
		"gcloud pubsub subscriptions create NEW --topic=projects/p/topics/orders --enable-message-ordering",
		"or set source.ordering to false",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("setup = %v; want it to say %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "clicks") {
		t.Errorf("setup = %v; the clicks pipeline's subscription orders unasked, which is no error", err)
	}
	if !strings.Contains(out.String(), "subscription projects/p/subscriptions/clicks-sub exists\n  note: it has message ordering, which source.ordering does not ask for") {
		t.Errorf("setup did not note the subscription that orders unasked:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "orders-sub exists\n  note: it has no retry policy") {
		t.Errorf("the ordering error left out the subscription's other notes:\n%s", out.String())
	}
	// The rest of the failing pipeline was set up; nothing was changed.
	if _, err := ac.TableInfo(ctx, "orders"); err != nil {
		t.Errorf("the orders pipeline's table was not created: %v", err)
	}
	for sub, want := range map[string]bool{"orders-sub": false, "clicks-sub": true} {
		got, _ := f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/" + sub})
		if got.GetEnableMessageOrdering() != want {
			t.Errorf("setup changed the message ordering of %s", sub)
		}
	}
}

// TestSetupWithoutCredentialsNamesTheEmulatorVariables: setup on a machine
// with no emulator variables and no Google credentials says, besides the
// client library's complaint, that the local emulators are named by
// PUBSUB_EMULATOR_HOST and BIGTABLE_EMULATOR_HOST.
func TestSetupWithoutCredentialsNamesTheEmulatorVariables(t *testing.T) {
	for _, v := range []string{"PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"} {
		t.Setenv(v, "")
	}
	home := t.TempDir() // no gcloud credentials in it
	t.Setenv("HOME", home)
	t.Setenv("CLOUDSDK_CONFIG", filepath.Join(home, "gcloud"))
	path := filepath.Join(t.TempDir(), "pubsink.yaml")
	if err := os.WriteFile(path, []byte(setupYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := SetupFile(ctx, path, io.Discard)
	if err == nil {
		t.Fatal("setup without emulators and credentials succeeded")
	}
	const hint = "for the local emulators, set PUBSUB_EMULATOR_HOST and BIGTABLE_EMULATOR_HOST to their host:port (neither is set)"
	// On Google Cloud the metadata server has credentials: then the failure
	// is another, and has no hint.
	if strings.Contains(err.Error(), "could not find default credentials") != strings.Contains(err.Error(), hint) {
		t.Fatalf("setup: %v\nwant the hint %q exactly when the library found no credentials", err, hint)
	}
}
