package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

// tryConfig is the case: a Debezium-like JSON change pipeline
// whose last_name reads a misspelt path under on_missing: skip; its topic
// retains an hour, so that --from gets what was published before.
func (e *env) tryConfig() string {
	return fmt.Sprintf(`
project: %[1]s
log: {level: info, format: json}
state: {instance: %[2]s, table: %[3]s}
pipelines:
  - name: customers
    mode: at_least_once
    source: {topic: %[4]s, subscription: %[5]s, topic_message_retention: 1h}
    filter: "data.op in ['c', 'u', 'd', 'r']"
    sink:
      table: %[6]s
      column_family: d
      row_key: "{= data.op == 'd' ? data.before.id : data.after.id}"
      op: "data.op == 'd' ? 'delete' : 'set'"
      write_mode: replace_if_newer
      on_missing: skip
      columns:
        first_name: "{data.after.first_name}"
        last_name: "{data.after.lastname}"
        email: "{data.after.email}"
`, project, instance, e.stateTable, e.topic, e.sub, e.table)
}

// debeziumChanges are three changes as Debezium Server's Pub/Sub sink
// publishes them (the payload without its schema envelope).
var debeziumChanges = []string{
	`{"before":null,"after":{"id":1001,"first_name":"Sally","last_name":"Thomas","email":"sally.thomas@acme.com"},"source":{"ts_ms":1765152000000},"op":"c"}`,
	`{"before":{"id":1001,"first_name":"Sally","last_name":"Thomas","email":"sally.thomas@acme.com"},"after":{"id":1001,"first_name":"Sally","last_name":"Thomas","email":"sally@acme.com"},"source":{"ts_ms":1765152001000},"op":"u"}`,
	`{"before":null,"after":{"id":1002,"first_name":"George","last_name":"Bailey","email":"gbailey@foobar.com"},"source":{"ts_ms":1765152002000},"op":"r"}`,
}

func (e *env) publishChanges(changes []string) {
	e.t.Helper()
	pub := e.pubsub.Publisher(e.topic)
	defer pub.Stop()
	for _, c := range changes {
		if _, err := pub.Publish(context.Background(), &pubsub.Message{Data: []byte(c)}).Get(context.Background()); err != nil {
			e.t.Fatal(err)
		}
	}
}

// waitTrySubscription waits until the try's subscription exists.
func (e *env) waitTrySubscription() {
	e.t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if len(e.ownSubscriptions("try")) == 1 {
			return
		}
	}
	e.t.Fatal("the try's subscription did not appear")
}

// TestTryWarnsOfTheMisspeltColumn: the point 1 through the built
// binary on the real emulators. Three changes published before, `pubsink
// try --from` prints each one's row (first_name and email, no last_name),
// the column table with last_name filled 0 times and skipped 3, the
// warning line naming its key and template, that it wrote nothing, and
// exits 0; the table is empty and no subscription of the try is left.
// `--snapshot` of a snapshot of the live subscription does the same, and
// `--next 3` takes three changes published after its start, the same
// way. A try stopped by SIGINT while it waits exits 3 and deletes
// its subscription.
func TestTryWarnsOfTheMisspeltColumn(t *testing.T) {
	e := newEnv(t)
	path, _ := e.writeConfig(e.tryConfig())
	e.publishChanges(debeziumChanges)

	warning := `warning: column sink.columns.last_name (template "{data.after.lastname}") was never filled in 3 messages: missing in 3 of their rows (on_missing skip)`
	check := func(r *reprocessRun, what string) {
		t.Helper()
		if code := r.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%s: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", what, code, r.out.String(), r.log.String())
		}
		out := r.out.String()
		t.Logf("%s:\n%s", what, out)
		for _, want := range []string{
			`    first_name = "Sally"`, `    email = "sally@acme.com"`, "  missing sink.columns.last_name (on_missing skip)",
			": 3 messages, ", ": 3 with rows (3 rows), 0 filtered, 0 dead-lettered",
			warning, "wrote nothing (no table, no dead-letter copy, no ack on the live subscription); deleted its subscription",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the output lacks %q", what, want)
			}
		}
		if !hasFieldsLine(out, "sink.columns.last_name {data.after.lastname} skip 0 3 0 0") ||
			!hasFieldsLine(out, "sink.columns.first_name {data.after.first_name} skip 3 0 0 0") {
			t.Errorf("%s: the column table is not last_name 0 filled 3 skipped, first_name 3 filled", what)
		}
		if strings.Contains(out, "last_name = ") {
			t.Errorf("%s: a row has a last_name", what)
		}
		if subs := e.ownSubscriptions("try"); len(subs) != 0 {
			t.Errorf("%s: subscriptions left behind: %q", what, subs)
		}
	}

	from := e.startCommand("try", "--config", path, "--pipeline", "customers", "--from", "10m", "--idle", "5s")
	check(from, "try --from")
	if !strings.Contains(from.out.String(), ": 3 messages, then none for --idle 5s: ") {
		t.Error("try --from: the summary does not say the read ended after --idle")
	}

	// A snapshot of the live subscription, which holds the three unacked.
	snap := "try-" + e.sub
	e.snapshotLive(snap)
	check(e.startCommand("try", "--config", path, "--pipeline", "customers", "--snapshot", snap, "--idle", "5s"), "try --snapshot")

	next := e.startCommand("try", "--config", path, "--pipeline", "customers", "--next", "3", "--idle", "30s")
	e.waitTrySubscription()
	e.publishChanges(debeziumChanges)
	check(next, "try --next")
	if !strings.Contains(next.out.String(), ": 3 messages, the sample's size: ") {
		t.Error("try --next: the summary does not say the read ended at the sample's size")
	}

	if n := e.countRows(e.table); n != 0 {
		t.Errorf("the table has %d rows: the try wrote", n)
	}

	stopped := e.startCommand("try", "--config", path, "--pipeline", "customers", "--next", "3", "--idle", "1m")
	e.waitTrySubscription()
	if err := stopped.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := stopped.wait(t, time.Minute); code != 3 {
		t.Errorf("a try stopped by SIGINT: exit %d, want 3\nstdout:\n%s\nstderr:\n%s", code, stopped.out.String(), stopped.log.String())
	}
	if subs := e.ownSubscriptions("try"); len(subs) != 0 {
		t.Errorf("a try stopped by SIGINT left its subscription: %q", subs)
	}
	if !strings.Contains(stopped.out.String(), "stopped after 0 messages") || !strings.Contains(stopped.out.String(), "deleted its subscription") {
		t.Errorf("a stopped try's output:\n%s", stopped.out.String())
	}
}

// hasFieldsLine reports whether a line of s has the fields of want.
func hasFieldsLine(s, want string) bool {
	for _, line := range strings.Split(s, "\n") {
		if strings.Join(strings.Fields(line), " ") == want {
			return true
		}
	}
	return false
}
