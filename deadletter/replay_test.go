package deadletter

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
)

// TestReplayRepublishesOriginalsOnceAndRemovesTheirCopies runs the replay
// of every output through dry run, --reason, --limit and a full run.
func TestReplayRepublishesOriginalsOnceAndRemovesTheirCopies(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	for kind, dl := range f.outputs() {
		t.Run(kind, func(t *testing.T) {
			f.ps.ClearMessages()
			p := f.pipeline("orders", dl)
			out := f.open(p)
			reasons := []Reason{Late, Late, InvalidPayload, MissingField, BadEventTime, TooLarge}
			for i, r := range reasons {
				if err := out.Send(ctx, message(i), r, errors.New("why")); err != nil {
					t.Fatal(err)
				}
			}
			// A redelivered message dead-lettered twice; another pipeline
			// sharing the output.
			if err := out.Send(ctx, message(0), Late, errors.New("again")); err != nil {
				t.Fatal(err)
			}
			other := f.open(f.pipeline("other", dl))
			if err := other.Send(ctx, message(50), Late, nil); err != nil {
				t.Fatal(err)
			}
			replay := func(opts ReplayOptions) Summary {
				t.Helper()
				var buf bytes.Buffer
				opts.Out = &buf
				sum, err := Replay(ctx, zap.NewNop(), f.cfg, p, f.clients(), opts)
				if err != nil {
					t.Fatalf("Replay(%+v): %v\n%s", opts, err, buf.String())
				}
				if strings.Contains(buf.String(), "payload ") {
					t.Errorf("the replay output shows a payload:\n%s", buf.String())
				}
				return sum
			}

			// A table has one row per message (the second copy replaced the
			// first), and replay reads only the pipeline's rows.
			dups, others := 1, 1
			if kind == KindTable {
				dups, others = 0, 0
			}
			sum := replay(ReplayOptions{DryRun: true})
			if sum.Replayed != 6 || sum.Duplicates != dups || sum.Failed != 0 {
				t.Fatalf("dry run: %+v", sum)
			}
			if n := len(f.republished()); n != 0 {
				t.Fatalf("dry run republished %d messages", n)
			}
			if n := len(f.readAll(p)); n != 6 {
				t.Fatalf("after the dry run %d copies of orders are left, want 6", n)
			}

			sum = replay(ReplayOptions{Reason: Late})
			if sum.Replayed != 2 || sum.Skipped[InvalidPayload] != 1 || sum.Skipped[TooLarge] != 1 || len(sum.Skipped) != 4 {
				t.Fatalf("--reason late: %+v", sum)
			}
			got := f.republished()
			if len(got) != 2 {
				t.Fatalf("%d republished, want 2", len(got))
			}
			for _, m := range got {
				orig := message(int(m.Data[len("payload ")] - '0'))
				if !maps.Equal(m.Attributes, orig.Attributes) || !bytes.Equal(m.Data, orig.Data) {
					t.Errorf("republished %q %v, want the original %q %v", m.Data, m.Attributes, orig.Data, orig.Attributes)
				}
			}

			sum = replay(ReplayOptions{Limit: 3})
			if sum.Replayed != 3 {
				t.Fatalf("--limit 3: %+v", sum)
			}
			sum = replay(ReplayOptions{})
			if sum.Replayed != 1 || sum.OtherPipelines != others {
				t.Fatalf("the rest: %+v", sum)
			}
			if sum = replay(ReplayOptions{}); sum.Replayed != 0 {
				t.Fatalf("a second full replay found %+v", sum)
			}
			if n := len(f.republished()); n != 6 {
				t.Fatalf("%d republished in all, want each of the 6 originals once", n)
			}
			if left := f.readAll(f.pipeline("other", dl)); len(left) != 1 {
				t.Fatalf("the other pipeline's copy is gone: %v", left)
			}
			other.Close(ctx)
			// Empty the shared output for the next subtest.
			if _, err := Replay(ctx, zap.NewNop(), f.cfg, f.pipeline("other", dl), f.clients(), ReplayOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReplayLeavesCopiesWhoseRepublishFailed: a pipeline topic that does
// not exist fails every republish; the copies stay.
func TestReplayLeavesCopiesWhoseRepublishFailed(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	for kind, dl := range f.outputs() {
		t.Run(kind, func(t *testing.T) {
			p := f.pipeline("lost", dl)
			p.Source.Topic = "deleted"
			out := f.open(p)
			for i := range 3 {
				if err := out.Send(ctx, message(i), Late, nil); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			sum, err := Replay(ctx, zap.NewNop(), f.cfg, p, f.clients(), ReplayOptions{Out: &buf})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Replayed != 0 || sum.Failed != 3 || !strings.Contains(buf.String(), "republish failed") {
				t.Fatalf("summary %+v\n%s", sum, buf.String())
			}
			if n := len(f.readAll(p)); n != 3 {
				t.Fatalf("%d copies left, want 3", n)
			}
		})
	}
}

func TestReplayNeedsAnOutput(t *testing.T) {
	f := newFakes(t)
	_, err := Replay(context.Background(), zap.NewNop(), f.cfg, f.pipeline("orders", config.DeadLetter{}), f.clients(), ReplayOptions{})
	if !errors.Is(err, ErrNoOutput) {
		t.Fatalf("%v", err)
	}
}

func TestSummaryReadsAsTheCLIPrintsIt(t *testing.T) {
	s := Summary{From: "dead-letter file d.jsonl", To: "topic projects/p/topics/t", Replayed: 3, Skipped: map[Reason]int{Late: 2, TooLarge: 1}, Failed: 1}
	want := "dead-letter file d.jsonl -> topic projects/p/topics/t\nreplayed: 3\nskipped by reason: late=2 too_large=1\nfailed: 1\n"
	if s.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", s, want)
	}
}

// republished returns the messages published to the pipeline topic.
func (f *fakes) republished() []*pstest.Message {
	var out []*pstest.Message
	for _, m := range f.ps.Messages() {
		if m.Topic == f.cfg.TopicName("orders") {
			out = append(out, m)
		}
	}
	return out
}
