package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/internal/dltest"
)

// failedAt is the clock of the outputs these tests open.
var failedAt = time.Date(2026, 6, 2, 3, 4, 5, 6000, time.UTC)

// open opens p's output with a fixed clock.
func open(f *dltest.Fakes, p config.Pipeline) deadletter.Output {
	f.T.Helper()
	out := f.Open(p)
	deadletter.SetClock(out, func() time.Time { return failedAt })
	return out
}

// TestEveryOutputKeepsWholeCopies is the conformance test of the outputs:
// concurrent sends are all confirmed, and each copy reads back whole, with
// the original attributes apart from the pubsink_* ones.
func TestEveryOutputKeepsWholeCopies(t *testing.T) {
	f := dltest.New(t)
	for kind, dl := range f.Outputs() {
		t.Run(kind+" keeps every field of every copy", func(t *testing.T) {
			p := f.Pipeline("orders", dl)
			out := open(f, p)
			const n = 40
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					m := dltest.Message(i)
					m.Attributes[deadletter.AttrReason] = "forged" // reserved: not carried over
					errs[i] = out.Send(context.Background(), m, deadletter.Reasons[i%len(deadletter.Reasons)], fmt.Errorf("cause %d", i))
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			got := f.ReadAll(p)
			if len(got) != n {
				t.Fatalf("%d copies, want %d", len(got), n)
			}
			for i := range n {
				m := dltest.Message(i)
				want := &deadletter.Copy{
					Pipeline:    "orders",
					MessageID:   m.ID,
					PublishTime: m.PublishTime,
					FailedAt:    failedAt,
					Reason:      deadletter.Reasons[i%len(deadletter.Reasons)],
					Error:       fmt.Sprintf("cause %d", i),
					Attributes:  m.Attributes,
					Data:        m.Data,
				}
				if c := got[m.ID]; !reflect.DeepEqual(c, want) {
					t.Errorf("copy of %s:\n got %+v\nwant %+v", m.ID, c, want)
				}
			}
		})
		t.Run(kind+" refuses sends after Close, which is idempotent", func(t *testing.T) {
			out := open(f, f.Pipeline("closing", dl))
			if err := out.Send(context.Background(), dltest.Message(1), deadletter.Late, nil); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := out.Close(context.Background()); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			if err := out.Send(context.Background(), dltest.Message(2), deadletter.Late, nil); err == nil {
				t.Fatal("Send after Close succeeded")
			}
		})
	}
}

func TestOpenNamesWhatIsMissing(t *testing.T) {
	f := dltest.New(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		dl   config.DeadLetter
		want string
	}{
		{"no output", config.DeadLetter{}, deadletter.ErrNoOutput.Error()},
		{"a topic that does not exist", config.DeadLetter{Topic: "nope"}, "dead-letter topic projects/p/topics/nope does not exist"},
		{"a table that does not exist", config.DeadLetter{BigtableTable: "nope"}, "dead-letter table nope in instance i does not exist"},
		{"a file in a missing directory", config.DeadLetter{File: filepath.Join(f.Dir, "no", "dead.jsonl")}, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := deadletter.Open(ctx, zap.NewNop(), f.Cfg, f.Pipeline("orders", tc.dl), f.Clients())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want an error containing %q", err, tc.want)
			}
			if out != nil {
				t.Fatalf("Open returned %#v with its error", out)
			}
		})
	}
}
