package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
)

// finding is what the test reads of a report line.
type finding struct {
	Kind      string `json:"kind"`
	Row       string `json:"row"`
	Column    string `json:"column"`
	MessageID string `json:"message_id"`
	Detail    string `json:"detail"`
}

func (f finding) String() string { return f.Kind + " " + f.Row + " " + f.Column }

// readReport returns the findings of a --report file, sorted; its last
// line must be the summary.
func readReport(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	var last struct {
		Summary *struct {
			Messages int64 `json:"messages"`
		} `json:"summary"`
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if last.Summary != nil {
			t.Fatalf("report line %q after the summary", sc.Text())
		}
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("report line %q: %v", sc.Text(), err)
		}
		if last.Summary != nil {
			continue
		}
		var l finding
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("report line %q: %v", sc.Text(), err)
		}
		out = append(out, l.String())
	}
	if last.Summary == nil || last.Summary.Messages == 0 {
		t.Fatalf("%s does not end with a summary line counting the messages", path)
	}
	slices.Sort(out)
	return out
}

// TestAuditFindsExactlyWhatWasDamaged: beside two live replicas, a range of
// unique keys, publisher duplicates, rival pairs, poison (dead-lettered to
// a table) and filtered messages audits clean (exit 0, no finding). Then
// the test damages the table and the dead-letter output in every way an
// audit must see, once each, and the audit reports exactly those findings
// (exit 4); stopped by SIGTERM it exits 3 and leaves no subscription, and
// run again it reports them again. A --from beyond the topic's retention is
// refused (exit 2).
func TestAuditFindsExactlyWhatWasDamaged(t *testing.T) {
	const unique, dups, rivals, poisoned, filtered = 100, 20, 20, 5, 5
	e := newEnv(t)
	_, _, dlTable := e.deadLetterNames()
	yaml := e.configYAML("exactly_once", "    filter: \"data.n >= 0\"\n    dead_letter: {bigtable_table: "+dlTable+"}\n")
	sub := "      subscription: " + e.sub + "\n"
	yaml = strings.Replace(yaml, sub, sub+"      topic_message_retention: 1h\n", 1)
	path, _ := e.writeConfig(yaml)
	var live []*child
	for i := range 2 {
		p, c := e.replicaConfig(yaml, i)
		live = append(live, e.start(p, c))
		live[i].waitReady(60 * time.Second)
	}

	base := time.Now().Add(-30 * time.Minute).Truncate(time.Second)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 100 * time.Millisecond) }
	var msgs []dupMsg
	for i := range unique {
		msgs = append(msgs, dupMsg{id: fmt.Sprintf("k%03d", i), data: fmt.Sprintf(`{"n":%d}`, i), ts: at(i)})
	}
	msgs = append(msgs, msgs[:dups]...) // a publisher's retries: the same message again
	for i := range rivals {
		key := fmt.Sprintf("r%03d", i)
		msgs = append(msgs, rival(key, "a", i, at(i).Add(50*time.Millisecond)), rival(key, "b", i, at(i).Add(57*time.Millisecond)))
	}
	for i := range poisoned {
		msgs = append(msgs, dupMsg{id: fmt.Sprintf("p%03d", i), data: poison, ts: at(i)})
	}
	for i := range filtered {
		msgs = append(msgs, dupMsg{id: fmt.Sprintf("f%03d", i), data: `{"n":-1}`, ts: at(i)})
	}
	from := time.Now().UTC()
	time.Sleep(100 * time.Millisecond)
	e.publishDup(msgs)
	e.waitRows(e.table, unique+rivals, time.Minute)
	pollUntil(t, "every poison message dead-lettered", time.Minute, func() bool {
		return e.countRowsIn(dlTable, bigtable.PrefixRange("e2e#")) == poisoned
	})
	duplicates := func() int {
		n := 0.0
		for _, c := range live {
			n += metric(c.metricsText(), "pubsink_messages_duplicate_total", map[string]string{"pipeline": "e2e"})
		}
		return int(n)
	}
	pollUntil(t, "a duplicate for every retry and rival", time.Minute, func() bool { return duplicates() >= dups+rivals })
	time.Sleep(time.Second)
	until := time.Now().UTC()
	args := func(report string) []string {
		return []string{"--pipeline", "e2e", "--from", from.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano), "--idle", "3s", "--report", report}
	}

	clean := filepath.Join(e.dir, "clean.jsonl")
	a := e.startJob("audit", path, args(clean)...)
	if code := a.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("audit of an undamaged range: exit %d, want 0\n%s", code, a.out.String())
	}
	if os.Getenv("PUBSINK_AUDIT_SHOW") != "" {
		t.Logf("the clean audit's stdout:\n%s", a.out.String())
	}
	if got := readReport(t, clean); len(got) > 0 {
		t.Fatalf("audit of an undamaged range reported %v", got)
	}
	for _, want := range []string{
		fmt.Sprintf("messages   %d", unique+dups+2*rivals+poisoned+filtered),
		fmt.Sprintf("(winners %d, duplicates %d, filtered %d, dead-lettered %d)", unique+rivals, dups+rivals, filtered, poisoned),
		"clean: nothing missing or doubled",
	} {
		if !strings.Contains(a.out.String(), want) {
			t.Errorf("the clean audit's summary lacks %q:\n%s", want, a.out.String())
		}
	}

	// The damage, one of each kind.
	ctx := context.Background()
	tbl := e.bigtable.Open(e.table)
	apply := func(row string, m *bigtable.Mutation) {
		t.Helper()
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	ms := func(ts time.Time) bigtable.Timestamp {
		return bigtable.Timestamp(ts.UnixMicro()).TruncateToMilliseconds()
	}
	// A row deleted: its two cells missing.
	m := bigtable.NewMutation()
	m.DeleteRow()
	apply("k001", m)
	// A second version of a cell, 5 ms after the right one.
	m = bigtable.NewMutation()
	m.Set("d", "data", ms(at(2).Add(5*time.Millisecond)), []byte(`{"n":2,"again":true}`))
	apply("k002", m)
	// A cell changed in place.
	m = bigtable.NewMutation()
	m.Set("d", "n", ms(at(3)), []byte("999"))
	apply("k003", m)
	// The losing rival of r000 written too.
	rows := e.readTable(e.table)
	loser := "a"
	if winnerOf(rows["r000"]["data"][0].value) == "a" {
		loser = "b"
	}
	lost := rival("r000", loser, 0, at(0).Add(50*time.Millisecond))
	if loser == "b" {
		lost.ts = at(0).Add(57 * time.Millisecond)
	}
	m = bigtable.NewMutation()
	m.Set("d", "data", ms(lost.ts), []byte(lost.data))
	m.Set("d", "n", ms(lost.ts), []byte("0"))
	apply("r000", m)
	// A dead-letter copy removed.
	dl := e.bigtable.Open(dlTable)
	var dlRow string
	if err := dl.ReadRows(ctx, bigtable.PrefixRange("e2e#"), func(r bigtable.Row) bool { dlRow = r.Key(); return false }); err != nil || dlRow == "" {
		t.Fatalf("no dead-letter row to remove (err %v)", err)
	}
	m = bigtable.NewMutation()
	m.DeleteRow()
	if err := dl.Apply(ctx, dlRow, m); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"different k003 n",
		"doubled k002 data",
		"doubled r000 data",
		"doubled r000 n",
		"missing  ", // the dead-letter copy: a message, no cell
		"missing k001 data",
		"missing k001 n",
	}

	// Stopped part-way (--rate keeps it reading): exit 3, no subscription
	// left behind.
	stopped := e.startJob("audit", path, append(args(filepath.Join(e.dir, "stopped.jsonl")), "--rate", "20")...)
	pollUntil(t, "the audit reading, in its /status", 30*time.Second, func() bool {
		st := stopped.status(t).Audit
		return st != nil && st.Phase == "reading" && st.Summary.Messages > 0 && st.Progress.Done > 0
	})
	if st := stopped.status(t).Audit; st.Pipeline != "e2e" || !strings.HasPrefix(st.Name, "e2e~a") {
		t.Errorf("the audit's /status: %+v", st)
	}
	stopped.cmd.Process.Signal(syscall.SIGTERM)
	if code := stopped.wait(t, time.Minute); code != 3 {
		t.Fatalf("audit stopped by SIGTERM: exit %d, want 3\n%s", code, stopped.out.String())
	}
	if !strings.Contains(stopped.out.String(), "stopped after") {
		t.Errorf("the stopped audit did not say so:\n%s", stopped.out.String())
	}
	if left := e.auditSubscriptions(); len(left) > 0 {
		t.Errorf("the stopped audit left its subscriptions %v", left)
	}

	damaged := filepath.Join(e.dir, "damaged.jsonl")
	a = e.startJob("audit", path, args(damaged)...)
	if code := a.wait(t, 2*time.Minute); code != 4 {
		t.Fatalf("audit of a damaged range: exit %d, want 4\n%s", code, a.out.String())
	}
	if got := readReport(t, damaged); !slices.Equal(got, want) {
		t.Errorf("the damaged range's findings:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(a.out.String(), "FINDINGS") {
		t.Errorf("the damaged audit's summary:\n%s", a.out.String())
	}
	if left := e.auditSubscriptions(); len(left) > 0 {
		t.Errorf("the audit left its subscriptions %v", left)
	}
	if os.Getenv("PUBSINK_AUDIT_SHOW") != "" {
		report, _ := os.ReadFile(damaged)
		t.Logf("the damaged audit's stdout:\n%s\nreport:\n%s", a.out.String(), report)
	}

	// A range the topic does not retain.
	old := e.startJob("audit", path, "--pipeline", "e2e", "--from", "2h")
	if code := old.wait(t, time.Minute); code != 2 || !strings.Contains(old.log.String(), "needs the topic to retain") {
		t.Errorf("audit --from 2h on a topic retaining 1h: exit %d, want 2 naming the retention; stderr:\n%s", code, old.log.String())
	}
}

// auditSubscriptions lists the subscriptions of the test topic an audit
// made.
func (e *env) auditSubscriptions() []string { return e.ownSubscriptions("audit") }

// ownSubscriptions lists the subscriptions of the test topic that a
// command (audit, try) made, named SUBSCRIPTION-COMMAND-STAMP.
func (e *env) ownSubscriptions(command string) []string {
	e.t.Helper()
	var out []string
	it := e.pubsub.TopicAdminClient.ListTopicSubscriptions(context.Background(), &pubsubpb.ListTopicSubscriptionsRequest{Topic: "projects/" + project + "/topics/" + e.topic})
	for {
		s, err := it.Next()
		if err == iterator.Done {
			return out
		}
		if err != nil {
			e.t.Fatal(err)
		}
		if strings.Contains(s, "-"+command+"-") {
			out = append(out, s)
		}
	}
}
