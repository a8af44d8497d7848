package replay

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/internal/dltest"
)

// TestReplayRepublishesOriginalsOnceAndRemovesTheirCopies runs the replay
// of every output through dry run, --reason, --limit and a full run.
func TestReplayRepublishesOriginalsOnceAndRemovesTheirCopies(t *testing.T) {
	ctx := context.Background()
	forEachOutput(t, func(t *testing.T, f *dltest.Fakes, kind string, p config.Pipeline) {
		dl := p.DeadLetter
		out := f.Open(p)
		reasons := []deadletter.Reason{deadletter.Late, deadletter.Late, deadletter.InvalidPayload, deadletter.MissingField, deadletter.BadEventTime, deadletter.TooLarge}
		for i, r := range reasons {
			if err := out.Send(ctx, dltest.Message(i), r, errors.New("why")); err != nil {
				t.Fatal(err)
			}
		}
		// A redelivered message dead-lettered twice; another pipeline
		// sharing the output.
		if err := out.Send(ctx, dltest.Message(0), deadletter.Late, errors.New("again")); err != nil {
			t.Fatal(err)
		}
		other := f.Open(f.Pipeline("other", dl))
		if err := other.Send(ctx, dltest.Message(50), deadletter.Late, nil); err != nil {
			t.Fatal(err)
		}
		replay := func(opts Options) Summary {
			t.Helper()
			var buf bytes.Buffer
			opts.Out = &buf
			sum, err := Run(ctx, zap.NewNop(), f.Cfg, p, f.Clients(), opts)
			if err != nil {
				t.Fatalf("Run(%+v): %v\n%s", opts, err, buf.String())
			}
			if strings.Contains(buf.String(), "payload ") {
				t.Errorf("the replay output shows a payload:\n%s", buf.String())
			}
			return sum
		}

		// A table has one row per message (the second copy replaced the
		// first), and replay reads only the pipeline's rows.
		dups, others := 1, 1
		if kind == deadletter.KindTable {
			dups, others = 0, 0
		}
		sum := replay(Options{DryRun: true})
		if sum.Replayed != 6 || sum.Duplicates != dups || sum.Failed != 0 {
			t.Fatalf("dry run: %+v", sum)
		}
		if n := len(f.Republished()); n != 0 {
			t.Fatalf("dry run republished %d messages", n)
		}
		if n := len(f.ReadAll(p)); n != 6 {
			t.Fatalf("after the dry run %d copies of orders are left, want 6", n)
		}

		sum = replay(Options{Reason: deadletter.Late})
		if sum.Replayed != 2 || sum.Skipped[deadletter.InvalidPayload] != 1 || sum.Skipped[deadletter.TooLarge] != 1 || len(sum.Skipped) != 4 {
			t.Fatalf("--reason late: %+v", sum)
		}
		got := f.Republished()
		if len(got) != 2 {
			t.Fatalf("%d republished, want 2", len(got))
		}
		for _, m := range got {
			orig := dltest.Message(int(m.Data[len("payload ")] - '0'))
			if !maps.Equal(m.Attributes, orig.Attributes) || !bytes.Equal(m.Data, orig.Data) {
				t.Errorf("republished %q %v, want the original %q %v", m.Data, m.Attributes, orig.Data, orig.Attributes)
			}
		}

		sum = replay(Options{Limit: 3})
		if sum.Replayed != 3 {
			t.Fatalf("--limit 3: %+v", sum)
		}
		sum = replay(Options{})
		if sum.Replayed != 1 || sum.OtherPipelines != others {
			t.Fatalf("the rest: %+v", sum)
		}
		if sum = replay(Options{}); sum.Replayed != 0 {
			t.Fatalf("a second full replay found %+v", sum)
		}
		if n := len(f.Republished()); n != 6 {
			t.Fatalf("%d republished in all, want each of the 6 originals once", n)
		}
		if left := f.ReadAll(f.Pipeline("other", dl)); len(left) != 1 {
			t.Fatalf("the other pipeline's copy is gone: %v", left)
		}
		other.Close(ctx)
		// Empty the shared output for the next subtest.
		if _, err := Run(ctx, zap.NewNop(), f.Cfg, f.Pipeline("other", dl), f.Clients(), Options{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReplayLeavesCopiesWhoseRepublishFailed: a pipeline topic that does
// not exist fails every republish; the copies stay.
func TestReplayLeavesCopiesWhoseRepublishFailed(t *testing.T) {
	f := dltest.New(t)
	ctx := context.Background()
	for kind, dl := range f.Outputs() {
		t.Run(kind, func(t *testing.T) {
			p := f.Pipeline("lost", dl)
			p.Source.Topic = "deleted"
			out := f.Open(p)
			for i := range 3 {
				if err := out.Send(ctx, dltest.Message(i), deadletter.Late, nil); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			sum, err := Run(ctx, zap.NewNop(), f.Cfg, p, f.Clients(), Options{Out: &buf})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Replayed != 0 || sum.Failed != 3 || !strings.Contains(buf.String(), "republish failed") {
				t.Fatalf("summary %+v\n%s", sum, buf.String())
			}
			if n := len(f.ReadAll(p)); n != 3 {
				t.Fatalf("%d copies left, want 3", n)
			}
		})
	}
}

func TestReplayNeedsAnOutput(t *testing.T) {
	f := dltest.New(t)
	_, err := Run(context.Background(), zap.NewNop(), f.Cfg, f.Pipeline("orders", config.DeadLetter{}), f.Clients(), Options{})
	if !errors.Is(err, deadletter.ErrNoOutput) {
		t.Fatalf("%v", err)
	}
}

func TestSummaryReadsAsTheCLIPrintsIt(t *testing.T) {
	s := Summary{From: "dead-letter file d.jsonl", To: "topic projects/p/topics/t", Replayed: 3, Skipped: map[deadletter.Reason]int{deadletter.Late: 2, deadletter.TooLarge: 1}, Failed: 1}
	want := "dead-letter file d.jsonl -> topic projects/p/topics/t\nreplayed: 3\nskipped by reason: late=2 too_large=1\nfailed: 1\n"
	if s.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", s, want)
	}
}

// TestReplayPublishesNoGoogAttributes: a schema'd topic's messages carry
// googclient_* attributes, and Pub/Sub reserves keys starting with goog, so
// a topic output publishes them renamed (pubsink_goog…), and replay, which
// publishes too, leaves them out (Pub/Sub sets its own on a schema'd
// topic) and republishes every other attribute of the original, from every
// output. The emulator and pstest accept goog keys: this checks what is
// published.
func TestReplayPublishesNoGoogAttributes(t *testing.T) {
	ctx := context.Background()
	forEachOutput(t, func(t *testing.T, f *dltest.Fakes, kind string, p config.Pipeline) {
		m := dltest.Message(3)
		want := maps.Clone(m.Attributes)
		m.Attributes["googclient_schemaname"] = "projects/p/schemas/orders"
		m.Attributes["googclient_schemaencoding"] = "BINARY"
		m.Attributes["googclient_schemarevisionid"] = "8d1e4c2a"
		if err := f.Open(p).Send(ctx, m, deadletter.InvalidPayload, errors.New("why")); err != nil {
			t.Fatal(err)
		}
		for _, pm := range f.PS.Messages() { // the topic output's copy
			for k := range pm.Attributes {
				if strings.HasPrefix(k, "goog") {
					t.Errorf("published to %s with reserved key %s", pm.Topic, k)
				}
			}
		}
		if kind == deadletter.KindTopic && len(f.PS.Messages()) != 1 {
			t.Fatalf("%d copies published, want 1", len(f.PS.Messages()))
		}
		sum, err := Run(ctx, zap.NewNop(), f.Cfg, p, f.Clients(), Options{})
		if err != nil || sum.Replayed != 1 {
			t.Fatalf("replay: %+v, %v", sum, err)
		}
		got := f.Republished()
		if len(got) != 1 || !maps.Equal(got[0].Attributes, want) {
			t.Fatalf("republished %v, want the original's attributes but the goog ones %v", got, want)
		}
	})
}

// forEachOutput runs test once for each output kind, as pipeline orders's
// dead-letter output, on fakes shared by the subtests (Pub/Sub's messages
// cleared before each).
func forEachOutput(t *testing.T, test func(t *testing.T, f *dltest.Fakes, kind string, p config.Pipeline)) {
	f := dltest.New(t)
	for kind, dl := range f.Outputs() {
		t.Run(kind, func(t *testing.T) {
			f.PS.ClearMessages()
			test(t, f, kind, f.Pipeline("orders", dl))
		})
	}
}
