package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/internal/testenv/faultproxy"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/sinks"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/watermark"
)

// poison marks the payloads of crafted bad messages, so that a test can
// check that no log line carries a payload.
const poison = "POISON-PAYLOAD"

// deadLetterNames are a test's fresh dead-letter topic, its replay
// subscription (setup's default name), and a dead-letter table.
func (e *env) deadLetterNames() (topic, sub, table string) {
	suffix := strings.TrimPrefix(e.topic, "t-")
	return "dl-" + suffix, "dl-" + suffix + "-replay", "dead-" + suffix
}

// deadLetterYAML is the pipeline's dead_letter section for an output kind.
func (e *env) deadLetterYAML(kind string) string {
	topic, _, table := e.deadLetterNames()
	if kind == deadletter.KindTable {
		return fmt.Sprintf("    dead_letter: {bigtable_table: %s}\n", table)
	}
	return fmt.Sprintf("    dead_letter: {topic: %s}\n", topic)
}

// publishOne publishes one message to the test topic and returns its ID.
func (e *env) publishOne(data string, attrs map[string]string) string {
	e.t.Helper()
	pub := e.pubsub.Publisher(e.topic)
	defer pub.Stop()
	id, err := pub.Publish(context.Background(), &pubsub.Message{Data: []byte(data), Attributes: attrs}).Get(context.Background())
	if err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	return id
}

// pull acks and returns the messages of subscription sub (a short name):
// at least want of them, waiting up to timeout, and then whatever else
// arrives within a few seconds, so that a test can count them exactly.
func (e *env) pull(sub string, want int, timeout time.Duration) []*pubsubpb.PubsubMessage {
	e.t.Helper()
	name := "projects/" + project + "/subscriptions/" + sub
	var out []*pubsubpb.PubsubMessage
	deadline := time.Now().Add(timeout)
	quietUntil := time.Time{}
	for {
		if len(out) >= want && quietUntil.IsZero() {
			quietUntil = time.Now().Add(3 * time.Second)
		}
		if !quietUntil.IsZero() && time.Now().After(quietUntil) {
			return out
		}
		if quietUntil.IsZero() && time.Now().After(deadline) {
			e.t.Fatalf("%d of %d messages on %s after %v", len(out), want, sub, timeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := e.pubsub.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: name, MaxMessages: 100})
		cancel()
		if status.Code(err) == codes.DeadlineExceeded || err == context.DeadlineExceeded {
			continue
		}
		if err != nil {
			e.t.Fatalf("pull %s: %v", sub, err)
		}
		var ids []string
		for _, rm := range resp.ReceivedMessages {
			out = append(out, rm.Message)
			ids = append(ids, rm.AckId)
		}
		if len(ids) > 0 {
			if err := e.pubsub.SubscriptionAdminClient.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: name, AckIds: ids}); err != nil {
				e.t.Fatalf("ack on %s: %v", sub, err)
			}
		}
	}
}

