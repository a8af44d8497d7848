package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/reprocess"
)

// reprocessRun is one `pubsink reprocess` process: its stdout (the plan,
// the restore point, the summary) and its log.
type reprocessRun struct {
	addr string // its --http-addr
	cmd  *exec.Cmd
	out  bytes.Buffer
	log  bytes.Buffer
	done chan struct{}
	code int
}

func (e *env) startReprocess(path string, args ...string) *reprocessRun {
	e.t.Helper()
	return e.startJob("reprocess", path, args...)
}

// startJob starts `pubsink COMMAND --config path --http-addr ADDR args...`
// (reprocess, audit): a command that ends by itself.
func (e *env) startJob(command, path string, args ...string) *reprocessRun {
	e.t.Helper()
	addr := "127.0.0.1:" + freePort(e.t)
	r := e.startCommand(append([]string{command, "--config", path, "--http-addr", addr}, args...)...)
	r.addr = addr
	return r
}

// startCommand starts `pubsink args...` on the emulators, in the
// background; the test's end kills it if it still runs.
func (e *env) startCommand(args ...string) *reprocessRun {
	e.t.Helper()
	r := &reprocessRun{done: make(chan struct{})}
	r.cmd = exec.Command(binary, args...)
	r.cmd.Env = append(append(os.Environ(), e.ps.Env()...), e.bt.Env()...)
	r.cmd.Stdout, r.cmd.Stderr = &syncWriter{w: &r.out}, &syncWriter{w: &r.log}
	if err := r.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		r.code = r.cmd.ProcessState.ExitCode()
		close(r.done)
	}()
	e.t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
		if e.t.Failed() {
			e.t.Logf("%v: stdout:\n%s\nlog:\n%s", r.cmd.Args[1:], tail(r.out.String(), 40), tail(r.log.String(), 40))
		}
	})
	return r
}

// runStatus is what the tests read of a reprocess's /status.
type runStatus struct {
	Pipelines []struct {
		Name string `json:"name"`
	} `json:"pipelines"`
	Reprocess struct {
		Name     string `json:"name"`
		Pipeline string `json:"pipeline"`
		Progress struct {
			Done int64 `json:"done"`
		} `json:"progress"`
	} `json:"reprocess"`
	Audit *struct {
		Name     string `json:"name"`
		Pipeline string `json:"pipeline"`
		Phase    string `json:"phase"`
		Progress struct {
			Done int64 `json:"done"`
		} `json:"progress"`
		Summary struct {
			Messages int64 `json:"messages"`
		} `json:"summary"`
	} `json:"audit"`
}

// status reads the run's /status; zero while it does not answer.
func (r *reprocessRun) status(t *testing.T) runStatus {
	var st runStatus
	resp, err := http.Get("http://" + r.addr + "/status")
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Logf("the run's /status: %v", err)
	}
	return st
}

// wait waits for the run to exit and returns its exit code.
func (r *reprocessRun) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-time.After(timeout):
		t.Fatalf("%v still running after %v; log:\n%s", r.cmd.Args[1:], timeout, tail(r.log.String(), 40))
		return -1
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// publishNow publishes messages with ids prefix+[from, to), their event
// time now, and returns when all are confirmed.
func (e *env) publishNow(prefix string, from, to int) { e.publishAt(prefix, from, to, time.Now()) }

// publishAt is publishNow with event time ts: published twice, a message
// is a publisher's duplicate (the same data and attributes).
func (e *env) publishAt(prefix string, from, to int, ts time.Time) {
	e.t.Helper()
	ctx := context.Background()
	pub := e.pubsub.Publisher(e.topic)
	defer pub.Stop()
	var results []*pubsub.PublishResult
	for i := from; i < to; i++ {
		results = append(results, pub.Publish(ctx, &pubsub.Message{
			Data:       []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Attributes: map[string]string{"id": fmt.Sprintf("%s%06d", prefix, i), "ts": stamp(ts)},
		}))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			e.t.Fatalf("publish: %v", err)
		}
	}
}

// countSnapshots counts the project's snapshots.
func (e *env) countSnapshots() int {
	n := 0
	it := e.pubsub.SubscriptionAdminClient.ListSnapshots(context.Background(), &pubsubpb.ListSnapshotsRequest{Project: "projects/" + project})
	for {
		_, err := it.Next()
		if err == iterator.Done {
			return n
		}
		if err != nil {
			e.t.Fatalf("list snapshots: %v", err)
		}
		n++
	}
}

