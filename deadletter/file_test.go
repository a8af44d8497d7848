package deadletter

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pubsink/pubsink/config"
)

// TestFileBatchesABurstIntoFewFsyncs: concurrent sends share writes and
// fsyncs (a group commit), and every send still returns only after the
// fsync that covers its line.
func TestFileBatchesABurstIntoFewFsyncs(t *testing.T) {
	f := newFakes(t)
	path := filepath.Join(f.dir, "burst.jsonl")
	out := f.open(f.pipeline("orders", config.DeadLetter{File: path})).(*File)
	const n = 500
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := out.Send(context.Background(), message(i), InvalidPayload, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	syncs := out.syncs.Load()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(b, []byte("\n")); lines != n {
		t.Fatalf("%d lines, want %d", lines, n)
	}
	if syncs >= n/2 {
		t.Errorf("%d fsyncs for %d concurrent sends: not batched", syncs, n)
	}
	t.Logf("%d sends, %d fsyncs", n, syncs)
}

// TestFileFencesATornLine: after a write that failed part-way, the next
// write starts on a new line, so the damage stays one malformed line that
// replay reports, and later copies read back whole.
func TestFileFencesATornLine(t *testing.T) {
	f := newFakes(t)
	path := filepath.Join(f.dir, "torn.jsonl")
	p := f.pipeline("orders", config.DeadLetter{File: path})
	out := f.open(p).(*File)
	if err := out.Send(context.Background(), message(1), Late, nil); err != nil {
		t.Fatal(err)
	}
	// What a write cut short by a full disk leaves.
	raw, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	raw.WriteString(`{"pubsink_reason":"la`)
	raw.Close()
	out.partial = true

	if err := out.Send(context.Background(), message(2), Late, nil); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sum, err := Replay(context.Background(), zap.NewNop(), f.cfg, p, f.clients(), ReplayOptions{DryRun: true, Out: &buf})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Replayed != 2 || sum.Failed != 1 {
		t.Fatalf("summary %+v, want 2 replayable and 1 failed\n%s", sum, buf.String())
	}
	if !strings.Contains(buf.String(), "torn.jsonl line 2") {
		t.Errorf("the malformed line is not named:\n%s", buf.String())
	}
}

// TestTopicWithoutSubscriptionIsAWarning: Pub/Sub drops what is published
// to a topic nobody subscribes to, so Open says so.
func TestTopicWithoutSubscriptionIsAWarning(t *testing.T) {
	f := newFakes(t)
	f.topic("lonely")
	core, logs := observer.New(zapcore.WarnLevel)
	out, err := Open(context.Background(), zap.New(core), f.cfg, f.pipeline("orders", config.DeadLetter{Topic: "lonely"}), f.clients())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close(context.Background())
	if logs.FilterMessageSnippet("has no subscription").Len() != 1 {
		t.Fatalf("no warning; logs: %v", logs.All())
	}
}
