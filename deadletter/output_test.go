package deadletter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/internal/dltest"
	"github.com/pubsink/pubsink/deadletter/replay"
	"github.com/pubsink/pubsink/internal/state"
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

// reprocessRun is the name of the reprocess run these tests write for.
const reprocessRun = "orders~r20261203t053012z"

// openFor opens p's output for reprocess run ("" for the live pipeline),
// with a fixed clock, closed when the test ends.
func openFor(f *dltest.Fakes, p config.Pipeline, run string) deadletter.Output {
	f.T.Helper()
	clients := f.Clients()
	clients.Now = func() time.Time { return failedAt }
	clients.Reprocess = run
	out, err := deadletter.Open(context.Background(), zap.NewNop(), f.Cfg, p, clients)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { out.Close(context.Background()) })
	return out
}

// stored returns the pubsink fields of each copy of pipeline as the output
// dl stores them, by message ID: a Topic copy's attributes, a Table row's
// columns (qualifiers without the family), a File line's keys.
func stored(t *testing.T, f *dltest.Fakes, kind string, dl config.DeadLetter, pipeline string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	switch kind {
	case deadletter.KindTopic:
		for _, m := range f.PS.Messages() {
			if m.Topic == f.Cfg.TopicName(dl.Topic) && m.Attributes[deadletter.AttrPipeline] == pipeline {
				out[m.Attributes[deadletter.AttrMessageID]] = m.Attributes
			}
		}
	case deadletter.KindTable:
		err := f.BT.Open(dl.BigtableTable).ReadRows(context.Background(), bigtable.PrefixRange(pipeline+"#"), func(r bigtable.Row) bool {
			cols := map[string]string{}
			for _, it := range r[state.FamilyDeadLetter] {
				cols[strings.TrimPrefix(it.Column, state.FamilyDeadLetter+":")] = string(it.Value)
			}
			out[cols["message_id"]] = cols
			return true
		}, bigtable.RowFilter(bigtable.LatestNFilter(1)))
		if err != nil {
			t.Fatal(err)
		}
	case deadletter.KindFile:
		b, err := os.ReadFile(dl.File)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			var keys map[string]any
			if err := json.Unmarshal(line, &keys); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			if keys[deadletter.AttrPipeline] != pipeline {
				continue
			}
			fields := map[string]string{}
			for k, v := range keys {
				fields[k] = fmt.Sprint(v)
			}
			out[fields[deadletter.AttrMessageID]] = fields
		}
	}
	return out
}

// reprocessField is where each output stores the reprocess marker: the
// attribute and JSON key AttrReprocess, the column qualifier reprocess.
var reprocessField = map[string]string{
	deadletter.KindTopic: deadletter.AttrReprocess,
	deadletter.KindTable: "reprocess",
	deadletter.KindFile:  deadletter.AttrReprocess,
}

// TestEveryOutputMarksReprocessCopies: an output opened for a reprocess
// run (Clients.Reprocess) marks every copy with the run's name, which
// reads back; the live pipeline's output stores no marker at all, even for
// an original that carries a forged one. Replay republishes neither
// marker: the originals go out with their own attributes only.
func TestEveryOutputMarksReprocessCopies(t *testing.T) {
	for _, kind := range []string{deadletter.KindTopic, deadletter.KindTable, deadletter.KindFile} {
		t.Run(kind, func(t *testing.T) {
			f := dltest.New(t)
			dl := f.Outputs()[kind]
			p := f.Pipeline("orders", dl)
			// Message 1 dead-lettered by the live pipeline, with a forged
			// marker (reserved: not carried over); message 2 by a run.
			runs := map[int]string{1: "", 2: reprocessRun}
			for i, run := range runs {
				m := dltest.Message(i)
				if run == "" {
					m.Attributes[deadletter.AttrReprocess] = "forged"
				}
				if err := openFor(f, p, run).Send(context.Background(), m, deadletter.Late, nil); err != nil {
					t.Fatal(err)
				}
			}

			raw, got := stored(t, f, kind, dl, "orders"), f.ReadAll(p)
			for i, run := range runs {
				m := dltest.Message(i)
				v, ok := raw[m.ID][reprocessField[kind]]
				if ok != (run != "") || v != run {
					t.Errorf("the copy of %s (run %q) stores %s %q (present %v)", m.ID, run, reprocessField[kind], v, ok)
				}
				c := got[m.ID]
				if c == nil {
					t.Fatalf("no copy of %s read back", m.ID)
				}
				if c.Reprocess != run {
					t.Errorf("the copy of %s reads back with Reprocess %q, want %q", m.ID, c.Reprocess, run)
				}
				if !maps.Equal(c.Attributes, m.Attributes) {
					t.Errorf("the copy of %s reads back with attributes %v, want the original's %v", m.ID, c.Attributes, m.Attributes)
				}
			}

			sum, err := replay.Run(context.Background(), zap.NewNop(), f.Cfg, p, f.Clients(), replay.Options{})
			if err != nil || sum.Replayed != 2 {
				t.Fatalf("replay: %+v, %v", sum, err)
			}
			republished := f.Republished()
			if len(republished) != 2 {
				t.Fatalf("%d republished, want 2", len(republished))
			}
			for _, m := range republished {
				for k := range m.Attributes {
					if strings.HasPrefix(k, deadletter.AttrPrefix) {
						t.Errorf("replay republished %s with %s", m.Attributes["id"], k)
					}
				}
			}
		})
	}
}

// TestTableRowSaysWhoseCopyItHolds: a reprocess run's copy of a message
// and the live pipeline's share the message's row; the row reads back as
// the copy written last, its reprocess column included.
func TestTableRowSaysWhoseCopyItHolds(t *testing.T) {
	f := dltest.New(t)
	dl := f.Outputs()[deadletter.KindTable]
	p := f.Pipeline("orders", dl)
	liveOut, rerunOut := openFor(f, p, ""), openFor(f, p, reprocessRun)
	m := dltest.Message(3)
	for _, step := range []struct {
		out  deadletter.Output
		want string
	}{{rerunOut, reprocessRun}, {liveOut, ""}, {rerunOut, reprocessRun}} {
		if err := step.out.Send(context.Background(), m, deadletter.Late, nil); err != nil {
			t.Fatal(err)
		}
		c := f.ReadAll(p)[m.ID]
		if c == nil {
			t.Fatalf("no copy of %s read back", m.ID)
		}
		if c.Reprocess != step.want {
			t.Fatalf("after a copy by %q the row reads back with Reprocess %q", step.want, c.Reprocess)
		}
		if v, ok := stored(t, f, deadletter.KindTable, dl, "orders")[m.ID]["reprocess"]; ok != (step.want != "") || v != step.want {
			t.Fatalf("after a copy by %q the row's reprocess column is %q (present %v)", step.want, v, ok)
		}
	}
}
