package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
)

// TestReprocessWaitsForALiveStalledBehindTheRangesEnd: the live pipeline
// (the old mapping) is stalled (its Bigtable behind a stalled proxy) with
// the last messages of the range unwritten when a reprocess with a new
// mapping starts. The run waits until the live pipeline has finished the
// range, and only then writes: every row of the range ends with the new
// mapping. Without the wait the run wrote those rows first and the live
// pipeline, once unstalled, wrote the old mapping over them.
func TestReprocessWaitsForALiveStalledBehindTheRangesEnd(t *testing.T) {
	const before, stalled = 50, 30
	const stall = 9 * time.Second // under reprocess.LiveRecently: the live pipeline still counts as running
	e := newEnv(t)
	yaml := e.snapshotYAML()
	_, cfg := e.writeConfig(yaml)
	changed := strings.Replace(yaml, `n: "{data.n}"`, `n: "v2-{data.n}"`, 1)
	if changed == yaml {
		t.Fatalf("the harness's YAML changed: no column n in\n%s", yaml)
	}
	newCfg, err := config.Parse([]byte(changed))
	if err != nil {
		t.Fatal(err)
	}
	proxy, viaProxy := e.bigtableProxy()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live, err := app.Open(ctx, nopLogger(), cfg, app.Options{PubSub: e.pubsub, Bigtable: viaProxy, HTTPAddr: "-"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- live.Run(ctx) }()

	from := time.Now().UTC()
	time.Sleep(100 * time.Millisecond)
	e.publish(0, before)
	e.waitRows(e.table, before, time.Minute)
	proxy.Stall()
	e.publish(before, before+stalled) // received by the live pipeline, not written
	time.Sleep(500 * time.Millisecond)
	until := time.Now().UTC()
	go func() {
		time.Sleep(stall)
		proxy.Resume()
	}()

	var out bytes.Buffer
	req := app.ReprocessRequest{Pipeline: "e2e", From: from.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), Idle: 3 * time.Second, NoRestorePoint: true}
	if err := app.Reprocess(context.Background(), nopLogger(), newCfg, req, e.reprocessOptions(), &out, io.Discard); err != nil {
		t.Fatalf("reprocess: %v\n%s", err, out.String())
	}
	for _, want := range []string{"waiting for the live pipeline to finish the range", "the live pipeline finished the range", "done in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the reprocess did not say %q:\n%s", want, out.String())
		}
	}
	// Whatever the run did, the live pipeline writes the range once
	// unstalled: judge the rows after it did.
	waitCommitted(t, live.Pipelines()[0], before+stalled, time.Minute)
	var old []string
	rows := e.readTable(e.table)
	for i := range before + stalled {
		n := rows[rowKey(i)]["n"]
		if want := fmt.Sprintf("v2-%d", i); len(n) != 1 || n[0].value != want {
			old = append(old, fmt.Sprintf("%s: n %v, want %q", rowKey(i), n, want))
		}
	}
	if len(old) > 0 {
		t.Errorf("%d of %d rows of the range without the new mapping (the live pipeline wrote over the run), first: %v", len(old), before+stalled, old[:min(5, len(old))])
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("the live pipeline: %v", err)
	}
}