// metricsText returns the child's /metrics page.
func (c *child) metricsText() string {
	c.t.Helper()
	resp, err := http.Get("http://" + c.addr + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestEveryReasonIsDeadLetteredWithItsAttributes publishes a crafted
// message for each reason the binary can meet without a watermark (late has
// its own test), next to good ones, and finds each in the dead-letter topic
// with the contract's attributes, counted by reason in /status and
// /metrics, logged with its reason and ID and without its payload.
func TestEveryReasonIsDeadLetteredWithItsAttributes(t *testing.T) {
	e := newEnv(t)
	path, cfg := e.writeConfig(e.configYAML(config.ModeExactlyOnce, e.deadLetterYAML(deadletter.KindTopic)))
	_, dlSub, _ := e.deadLetterNames()
	const good = 10
	e.publish(0, good)

	ts := func(i int) string { return fmt.Sprint(eventTime(i).UnixMicro()) }
	crafted := []struct {
		reason deadletter.Reason
		data   string
		attrs  map[string]string
	}{
		{deadletter.InvalidPayload, poison + " is not JSON", map[string]string{"id": "bad-1", "ts": ts(1)}},
		{deadletter.MissingField, `{"payload":"` + poison + `, no n"}`, map[string]string{"id": "bad-2", "ts": ts(2)}},
		{deadletter.MissingField, `{"n":3,"payload":"` + poison + `, no id"}`, map[string]string{"ts": ts(3)}},
		{deadletter.BadEventTime, `{"n":4,"payload":"` + poison + `"}`, map[string]string{"id": "bad-4", "ts": "yesterday"}},
		// A row key over Bigtable's 4 KiB, found before any write.
		{deadletter.TooLarge, `{"n":5,"payload":"` + poison + `"}`, map[string]string{"id": strings.Repeat("k", 5000), "ts": ts(5)}},
		// Bigtable takes no cell timestamp before 1970: an event time
		// before it is refused at decode. (sink_rejected, Bigtable's own
		// refusal of an entry, has no input left that pubsink does not
		// catch first; sinks/bigtable's tests provoke it.)
		{deadletter.BadEventTime, `{"n":6,"payload":"` + poison + `"}`, map[string]string{"id": "bad-6", "ts": "-1000000"}},
	}
	type sent struct {
		reason deadletter.Reason
		data   string
		attrs  map[string]string
		at     time.Time
	}
	want := map[string]sent{} // by message ID
	for _, c := range crafted {
		at := time.Now()
		want[e.publishOne(c.data, c.attrs)] = sent{c.reason, c.data, c.attrs, at}
	}

	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	msgs := e.pull(dlSub, len(crafted), time.Minute)
	if len(msgs) != len(crafted) {
		t.Fatalf("%d dead letters, want %d", len(msgs), len(crafted))
	}
	for _, m := range msgs {
		a := m.Attributes
		id := a[deadletter.AttrMessageID]
		w, ok := want[id]
		if !ok {
			t.Errorf("dead letter with pubsink_message_id %q, not a crafted message; attributes %v", id, a)
			continue
		}
		delete(want, id)
		if got := deadletter.Reason(a[deadletter.AttrReason]); got != w.reason {
			t.Errorf("message %s: reason %s, want %s (error %q)", id, got, w.reason, a[deadletter.AttrError])
		}
		if a[deadletter.AttrPipeline] != "e2e" {
			t.Errorf("message %s: pipeline %q", id, a[deadletter.AttrPipeline])
		}
		if n := len(a[deadletter.AttrError]); n == 0 || n > deadletter.MaxErrorBytes {
			t.Errorf("message %s: pubsink_error of %d bytes", id, n)
		}
		published, err1 := time.Parse(time.RFC3339Nano, a[deadletter.AttrPublishTime])
		failed, err2 := time.Parse(time.RFC3339Nano, a[deadletter.AttrFailedAt])
		switch {
		case err1 != nil || err2 != nil:
			t.Errorf("message %s: times not RFC 3339: %v %v", id, err1, err2)
		case published.Before(w.at.Add(-time.Second)) || published.After(w.at.Add(5*time.Second)):
			t.Errorf("message %s: pubsink_publish_time %s, published at about %s", id, published, w.at)
		case failed.Before(published):
			t.Errorf("message %s: failed at %s, before its publication %s", id, failed, published)
		}
		if string(m.Data) != w.data {
			t.Errorf("message %s: data %q, want %q", id, m.Data, w.data)
		}
		for k, v := range w.attrs {
			if a[k] != v {
				t.Errorf("message %s: attribute %s = %q, want the original %q", id, k, a[k], v)
			}
		}
		for k := range a {
			if _, orig := w.attrs[k]; !orig && !isContractAttribute(k) {
				t.Errorf("message %s: unexpected attribute %s", id, k)
			}
		}
	}
	for id, w := range want {
		t.Errorf("message %s (%s) was not dead-lettered", id, w.reason)
	}

	waitStatus(t, c, func(st map[string]any) bool {
		return st["committed"].(float64) >= good && st["in_flight"].(float64) == 0
	}, 30*time.Second)
	st := c.status()["dead_lettered"].(map[string]any)
	wantCounts := map[deadletter.Reason]float64{deadletter.InvalidPayload: 1, deadletter.MissingField: 2, deadletter.BadEventTime: 2, deadletter.TooLarge: 1, deadletter.SinkRejected: 0, deadletter.Late: 0}
	text := c.metricsText()
	for r, n := range wantCounts {
		if st[string(r)] != n {
			t.Errorf("/status dead_lettered[%s] = %v, want %v", r, st[string(r)], n)
		}
		line := fmt.Sprintf(`pubsink_messages_dead_lettered_total{pipeline="e2e",reason="%s"} %v`, r, n)
		if !strings.Contains(text, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if n := e.countRows(e.table); n != good {
		t.Errorf("%d rows, want the %d good messages", n, good)
	}
	logs, err := os.ReadFile(c.log.Name())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(logs, []byte(poison)) {
		t.Errorf("a payload is in the logs:\n%s", tail(string(logs), 20))
	}
	for _, m := range msgs {
		id, reason := m.Attributes[deadletter.AttrMessageID], m.Attributes[deadletter.AttrReason]
		if !bytes.Contains(logs, []byte(`"message_id":"`+id+`","reason":"`+reason+`"`)) {
			t.Errorf("no log line names dead-lettered message %s with its reason %s", id, reason)
		}
	}
}

func isContractAttribute(k string) bool {
	switch k {
	case deadletter.AttrReason, deadletter.AttrError, deadletter.AttrPipeline, deadletter.AttrMessageID,
		deadletter.AttrPublishTime, deadletter.AttrFailedAt:
		return true
	}
	return false
}

// fixedWatermark is a tracker whose watermark does not move.
type fixedWatermark time.Time

func (w fixedWatermark) Watermark() time.Time { return time.Time(w) }
func (fixedWatermark) Finished(context.Context, *source.Message, time.Time) error {
	return nil
}
func (fixedWatermark) WatchInFlight(func() (time.Time, bool)) {}
func (fixedWatermark) Stalled() error                         { return nil }
func (fixedWatermark) Run(context.Context) error              { return nil }
func (fixedWatermark) Close(context.Context) error            { return nil }
func (fixedWatermark) Stats() watermark.Stats                 { return watermark.Stats{} }

// TestLateDataIsDeadLetteredWithReasonLate wires a pipeline by hand, as the
// app does, with a fixed watermark (the app has no tracker to inject), and
// checks that late_data: dead_letter sends messages behind it to the
// dead-letter topic with reason late, and writes the others.
func TestLateDataIsDeadLetteredWithReasonLate(t *testing.T) {
	e := newEnv(t)
	_, cfg := e.writeConfig(e.configYAML(config.ModeAtLeastOnce,
		"    watermark: {late_data: dead_letter}\n"+e.deadLetterYAML(deadletter.KindTopic)))
	_, dlSub, _ := e.deadLetterNames()
	pc := cfg.Pipelines[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dl, err := deadletter.Open(ctx, nopLogger(), cfg, pc, deadletter.Clients{PubSub: e.pubsub})
	if err != nil {
		t.Fatal(err)
	}
	sink := btsink.New(e.bigtable, nopLogger(), pc.Sink, nil)
	m := metrics.New().Pipeline(pc.Name)
	p, err := pipeline.New(nopLogger(), pc, pipeline.Deps{
		Source:     source.New(e.pubsub, nopLogger(), cfg.SubscriptionName(pc.Source.Subscription), pc.Source, 64<<20),
		Sink:       sink,
		Limits:     btsink.Limits,
		Tracker:    fixedWatermark(eventTime(50)),
		DeadLetter: dl,
		Metrics:    m,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, ctx) }()

	e.publish(40, 60) // 40..49 are behind the watermark
	msgs := e.pull(dlSub, 10, time.Minute)
	e.waitRows(e.table, 10, time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	p.Close(context.Background())
	if len(msgs) != 10 {
		t.Fatalf("%d dead letters, want 10", len(msgs))
	}
	for _, msg := range msgs {
		if r := msg.Attributes[deadletter.AttrReason]; r != string(deadletter.Late) || !strings.Contains(msg.Attributes[deadletter.AttrError], "watermark") {
			t.Errorf("message %s: reason %q, error %q", msg.Attributes["id"], r, msg.Attributes[deadletter.AttrError])
		}
	}
	rows := e.readTable(e.table)
	for i := 50; i < 60; i++ {
		if _, ok := rows[rowKey(i)]; !ok {
			t.Errorf("row %s, on time, is missing", rowKey(i))
		}
	}
	if n := int(metrics.Value(m.DeadLettered(string(deadletter.Late)))); n != 10 {
		t.Errorf("dead_lettered{reason=late} = %d, want 10", n)
	}
}

// TestDeletedDeadLetterTopicKeepsTheOriginalUnacked deletes the
// dead-letter topic after start: a bad message then cannot be copied, so it
// stays unacked (and is not counted as dead-lettered) until the stop nacks
// it; once the topic is back, the redelivered original is dead-lettered.
func TestDeletedDeadLetterTopicKeepsTheOriginalUnacked(t *testing.T) {
	e := newEnv(t)
	yaml := strings.Replace(e.configYAML(config.ModeExactlyOnce, e.deadLetterYAML(deadletter.KindTopic)), "shutdown_timeout: 10s", "shutdown_timeout: 3s", 1)
	_, cfg := e.writeConfig(yaml)
	dlTopic, _, _ := e.deadLetterNames()
	dlName := cfg.TopicName(dlTopic)
	ctx := context.Background()
	run := func() (*app.App, func() error) {
		t.Helper()
		runCtx, cancel := context.WithCancel(ctx)
		a, err := app.Open(runCtx, nopLogger(), cfg, app.Options{PubSub: e.pubsub, Bigtable: e.bigtableFor, HTTPAddr: "-"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		return a, func() error { cancel(); return <-done }
	}

	a, stop := run()
	if err := e.pubsub.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: dlName}); err != nil {
		t.Fatal(err)
	}
	e.publish(0, 5)
	badID := e.publishOne(poison+" not JSON", map[string]string{"id": "bad", "ts": fmt.Sprint(eventTime(9).UnixMicro())})
	e.waitRows(e.table, 5, time.Minute)
	p := a.Pipelines()[0]
	// The bad message is held: received, in flight, not dead-lettered, for
	// as long as the output fails.
	for range 10 {
		st := p.Status()
		if st.InFlight != 1 || st.DeadLettered[string(deadletter.InvalidPayload)] != 0 {
			t.Fatalf("with the dead-letter topic deleted: %+v", st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopStart := time.Now()
	// The held message uses all of shutdown_timeout and is nacked; the stop
	// is still clean (docs/reference.md, "Stop"): Run returns nil.
	if err := stop(); err != nil {
		t.Fatalf("Run after a stop with a message held until shutdown_timeout: %v; want a clean stop", err)
	}
	st := p.Status()
	if st.Retried != 1 || st.Committed != 5 {
		t.Fatalf("after the stop: %+v; want the bad message nacked (retried 1)", st)
	}
	t.Logf("stopped in %v with the bad message nacked", time.Since(stopStart).Round(time.Millisecond))

	// The topic comes back (with a new subscription: the old one was
	// detached when its topic was deleted).
	if _, err := e.pubsub.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: dlName}); err != nil {
		t.Fatal(err)
	}
	sub2 := "dl2-" + strings.TrimPrefix(e.topic, "t-")
	if _, err := e.pubsub.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: cfg.SubscriptionName(sub2), Topic: dlName}); err != nil {
		t.Fatal(err)
	}
	a, stop = run()
	msgs := e.pull(sub2, 1, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(msgs) != 1 || msgs[0].Attributes[deadletter.AttrMessageID] != badID || msgs[0].Attributes[deadletter.AttrReason] != string(deadletter.InvalidPayload) {
		t.Fatalf("dead letters after the topic came back: %v; want the redelivered original %s", msgs, badID)
	}
	if st := a.Pipelines()[0].Status(); st.DeadLettered[string(deadletter.InvalidPayload)] != 1 {
		t.Fatalf("second run: %+v", st)
	}
}

// failCounter counts the errors a sink returns.
type failCounter struct {
	sinks.Sink
	failures atomic.Int64
}

func (f *failCounter) Write(ctx context.Context, rows []sinks.Row) error {
	err := f.Sink.Write(ctx, rows)
	if err != nil {
		f.failures.Add(1)
	}
	return err
}

// bigtableProxy starts a faultproxy in front of the Bigtable emulator,
// closed when the test ends, and returns it with an app.Options.Bigtable
// that connects through it.
func (e *env) bigtableProxy() (*faultproxy.Proxy, func(context.Context, string) (*bigtable.Client, error)) {
	e.t.Helper()
	proxy, err := faultproxy.Start(e.bt.Host)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { proxy.Close() })
	viaProxy := &emulator.Bigtable{Host: proxy.Addr()}
	return proxy, func(ctx context.Context, inst string) (*bigtable.Client, error) {
		c, admin, err := viaProxy.Clients(ctx, project, inst)
		if admin != nil {
			admin.Close()
		}
		return c, err
	}
}

// TestBigtableStallDeadLettersNothingAndLosesNothing stalls every
// connection to Bigtable mid-stream (through internal/testenv/faultproxy), then
// resets them all: transient failures however long; nothing may be
// dead-lettered, lost or doubled. The stall outlasts the sink's 30 s call
// timeout, so that DeadlineExceeded reaches the pipeline's classification
// (a 20 s stall only makes the calls wait, and the client's own retry
// hides the reset).
func TestBigtableStallDeadLettersNothingAndLosesNothing(t *testing.T) {
	const n = 2000
	const stall = 35 * time.Second
	e := newEnv(t)
	// at_least_once, so that the sink's write is the first call to
	// Bigtable a message makes and the stall reaches the sink's
	// classification; in exactly_once the dedupe claim comes first and
	// takes the stall (the chaos campaign stalls that path).
	_, cfg := e.writeConfig(e.configYAML(config.ModeAtLeastOnce, e.deadLetterYAML(deadletter.KindTopic)))
	_, dlSub, _ := e.deadLetterNames()
	proxy, viaProxy := e.bigtableProxy()
	var counter *failCounter
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.Open(ctx, nopLogger(), cfg, app.Options{
		PubSub:   e.pubsub,
		Bigtable: viaProxy,
		WrapSink: func(_ string, s sinks.Sink) sinks.Sink { counter = &failCounter{Sink: s}; return counter },
		HTTPAddr: "-",
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	// Half the stream before the stall, half while Bigtable is stalled
	// (Pub/Sub is not behind the proxy).
	e.publish(0, n/2)
	e.waitRows(e.table, n/2, time.Minute)
	proxy.Stall()
	before := e.countRows(e.table)
	e.publish(n/2, n)
	time.Sleep(stall)
	during := e.countRows(e.table) - before
	proxy.ResetAll() // and the connections are lost, too
	proxy.Resume()
	e.waitRows(e.table, n, 3*time.Minute)
	p := a.Pipelines()[0]
	waitCommitted(t, p, n, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := p.Status()
	for reason, count := range st.DeadLettered {
		if count != 0 {
			t.Errorf("%d messages dead-lettered as %s during a Bigtable stall", count, reason)
		}
	}
	if msgs := e.pull(dlSub, 0, 0); len(msgs) != 0 {
		t.Errorf("%d messages on the dead-letter topic", len(msgs))
	}
	// The stall bit: the drain was under way and stopped while it lasted
	// (one write already in progress may complete: see faultproxy.Stall),
	// and writes failed with a transient error that the pipeline retried.
	if before >= n || during > 500 || counter.failures.Load() == 0 {
		t.Errorf("%d rows before the stall, %d during it, %d failed writes: the stall did not bite", before, during, counter.failures.Load())
	}
	e.checkRows(n)
	t.Logf("stall of %v after %d rows: %d rows written during it, %d writes failed and were retried, %d deliveries nacked; all %d rows once, nothing dead-lettered",
		stall, before, during, counter.failures.Load(), st.Retried, n)
}

// TestABigtableStallMakesOneDeadLetterCopyPerPoisonMessage: in
// exactly_once mode, poison interleaved with good messages during a
// Bigtable stall, on a subscription with more backlog than flow control
// admits, so that the emulator sends many messages twice (see
// internal/testenv/emulator's doc): every good message is written once and
// every poison message has exactly one dead-letter copy, however often it
// was delivered.
func TestABigtableStallMakesOneDeadLetterCopyPerPoisonMessage(t *testing.T) {
	const n = 5000
	const poison = 100
	e := newEnv(t)
	_, cfg := e.writeConfig(e.configYAML(config.ModeExactlyOnce, e.deadLetterYAML(deadletter.KindTopic)))
	_, dlSub, _ := e.deadLetterNames()
	proxy, viaProxy := e.bigtableProxy()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.Open(ctx, nopLogger(), cfg, app.Options{
		PubSub:   e.pubsub,
		Bigtable: viaProxy,
		HTTPAddr: "-",
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	e.publish(0, 500)
	e.waitRows(e.table, 500, time.Minute)
	proxy.Stall()
	for i := 0; i < poison; i++ {
		e.publish(500+i*(n-500)/poison, 500+(i+1)*(n-500)/poison)
		e.publishOne("not json", map[string]string{"id": fmt.Sprintf("p%04d", i), "ts": "1"})
	}
	p := a.Pipelines()[0]
	time.Sleep(15 * time.Second)
	proxy.Resume()
	e.waitRows(e.table, n, 3*time.Minute)
	waitCommitted(t, p, n, 30*time.Second)
	time.Sleep(5 * time.Second)
	st := p.Status()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	copies := map[string]int{}
	for _, m := range e.pull(dlSub, poison, time.Minute) {
		copies[m.Attributes["id"]]++
	}
	doubled := 0
	for _, c := range copies {
		doubled += c - 1
	}
	t.Logf("%d deliveries of %d messages (%d duplicates); %d dead-letter copies of %d poison messages",
		st.Received, n+poison, st.Duplicate, len(copies)+doubled, poison)
	if st.Received <= n+poison {
		t.Fatalf("%d deliveries of %d messages: nothing was delivered twice, the test did not bite", st.Received, n+poison)
	}
	if len(copies) != poison || doubled != 0 {
		t.Errorf("%d poison messages have a copy, %d copies too many; want each of %d once", len(copies), doubled, poison)
	}
	if got := st.DeadLettered[string(deadletter.InvalidPayload)]; got != poison {
		t.Errorf("dead_lettered{invalid_payload} = %d, want %d", got, poison)
	}
	e.checkRows(n)
}

// TestReplayRoundTrip dead-letters messages under a broken config, fixes
// the config, replays (dry run, --reason, --limit, then the rest), and
// finds every row written once and the dead-letter output drained; for a
// topic and for a table output.
func TestReplayRoundTrip(t *testing.T) {
	for _, kind := range []string{deadletter.KindTopic, deadletter.KindTable} {
		t.Run(kind, func(t *testing.T) { testReplayRoundTrip(t, kind) })
	}
}

func testReplayRoundTrip(t *testing.T, kind string) {
	const n = 100
	e := newEnv(t)
	_, dlSub, dlTable := e.deadLetterNames()
	fixed := e.configYAML(config.ModeExactlyOnce, e.deadLetterYAML(kind))
	broken := strings.Replace(fixed, `n: "{data.n}"`, `n: "{data.count}"`, 1)
	path, cfg := e.writeConfig(broken)
	e.publish(0, n)

	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	waitStatus(t, c, func(st map[string]any) bool {
		return st["dead_lettered"].(map[string]any)[string(deadletter.MissingField)].(float64) >= n && st["in_flight"].(float64) == 0
	}, time.Minute)
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if rows := e.countRows(e.table); rows != 0 {
		t.Fatalf("%d rows written by the broken config", rows)
	}

	path, cfg = e.writeConfig(fixed)
	replay := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"deadletter", "replay", "--config", path, "--pipeline", "e2e"}, args...)...)
		cmd.Env = append(append(os.Environ(), e.ps.Env()...), e.bt.Env()...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("replay %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, tail(stdout.String(), 10), tail(stderr.String(), 20))
		}
		if strings.Contains(stdout.String(), "reading") { // the payloads say "reading N of the e2e stream"
			t.Errorf("replay printed a payload:\n%s", stdout.String())
		}
		return stdout.String()
	}
	expect := func(out string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(out, "\n"+l+"\n") {
				t.Errorf("replay output lacks %q:\n%s", l, tail(out, 8))
			}
		}
	}

	out := replay("--dry-run")
	expect(out, fmt.Sprintf("would replay: %d", n), "failed: 0")
	out = replay("--reason", "late")
	expect(out, "replayed: 0", fmt.Sprintf("skipped by reason: missing_field=%d", n))
	out = replay("--limit", "10")
	expect(out, "replayed: 10")

	c = e.start(path, cfg)
	c.waitReady(30 * time.Second)
	start := time.Now()
	out = replay()
	expect(out, fmt.Sprintf("replayed: %d", n-10), "skipped by reason: none", "failed: 0")
	e.waitRows(e.table, n, time.Minute)
	waitStatus(t, c, func(st map[string]any) bool {
		return st["committed"].(float64) >= n && st["in_flight"].(float64) == 0
	}, 30*time.Second)
	t.Logf("%s: replayed %d dead letters; all rows written %v after the replay started", kind, n, time.Since(start).Round(time.Millisecond))
	expect(replay(), "replayed: 0")
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	e.checkRows(n)
	switch kind {
	case deadletter.KindTopic:
		if msgs := e.pull(dlSub, 0, 0); len(msgs) != 0 {
			t.Errorf("%d copies left on the replay subscription", len(msgs))
		}
	case deadletter.KindTable:
		if rows := e.countRows(dlTable); rows != 0 {
			t.Errorf("%d rows left in the dead-letter table", rows)
		}
	}
}
