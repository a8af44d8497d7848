package e2e

// Issue 27: `pubsink reprocess` and `pubsink deadletter replay` apply
// changes as the live pipeline does (docs/reference.md, "Changes", "Replay"
// and "Reprocess"), on the seeded change model of changes_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/pipeline"
)

// changesPipeline is changeYAML's pipeline "e2e" on e.topic and e.sub into
// e.table, its topic created by setup with message retention (what
// `reprocess --from` needs), its op expression op and, when extra is not
// empty, extra appended (a dead_letter section).
func (e *env) changesPipeline(mode string, deleteMissing []string, op, extra string) string {
	e.t.Helper()
	y := e.changeYAML("e2e", e.sub, e.table, mode, deleteMissing, false)
	sub := "      subscription: " + e.sub + "\n"
	liveOp := `      op: "data.op == 'd' ? 'delete' : 'set'"` + "\n"
	if !strings.Contains(y, sub) || !strings.Contains(y, liveOp) {
		e.t.Fatalf("changeYAML changed; no %q or %q in\n%s", sub, liveOp, y)
	}
	y = strings.Replace(y, sub, sub+"      topic_message_retention: 1h\n", 1)
	y = strings.Replace(y, liveOp, "      op: "+strconv.Quote(op)+"\n", 1)
	return e.baseYAML() + y + extra
}

// livePipeline runs cfg's pipeline in this process (until the test ends
// or stop) and returns it.
func (e *env) livePipeline(cfg *config.Config) (*pipeline.Pipeline, *appRun) {
	e.t.Helper()
	r := e.runWatchedApp(cfg, app.Options{PubSub: e.pubsub})
	return r.a.Pipelines()[0], r
}

// waitSettled waits until p has finished want messages (committed,
// duplicate or dead-lettered) and holds none.
func waitSettled(t *testing.T, p *pipeline.Pipeline, want int64, timeout time.Duration) pipeline.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := p.Status()
		done := st.Committed + st.Duplicate + deadSum(st)
		if done >= want && st.InFlight == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages finished after %v: %+v", done, want, timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deadSum is how many messages st counts as dead-lettered.
func deadSum(st pipeline.Status) int64 {
	n := int64(0)
	for _, v := range st.DeadLettered {
		n += v
	}
	return n
}

// tombstones reads the tombstone family of table: row → qualifier →
// versions.
func (e *env) tombstones(table string) map[string]map[string][]cell {
	e.t.Helper()
	out := map[string]map[string][]cell{}
	err := e.bigtable.Open(table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		cols := map[string][]cell{}
		for _, it := range r[tombFamily] {
			col := strings.TrimPrefix(it.Column, tombFamily+":")
			cols[col] = append(cols[col], cell{string(it.Value), it.Timestamp})
		}
		out[r.Key()] = cols
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("^"+tombFamily+"$")))
	if err != nil {
		e.t.Fatalf("read %s: %v", table, err)
	}
	return out
}

// coverage is what the tombstones of a read (tombstones) cover, as a
// change finds it: per row, the newest tombstone of each scope ("*" the
// row, FAMILY, FAMILY:COLUMN) that a wider scope's does not cover. Which
// older or covered tombstones a row keeps depends on the order its deletes
// were applied in, and changes nothing.
func coverage(tombs map[string]map[string][]cell) map[string]map[string]bigtable.Timestamp {
	out := map[string]map[string]bigtable.Timestamp{}
	for key, quals := range tombs {
		newest := map[string]bigtable.Timestamp{}
		for q, vs := range quals {
			for _, v := range vs {
				newest[q] = max(newest[q], v.ts)
			}
		}
		row := map[string]bigtable.Timestamp{}
		for q, ts := range newest {
			fam, _, isCol := strings.Cut(q, ":")
			switch {
			case q == "*":
			case !isCol && ts <= newest["*"]:
				continue
			case isCol && (ts <= newest["*"] || ts <= newest[fam]):
				continue
			}
			row[q] = ts
		}
		out[key] = row
	}
	return out
}

// diffRows lists the rows where two reads of a table differ.
func diffRows[V any](before, after map[string]V) []string {
	var out []string
	keys := slices.Collect(maps.Keys(before))
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		if b, a := before[key], after[key]; !reflect.DeepEqual(b, a) {
			out = append(out, fmt.Sprintf("row %s: %v before, %v after", key, b, a))
		}
	}
	return out
}

