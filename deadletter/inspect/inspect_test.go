package inspect

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/internal/dltest"
)

// TestListPrintsThePipelinesCopiesAndWhatDoesNotReadBack: copies of
// another pipeline sharing a file are skipped; a torn line is listed as
// unreadable (replay reports it too) and counted apart; --reason leaves it
// out; --limit counts it.
func TestListPrintsThePipelinesCopiesAndWhatDoesNotReadBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dl := config.DeadLetter{File: filepath.Join(dir, "dead.jsonl")}
	cfg := &config.Config{Project: "p"}
	send := func(pipeline string, i int, r deadletter.Reason) {
		out, err := deadletter.Open(ctx, zap.NewNop(), cfg, config.Pipeline{Name: pipeline, DeadLetter: dl}, deadletter.Clients{})
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Send(ctx, dltest.Message(i), r, errors.New("why")); err != nil {
			t.Fatal(err)
		}
		out.Close(ctx)
	}
	send("orders", 0, deadletter.Late)
	send("other", 1, deadletter.Late)
	f, err := os.OpenFile(dl.File, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{torn\n")
	f.Close()
	send("orders", 2, deadletter.TooLarge)

	p := config.Pipeline{Name: "orders", DeadLetter: dl}
	list := func(opts Options) (Summary, string) {
		t.Helper()
		var buf bytes.Buffer
		opts.Out = &buf
		sum, err := List(ctx, zap.NewNop(), cfg, p, deadletter.Clients{}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return sum, buf.String()
	}
	sum, out := list(Options{})
	if sum.Shown != 2 || sum.Unreadable != 1 || sum.More || strings.Contains(out, "1001 ") ||
		!strings.Contains(out, "unreadable") || !strings.Contains(out, "dead.jsonl line 3: not a JSON object") {
		t.Fatalf("list: %+v\n%s", sum, out)
	}
	if want := "2 copies of pipeline orders in dead-letter file " + dl.File + "; 1 unreadable\n"; sum.String() != want {
		t.Errorf("summary %q, want %q", sum.String(), want)
	}
	if sum, out = list(Options{Reason: deadletter.TooLarge}); sum.Shown != 1 || sum.Unreadable != 0 || !strings.Contains(out, "1002 ") {
		t.Errorf("--reason too_large: %+v\n%s", sum, out)
	}
	if sum, _ = list(Options{Limit: 2}); sum.Shown != 1 || sum.Unreadable != 1 || !sum.More {
		t.Errorf("--limit 2: %+v", sum)
	}
	if sum, _ = list(Options{Limit: 3}); sum.More {
		t.Errorf("--limit 3 of 3 entries says more follow: %+v", sum)
	}
	// The other pipeline's copy is not the orders pipeline's to show.
	if err := Show(ctx, zap.NewNop(), cfg, p, deadletter.Clients{}, "1001", false, &bytes.Buffer{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("show of another pipeline's copy: %v", err)
	}
}

func TestPayloadIsTextOnlyWhenItPrintsSafely(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "text:",
		"héllo\n\tworld\r": "text:héllo\n\tworld\r",
		"\xff":             "base64:/w==",
		"bell\a":           "base64:YmVsbAc=",
		"esc\x1b[2J":       "base64:ZXNjG1sySg==",
		"nul\x00":          "base64:bnVsAA==",
	} {
		enc, data := payload([]byte(in))
		if got := enc + ":" + data; got != want {
			t.Errorf("payload(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShortKeepsTheStartOfTheFirstLine(t *testing.T) {
	for in, want := range map[string]string{
		"short":                         "short",
		"two\nlines":                    "two …",
		strings.Repeat("x", 61):         strings.Repeat("x", 59) + "…",
		strings.Repeat("é", 60):         strings.Repeat("é", 60),
		strings.Repeat("y", 70) + "\nz": strings.Repeat("y", 59) + "…",
	} {
		if got := short(in); got != want {
			t.Errorf("short(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestShowNamesGoogAttributesAsTheOriginalHadThem: a topic output publishes
// the original's goog* attributes renamed (Pub/Sub reserves the prefix);
// show prints them under their original keys, as replay republishes them.
func TestShowNamesGoogAttributesAsTheOriginalHadThem(t *testing.T) {
	ctx := context.Background()
	f := dltest.New(t)
	p := f.Pipeline("orders", f.Outputs()[deadletter.KindTopic])
	m := dltest.Message(4)
	m.Attributes["googclient_schemaname"] = "projects/p/schemas/orders"
	if err := f.Open(p).Send(ctx, m, deadletter.InvalidPayload, errors.New("why")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Show(ctx, zap.NewNop(), f.Cfg, p, f.Clients(), m.ID, true, &buf); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, `"googclient_schemaname":"projects/p/schemas/orders"`) || strings.Contains(out, "pubsink_goog") {
		t.Errorf("show --json:\n%s", out)
	}
}
