package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/members"
)

// replicaConfig writes yaml for one more replica: the same pipeline, its
// own HTTP port. It returns the file and the parsed config.
func (e *env) replicaConfig(yaml string, n int) (string, *config.Config) {
	e.t.Helper()
	yaml = regexp.MustCompile(`http: \{addr: "[^"]*"\}`).ReplaceAllString(yaml, fmt.Sprintf(`http: {addr: "127.0.0.1:%s"}`, freePort(e.t)))
	path := filepath.Join(e.dir, fmt.Sprintf("replica-%d.yaml", n))
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		e.t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		e.t.Fatal(err)
	}
	return path, cfg
}

// rivalWave is one wave of the replicas test: keys [from, to), each
// published as version 0 and, for half of them right after it, as a rival
// version 1 (same dedupe key and row key, another payload and event time);
// the rivals of the other half come a wave later.
type rivalWave struct{ from, to int }

func (w rivalWave) together() []dupMsg {
	var out []dupMsg
	v0, v1 := dupBatch(w.to, 0), dupBatch(w.to, 1)
	for i := w.from; i < w.to; i++ {
		out = append(out, v0[i])
		if i%2 == 0 {
			out = append(out, v1[i])
		}
	}
	return out
}

func (w rivalWave) later() []dupMsg {
	var out []dupMsg
	v1 := dupBatch(w.to, 1)
	for i := w.from; i < w.to; i++ {
		if i%2 == 1 {
			out = append(out, v1[i])
		}
	}
	return out
}

