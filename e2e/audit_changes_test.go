package e2e

// The audit of change mappings end to end (issue 30; docs/reference.md,
// "Audit" and "Changes"): sets and deletes, upsert, replace_if_newer and
// insert, on_missing delete, tombstones.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/audit"
	"github.com/pubsink/pubsink/config"
)

// auditedModes are the mappings of the audited pipeline, one table each:
// the row key's prefix tells a finding's table.
var auditedModes = []struct{ prefix, mode string }{
	{"u-", config.WriteUpsert}, {"r-", config.WriteReplaceIfNewer}, {"i-", config.WriteInsert},
}

// auditChangesYAML is one pipeline of three change mappings of every
// message, each into its own table: upsert, replace_if_newer (both with a
// missing b deleting the column) and insert (b left out when missing, as
// insert does; it takes no key starting "x": their delete between two sets
// is what insert does not converge on in any order).
func (e *env) auditChangesYAML() string {
	var mappings strings.Builder
	for _, m := range auditedModes {
		fmt.Fprintf(&mappings, `        - table: %s%s
          row_key: "%s{data.key}"
          op: "data.op == 'd' ? 'delete' : 'set'"
          write_mode: %s
          on_missing_columns: {b: delete}
          columns: {a: "{data.a}", b: "{data.b}", c: "{data.c}"}
`, e.table, m.prefix, m.prefix, m.mode)
		if m.mode == config.WriteInsert {
			mappings.WriteString(`          when: "!data.key.startsWith('x')"` + "\n")
		}
	}
	return e.baseYAML() + fmt.Sprintf(`  - name: e2e
    mode: exactly_once
    source:
      topic: %s
      subscription: %s
      topic_message_retention: 1h
      timestamp_template: "{= timestamp(0) + duration(attributes.ts + 'ms')}"
      streams: 2
      max_outstanding_messages: 1000
    sink:
      column_family: %s
      on_missing: skip
      mappings:
%s`, e.topic, e.sub, dataFamily, mappings.String())
}

// readSummary returns the summary line of a --report file.
func readSummary(t *testing.T, path string) audit.Summary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last struct{ Summary *audit.Summary }
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		last.Summary = nil
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("report line %q: %v", sc.Text(), err)
		}
	}
	if last.Summary == nil {
		t.Fatalf("%s does not end with a summary line", path)
	}
	return *last.Summary
}

