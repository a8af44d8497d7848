package deadletter_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

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

// TestTopicWithoutSubscriptionIsAWarning: Pub/Sub drops what is published
// to a topic nobody subscribes to, so Open says so.
func TestTopicWithoutSubscriptionIsAWarning(t *testing.T) {
	f := dltest.New(t)
	f.Topic("lonely")
	core, logs := observer.New(zapcore.WarnLevel)
	out, err := deadletter.Open(context.Background(), zap.New(core), f.Cfg, f.Pipeline("orders", config.DeadLetter{Topic: "lonely"}), f.Clients())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close(context.Background())
	if logs.FilterMessageSnippet("has no subscription").Len() != 1 {
		t.Fatalf("no warning; logs: %v", logs.All())
	}
}