// catalogCells returns the catalog rows of a pipeline (prefix
// dedupe#PIPELINE#) whose dedupe key starts with key: row key → its cells'
// values and timestamps, one string.
func (e *env) catalogCells(prefix, key string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	err := e.bigtable.Open(e.stateTable).ReadRows(context.Background(), bigtable.PrefixRange(prefix), func(r bigtable.Row) bool {
		// dedupe#PIPELINE#HH#KEY (the journal's rows are #~j#…).
		if parts := strings.SplitN(strings.TrimPrefix(r.Key(), prefix), "#", 2); len(parts) != 2 || !strings.HasPrefix(parts[1], key) {
			return true
		}
		var b strings.Builder
		for _, items := range r {
			for _, it := range items {
				fmt.Fprintf(&b, "%s=%q@%d;", it.Column, it.Value, it.Timestamp)
			}
		}
		out[r.Key()] = b.String()
		return true
	})
	if err != nil {
		e.t.Fatalf("read %s: %v", e.stateTable, err)
	}
	return out
}

func (e *env) subscriptionExists(name string) bool {
	_, err := e.pubsub.SubscriptionAdminClient.GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: name})
	if status.Code(err) == codes.NotFound {
		return false
	}
	if err != nil {
		e.t.Fatalf("get %s: %v", name, err)
	}
	return true
}

