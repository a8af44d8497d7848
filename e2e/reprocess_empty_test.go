package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/app"
)

// TestReprocessOfARangeTheTopicNoLongerGivesFails: the user's first hour.
// The topic was created without message retention, the live pipeline
// committed a range, then source.topic_message_retention was added and
// setup widened the topic's retention. On the emulator a subscription
// created after that starts empty (on Pub/Sub, what was published before
// the change is not retained either), so a reprocess of the range gets no
// message of it: it says so, naming the range, why and what to do, and
// fails (a ConfigError: exit 2), where it used to print "done" with 0
// messages. An audit of the range does the same, where it said "clean".
// A range in which the live pipeline claimed nothing is no error: the
// summary notes that nothing arrived.
func TestReprocessOfARangeTheTopicNoLongerGivesFails(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	plain := e.configYAML("exactly_once", "")
	_, cfg := e.writeConfig(plain)
	quietFrom := time.Now().Add(-3 * time.Second).UTC()
	quietUntil := time.Now().Add(-2 * time.Second).UTC()
	time.Sleep(10 * time.Millisecond)

	runCtx, stop := context.WithCancel(ctx)
	a, err := app.Open(runCtx, nopLogger(), cfg, app.Options{PubSub: e.pubsub, Bigtable: e.bigtableFor, HTTPAddr: "-"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	from := time.Now().UTC()
	e.publish(0, 20)
	waitCommitted(t, a.Pipelines()[0], 20, time.Minute)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("live run: %v", err)
	}
	until := time.Now().UTC()

	// The user adds retention to the configuration and runs setup, which
	// widens the existing topic's.
	withRetention := strings.Replace(plain, "      subscription: "+e.sub+"\n", "      subscription: "+e.sub+"\n      topic_message_retention: 1h\n", 1)
	_, cfg = e.writeConfig(withRetention)
	topic, err := e.pubsub.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/" + project + "/topics/" + e.topic})
	if err != nil || topic.GetMessageRetentionDuration().AsDuration() != time.Hour {
		t.Fatalf("setup did not widen the topic's retention: %v, %v", topic.GetMessageRetentionDuration(), err)
	}

	var out bytes.Buffer
	req := app.ReprocessRequest{Pipeline: "e2e", From: from.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), Idle: 2 * time.Second}
	err = app.Reprocess(ctx, nopLogger(), cfg, req, e.reprocessOptions(), &out, io.Discard)
	var ce *app.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("a reprocess of a range the topic no longer gives: %v, want a ConfigError (exit 2)\n%s", err, out.String())
	}
	for _, want := range []string{
		"no message of the range (" + rangeInOnePrecision(from, until) + ") arrived",
		`the live pipeline "e2e" claimed 20 messages' keys in that time`,
		"retention added after the topic was created", "--from too far back",
		"gcloud pubsub topics describe projects/" + project + "/topics/" + e.topic, "--snapshot",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	t.Logf("stdout:\n%s\nerror: %v", out.String(), err)
	if !strings.Contains(out.String(), "messages     0 ") {
		t.Errorf("the summary does not say 0 messages:\n%s", out.String())
	}
	if e.subscriptionExists("projects/" + project + "/subscriptions/" + e.sub + "-reprocess") {
		t.Error("the run's subscription is still there: the run did not end")
	}

	// An audit of the same range reads nothing either: it says so and
	// fails the same way, where it used to say "clean" (exit 0).
	out.Reset()
	areq := app.AuditRequest{Pipeline: "e2e", From: from.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), Idle: 2 * time.Second}
	err = app.Audit(ctx, nopLogger(), cfg, areq, e.reprocessOptions(), &out, io.Discard)
	if !errors.As(err, &ce) {
		t.Fatalf("an audit of a range the topic no longer gives: %v, want a ConfigError (exit 2)\n%s", err, out.String())
	}
	for _, want := range []string{
		"audit e2e~a", "no message of the range (" + rangeInOnePrecision(from, until) + ") arrived",
		`the live pipeline "e2e" claimed 20 messages' keys in that time`, "audit only a range published after retention was enabled",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the audit's error lacks %q:\n%v", want, err)
		}
	}
	if s := out.String(); strings.Contains(s, "clean") || !strings.Contains(s, "nothing compared: no message of the range arrived") {
		t.Errorf("the audit's summary of an empty read:\n%s", s)
	}

	// A range before anything was published: nothing claimed, a note.
	out.Reset()
	req = app.ReprocessRequest{Pipeline: "e2e", From: quietFrom.Format(time.RFC3339Nano), Until: quietUntil.Format(time.RFC3339Nano), Idle: 2 * time.Second, NoRestorePoint: true}
	if err := app.Reprocess(ctx, nopLogger(), cfg, req, e.reprocessOptions(), &out, io.Discard); err != nil {
		t.Fatalf("a reprocess of a quiet range: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "  note         no message of the range arrived; if the topic had messages in it,") {
		t.Errorf("the summary of a quiet range has no note:\n%s", out.String())
	}
	out.Reset()
	areq = app.AuditRequest{Pipeline: "e2e", From: quietFrom.Format(time.RFC3339Nano), Until: quietUntil.Format(time.RFC3339Nano), Idle: 2 * time.Second}
	if err := app.Audit(ctx, nopLogger(), cfg, areq, e.reprocessOptions(), &out, io.Discard); err != nil {
		t.Fatalf("an audit of a quiet range: %v\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "nothing compared: no message of the range arrived") || !strings.Contains(s, "  note         no message of the range arrived; if the topic had messages in it,") {
		t.Errorf("the audit's summary of a quiet range:\n%s", s)
	}
}

// rangeInOnePrecision is a range as the reference says the product prints
// it: both ends RFC 3339 UTC with milliseconds when both are whole ones,
// else both with all nine digits of nanoseconds (never RFC3339Nano's
// trimmed zeros, which a time ending in 0 ns would show).
func rangeInOnePrecision(from, until time.Time) string {
	layout := "2006-01-02T15:04:05.000Z07:00"
	if from.Nanosecond()%int(time.Millisecond) != 0 || until.Nanosecond()%int(time.Millisecond) != 0 {
		layout = "2006-01-02T15:04:05.000000000Z07:00"
	}
	return "from " + from.UTC().Format(layout) + " until " + until.UTC().Format(layout)
}
