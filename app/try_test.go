package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/zap"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// tryYAML is the case: a Debezium-like JSON change pipeline with
// on_missing: skip and a misspelt path for last_name; email is emptied
// when missing.
const tryYAML = `
project: p
http: {addr: "127.0.0.1:0"}
shutdown_timeout: 5s
state: {instance: i}
pipelines:
  - name: customers
    mode: at_least_once
    source: {topic: customers, subscription: customers-sub, streams: 1, topic_message_retention: 3h}
    filter: "data.op in ['c', 'u', 'd', 'r']"
    sink:
      table: customers
      row_key: "{= data.op == 'd' ? data.before.id : data.after.id}"
      op: "data.op == 'd' ? 'delete' : 'set'"
      write_mode: replace_if_newer
      on_missing: skip
      on_missing_columns: {email: empty}
      columns:
        first_name: "{data.after.first_name}"
        last_name: "{data.after.lastname}"
        email: "{data.after.email}"
`

// tryMessages are published in this order: 3 rows (one without an email,
// emptied), a delete, a truncate (filtered) and a payload that is not JSON
// (dead-lettered).
var tryMessages = []string{
	`{"op":"c","after":{"id":1,"first_name":"Ada","last_name":"Lovelace","email":"ada@example.com"}}`,
	`{"op":"u","after":{"id":2,"first_name":"Alan","last_name":"Turing","email":"alan@example.com"}}`,
	`{"op":"r","after":{"id":3,"first_name":"Grace","last_name":"Hopper"}}`,
	`{"op":"d","before":{"id":2},"after":null}`,
	`{"op":"t"}`,
	`not json`,
}