// TestReprocessRewritesARangeBesideTheLiveReplicas: two live replicas keep
// committing a steady stream while a reprocess with a changed column
// mapping replays the range published before it (ranged messages and
// publisher duplicates of them). A dry run first changes nothing. The
// reprocess is stopped (SIGTERM: exit 3) a sixth of the way and resumes at
// once, is killed -9 a third of the way and started again with the same
// arguments; a second reprocess started meanwhile is refused. Afterwards
// every row of the range holds the new value with one version per cell,
// every row of the live stream after the range holds the live mapping's,
// the live catalog of the range's keys is as it was, the live watermark
// never went back, the one poison message of the range was dead-lettered
// once by the live pipeline and once by the run (marked as the run's) and
// nothing else was, the run's /status and metrics were under its own name,
// its subscription is gone and its restore point kept.
func TestReprocessRewritesARangeBesideTheLiveReplicas(t *testing.T) {
	const ranged = 8000
	e := newEnv(t)
	_, dlSub, _ := e.deadLetterNames()
	yaml := e.watermarkYAML(config.LateDeadLetter, e.deadLetterYAML("topic"))
	sub := "      subscription: " + e.sub + "\n"
	yaml = strings.Replace(yaml, sub, sub+"      topic_message_retention: 1h\n", 1) // setup creates the topic with it
	e.writeConfig(yaml)

	var live []*child
	for i := range 2 {
		path, c := e.replicaConfig(yaml, i)
		ch := e.start(path, c)
		live = append(live, ch)
	}
	for _, c := range live {
		c.waitReady(60 * time.Second)
	}
	from := time.Now().Add(-time.Second).UTC()
	ts := time.Now()
	e.publishAt("r", 0, ranged, ts)
	e.publishAt("r", 0, 200, ts) // publisher duplicates within the range: the same data and attributes
	poisonID := e.publishOne("not json", map[string]string{"id": "poison", "ts": stamp(time.Now())})
	e.waitRows(e.table, ranged, 2*time.Minute)
	until := time.Now().UTC()
	time.Sleep(1500 * time.Millisecond) // the live stream starts clear of the range's end

	// The live stream: 20 messages every 100 ms for as long as the
	// reprocess runs, and the live watermark sampled from both replicas.
	var streamed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for n := 0; ; n += 20 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			e.publishNow("l", n, n+20)
			streamed.Store(int64(n + 20))
		}
	}()
	var wmMu sync.Mutex
	var wmBack []string
	go func() {
		defer wg.Done()
		last := map[int]time.Time{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for i, c := range live {
				wm, _ := c.status()["watermark"].(string)
				if wm == "" {
					continue
				}
				w, _ := time.Parse(time.RFC3339Nano, wm)
				if w.Before(last[i]) {
					wmMu.Lock()
					wmBack = append(wmBack, fmt.Sprintf("replica %d: %v after %v", i, w, last[i]))
					wmMu.Unlock()
				}
				last[i] = w
			}
		}
	}()

	// The reprocess's configuration: the same pipeline with column n
	// mapped anew.
	changed := strings.Replace(yaml, `n: "{data.n}"`, `n: "v2-{data.n}"`, 1)
	changed = strings.Replace(changed, "streams: 8\n", "streams: 2\n", 1) // slower, to be caught at a sixth
	if !strings.Contains(changed, `n: "v2-{data.n}"`) || !strings.Contains(changed, "streams: 2\n") {
		t.Fatalf("the harness's YAML changed: no column n or streams in\n%s", yaml)
	}
	rpath, _ := e.replicaConfig(changed, 9)
	args := []string{"--pipeline", "e2e", "--from", from.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano), "--idle", "5s"}
	runSub := "projects/" + project + "/subscriptions/" + e.sub + "-reprocess"

	// The live dedupe state of the range's keys, which the reprocess must
	// leave as it is (its claims go to a scope of its own).
	liveClaims := e.catalogCells("dedupe#e2e#", "r")
	if len(liveClaims) < ranged {
		t.Fatalf("%d live catalog rows of the range, want %d", len(liveClaims), ranged)
	}

	// A dry run changes nothing.
	snaps := e.countSnapshots()
	dry := e.startReprocess(rpath, append(args, "--dry-run")...)
	if code := dry.wait(t, time.Minute); code != 0 {
		t.Fatalf("dry run: exit %d", code)
	}
	if !strings.Contains(dry.out.String(), "dry run: would create "+runSub) {
		t.Errorf("dry run printed %q", dry.out.String())
	}
	if e.subscriptionExists(runSub) || e.countSnapshots() != snaps {
		t.Fatalf("the dry run created the subscription or a snapshot")
	}

	// The run is paced by its own /status (done: what this process
	// finished), not by reading the table, which lags on a loaded machine.
	// Stopped (SIGTERM) a sixth of the way: exit 3, resumable, the lock
	// released, so that the next start takes it at once.
	stopped := e.startReprocess(rpath, args...)
	pollUntil(t, "a sixth of the range rewritten", 2*time.Minute, func() bool { return stopped.status(t).Reprocess.Progress.Done >= ranged/6 })
	stopped.cmd.Process.Signal(syscall.SIGTERM)
	if code := stopped.wait(t, 30*time.Second); code != 3 || !strings.Contains(stopped.out.String(), "run the same command again to resume") {
		t.Fatalf("a run stopped by SIGTERM: exit %d, stdout %q; want exit 3 and how to resume", code, stopped.out.String())
	}
	// Resumed at once, then killed -9 another sixth of the way; while it
	// runs, /status shows the run and /metrics counts under its name.
	first := e.startReprocess(rpath, args...)
	pollUntil(t, "the stopped run resumed at once", 10*time.Second, func() bool { return strings.Contains(first.out.String(), "resuming") })
	var st runStatus
	pollUntil(t, "another sixth of the range rewritten", 2*time.Minute, func() bool {
		st = first.status(t)
		return st.Reprocess.Progress.Done >= ranged/6
	})
	runName := st.Reprocess.Name
	if st.Reprocess.Pipeline != "e2e" || !strings.HasPrefix(runName, "e2e~r") || len(st.Pipelines) != 1 || st.Pipelines[0].Name != runName {
		t.Errorf("/status of the run: %+v", st)
	}
	resp, err := http.Get("http://" + first.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `pubsink_messages_committed_total{pipeline="`+runName+`"}`) || strings.Contains(string(metrics), `{pipeline="e2e"}`) {
		t.Errorf("the run's metrics are not under its own name %q", runName)
	}
	select {
	case <-first.done:
		t.Fatalf("the run ended (exit %d) before it could be killed halfway: the range is too short for this machine", first.code)
	default:
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	if !strings.Contains(stopped.out.String(), "restore point projects/"+project+"/snapshots/") {
		t.Errorf("the first run did not print its restore point: %q", stopped.out.String())
	}
	if !e.subscriptionExists(runSub) {
		t.Fatal("the killed run's subscription is gone: nothing to resume")
	}

	// Stopped while it waits for the dead run's lock to lapse: stopped
	// before done (exit 3), as any stop, not failed.
	waiting := e.startReprocess(rpath, args...)
	pollUntil(t, "a restarted run waiting for the lock", time.Minute, func() bool {
		return strings.Contains(waiting.log.String(), "the reprocess lock is held; waiting")
	})
	waiting.cmd.Process.Signal(syscall.SIGTERM)
	if code := waiting.wait(t, 30*time.Second); code != 3 || !strings.Contains(waiting.out.String(), "stopped after 0 messages; run the same command again to resume") {
		t.Errorf("SIGTERM while waiting for the lock: exit %d, stdout %q, log %q; want exit 3 and stopped after 0 messages", code, waiting.out.String(), tail(waiting.log.String(), 5))
	}

	// Started again: it waits for the dead run's lock to lapse and
	// resumes; a second reprocess meanwhile is refused.
	again := e.startReprocess(rpath, args...)
	pollUntil(t, "the restarted run resuming", time.Minute, func() bool { return strings.Contains(again.out.String(), "resuming") })
	second := e.startReprocess(rpath, args...)
	if code := second.wait(t, time.Minute); code != 1 || !strings.Contains(second.log.String(), reprocess.ErrLocked.Error()) {
		t.Errorf("a second reprocess meanwhile: exit %d, log %q; want exit 1 and %q", code, tail(second.log.String(), 5), reprocess.ErrLocked)
	}
	if code := again.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("the restarted run: exit %d", code)
	}
	if !strings.Contains(again.out.String(), "done in") {
		t.Errorf("no summary: %q", again.out.String())
	}
	var resumed int
	if _, rest, ok := strings.Cut(again.out.String(), "  messages "); ok {
		fmt.Sscan(rest, &resumed)
	}
	if resumed == 0 {
		t.Errorf("the restarted run processed no message: the kill was not halfway, or the run did not resume; stdout %q", again.out.String())
	}
	close(stop)
	wg.Wait()

	// The live pipeline catches up with the stream.
	n := int(streamed.Load())
	pollUntil(t, "the live stream written", time.Minute, func() bool {
		c := 0
		for key := range e.readTable(e.table) {
			if strings.HasPrefix(key, "l") {
				c++
			}
		}
		return c >= n
	})
	rows := e.readTable(e.table)
	var bad []string
	for i := range ranged {
		key := fmt.Sprintf("r%06d", i)
		cols := rows[key]
		if len(cols["n"]) != 1 || cols["n"][0].value != fmt.Sprintf("v2-%d", i) || len(cols["data"]) != 1 {
			bad = append(bad, fmt.Sprintf("%s: %v", key, cols))
		}
	}
	for i := range n {
		key := fmt.Sprintf("l%06d", i)
		cols := rows[key]
		if len(cols["n"]) != 1 || cols["n"][0].value != fmt.Sprint(i) || len(cols["data"]) != 1 {
			bad = append(bad, fmt.Sprintf("%s: %v", key, cols))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d rows not as expected, first: %v", len(bad), bad[:min(5, len(bad))])
	}
	if after := e.catalogCells("dedupe#e2e#", "r"); !maps.Equal(after, liveClaims) {
		t.Errorf("the reprocess changed the live dedupe catalog of the range: %d rows before, %d after", len(liveClaims), len(after))
	}
	if len(wmBack) > 0 {
		t.Errorf("the live watermark went back: %v", wmBack)
	}
	// The poison message of the range: one copy by the live pipeline, one
	// by the run, in the live pipeline's name and marked as the run's;
	// nothing else.
	copies := e.pull(dlSub, 2, time.Minute)
	var marks []string
	for _, c := range copies {
		if c.Attributes["pubsink_message_id"] != poisonID || c.Attributes["pubsink_pipeline"] != "e2e" {
			t.Errorf("dead-lettered: %v", c.Attributes)
		}
		marks = append(marks, c.Attributes["pubsink_reprocess"])
	}
	slices.Sort(marks)
	if fmt.Sprint(marks) != fmt.Sprint([]string{"", runName}) {
		t.Errorf("the dead-letter copies are marked %q, want one live copy (no mark) and one of %s", marks, runName)
	}
	if e.subscriptionExists(runSub) {
		t.Error("the finished run's subscription is still there")
	}
	if e.countSnapshots() != snaps+1 {
		t.Errorf("%d snapshots, want the restore point more than the %d before", e.countSnapshots(), snaps)
	}
	// Every cell of the replicas (watermark, members, reports, dead-letter
	// records) and of the run is in the reference's State table.
	e.requireStateRowsDocumented()
	t.Logf("range %d messages, live stream %d; restarted run's output:\n%s", ranged, n, again.out.String())
}