// TestReplicasWriteEachKeyOnce runs three `pubsink run` processes on one
// subscription, with a tracking subscription, and publishes every record
// with a rival, some right after it and some a wave later, while one
// process is killed -9 and replaced, one is replaced as a rolling update
// does (start the new, SIGTERM the old), and one (the watermark's leader,
// if one of the three leads then) is stopped (SIGSTOP) for longer than its
// membership and leader leases and resumed. Every key must end with
// one row holding one version of each cell: one of the two rivals, never
// both. The watermark, sampled from every process's /status and from the
// state table, must never go backwards, never pass the event time of a
// winning delivery before its record was committed, and reach the newest
// event time minus the band once the topic is idle.
func TestReplicasWriteEachKeyOnce(t *testing.T) {
	const perWave = 1500
	e := newEnv(t)
	yaml := e.watermarkYAML(config.LateAccept, "")
	_, cfg := e.writeConfig(yaml) // runs setup
	var procs []*child
	wms := newWatermarkSamples(e, cfg)
	startReplica := func() *child {
		path, c := e.replicaConfig(yaml, len(procs))
		ch := e.start(path, c)
		procs = append(procs, ch)
		wms.watch(ch)
		return ch
	}
	waves := []rivalWave{{0, perWave}, {perWave, 2 * perWave}, {2 * perWave, 3 * perWave}, {3 * perWave, 4 * perWave}}
	var all []dupMsg
	events := map[string]time.Time{} // message ID: event time
	publish := func(msgs []dupMsg) {
		msgs = stampNow(msgs)
		for i, id := range e.publishDup(msgs) {
			events[id] = msgs[i].ts
		}
		all = append(all, msgs...)
	}
	go wms.run()

	a, b, c := startReplica(), startReplica(), startReplica()
	for _, p := range []*child{a, b, c} {
		p.waitReady(60 * time.Second)
	}

	publish(waves[0].together())
	e.waitRows(e.table, perWave/2, time.Minute)
	// The first leader's startup guard (18s) drops before the faults, so
	// that every process has a watermark to show through them.
	known := time.Now()
	for wms.stored().IsZero() {
		if time.Since(known) > time.Minute {
			t.Fatal("no watermark stored a minute after the first wave")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// kill -9 mid-stream, and a replacement.
	publish(append(waves[0].later(), waves[1].together()...))
	b.signal(syscall.SIGKILL)
	b2 := startReplica()
	b2.waitReady(60 * time.Second) // after b's cell lapsed: a lease

	// A rolling update: the new one first, then SIGTERM the old.
	publish(append(waves[1].later(), waves[2].together()...))
	d := startReplica()
	d.waitReady(60 * time.Second)
	a.signal(syscall.SIGTERM)
	if code := a.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("the replaced process exited %d after SIGTERM, want 0", code)
	}

	// A process paused past its lease, then resumed: the watermark's
	// leader if one of them leads by now, so that it wakes up to a lease
	// taken over.
	paused, what := c, "a follower (no process led the watermark then)"
	for _, p := range []*child{b2, c, d} {
		if tr, _ := p.status()["tracker"].(map[string]any); tr["leading"] == true {
			paused, what = p, "the watermark's leader"
		}
	}
	t.Logf("pausing %s past its leases", what)
	paused.signal(syscall.SIGSTOP)
	publish(append(waves[2].later(), waves[3].together()...))
	time.Sleep(members.DefaultLease + 5*time.Second)
	paused.signal(syscall.SIGCONT)
	publish(waves[3].later())

	e.waitRows(e.table, 4*perWave, 3*time.Minute)
	settle(t, []*child{b2, c, d})
	var newest time.Time
	for _, m := range all {
		if m.ts.After(newest) {
			newest = m.ts
		}
	}
	// Idle: the watermark catches up, whichever process leads by now.
	idle := time.Now()
	want := newest.Add(-watermarkBand - time.Second)
	for !wms.stored().After(want) {
		if time.Since(idle) > time.Minute {
			t.Fatalf("a minute after the topic went idle the stored watermark %v is %v behind the newest event time %v",
				wms.stored(), newest.Sub(wms.stored()), newest)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("idle: the stored watermark reached the newest event time minus %v after %v", newest.Sub(wms.stored()), time.Since(idle).Round(100*time.Millisecond))
	wms.stop()
	leaders := 0
	for _, p := range []*child{b2, c, d} {
		if tr, _ := p.status()["tracker"].(map[string]any); tr["leading"] == true {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d of the 3 processes lead the watermark, want 1", leaders)
	}
	for _, p := range []*child{b2, c, d} {
		p.signal(syscall.SIGTERM)
		if code := p.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
	}

	rows := e.readTable(e.table)
	if len(rows) != 4*perWave {
		t.Errorf("%d rows, want %d", len(rows), 4*perWave)
	}
	both, bad := 0, 0
	for i := 0; i < 4*perWave; i++ {
		key := rowKey(i)
		data, n := rows[key]["data"], rows[key]["n"]
		switch {
		case len(data) == 2 || len(n) == 2:
			both++
		case len(data) != 1 || len(n) != 1:
			bad++
			if bad <= 5 {
				t.Errorf("row %s: %d versions of data, %d of n", key, len(data), len(n))
			}
		case !strings.Contains(data[0].value, fmt.Sprintf(`"n":%d,`, i)):
			bad++
			t.Errorf("row %s holds %s", key, data[0].value)
		}
	}
	if both > 0 {
		t.Errorf("%d of %d rows hold both rivals", both, 4*perWave)
	}
	wms.check(t, e.winners(cfg), events)
	t.Logf("%d messages (%d keys with a rival each) through 3 replicas with kill -9, a rolling update and a pause past the lease: %d rows, %d with both rivals",
		len(all), 4*perWave, len(rows), both)
}

// settle waits until no process holds a message and their counts stop
// moving, so that what is left to check is final.
func settle(t *testing.T, procs []*child) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	last, still := "", 0
	for still < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the processes did not settle: %s", last)
		}
		var sb strings.Builder
		idle := true
		for _, p := range procs {
			st := p.status()
			if st["in_flight"].(float64) != 0 {
				idle = false
			}
			fmt.Fprintf(&sb, "%v/%v ", st["received"], st["in_flight"])
		}
		if idle && sb.String() == last {
			still++
		} else {
			still = 0
		}
		last = sb.String()
		time.Sleep(time.Second)
	}
}

// stampNow gives each message an event time at its publication: the
// original now, its rival a second later (so that the two differ, and a
// row holding both shows two versions).
func stampNow(msgs []dupMsg) []dupMsg {
	out := make([]dupMsg, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		m.ts = now
		if strings.Contains(m.data, `"version":1`) {
			m.ts = now.Add(time.Second)
		}
		out[i] = m
	}
	return out
}

// watermarkSamples samples, every 50ms, the stored watermark and the
// /status watermark of every process it watches.
type watermarkSamples struct {
	e   *env
	cfg *config.Config

	mu      sync.Mutex
	procs   []*child
	samples []wmSample
	last    time.Time // the latest stored value
	done    chan struct{}
	stopped chan struct{}
}

type wmSample struct {
	at, wm time.Time
	source string // "stored" or the process's address
}

func newWatermarkSamples(e *env, cfg *config.Config) *watermarkSamples {
	return &watermarkSamples{e: e, cfg: cfg, done: make(chan struct{}), stopped: make(chan struct{})}
}

func (w *watermarkSamples) watch(c *child) {
	w.mu.Lock()
	w.procs = append(w.procs, c)
	w.mu.Unlock()
}

func (w *watermarkSamples) run() {
	defer close(w.stopped)
	table := w.e.bigtable.Open(w.cfg.State.Table)
	for {
		select {
		case <-w.done:
			return
		case <-time.After(50 * time.Millisecond):
		}
		w.mu.Lock()
		procs := slices.Clone(w.procs)
		w.mu.Unlock()
		for _, c := range procs {
			if !c.running() {
				continue
			}
			if wm, ok := statusWatermark(c.addr); ok {
				w.add(wmSample{at: time.Now(), wm: wm, source: c.addr})
			}
		}
		row, err := table.ReadRow(context.Background(), state.WatermarkRow("e2e"), bigtable.RowFilter(bigtable.ChainFilters(bigtable.ColumnFilter("^"+state.WatermarkColumn+"$"), bigtable.LatestNFilter(1))))
		at := time.Now()
		if err != nil {
			continue
		}
		for _, cell := range row[state.FamilyMeta] {
			if wm, err := time.Parse(state.WatermarkFormat, string(cell.Value)); err == nil {
				w.add(wmSample{at: at, wm: wm, source: "stored"})
			}
		}
	}
}

func (w *watermarkSamples) add(s wmSample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples = append(w.samples, s)
	if s.source == "stored" && s.wm.After(w.last) {
		w.last = s.wm
	}
}

func (w *watermarkSamples) stored() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *watermarkSamples) stop() {
	close(w.done)
	<-w.stopped
}

