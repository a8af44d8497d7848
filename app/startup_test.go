package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pubsink/pubsink/reprocess"
)

// TestAStartThatWaitsForPubSubAnswersProbesAndStopsCleanly: with Pub/Sub
// unreachable, run serves /healthz at once and /readyz names what it waits
// for, retries, and a stop during the wait returns nil (exit 0).
func TestAStartThatWaitsForPubSubAnswersProbesAndStopsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // nothing answers there once closed
	ln.Close()
	t.Setenv("PUBSUB_EMULATOR_HOST", dead)
	httpAddr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`project: p
http: {addr: %q}
pipelines:
  - name: a
    mode: at_least_once
    source: {subscription: subs-a}
    sink: {type: stdout}
`, httpAddr)), 0o644)
	old := startupAttemptTimeout
	startupAttemptTimeout = 300 * time.Millisecond
	defer func() { startupAttemptTimeout = old }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs strings.Builder
	done := make(chan error, 1)
	go func() { done <- RunFile(ctx, path, &syncWriter{w: &logs}) }()

	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + httpAddr + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for Pub/Sub at "+dead) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q; want 503 naming the Pub/Sub endpoint it waits for", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while starting, want 200", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunFile stopped during start-up = %v, want nil (exit 0)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunFile did not return within 5s of the stop")
	}
	if !strings.Contains(logs.String(), "waiting_for") || !strings.Contains(logs.String(), dead) {
		t.Errorf("the log does not say what the start waits for:\n%s", logs.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncWriter serializes the logger's writes into w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// openAndClose opens an App of cfg on f with log, and closes it at once.
func openAndClose(t *testing.T, f *fakes, cfg string, ordering bool, log *zap.Logger) error {
	t.Helper()
	c := parse(t, cfg)
	c.Pipelines[0].Source.Ordering = ordering
	opts := f.opts
	opts.HTTPAddr = "-"
	a, err := Open(context.Background(), log, c, opts)
	if err != nil {
		return err
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(stopped); err != nil {
		t.Fatal(err)
	}
	return nil
}

// TestRunRefusesASubscriptionWithoutOrderingUnderSourceOrdering: with
// source.ordering, run refuses a subscription without message ordering,
// naming it, the key and the fix; the one setup creates is accepted.
func TestRunRefusesASubscriptionWithoutOrderingUnderSourceOrdering(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	if err := Setup(ctx, parse(t, yaml), f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	err := openAndClose(t, f, yaml, true, zap.NewNop())
	for _, want := range []string{
		"pipeline orders: subscription projects/p/subscriptions/orders-sub has no message ordering, and source.ordering is true",
		"gcloud pubsub subscriptions create NEW --topic=projects/p/topics/orders --enable-message-ordering",
		"set source.ordering to false",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open = %v; want it to say %q", err, want)
		}
	}
	if startupTransient(err) {
		t.Errorf("Open = %v: a transient failure, where a subscription without ordering is the configuration's", err)
	}

	g := newFakes(t)
	c := parse(t, yaml)
	c.Pipelines[0].Source.Ordering = true
	if err := Setup(ctx, c, g.ps, g.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := openAndClose(t, g, yaml, true, zap.NewNop()); err != nil {
		t.Fatalf("Open of the subscription setup created with ordering: %v", err)
	}
}

// TestRunSaysWhenTheSubscriptionOrdersUnasked: a subscription with message
// ordering under source.ordering false starts, with an info line that says
// the client orders the messages of each key anyway.
func TestRunSaysWhenTheSubscriptionOrdersUnasked(t *testing.T) {
	ctx := context.Background()
	for _, ordered := range []bool{true, false} {
		f := newFakes(t)
		if _, err := f.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/orders"}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: "projects/p/subscriptions/orders-sub", Topic: "projects/p/topics/orders", EnableMessageOrdering: ordered}); err != nil {
			t.Fatal(err)
		}
		if err := Setup(ctx, parse(t, yaml), f.ps, f.admin, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zapcore.InfoLevel)
		if err := openAndClose(t, f, yaml, false, zap.New(core)); err != nil {
			t.Fatalf("ordered %v: Open = %v; want a start", ordered, err)
		}
		lines := logs.FilterMessageSnippet("message ordering").All()
		if !ordered {
			if len(lines) != 0 {
				t.Errorf("an unordered subscription was logged as ordered: %v", lines[0].Message)
			}
			continue
		}
		if len(lines) != 1 || lines[0].Level != zapcore.InfoLevel ||
			!strings.Contains(lines[0].Message, "source.ordering does not ask for") ||
			!strings.Contains(lines[0].Message, "one at a time, in publish order") ||
			lines[0].ContextMap()["subscription"] != "projects/p/subscriptions/orders-sub" || lines[0].ContextMap()["pipeline"] != "orders" {
			t.Errorf("log lines on message ordering: %+v; want one info line naming the pipeline and subscription", lines)
		}
	}
}

// TestReprocessSubscriptionCopiesTheLiveOrdering: the run's own
// subscription has the live one's message ordering (with its ack deadline
// and retry policy), so that the run's start-up checks accept it under
// source.ordering as run accepts the live one.
func TestReprocessSubscriptionCopiesTheLiveOrdering(t *testing.T) {
	ctx := context.Background()
	for _, ordered := range []bool{true, false} {
		f := newFakes(t)
		c := parse(t, yaml)
		c.Pipelines[0].Source.Ordering = ordered
		if err := Setup(ctx, c, f.ps, f.admin, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		live, err := f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/orders-sub"})
		if err != nil || live.EnableMessageOrdering != ordered {
			t.Fatalf("live subscription %v, %v; want ordering %v", live, err, ordered)
		}
		rec := &reprocess.Record{Subscription: live.Name + "-reprocess", From: time.Now().Add(-time.Minute)}
		if err := prepareSubscription(ctx, f.ps, live, rec); err != nil {
			t.Fatal(err)
		}
		got, err := f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: rec.Subscription})
		if err != nil {
			t.Fatal(err)
		}
		if got.EnableMessageOrdering != ordered || got.AckDeadlineSeconds != live.AckDeadlineSeconds ||
			got.GetRetryPolicy().GetMaximumBackoff().AsDuration() != redeliveryPolicy.MaximumBackoff.AsDuration() {
			t.Errorf("live ordering %v: the run's subscription has ordering %v, ack deadline %d, retry policy %v; want the live one's",
				ordered, got.EnableMessageOrdering, got.AckDeadlineSeconds, got.GetRetryPolicy())
		}
		if err := openAndClose(t, f, strings.Replace(yaml, "subscription: orders-sub,", "subscription: orders-sub-reprocess,", 1), ordered, zap.NewNop()); err != nil {
			t.Errorf("live ordering %v: the run's subscription is refused: %v", ordered, err)
		}
	}
}
