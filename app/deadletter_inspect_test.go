package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/inspect"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/source"
)

// inspectYAML has a pipeline for each kind of dead-letter output; DIR is
// the test's directory.
const inspectYAML = `
project: dlinspect
state: {instance: inst}
pipelines:
  - name: viatopic
    mode: at_least_once
    source: {topic: orders, subscription: orders-topic-sub}
    sink: {type: stdout}
    dead_letter: {topic: orders-dlq}
  - name: viatable
    mode: at_least_once
    source: {topic: orders, subscription: orders-table-sub}
    sink: {type: stdout}
    dead_letter: {bigtable_table: orders_dead}
  - name: viafile
    mode: at_least_once
    source: {topic: orders, subscription: orders-file-sub}
    sink: {type: stdout}
    dead_letter: {file: DIR/dead.jsonl}
`

// inspected are the messages each output gets a copy of: text and binary
// payloads, a two-line error, two of one reason.
var inspected = []struct {
	data   string
	reason deadletter.Reason
	err    string
}{
	{`{"temp": 21.5}`, deadletter.MissingField, "{data.temprature_c}: no such field"},
	{"\x00\xff\x10binary", deadletter.InvalidPayload, "line one\nline two"},
	{"late one", deadletter.Late, "event time behind the watermark"},
	{"late two", deadletter.Late, "event time behind the watermark"},
	{"big", deadletter.TooLarge, "row key over 4 KiB"},
	{"héllo <&>", deadletter.ExpressionFailed, "no such overload: double * int"},
}

func inspectedID(i int) string { return fmt.Sprintf("m-%d", 100+i) }

