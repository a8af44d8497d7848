package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/reprocess"
)

// reprocessOptions run app.Reprocess in the test's process on the
// emulators.
func (e *env) reprocessOptions() app.Options {
	return app.Options{PubSub: e.pubsub, HTTPAddr: "-", Bigtable: func(ctx context.Context, inst string) (*bigtable.Client, error) {
		data, admin, err := e.bt.Clients(ctx, project, inst)
		if admin != nil {
			admin.Close()
		}
		return data, err
	}}
}

// snapshotLive takes a snapshot named name of the live subscription.
func (e *env) snapshotLive(name string) {
	e.t.Helper()
	live := "projects/" + project + "/subscriptions/" + e.sub
	if _, err := e.pubsub.SubscriptionAdminClient.CreateSnapshot(context.Background(), &pubsubpb.CreateSnapshotRequest{Name: "projects/" + project + "/snapshots/" + name, Subscription: live}); err != nil {
		e.t.Fatal(err)
	}
}

// snapshotYAML is the harness's exactly_once pipeline on a topic that setup
// creates with message retention: on the emulator a new subscription gets
// the topic's history (and a snapshot's backlog) only then.
func (e *env) snapshotYAML() string {
	y := e.configYAML("exactly_once", "")
	sub := "      subscription: " + e.sub + "\n"
	if !strings.Contains(y, sub) {
		e.t.Fatalf("the harness's YAML changed; no %q in\n%s", sub, y)
	}
	return strings.Replace(y, sub, sub+"      topic_message_retention: 1h\n", 1)
}

// TestReprocessFromASnapshot runs the --snapshot path on the emulator (its
// Seek to a snapshot; pstest has no snapshots): a snapshot of the live
// subscription holding a backlog (no live process ran), the run rewrites
// it, publisher duplicates in it are duplicates in the run's own scope, a
// message published after the run's start is acked unprocessed, and the
// run ends by itself, deleting its subscription and record and keeping its
// restore point.
func TestReprocessFromASnapshot(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, cfg := e.writeConfig(e.snapshotYAML())
	e.publish(0, 300)
	e.publish(0, 20) // publisher duplicates
	live := "projects/" + project + "/subscriptions/" + e.sub
	snap := "before-" + e.sub
	e.snapshotLive(snap)
	snaps := e.countSnapshots()
	go func() {
		time.Sleep(2 * time.Second) // after the run's start: after its range
		e.publishNow("after", 0, 1)
	}()
	var out bytes.Buffer
	req := app.ReprocessRequest{Pipeline: "e2e", Snapshot: snap, Idle: 3 * time.Second}
	if err := app.Reprocess(ctx, nopLogger(), cfg, req, e.reprocessOptions(), &out, io.Discard); err != nil {
		t.Fatalf("reprocess: %v\n%s", err, out.String())
	}
	for _, want := range []string{"done in", "messages     320 (this process: received 320, committed 300, duplicates 20, dead-lettered 0, filtered 0)", "after range  1 skipped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
	if n := e.countRows(e.table); n != 300 {
		t.Errorf("%d rows, want 300", n)
	}
	if e.subscriptionExists(live + "-reprocess") {
		t.Error("the finished run's subscription is still there")
	}
	if got := e.countSnapshots(); got != snaps+1 {
		t.Errorf("%d snapshots, want the restore point more than the %d before", got, snaps)
	}
	if rec, err := reprocess.NewStore(e.bigtable.Open(e.stateTable), "e2e", nil).Load(ctx); err != nil || rec != nil {
		t.Errorf("the finished run's record: %+v, %v", rec, err)
	}
}

// TestReprocessRefusesAnotherRangeWhileOneIsOnRecord: a run stopped before
// its end (exit 3 in the CLI) stays on record, and is resumed only with its
// own arguments.
func TestReprocessRefusesAnotherRangeWhileOneIsOnRecord(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, cfg := e.writeConfig(e.snapshotYAML())
	e.publish(0, 10)
	e.snapshotLive("a-" + e.sub)
	e.snapshotLive("b-" + e.sub)
	sctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(3 * time.Second); cancel() }()
	var out bytes.Buffer
	err := app.Reprocess(sctx, nopLogger(), cfg, app.ReprocessRequest{Pipeline: "e2e", Snapshot: "a-" + e.sub, Idle: time.Hour}, e.reprocessOptions(), &out, io.Discard)
	if !errors.Is(err, app.ErrReprocessStopped) {
		t.Fatalf("a stopped run: %v, want ErrReprocessStopped\n%s", err, out.String())
	}
	err = app.Reprocess(ctx, nopLogger(), cfg, app.ReprocessRequest{Pipeline: "e2e", Snapshot: "b-" + e.sub, Idle: time.Second}, e.reprocessOptions(), io.Discard, io.Discard)
	var ce *app.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `an unfinished reprocess of "e2e"`) {
		t.Fatalf("another range while one is on record: %v, want a ConfigError naming the unfinished run", err)
	}
	// With its own arguments it resumes and finishes.
	out.Reset()
	if err := app.Reprocess(ctx, nopLogger(), cfg, app.ReprocessRequest{Pipeline: "e2e", Snapshot: "a-" + e.sub, Idle: 2 * time.Second}, e.reprocessOptions(), &out, io.Discard); err != nil || !strings.Contains(out.String(), "resuming") || !strings.Contains(out.String(), "done in") {
		t.Fatalf("resumed with its own arguments: %v\n%s", err, out.String())
	}
}

// TestReprocessKilledDuringItsEndFinishesItWhenRunAgain: a run killed after
// its range was done and its subscription deleted, before its record was
// (the record says done), finishes its end when run again: exit 0, the
// record gone, instead of failing on the subscription it deleted.
func TestReprocessKilledDuringItsEndFinishesItWhenRunAgain(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, cfg := e.writeConfig(e.snapshotYAML())
	e.publish(0, 10)
	snap := "a-" + e.sub
	e.snapshotLive(snap)
	sctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(3 * time.Second); cancel() }()
	if err := app.Reprocess(sctx, nopLogger(), cfg, app.ReprocessRequest{Pipeline: "e2e", Snapshot: snap, Idle: time.Hour}, e.reprocessOptions(), io.Discard, io.Discard); !errors.Is(err, app.ErrReprocessStopped) {
		t.Fatalf("a stopped run: %v, want ErrReprocessStopped", err)
	}
	// What a kill between the end's two deletions leaves: the record
	// marked done, its subscription gone.
	store := reprocess.NewStore(e.bigtable.Open(e.stateTable), "e2e", nil)
	lock, err := store.Acquire(ctx, "the-killed-run", nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Load(ctx)
	if err != nil || rec == nil || !rec.Ready {
		t.Fatalf("the stopped run's record: %+v, %v", rec, err)
	}
	rec.Done = true
	if err := lock.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := e.pubsub.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: rec.Subscription}); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := app.Reprocess(ctx, nopLogger(), cfg, app.ReprocessRequest{Pipeline: "e2e", Snapshot: snap, Idle: 2 * time.Second}, e.reprocessOptions(), &out, io.Discard); err != nil || !strings.Contains(out.String(), "done in") {
		t.Fatalf("run again after a kill during its end: %v, want done\n%s", err, out.String())
	}
	if got, err := store.Load(ctx); err != nil || got != nil {
		t.Errorf("the record after the end was finished: %+v, %v", got, err)
	}
	if e.subscriptionExists(rec.Subscription) {
		t.Error("the run's subscription is back")
	}
}