// summaryCounts reads the counts of a reprocess summary's messages line.
var summaryCounts = regexp.MustCompile(`committed (\d+), duplicates (\d+), dead-lettered (\d+)`)

// reprocessChanges runs app.Reprocess of pipeline e2e from from until its
// start, and checks that it committed every one of the n messages of the
// topic, none a duplicate or dead-lettered.
func (e *env) reprocessChanges(cfg *config.Config, from time.Time, n int) {
	e.t.Helper()
	var out bytes.Buffer
	req := app.ReprocessRequest{Pipeline: "e2e", From: from.Format(time.RFC3339Nano), Idle: 2 * time.Second, NoRestorePoint: true}
	if err := app.Reprocess(context.Background(), nopLogger(), cfg, req, e.reprocessOptions(), &out, io.Discard); err != nil {
		e.t.Fatalf("reprocess: %v\n%s", err, out.String())
	}
	m := summaryCounts.FindStringSubmatch(out.String())
	if m == nil || m[1] != strconv.Itoa(n) || m[2] != "0" || m[3] != "0" {
		e.t.Fatalf("the reprocess did not commit each of the %d messages once:\n%s", n, out.String())
	}
}

// TestReprocessAppliesChangesAsLive: a live pipeline (upsert, a missing b
// deletes the column) applies a shuffled change stream of 300 keys
// (inserts, partial updates, deletes, re-inserts) from a topic with
// message retention, and the table equals the model. A reprocess of the
// whole range with the same mapping then commits every message again and
// leaves every data cell as it was (value, timestamp, one version), no
// deleted row back, and the tombstones covering what they covered. A
// reprocess with a changed mapping (column c's template) leaves the table
// equal to the model under the new mapping: each column's newest change
// rewritten in place, one version a cell, deleted rows still deleted, the
// tombstones covering what they covered.
func TestReprocessAppliesChangesAsLive(t *testing.T) {
	t.Parallel()
	const keys = 300
	start := time.Now()
	e := newEnv(t)
	mode, deleteMissing := config.WriteUpsert, []string{"b"}
	stream := changeStream(mode, keys, 2727_27, recent())
	want := finalState(mode, deleteMissing, stream, func(c change) int64 { return c.ts })
	var msgs []*pubsubpb.PubsubMessage
	deletes := 0
	for _, cs := range stream {
		for _, c := range cs {
			msgs = append(msgs, c.message(""))
			if c.delete() {
				deletes++
			}
		}
	}
	rand.New(rand.NewPCG(27, 1)).Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })

	liveOp := "data.op == 'd' ? 'delete' : 'set'"
	_, cfg := e.writeConfig(e.changesPipeline(mode, deleteMissing, liveOp, ""))
	e.checkTombstoneFamily(e.table)
	from := time.Now().Add(-time.Second)
	p, live := e.livePipeline(cfg)
	if _, err := e.publishRaw(e.topic, msgs); err != nil {
		t.Fatal(err)
	}
	st := waitSettled(t, p, int64(len(msgs)), time.Minute)
	if diffs := diffChanges(e.readChanges(e.table), want); len(diffs) > 0 {
		t.Fatalf("live: %d differences from the model, the first:\n%s", len(diffs), strings.Join(diffs[:min(len(diffs), 15)], "\n"))
	}
	if deadSum(st) != 0 || st.Committed != int64(len(msgs)) {
		t.Fatalf("live: %+v, want each of %d messages committed", st, len(msgs))
	}
	live.stop(20 * time.Second)
	liveDone := time.Since(start)
	before, tombs := e.readChanges(e.table), e.tombstones(e.table) // every version
	cov := coverage(tombs)

	// The same mapping: no data cell changes, nor what the tombstones cover.
	e.reprocessChanges(cfg, from, len(msgs))
	if diffs := diffRows(before, e.readChanges(e.table)); len(diffs) > 0 {
		t.Errorf("the reprocess with the same mapping changed the data of %d rows, the first:\n%s", len(diffs), strings.Join(diffs[:min(len(diffs), 15)], "\n"))
	}
	tombs2 := e.tombstones(e.table)
	if diffs := diffRows(cov, coverage(tombs2)); len(diffs) > 0 {
		t.Errorf("the reprocess with the same mapping changed what the tombstones of %d rows cover, the first:\n%s", len(diffs), strings.Join(diffs[:min(len(diffs), 15)], "\n"))
	}
	reordered := len(diffRows(tombs, tombs2))
	sameDone := time.Since(start)

	// A changed mapping: the model with c's new values.
	changed := strings.Replace(e.changesPipeline(mode, deleteMissing, liveOp, ""), `c: "{data.c}"`, `c: "v2-{data.c}"`, 1)
	_, cfg2 := e.writeConfig(changed)
	v2 := make([][]change, len(stream))
	rewritten := 0
	for k, cs := range stream {
		for _, c := range cs {
			cols := maps.Clone(c.cols)
			if v, ok := cols["c"]; ok {
				cols["c"] = "v2-" + v
			}
			c.cols = cols
			v2[k] = append(v2[k], c)
		}
	}
	want2 := finalState(mode, deleteMissing, v2, func(c change) int64 { return c.ts })
	for _, r := range want2 {
		if _, ok := r["c"]; ok {
			rewritten++
		}
	}
	if rewritten < keys/3 {
		t.Fatalf("only %d rows keep a column c: the changed mapping would prove little", rewritten)
	}
	e.reprocessChanges(cfg2, from, len(msgs))
	if diffs := diffChanges(e.readChanges(e.table), want2); len(diffs) > 0 {
		t.Errorf("changed mapping: %d differences from the model under it, the first:\n%s", len(diffs), strings.Join(diffs[:min(len(diffs), 15)], "\n"))
	}
	if diffs := diffRows(cov, coverage(e.tombstones(e.table))); len(diffs) > 0 {
		t.Errorf("the reprocess with a changed mapping changed what the tombstones of %d rows cover, the first:\n%s", len(diffs), strings.Join(diffs[:min(len(diffs), 15)], "\n"))
	}
	t.Logf("%d keys, %d changes (%d deletes), %d rows with data, %d with a rewritten c (the same-mapping reprocess changed the tombstone cells, not what they cover, of %d rows): live in %v, same-mapping reprocess %v, changed-mapping reprocess %v",
		keys, len(msgs), deletes, len(want), rewritten, reordered, liveDone.Round(100*time.Millisecond),
		(sameDone - liveDone).Round(100*time.Millisecond), (time.Since(start) - sameDone).Round(100*time.Millisecond))
}