// TestDeadLetterListAndShowLeaveEveryCopyForReplay dead-letters the same
// messages into a topic (the Pub/Sub emulator), a table (cbtemulator) and a
// file, then lists them (all, by reason as JSON, with a limit), shows two
// whole and a missing one, and finds that a replay still gets every copy.
func TestDeadLetterListAndShowLeaveEveryCopyForReplay(t *testing.T) {
	ps := emulator.RequirePubSub(t)
	bt := emulator.RequireBigtable(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", ps.Host)
	t.Setenv("BIGTABLE_EMULATOR_HOST", bt.Host)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "pubsink.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(inspectYAML, "DIR", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SetupFile(ctx, path, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	psc, err := ps.Client(ctx, cfg.Project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { psc.Close() })
	btc, _, err := bt.Clients(ctx, cfg.Project, cfg.State.Instance)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { btc.Close() })
	for _, p := range cfg.Pipelines {
		out, err := deadletter.Open(ctx, zap.NewNop(), cfg, p, deadletter.Clients{PubSub: psc, Bigtable: btc})
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range inspected {
			msg := &source.Message{ID: inspectedID(i), Data: []byte(m.data), Attributes: map[string]string{"site": "s" + fmt.Sprint(i)},
				PublishTime: time.Date(2026, 12, 3, 10, 0, i, 0, time.UTC)}
			if err := out.Send(ctx, msg, m.reason, errors.New(m.err)); err != nil {
				t.Fatal(err)
			}
		}
		if err := out.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}

	for _, p := range cfg.Pipelines {
		t.Run(deadletter.Kind(p.DeadLetter), func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			from := describeForTest(cfg.Project, p.Name, dir)
			list := func(req ListRequest) (string, string) {
				t.Helper()
				req.Pipeline = p.Name
				var out, logs bytes.Buffer
				if err := ListFile(ctx, path, req, &out, &logs); err != nil {
					t.Fatalf("list %+v: %v\n%s", req, err, logs.String())
				}
				return out.String(), logs.String()
			}

			// Every copy, one line each, then the summary.
			out, _ := list(ListRequest{})
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != len(inspected)+2 || !strings.HasPrefix(lines[0], "MESSAGE_ID ") {
				t.Fatalf("list printed %d lines, want a header, %d copies and a summary:\n%s", len(lines), len(inspected), out)
			}
			if want := fmt.Sprintf("%d copies of pipeline %s in %s", len(inspected), p.Name, from); lines[len(lines)-1] != want {
				t.Errorf("summary %q, want %q", lines[len(lines)-1], want)
			}
			for i, m := range inspected {
				line := lineOf(lines, inspectedID(i))
				if !strings.Contains(line, " "+string(m.reason)+" ") || !strings.Contains(line, fmt.Sprintf(" %d  ", len(m.data))) ||
					!strings.Contains(line, strings.Split(m.err, "\n")[0]) || !strings.Contains(line, "2026-") {
					t.Errorf("the line of %s does not show its failed_at, reason %s, size %d and error %q: %q", inspectedID(i), m.reason, len(m.data), m.err, line)
				}
			}

			// --reason late --json: the two late copies, as JSON objects
			// with the documented fields; the summary on stderr.
			out, logs := list(ListRequest{Reason: "late", JSON: true})
			var got []map[string]any
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				var r map[string]any
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("--json printed a line that is not JSON: %q (%v)", l, err)
				}
				got = append(got, r)
			}
			fields := []string{"attributes", "data", "data_encoding", "error", "failed_at", "location", "message_id", "pipeline", "publish_time", "reason", "size"}
			if len(got) != 2 {
				t.Fatalf("--reason late printed %d objects, want 2:\n%s", len(got), out)
			}
			for _, r := range got {
				if keys := slices.Sorted(maps.Keys(r)); !slices.Equal(keys, fields) {
					t.Errorf("--json fields %q, want %q", keys, fields)
				}
				if r["reason"] != "late" || r["pipeline"] != p.Name || r["data_encoding"] != "text" || !strings.HasPrefix(r["data"].(string), "late ") {
					t.Errorf("--reason late printed %v", r)
				}
			}
			if want := fmt.Sprintf("2 copies with reason late of pipeline %s in %s\n", p.Name, from); logs != want {
				t.Errorf("--json summary on stderr %q, want %q", logs, want)
			}

			// --limit 2: two copies, and it says more follow.
			out, _ = list(ListRequest{Limit: 2})
			lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 4 || !strings.HasSuffix(lines[3], "; --limit 2 reached, more follow") {
				t.Errorf("--limit 2 printed:\n%s", out)
			}

			// show: the binary copy whole, in base64; the text one as JSON.
			var buf bytes.Buffer
			if err := ShowFile(ctx, path, ShowRequest{Pipeline: p.Name, MessageID: inspectedID(1)}, &buf, io.Discard); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"message_id    m-101\n", "reason        invalid_payload\n", "error         line one\n              line two\n",
				"attributes    site=s1\n", "size          9\n", "data_encoding base64\ndata\n" + base64.StdEncoding.EncodeToString([]byte(inspected[1].data)) + "\n",
			} {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("show of the binary copy lacks %q:\n%s", want, buf.String())
				}
			}
			buf.Reset()
			if err := ShowFile(ctx, path, ShowRequest{Pipeline: p.Name, MessageID: inspectedID(5), JSON: true}, &buf, io.Discard); err != nil {
				t.Fatal(err)
			}
			var r map[string]any
			if err := json.Unmarshal(buf.Bytes(), &r); err != nil || r["data"] != inspected[5].data || r["data_encoding"] != "text" ||
				r["error"] != inspected[5].err || r["attributes"].(map[string]any)["site"] != "s5" {
				t.Errorf("show --json of the text copy: %v\n%s", err, buf.String())
			}
			err := ShowFile(ctx, path, ShowRequest{Pipeline: p.Name, MessageID: "m-999"}, io.Discard, io.Discard)
			if !errors.Is(err, inspect.ErrNotFound) || !strings.Contains(err.Error(), "holds no copy of message m-999") {
				t.Errorf("show of a message without copy: %v", err)
			}

			// Nothing was consumed: a replay gets every copy.
			buf.Reset()
			if err := ReplayFile(ctx, path, ReplayRequest{Pipeline: p.Name, DryRun: true}, &buf, io.Discard); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("\nwould replay: %d\n", len(inspected)); !strings.Contains(buf.String(), want) {
				t.Errorf("after list and show, a replay finds:\n%s\nwant %q", buf.String(), want)
			}
			t.Logf("%s: %v", p.Name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// lineOf returns the line of lines that starts with id.
func lineOf(lines []string, id string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, id+" ") {
			return l
		}
	}
	return ""
}

// describeForTest is how the summary names the output of each of
// inspectYAML's pipelines.
func describeForTest(project, pipeline, dir string) string {
	switch pipeline {
	case "viatopic":
		return fmt.Sprintf("dead-letter topic projects/%[1]s/topics/orders-dlq (subscription projects/%[1]s/subscriptions/orders-dlq-replay)", project)
	case "viatable":
		return "dead-letter table orders_dead in instance inst"
	}
	return "dead-letter file " + filepath.Join(dir, "dead.jsonl")
}