// statusWatermark reads the first pipeline's watermark from /status; false
// while unknown or unreadable (a process stopped or paused).
func statusWatermark(addr string) (time.Time, bool) {
	cl := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := cl.Get("http://" + addr + "/status")
	if err != nil {
		return time.Time{}, false
	}
	defer resp.Body.Close()
	var st struct {
		Pipelines []struct {
			Watermark time.Time `json:"watermark"`
		} `json:"pipelines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Pipelines) == 0 || st.Pipelines[0].Watermark.IsZero() {
		return time.Time{}, false
	}
	return st.Pipelines[0].Watermark, true
}

// check fails the test if some source's watermark went backwards, or if a
// sample passed the event time of a winning delivery before that key's
// record was committed (so before the delivery was finished).
func (w *watermarkSamples) check(t *testing.T, winners map[string]winner, events map[string]time.Time) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	last := map[string]time.Time{}
	back := 0
	for _, s := range w.samples {
		if s.wm.Before(last[s.source]) {
			if back++; back <= 5 {
				t.Errorf("%s: the watermark went back from %v to %v at %v", s.source, last[s.source], s.wm, s.at)
			}
		}
		last[s.source] = s.wm
	}
	type fin struct{ event, committed time.Time }
	var fins []fin
	for _, win := range winners {
		if ev, ok := events[win.messageID]; ok {
			fins = append(fins, fin{ev, win.committed})
		}
	}
	if len(fins) < len(winners)*9/10 {
		t.Fatalf("only %d of %d winners' event times known: the check would prove little", len(fins), len(winners))
	}
	// The record's timestamp is in milliseconds, truncated.
	const slack = 2 * time.Millisecond
	ahead := 0
	for _, s := range w.samples {
		for _, f := range fins {
			if s.wm.After(f.event) && f.committed.After(s.at.Add(slack)) {
				if ahead++; ahead <= 5 {
					t.Errorf("%s at %v: watermark %v passed the event time %v of a delivery committed only at %v",
						s.source, s.at, s.wm, f.event, f.committed)
				}
			}
		}
	}
	t.Logf("watermark: %d samples from %d sources checked against %d winning deliveries; %d went back, %d passed an unfinished event",
		len(w.samples), len(last), len(fins), back, ahead)
}

// winner is a key's winning delivery, as its catalog row names it, and
// when it claimed the key (before its row was written: a lower bound of
// its commit).
type winner struct {
	messageID string
	committed time.Time
}

// winners reads every catalog row of the state table: the claim cell
// k:w/MESSAGE_ID, which decides the key (there is no record).
func (e *env) winners(cfg *config.Config) map[string]winner {
	e.t.Helper()
	out := map[string]winner{}
	err := e.bigtable.Open(cfg.State.Table).ReadRows(context.Background(), bigtable.PrefixRange("dedupe#"), func(r bigtable.Row) bool {
		var w winner
		claims := 0
		for _, c := range r[state.FamilyDedupe] {
			q := strings.TrimPrefix(c.Column, state.FamilyDedupe+":")
			if strings.HasPrefix(q, "w/") {
				w.messageID = strings.TrimPrefix(q, "w/")
				w.committed = c.Timestamp.Time()
				claims++
			}
		}
		// An untrusted claim being withdrawn names two deliveries for a
		// moment: which one won is not in the row alone.
		if claims == 1 {
			out[r.Key()] = w
		}
		return true
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}