// withOp is c's message with its JSON op set to op.
func withOp(c change, op string) *pubsubpb.PubsubMessage {
	m := c.message("")
	var v map[string]any
	if err := json.Unmarshal(m.Data, &v); err != nil {
		panic(err)
	}
	v["op"] = op
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	m.Data = b
	return m
}

// TestDeadLetterReplayAppliesChangesAsLive: a change stream of 300 keys
// (replace_if_newer, a missing b deletes the column) where a quarter of
// the changes carry op codes the first configuration's op expression does
// not know (r for a set, x for a delete: its map lookup fails), so they
// are dead-lettered as expression_failed to a dead-letter table, while the
// others are applied (the table equals the model of those alone). Among
// them deletes, and sets older and newer than other changes of their
// rows. The configuration is fixed, `pubsink deadletter replay`
// republishes them while the rest of the stream is published, and once
// the replayed copies are processed (late, after most of their rows'
// changes, and out of order with the rest) the table equals the model of
// all the changes in event-time order.
func TestDeadLetterReplayAppliesChangesAsLive(t *testing.T) {
	t.Parallel()
	const keys = 300
	start := time.Now()
	e := newEnv(t)
	mode, deleteMissing := config.WriteReplaceIfNewer, []string{"b"}
	stream := changeStream(mode, keys, 2727_28, recent())
	want := finalState(mode, deleteMissing, stream, func(c change) int64 { return c.ts })

	// A quarter of the changes fail at first; of the others, a third waits
	// for the replay to be published beside it.
	rng := rand.New(rand.NewPCG(27, 2))
	var first, rest []*pubsubpb.PubsubMessage
	good := make([][]change, len(stream))  // the changes the first configuration applies
	other := make([][]change, len(stream)) // the changes that do not fail
	var failed, failedDeletes, failedOlder, failedNewer int
	for k, cs := range stream {
		for i, c := range cs {
			switch {
			case rng.Float64() < 0.25:
				failed++
				op := "r"
				if c.delete() {
					op, failedDeletes = "x", failedDeletes+1
				} else {
					if i < len(cs)-1 {
						failedOlder++
					}
					if i > 0 {
						failedNewer++
					}
				}
				first = append(first, withOp(c, op))
			case rng.Float64() < 0.3:
				rest = append(rest, c.message(""))
				other[k] = append(other[k], c)
			default:
				first = append(first, c.message(""))
				good[k] = append(good[k], c)
				other[k] = append(other[k], c)
			}
		}
	}
	// finalState names a row by its first change: keys with none left out.
	empty := func(cs []change) bool { return len(cs) == 0 }
	wantFirst := finalState(mode, deleteMissing, slices.DeleteFunc(good, empty), func(c change) int64 { return c.ts })
	wantOther := finalState(mode, deleteMissing, slices.DeleteFunc(other, empty), func(c change) int64 { return c.ts })
	decided := 0 // the keys whose end the failed changes decide
	for _, cs := range stream {
		if !maps.Equal(want[cs[0].key], wantOther[cs[0].key]) {
			decided++
		}
	}
	if failedDeletes < 10 || failedOlder < 10 || failedNewer < 10 || decided < keys/5 {
		t.Fatalf("failed changes: %d deletes, %d sets older and %d newer than another of their row, deciding %d keys: too few", failedDeletes, failedOlder, failedNewer, decided)
	}
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })

	_, _, dlTable := e.deadLetterNames()
	dl := e.deadLetterYAML(deadletter.KindTable)
	knownOps := "{'c': 'set', 'u': 'set', 'd': 'delete'}"
	fixedOps := "{'c': 'set', 'u': 'set', 'r': 'set', 'd': 'delete', 'x': 'delete'}"
	_, cfg := e.writeConfig(e.changesPipeline(mode, deleteMissing, knownOps+"[data.op]", dl))
	p, live := e.livePipeline(cfg)
	if _, err := e.publishRaw(e.topic, first); err != nil {
		t.Fatal(err)
	}
	st := waitSettled(t, p, int64(len(first)), time.Minute)
	if st.DeadLettered[string(deadletter.ExpressionFailed)] != int64(failed) || deadSum(st) != int64(failed) || st.Committed != int64(len(first)-failed) {
		t.Fatalf("the first configuration: %+v, want %d committed and %d dead-lettered as expression_failed", st, len(first)-failed, failed)
	}
	if n := e.countRows(dlTable); n != failed {
		t.Fatalf("%d rows in the dead-letter table, want %d", n, failed)
	}
	if diffs := diffChanges(e.readChanges(e.table), wantFirst); len(diffs) > 0 {
		t.Fatalf("before the replay: %d differences from the model of the changes applied, the first:\n%s", len(diffs), strings.Join(diffs[:min(len(diffs), 15)], "\n"))
	}
	live.stop(20 * time.Second)
	firstDone := time.Since(start)

	path, cfg := e.writeConfig(e.changesPipeline(mode, deleteMissing, fixedOps+"[data.op]", dl))
	p, live = e.livePipeline(cfg)
	published := make(chan error, 1)
	go func() { _, err := e.publishRaw(e.topic, rest); published <- err }()
	cmd := exec.Command(binary, "deadletter", "replay", "--config", path, "--pipeline", "e2e")
	cmd.Env = append(append(os.Environ(), e.ps.Env()...), e.bt.Env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay: %v\n%s\n%s", err, tail(stdout.String(), 10), tail(stderr.String(), 20))
	}
	for _, line := range []string{fmt.Sprintf("replayed: %d", failed), "failed: 0"} {
		if !strings.Contains(stdout.String(), "\n"+line+"\n") {
			t.Errorf("the replay's output lacks %q:\n%s", line, tail(stdout.String(), 8))
		}
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	st = waitSettled(t, p, int64(len(rest)+failed), time.Minute)
	if deadSum(st) != 0 || st.Committed != int64(len(rest)+failed) {
		t.Errorf("the fixed configuration: %+v, want each of %d messages committed", st, len(rest)+failed)
	}
	if diffs := diffChanges(e.readChanges(e.table), want); len(diffs) > 0 {
		t.Errorf("after the replay: %d differences from the model of all the changes, the first:\n%s", len(diffs), strings.Join(diffs[:min(len(diffs), 15)], "\n"))
	}
	if n := e.countRows(dlTable); n != 0 {
		t.Errorf("%d rows left in the dead-letter table", n)
	}
	live.stop(20 * time.Second)
	t.Logf("%d keys, %d changes: %d dead-lettered (%d deletes, sets: %d older and %d newer than another of their row; they decide %d keys), %d published beside the replay: first run %v, replay and the rest %v",
		keys, len(first)+len(rest), failed, failedDeletes, failedOlder, failedNewer, decided, len(rest),
		firstDone.Round(100*time.Millisecond), (time.Since(start) - firstDone).Round(100*time.Millisecond))
}
