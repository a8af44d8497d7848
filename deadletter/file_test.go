package deadletter_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/internal/dltest"
	"github.com/pubsink/pubsink/deadletter/replay"
)

// TestFileBatchesABurstIntoFewFsyncs: concurrent sends share writes and
// fsyncs (a group commit), and every send still returns only after the
// fsync that covers its line.
func TestFileBatchesABurstIntoFewFsyncs(t *testing.T) {
	f := dltest.New(t)
	path := filepath.Join(f.Dir, "burst.jsonl")
	out := open(f, f.Pipeline("orders", config.DeadLetter{File: path})).(*deadletter.File)
	const n = 500
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := out.Send(context.Background(), dltest.Message(i), deadletter.InvalidPayload, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	syncs := deadletter.FileSyncs(out)
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
	f := dltest.New(t)
	path := filepath.Join(f.Dir, "torn.jsonl")
	p := f.Pipeline("orders", config.DeadLetter{File: path})
	out := open(f, p).(*deadletter.File)
	if err := out.Send(context.Background(), dltest.Message(1), deadletter.Late, nil); err != nil {
		t.Fatal(err)
	}
	// What a write cut short by a full disk leaves.
	raw, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	raw.WriteString(`{"pubsink_reason":"la`)
	raw.Close()
	deadletter.TearFile(out)

	if err := out.Send(context.Background(), dltest.Message(2), deadletter.Late, nil); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sum, err := replay.Run(context.Background(), zap.NewNop(), f.Cfg, p, f.Clients(), replay.Options{DryRun: true, Out: &buf})
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

// TestFileFollowsARotation: a log rotation renames the file (or deletes
// it); the next copies go to a new file at the configured path, not to the
// renamed one nobody reads.
func TestFileFollowsARotation(t *testing.T) {
	for _, rotate := range []string{"rename", "remove"} {
		t.Run(rotate, func(t *testing.T) {
			f := dltest.New(t)
			path := filepath.Join(f.Dir, "rotated.jsonl")
			out := open(f, f.Pipeline("orders", config.DeadLetter{File: path})).(*deadletter.File)
			ctx := context.Background()
			if err := out.Send(ctx, dltest.Message(1), deadletter.Late, nil); err != nil {
				t.Fatal(err)
			}
			var err error
			if rotate == "rename" {
				err = os.Rename(path, path+".1")
			} else {
				err = os.Remove(path)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := out.Send(ctx, dltest.Message(2), deadletter.Late, nil); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("no file at the path after the rotation: %v", err)
			}
			if lines := bytes.Count(b, []byte("\n")); lines != 1 || !bytes.Contains(b, []byte(dltest.Message(2).ID)) {
				t.Fatalf("the path holds %q, want the one copy sent after the rotation", b)
			}
		})
	}
}