// TestAuditOfChanges: beside two live replicas, one pipeline writes every
// message into three tables by change mappings (upsert, replace_if_newer,
// insert; ops set and delete by a CEL expression; a missing b deletes the
// column), from changes published newest first: named keys for each case,
// and seeded streams of sets and deletes. Once the tables hold what the
// changes say in event-time order:
//  1. the audit of the range is clean, and it checked every data cell the
//     tables hold, none superseded;
//  2. a newer set of one row and a delete of another, published after the
//     range (applied by live), make the range's cells they replaced or
//     deleted superseded, not findings;
//  3. the tables damaged in the ways a change mapping can be (a deleted
//     row's cell brought back, a column a replace removed brought back, the
//     newest set's cell removed, an older version of an upsert cell kept, a
//     later insert's cell kept, a tombstone removed with its row still
//     empty), the audit reports exactly those findings but the tombstone's
//     (exit 4): a tombstone is no data, and Bigtable's GC may take it after
//     tombstone_retention anyway; the audit checks that the data is what
//     the changes say.
func TestAuditOfChanges(t *testing.T) {
	start := time.Now()
	e := newEnv(t)
	deleteMissing := []string{"b"}
	yaml := e.auditChangesYAML()
	path, _ := e.setupCLI("config.yaml", yaml)
	var live []*child
	for i := range 2 {
		p, c := e.replicaConfig(yaml, i)
		live = append(live, e.start(p, c))
	}
	for _, c := range live {
		c.waitReady(60 * time.Second)
	}

	base := recent()
	set := func(key string, n int, ts int64, cols ...string) change {
		c := change{key: key, op: "c", n: n, ts: base + ts, cols: map[string]string{}}
		for _, col := range cols {
			c.cols[col] = fmt.Sprintf("%s-%s-%d", col, key, n)
		}
		return c
	}
	del := func(key string, n int, ts int64) change { return change{key: key, op: "d", n: n, ts: base + ts} }
	named := [][]change{
		{set("k0", 0, 0, "a", "b", "c"), set("k0", 1, 10, "a")},                        // a partial update: b deleted, c kept (upsert)
		{set("k1", 0, 0, "a", "b", "c"), del("k1", 1, 10)},                             // deleted
		{del("k2", 0, 0), set("k2", 1, 10, "a", "b", "c"), set("k2", 2, 20, "a", "c")}, // re-inserted
		{set("x3", 0, 0, "a", "b", "c"), del("x3", 1, 10), set("x3", 2, 20, "a", "c")}, // deleted between two sets
		{set("k4", 0, 0, "a", "b", "c"), set("k4", 1, 10, "a", "b", "c")},              // updated
		{set("k5", 0, 0, "a", "b"), del("k5", 1, 10)},                                  // deleted
		{set("k6", 0, 0, "a", "b", "c")},                                               // set once (step 2 sets it again)
		{del("k7", 0, 0)},                                                              // a delete of nothing
		{set("k8", 0, 0, "a", "c"), set("k8", 1, 10, "b")},                             // b alone at 10 (step 2 deletes the row)
	}
	// Seeded streams: at most one delete before and one after a row's
	// sets, which every mode converges on in any order.
	stream := append(named, changeStream(config.WriteInsert, 40, 30, base+100)...)
	// Newest first, keys shuffled.
	var msgs []*pubsubpb.PubsubMessage
	for _, i := range rand.New(rand.NewPCG(30, 30)).Perm(len(stream)) {
		for _, c := range slices.Backward(stream[i]) {
			msgs = append(msgs, c.message(""))
		}
	}

	from := time.Now().UTC()
	time.Sleep(100 * time.Millisecond)
	if _, err := e.publishRaw(e.topic, msgs); err != nil {
		t.Fatal(err)
	}
	e.waitRecorded("e2e", len(msgs), time.Minute, live...)
	time.Sleep(time.Second)
	until := time.Now().UTC()

	// The tables hold what the changes say in event-time order (so that
	// a clean audit means something), and count their data cells.
	eventTime := func(c change) int64 { return c.ts }
	dataCells := func() int {
		n := 0
		for _, m := range auditedModes {
			for _, cols := range e.readChanges(e.table + m.prefix) {
				for _, vs := range cols {
					n += len(vs)
				}
			}
		}
		return n
	}
	rows := 0
	for _, m := range auditedModes {
		keys := stream
		if m.mode == config.WriteInsert {
			keys = slices.DeleteFunc(slices.Clone(stream), func(cs []change) bool { return strings.HasPrefix(cs[0].key, "x") })
		}
		rows += len(keys)
		want := map[string]map[string]modelCell{}
		for key, cells := range finalState(m.mode, deleteMissing, keys, eventTime) {
			want[m.prefix+key] = cells
		}
		if diffs := diffChanges(e.readChanges(e.table+m.prefix), want); len(diffs) > 0 {
			t.Fatalf("%s: the live pipeline did not apply the changes as the reference says:\n%s", m.mode, strings.Join(diffs, "\n"))
		}
	}
	cells := dataCells()

	args := func(report string) []string {
		return []string{"--pipeline", "e2e", "--from", from.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano), "--idle", "2s", "--report", report}
	}
	runAudit := func(name string, wantCode int) ([]string, audit.Summary) {
		t.Helper()
		report := filepath.Join(e.dir, name+".jsonl")
		a := e.startJob("audit", path, args(report)...)
		if code := a.wait(t, 2*time.Minute); code != wantCode {
			t.Fatalf("%s audit: exit %d, want %d\n%s", name, code, wantCode, a.out.String())
		}
		if os.Getenv("PUBSINK_AUDIT_SHOW") != "" {
			b, _ := os.ReadFile(report)
			t.Logf("%s audit: stdout:\n%s\nreport:\n%s", name, a.out.String(), b)
		}
		return readReport(t, report), readSummary(t, report)
	}
	checkCounts := func(name string, s audit.Summary, checked, superseded int) {
		t.Helper()
		if s.Messages != int64(len(msgs)) || s.Winners != int64(len(msgs)) || s.Rows != int64(rows) ||
			s.Checked != int64(checked) || s.Superseded != int64(superseded) || s.LateDropped != 0 {
			t.Errorf("%s audit's summary %+v: want %d messages, each a winner, %d rows, %d cells checked, %d superseded",
				name, s, len(msgs), rows, checked, superseded)
		}
	}

	// 1. Clean: every data cell of the tables is a newest set of the
	// range, checked; nothing is superseded (no change outside the range).
	findings, s := runAudit("clean", 0)
	if len(findings) > 0 {
		t.Fatalf("the audit of an undamaged range reported %v", findings)
	}
	checkCounts("the clean", s, cells, 0)

	// 2. Changes after the range: a newer set of k6, which upsert and
	// replace_if_newer take (their 3 cells of k6 each superseded; insert
	// keeps its earliest insert, still checked), and a delete of k8, which
	// removes its 6 data cells (u: a, b, c; r: b; i: a, c), superseded by
	// the row's tombstone.
	newer, deleted := set("k6", 1, 50, "a", "b", "c"), del("k8", 2, 50)
	if _, err := e.publishRaw(e.topic, []*pubsubpb.PubsubMessage{newer.message(""), deleted.message("")}); err != nil {
		t.Fatal(err)
	}
	e.waitRecorded("e2e", len(msgs)+2, time.Minute, live...)
	for _, prefix := range []string{"u-", "r-"} {
		if got := e.readChanges(e.table + prefix)[prefix+"k6"]["a"]; len(got) != 1 || got[0].ts != bigtable.Timestamp(newer.ts*1000) {
			t.Fatalf("%sk6 a: %v, want the newer set's", prefix, got)
		}
	}
	if n := dataCells(); n != cells-6 {
		t.Fatalf("%d data cells after the changes after the range, want %d", n, cells-6)
	}
	const superseded = 3 + 3 + 6
	findings, s = runAudit("superseded", 0)
	if len(findings) > 0 {
		t.Fatalf("the audit of a range with newer changes after it reported %v", findings)
	}
	checkCounts("the superseded", s, cells-superseded, superseded)

	// 3. The damage, on the cells the range's changes decide. damage
	// applies a mutation to row, in the table its prefix names.
	damage := func(row string, edit func(*bigtable.Mutation)) {
		t.Helper()
		m := bigtable.NewMutation()
		edit(m)
		if err := e.bigtable.Open(e.table+row[:2]).Apply(context.Background(), row, m); err != nil {
			t.Fatal(err)
		}
	}
	put := func(row, col string, ts int64, value string) {
		t.Helper()
		damage(row, func(m *bigtable.Mutation) {
			m.Set(dataFamily, col, bigtable.Timestamp((base+ts)*1000), []byte(value))
		})
	}
	// A deleted row's cell brought back, older than the delete.
	put("u-k1", "a", 0, "a-k1-0")
	// A column the newest change (a replace without it) removed, brought back.
	put("r-k0", "c", 10, "c-k0-0")
	// The newest set's cell removed.
	damage("u-k2", func(m *bigtable.Mutation) { m.DeleteCellsInColumn(dataFamily, "a") })
	// The older version of an upsert cell kept.
	put("u-k4", "a", 0, "a-k4-0")
	// A later insert's cell kept.
	put("i-k0", "a", 10, "a-k0-1")
	// A deleted row's tombstone removed: the row holds nothing at all.
	damage("u-k5", func(m *bigtable.Mutation) { m.DeleteCellsInFamily(tombFamily) })
	if got := e.readTable(e.table + "u-")["u-k5"]; got != nil {
		t.Fatalf("u-k5 after its tombstone's removal: %v, want no cell", got)
	}
	want := []string{
		"different r-k0 c",
		"different u-k1 a",
		"doubled i-k0 a",
		"doubled u-k4 a",
		"missing u-k2 a",
	}
	findings, s = runAudit("damaged", 4)
	if !slices.Equal(findings, want) {
		t.Errorf("the damaged tables' findings:\n%s\nwant exactly:\n%s", strings.Join(findings, "\n"), strings.Join(want, "\n"))
	}
	// u-k2 a is no longer checked; the others' right cells still are.
	checkCounts("the damaged", s, cells-superseded-1, superseded)
	if left := e.auditSubscriptions(); len(left) > 0 {
		t.Errorf("the audits left their subscriptions %v", left)
	}
	t.Logf("%d changes of %d keys into 3 tables (%d rows, %d data cells), 2 replicas, 3 audits: %v",
		len(msgs), len(stream), rows, cells, time.Since(start).Round(100*time.Millisecond))
}