// trySetup makes the fakes' topic, the live subscription and the tables
// of tryYAML.
func trySetup(t *testing.T, f *fakes) {
	t.Helper()
	if err := Setup(context.Background(), parse(t, tryYAML), f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

// publishTry publishes msgs on the customers topic and waits for them.
func publishTry(t *testing.T, ps *pubsub.Client, msgs []string) {
	t.Helper()
	pub := ps.Publisher("customers")
	defer pub.Stop()
	var results []*pubsub.PublishResult
	for _, m := range msgs {
		results = append(results, pub.Publish(context.Background(), &pubsub.Message{Data: []byte(m)}))
	}
	for _, r := range results {
		if _, err := r.Get(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// trySubscriptions lists the subscriptions of the fake whose name says
// they are a try's.
func trySubscriptions(t *testing.T, ps *pubsub.Client) []string {
	t.Helper()
	var names []string
	it := ps.SubscriptionAdminClient.ListSubscriptions(context.Background(), &pubsubpb.ListSubscriptionsRequest{Project: "projects/p"})
	for {
		s, err := it.Next()
		if err == iterator.Done {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(s.GetName(), "-try-") {
			names = append(names, s.GetName())
		}
	}
}

// waitTrySubscription waits until a try's subscription exists.
func waitTrySubscription(t *testing.T, ps *pubsub.Client) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if subs := trySubscriptions(t, ps); len(subs) == 1 {
			return subs[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no try subscription appeared")
	return ""
}

// liveBacklog is how many distinct messages the live subscription
// customers-sub delivers within a few seconds: its backlog, when nothing
// else read it.
func liveBacklog(t *testing.T, ps *pubsub.Client, want int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]bool{}
	err := ps.Subscriber("customers-sub").Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID] = true
		if len(seen) == want {
			cancel()
		}
	})
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return len(seen)
}

// acked is how many of the fake's messages were acked on some
// subscription.
func acked(srv *pstest.Server) int {
	n := 0
	for _, m := range srv.Messages() {
		if m.Acks > 0 {
			n++
		}
	}
	return n
}

type tryRun struct {
	out, logs bytes.Buffer
	err       error
}

// startTry runs Try in the background; wait returns its result.
func startTry(ctx context.Context, t *testing.T, opts Options, req TryRequest) func() *tryRun {
	t.Helper()
	r := &tryRun{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.err = Try(ctx, zap.NewNop(), parse(t, tryYAML), req, opts, &r.out, &r.logs)
	}()
	return func() *tryRun {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("try did not end")
		}
		return r
	}
}

// TestTryNextMapsTheNextMessagesAndWarnsOfAColumnNeverFilled: the issue's
// case. --next 6 takes the six messages published after the start and
// prints each one's outcome and rows, then the column table: last_name,
// whose path is misspelt, was never filled and is skipped in each row,
// the one email missing is emptied, the delete fills nothing; the
// truncate is filtered, the bad payload dead-lettered with its reason and
// error. The try leaves no subscription behind, and the live
// subscription's backlog (it was never read) is all six messages.
func TestTryNextMapsTheNextMessagesAndWarnsOfAColumnNeverFilled(t *testing.T) {
	f := newFakes(t)
	trySetup(t, f)
	wait := startTry(context.Background(), t, f.opts, TryRequest{Pipeline: "customers", Next: 6, Idle: 5 * time.Second})
	waitTrySubscription(t, f.ps)
	publishTry(t, f.ps, tryMessages)
	r := wait()
	if r.err != nil {
		t.Fatalf("try: %v\n%s", r.err, r.out.String())
	}
	got := r.out.String()
	t.Logf("output:\n%s", got)
	for _, want := range []string{
		"reading the next 6 messages published on the topic projects/p/topics/customers of pipeline customers, through projects/p/subscriptions/customers-sub-try-",
		`  customers  row "1"  family d  at `, "(set, replace_if_newer)",
		`    first_name = "Ada"`, `    email = "ada@example.com"`,
		"  missing sink.columns.last_name (on_missing skip)",
		"  missing sink.columns.email (on_missing empty)",
		`  customers  row "2"  family d  at `, "(delete, replace_if_newer)",
		"  filtered\n",
		"dead-lettered (invalid_payload): ",
		"try customers~t", ": 6 messages, the sample's size: 4 with rows (4 rows), 1 filtered, 1 dead-lettered",
		"  dead-lettered invalid_payload: 1\n",
		"  filtered: 1\n",
		`warning: column sink.columns.last_name (template "{data.after.lastname}") was never filled in 6 messages: missing in 3 of their rows (on_missing skip)`,
		"wrote nothing (no table, no dead-letter copy, no ack on the live subscription); deleted its subscription projects/p/subscriptions/customers-sub-try-",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	// The column table: key, template, on_missing, filled, skipped,
	// emptied, deleted.
	for _, want := range [][]string{
		{"sink.columns.email", "{data.after.email}", "empty", "2", "0", "1", "0"},
		{"sink.columns.first_name", "{data.after.first_name}", "skip", "3", "0", "0", "0"},
		{"sink.columns.last_name", "{data.after.lastname}", "skip", "0", "3", "0", "0"},
	} {
		if !hasFields(got, want) {
			t.Errorf("the column table has no row %q", want)
		}
	}
	if strings.Contains(got, "warning: column sink.columns.first_name") || strings.Contains(got, "warning: column sink.columns.email") {
		t.Error("a column that was filled is warned of")
	}
	if subs := trySubscriptions(t, f.ps); len(subs) != 0 {
		t.Errorf("subscriptions left behind: %q", subs)
	}
	if n := liveBacklog(t, f.ps, len(tryMessages)); n != len(tryMessages) {
		t.Errorf("the live subscription's backlog is %d messages, want %d: the try acked on it", n, len(tryMessages))
	}
}

// hasFields reports whether a line of s has exactly the fields want.
func hasFields(s string, want []string) bool {
	for _, line := range strings.Split(s, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(want, " ") {
			return true
		}
	}
	return false
}

// TestTryJSONPrintsAnObjectPerMessageAndTheSummary: with --json, stdout is
// one JSON object per message and the summary's, nothing else. In this
// sample (a set without email, a delete, a truncate) email is only ever
// emptied: it is warned of beside last_name.
func TestTryJSONPrintsAnObjectPerMessageAndTheSummary(t *testing.T) {
	f := newFakes(t)
	trySetup(t, f)
	wait := startTry(context.Background(), t, f.opts, TryRequest{Pipeline: "customers", Next: 3, JSON: true, Idle: 5 * time.Second})
	waitTrySubscription(t, f.ps)
	publishTry(t, f.ps, tryMessages[2:5])
	r := wait()
	if r.err != nil {
		t.Fatalf("try: %v\n%s", r.err, r.logs.String())
	}
	lines := strings.Split(strings.TrimSpace(r.out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("stdout has %d lines, want 3 messages and the summary:\n%s", len(lines), r.out.String())
	}
	byOutcome := map[string]tryMessage{}
	for _, l := range lines[:3] {
		var m tryMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil || m.Kind != "message" || m.MessageID == "" || m.PublishTime.IsZero() {
			t.Fatalf("a message line %s: %v", l, err)
		}
		byOutcome[m.Outcome+"/"+m.Rows0Op()] = m
	}
	set, ok := byOutcome["rows/set"]
	if !ok || len(set.Rows) != 1 || set.Rows[0].Key != "3" || set.Rows[0].Mode != "replace_if_newer" || len(set.Rows[0].Cells) != 2 ||
		len(set.Missing) != 2 || set.Missing[0].Column != "sink.columns.email" && set.Missing[1].Column != "sink.columns.email" {
		t.Errorf("the set: %+v", set)
	}
	if del, ok := byOutcome["rows/delete"]; !ok || del.Rows[0].Key != "2" || del.Rows[0].Cells == nil || len(del.Rows[0].Cells) != 0 {
		t.Errorf("the delete: %+v", del)
	}
	if _, ok := byOutcome["filtered/"]; !ok {
		t.Errorf("no filtered message: %v", byOutcome)
	}
	var sum trySummary
	if err := json.Unmarshal([]byte(lines[3]), &sum); err != nil || sum.Kind != "summary" {
		t.Fatalf("the summary line %s: %v", lines[3], err)
	}
	if sum.Messages != 3 || sum.Ended != "full" || sum.WithRows != 2 || sum.Rows != 2 || sum.Filtered != 1 || len(sum.DeadLettered) != 0 || !sum.WroteNothing || !sum.Deleted ||
		len(sum.Columns) != 3 || sum.Columns[0].Emptied != 1 || sum.Columns[1].Filled != 1 || sum.Columns[2].Skipped != 1 ||
		len(sum.Warnings) != 2 || !strings.Contains(sum.Warnings[0], "sink.columns.email") || !strings.Contains(sum.Warnings[1], "sink.columns.last_name") {
		t.Errorf("the summary: %+v", sum)
	}
	if !strings.Contains(r.logs.String(), "warning: column sink.columns.last_name") {
		t.Errorf("the warning is not on stderr:\n%s", r.logs.String())
	}
}

// Rows0Op is the op of m's first row, "" without rows.
func (m tryMessage) Rows0Op() string {
	if len(m.Rows) == 0 {
		return ""
	}
	return m.Rows[0].Op
}

// TestTryNextWithNothingPublishedExits2: --next that gets no message
// within --idle is a *ConfigError (exit 2) saying why, and leaves no
// subscription.
func TestTryNextWithNothingPublishedExits2(t *testing.T) {
	f := newFakes(t)
	trySetup(t, f)
	var out bytes.Buffer
	err := Try(context.Background(), zap.NewNop(), parse(t, tryYAML), TryRequest{Pipeline: "customers", Next: 5, Idle: time.Second}, f.opts, &out, &out)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no message was published on projects/p/topics/customers within --idle 1s of the start") {
		t.Fatalf("try of nothing: %v, want a ConfigError saying why\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "deleted its subscription") {
		t.Errorf("the output does not say the subscription was deleted:\n%s", out.String())
	}
	if subs := trySubscriptions(t, f.ps); len(subs) != 0 {
		t.Errorf("subscriptions left behind: %q", subs)
	}
}

// TestTryStoppedDeletesItsSubscription: a try stopped (SIGINT: its context
// cancelled) while it waits deletes its subscription, prints what it had
// and is ErrTryStopped.
func TestTryStoppedDeletesItsSubscription(t *testing.T) {
	f := newFakes(t)
	trySetup(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	wait := startTry(ctx, t, f.opts, TryRequest{Pipeline: "customers", Next: 10, Idle: time.Minute})
	waitTrySubscription(t, f.ps)
	publishTry(t, f.ps, tryMessages[:1])
	deadline := time.Now().Add(10 * time.Second)
	for acked(f.psSrv) == 0 && time.Now().Before(deadline) { // the try's ack of it
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	r := wait()
	if !errors.Is(r.err, ErrTryStopped) {
		t.Fatalf("a stopped try: %v, want ErrTryStopped\n%s", r.err, r.out.String())
	}
	if subs := trySubscriptions(t, f.ps); len(subs) != 0 {
		t.Errorf("subscriptions left behind: %q", subs)
	}
	for _, want := range []string{": 1 messages, then stopped: 1 with rows", "stopped after 1 messages", "deleted its subscription"} {
		if !strings.Contains(r.out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, r.out.String())
		}
	}
}

// seekRecorder is a pstest reactor for Seek: it records each request and
// handles it as a no-op (the fake cannot seek a new subscription back to
// messages published before it: their payloads are gone), so that the
// test publishes the range's messages once the seek was made.
type seekRecorder struct {
	mu    sync.Mutex
	seeks []*pubsubpb.SeekRequest
	done  chan struct{}
}

func (s *seekRecorder) React(req any) (bool, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seeks = append(s.seeks, req.(*pubsubpb.SeekRequest))
	if len(s.seeks) == 1 {
		close(s.done)
	}
	return true, &pubsubpb.SeekResponse{}, nil
}

// TestTryFromSeeksItsOwnSubscriptionAndStopsAtTheLimit: --from seeks the
// try's subscription (never the live one) to the range's start, and
// --limit 2 stops the read at two messages of the range.
func TestTryFromSeeksItsOwnSubscriptionAndStopsAtTheLimit(t *testing.T) {
	f := newFakes(t)
	rec := &seekRecorder{done: make(chan struct{})}
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Seek", Reactor: rec})
	t.Cleanup(func() { srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pubsub.NewClient(context.Background(), "p", option.WithGRPCConn(conn), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	f.ps, f.psSrv, f.opts.PubSub = ps, srv, ps
	trySetup(t, f)

	// The clock is an hour ahead, so that the range (--from 2h until the
	// start) holds what is published now.
	real := time.Now()
	start := real.Add(time.Hour)
	opts := f.opts
	opts.Now = func() time.Time { return time.Now().Add(time.Hour) }
	wait := startTry(context.Background(), t, opts, TryRequest{Pipeline: "customers", From: "2h", Limit: 2, Idle: 5 * time.Second})
	select {
	case <-rec.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no seek")
	}
	publishTry(t, ps, tryMessages[:4])
	r := wait()
	if r.err != nil {
		t.Fatalf("try: %v\n%s", r.err, r.out.String())
	}
	if !strings.Contains(r.out.String(), ": 2 messages, the sample's size: 2 with rows") || strings.Count(r.out.String(), "\nmessage ") != 2 {
		t.Errorf("the sample is not the limit's 2 messages:\n%s", r.out.String())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seeks) != 1 || !strings.Contains(rec.seeks[0].GetSubscription(), "customers-sub-try-") {
		t.Fatalf("seeks: %v, want one, of the try's subscription", rec.seeks)
	}
	from := rec.seeks[0].GetTime().AsTime()
	if d := start.Add(-2 * time.Hour).Sub(from); d < -time.Second || d > time.Second {
		t.Errorf("seeked to %s, want --from 2h before the start %s", from, start)
	}
	if subs := trySubscriptions(t, ps); len(subs) != 0 {
		t.Errorf("subscriptions left behind: %q", subs)
	}
	if n := liveBacklog(t, ps, 4); n != 4 {
		t.Errorf("the live subscription's backlog is %d messages, want 4", n)
	}
}

// TestTryFromAnEmptyRangeExits2: a range of which no message arrives is a
// *ConfigError (exit 2) with the retention note.
func TestTryFromAnEmptyRangeExits2(t *testing.T) {
	f := newFakes(t)
	trySetup(t, f)
	var out bytes.Buffer
	err := Try(context.Background(), zap.NewNop(), parse(t, tryYAML), TryRequest{Pipeline: "customers", From: "1h", Limit: 10, Idle: time.Second}, f.opts, &out, &out)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no message of the range (from ") || !strings.Contains(err.Error(), "nothing to try the mapping on") {
		t.Fatalf("try of an empty range: %v, want a ConfigError saying why\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "note         no message of the range arrived; if the topic had messages in it, a new subscription gets only what the topic retains") {
		t.Errorf("no retention note:\n%s", out.String())
	}
	if subs := trySubscriptions(t, f.ps); len(subs) != 0 {
		t.Errorf("subscriptions left behind: %q", subs)
	}
}

// TestTryRefusesWhatAuditRefuses: the range's checks are audit's: a topic
// that does not retain --from's span, an unknown pipeline.
func TestTryRefusesWhatAuditRefuses(t *testing.T) {
	f := newFakes(t)
	trySetup(t, f)
	for _, c := range []struct {
		req  TryRequest
		want string
	}{
		{TryRequest{Pipeline: "customers", From: "5h", Idle: time.Second}, "try: --from "},
		{TryRequest{Pipeline: "nope", Next: 1, Idle: time.Second}, `try: the configuration has no pipeline "nope"`},
		{TryRequest{Pipeline: "customers", From: "yesterday", Idle: time.Second}, `try: --from "yesterday" is neither an RFC 3339 time`},
	} {
		err := Try(context.Background(), zap.NewNop(), parse(t, tryYAML), c.req, f.opts, &bytes.Buffer{}, &bytes.Buffer{})
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a ConfigError with %q", c.req, err, c.want)
		}
	}
}

// TestTryShortensLongValues: a value longer than the width is cut after
// width characters (never inside one) and says its length in bytes; a
// shorter one is only quoted.
func TestTryShortensLongValues(t *testing.T) {
	for _, c := range []struct {
		v    string
		want string
	}{
		{"Ada", `"Ada"`},
		{strings.Repeat("a", 10), `"aaaaaaaaaa"`},
		{strings.Repeat("a", 11), `"aaaaaaaaaa"… (11 bytes)`},
		{strings.Repeat("é", 12), `"éééééééééé"… (24 bytes)`},
		{"tab\there", `"tab\there"`},
	} {
		if got := shorten(c.v, 10); got != c.want {
			t.Errorf("shorten(%q, 10) = %s, want %s", c.v, got, c.want)
		}
	}
}
