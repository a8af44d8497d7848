package setupplan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/hclread"
)

func load(t *testing.T, path string) *config.Config {
	t.Helper()
	t.Setenv("GOOGLE_CLOUD_PROJECT", "p")
	t.Setenv("BIGTABLE_INSTANCE", "i")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestPlanOfTheExamplesNamesWhatSetupCreates(t *testing.T) {
	pl := New(load(t, "../examples.yaml"))
	if len(pl.Pipelines) != 3 {
		t.Fatalf("%d pipelines planned, want 3", len(pl.Pipelines))
	}
	orders, clicks, customers := pl.Pipelines[0], pl.Pipelines[1], pl.Pipelines[2]
	for _, p := range pl.Pipelines {
		if p.Err != nil {
			t.Fatalf("pipeline %s: %v", p.Name, p.Err)
		}
	}
	t.Run("the main subscription has the redelivery policy and a 60 s deadline", func(t *testing.T) {
		s := orders.Subscription
		if s.Name != "projects/p/subscriptions/orders-pubsink" || s.Topic != "projects/p/topics/orders" || s.AckDeadline != 60*time.Second ||
			s.Retry == nil || *s.Retry != (Backoff{time.Second, 5 * time.Second}) || s.Ordering || !s.CheckOrdering {
			t.Errorf("orders' main subscription: %+v", s)
		}
	})
	t.Run("the tracking subscription has 10 s and no retry policy", func(t *testing.T) {
		s := orders.Tracking
		if s == nil || s.Name != "projects/p/subscriptions/orders-pubsink-tracking" || s.AckDeadline != 10*time.Second || s.Retry != nil || !s.CheckAckDeadline {
			t.Errorf("orders' tracking subscription: %+v", s)
		}
		if clicks.Tracking != nil {
			t.Errorf("clicks has no tracking_subscription, planned %+v", clicks.Tracking)
		}
	})
	t.Run("source.ordering orders the main subscription", func(t *testing.T) {
		if !customers.Subscription.Ordering {
			t.Errorf("customers' subscription is not ordered: %+v", customers.Subscription)
		}
	})
	t.Run("a dead-letter topic gets its replay subscription", func(t *testing.T) {
		if orders.DeadLetterTopic == nil || orders.DeadLetterTopic.Name != "projects/p/topics/orders-dlq" ||
			orders.DeadLetterSubscription == nil || orders.DeadLetterSubscription.Name != "projects/p/subscriptions/orders-dlq-replay" ||
			orders.DeadLetterSubscription.Topic != "projects/p/topics/orders-dlq" {
			t.Errorf("orders' dead letter: %+v, %+v", orders.DeadLetterTopic, orders.DeadLetterSubscription)
		}
		if clicks.DeadLetterTopic != nil {
			t.Errorf("clicks dead-letters to a file, planned topic %+v", clicks.DeadLetterTopic)
		}
	})
	t.Run("a change mapping's table gets the tombstone family", func(t *testing.T) {
		if len(customers.Tables) != 1 {
			t.Fatalf("customers' tables: %+v", customers.Tables)
		}
		fams := customers.Tables[0].Families
		if len(fams) != 2 || fams[0].Name != "d" || fams[0].GC != nil || fams[1].Name != "tombstone" ||
			fams[1].GC != bigtable.MaxAgePolicy(168*time.Hour) || fams[1].Setting != "sink.tombstone_retention" {
			t.Errorf("customers' families: %+v", fams)
		}
		if f := orders.Tables[0].Families; len(f) != 1 || f[0].Name != "d" || f[0].GC != nil {
			t.Errorf("orders' families: %+v", f)
		}
	})
	t.Run("the state table's catalog keeps the longest window and an hour", func(t *testing.T) {
		if pl.State == nil || pl.State.Name != "pubsink_state" || pl.State.Instance != "i" || len(pl.State.Families) != 4 {
			t.Fatalf("state table: %+v", pl.State)
		}
		if k := pl.State.Families[0]; k.Name != "k" || k.GC != bigtable.MaxAgePolicy(70*time.Minute) {
			t.Errorf("family k: %+v", k)
		}
	})
}

func TestPlanReadsTheTopicSchemaFromTheFile(t *testing.T) {
	dir := t.TempDir()
	avsc := `{"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}]}`
	if err := os.WriteFile(filepath.Join(dir, "r.avsc"), []byte(avsc), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := `
project: p
state: {instance: i}
pipelines:
  - name: r
    mode: at_least_once
    source: {topic: reads, subscription: r-sub, topic_message_retention: 24h}
    payload: {format: avro, schema: r.avsc, encoding: json}
    sink: {table: r, row_key: "{data.id}"}
`
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	pl := New(load(t, path))
	tp := pl.Pipelines[0].Topic
	if tp == nil || tp.Retention != 24*time.Hour || tp.Schema == nil {
		t.Fatalf("topic: %+v", tp)
	}
	if s := tp.Schema; s.Name != "projects/p/schemas/reads-schema" || s.Type != SchemaAvro || s.Encoding != EncodingJSON || s.Definition != avsc {
		t.Errorf("schema: %+v", s)
	}
	if pl.State != nil {
		t.Errorf("an at_least_once pipeline without tracking needs no state table, planned %+v", pl.State)
	}

	// In Terraform, the schema's definition is the file's text, a template
	// sequence in it escaped; the topic names it, with its encoding.
	tp.Schema.Definition = strings.Replace(avsc, `"name": "R"`, `"name": "R", "doc": "not a ${template} nor %{ if }"`, 1)
	src := Terraform(pl, Vars{Project: "p", Instance: "i", Region: "r"})
	rs, err := hclread.Resources(src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	var def, encoding string
	for _, r := range rs {
		switch r.Type {
		case "google_pubsub_schema":
			def = attribute(t, r.Body, "definition")
		case "google_pubsub_topic":
			encoding = attribute(t, r.Body, "schema_settings.encoding")
		}
	}
	if def != tp.Schema.Definition+"\n" || encoding != "JSON" {
		t.Errorf("schema definition %q, encoding %q in:\n%s", def, encoding, src)
	}
}
