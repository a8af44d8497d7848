package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
)

// auditMeasure is one audit measured: how long it took, how fast it read,
// how much memory it held and how many runs it spilled.
type auditMeasure struct {
	wall, read, compare time.Duration
	cpu                 time.Duration // the audit's user + system time
	messages            int64
	peakRSS             int64 // bytes, VmHWM sampled while it ran
	maxLive             int64 // MB: the largest heap left live after a GC (gctrace)
	spillFiles          int   // the most spill files it had at once
}

func (m auditMeasure) String() string {
	rate := float64(m.messages) / m.read.Seconds()
	return fmt.Sprintf("%d messages: wall %v, read pass %v (%.0f msg/s), compare pass %v, CPU %v, peak RSS %.1f MiB (largest live heap after a GC %d MB), spill files at most %d",
		m.messages, m.wall.Round(100*time.Millisecond), m.read.Round(100*time.Millisecond), rate,
		m.compare.Round(100*time.Millisecond), m.cpu.Round(100*time.Millisecond), float64(m.peakRSS)/(1<<20), m.maxLive, m.spillFiles)
}

// auditPhase is what the measurement reads of an audit's /status.
type auditPhase struct {
	Audit *struct {
		Phase    string `json:"phase"`
		Progress struct {
			Done int64 `json:"done"`
		} `json:"progress"`
	} `json:"audit"`
}

func (r *reprocessRun) auditPhase() (phase string, done int64) {
	resp, err := http.Get("http://" + r.addr + "/status")
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	var st auditPhase
	if json.NewDecoder(resp.Body).Decode(&st) != nil || st.Audit == nil {
		return "", 0
	}
	return st.Audit.Phase, st.Audit.Progress.Done
}

// measureAudit runs `pubsink audit` over [from, until) of the pipeline,
// with env added to its environment (and its spill files in a directory of
// their own), expects want messages and a clean exit, and samples its
// /status, its peak RSS and its spill files every 20 ms. The read pass is
// timed from the first "reading" to the last message of the range done
// (not to the end of --idle); the compare pass from "comparing" to the
// exit. The peak RSS is the kernel's VmHWM read while the child runs: the
// rusage of the reaped child is no good (harness_test.go, peakRSS).
func (e *env) measureAudit(path string, from, until time.Time, want int64, env []string, extra ...string) auditMeasure {
	e.t.Helper()
	tmp, err := os.MkdirTemp(e.dir, "spill-")
	if err != nil {
		e.t.Fatal(err)
	}
	args := append([]string{"--pipeline", "e2e", "--from", from.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano), "--idle", "3s"}, extra...)
	a := e.startAuditWith(path, append(env, "TMPDIR="+tmp, "GODEBUG=gctrace=1"), args...)
	start := time.Now()
	var m auditMeasure
	var reading, readDone, comparing time.Time
	for running := true; running; {
		select {
		case <-a.done:
			running = false
		case <-time.After(20 * time.Millisecond):
		}
		if rss := (&child{cmd: a.cmd}).peakRSS(); rss > m.peakRSS {
			m.peakRSS = rss
		}
		if files, _ := os.ReadDir(tmp); len(files) > m.spillFiles {
			m.spillFiles = len(files)
		}
		phase, done := a.auditPhase()
		now := time.Now()
		switch {
		case phase == "reading" && reading.IsZero():
			reading = now
		case phase == "comparing" && comparing.IsZero():
			comparing = now
		}
		if done >= want && readDone.IsZero() {
			readDone = now
		}
	}
	end := time.Now()
	if a.code != 0 {
		e.t.Fatalf("audit %v: exit %d\n%s\n%s", args, a.code, a.out.String(), tail(a.log.String(), 20))
	}
	if !strings.Contains(a.out.String(), fmt.Sprintf("messages   %d", want)) {
		e.t.Fatalf("audit %v: the summary does not count %d messages:\n%s", args, want, a.out.String())
	}
	if reading.IsZero() || readDone.IsZero() || comparing.IsZero() {
		e.t.Fatalf("audit %v: phases not seen (reading %v, all read %v, comparing %v)", args, reading, readDone, comparing)
	}
	m.messages, m.wall, m.read, m.compare = want, end.Sub(start), readDone.Sub(reading), end.Sub(comparing)
	m.maxLive = maxLiveHeap(a.log.String())
	m.cpu = a.cmd.ProcessState.UserTime() + a.cmd.ProcessState.SystemTime()
	return m
}

// liveHeap is the heap after a GC in a gctrace line: "..., 10->12->5 MB, ...".
var liveHeap = regexp.MustCompile(`\d+->\d+->(\d+) MB`)

// maxLiveHeap is the largest live heap after a GC in a gctrace log, in MB.
func maxLiveHeap(log string) int64 {
	var most int64
	for _, m := range liveHeap.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		most = max(most, n)
	}
	return most
}

// startAuditWith is startJob("audit", ...) with env added to the child's
// environment.
func (e *env) startAuditWith(path string, env []string, args ...string) *reprocessRun {
	e.t.Helper()
	saved := make(map[string]*string)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if old, ok := os.LookupEnv(k); ok {
			saved[k] = &old
		} else {
			saved[k] = nil
		}
		os.Setenv(k, v)
	}
	defer func() {
		for k, v := range saved {
			if v == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *v)
			}
		}
	}()
	return e.startJob("audit", path, args...)
}

// committed is a live replica's pubsink_messages_committed_total.
func (c *child) committed() int64 {
	return int64(metric(c.metricsText(), "pubsink_messages_committed_total", map[string]string{"pipeline": "e2e"}))
}

// backlogRate stops c (SIGSTOP), publishes messages [first, first+n),
// calls during (which starts what runs beside), resumes c (SIGCONT) and
// returns its committed messages per second over the backlog, from its
// first commit of it to its last, sampled every 100 ms. Paused rather than
// restarted: a restarted replica rebuilds its dedupe filters from the
// catalog while it drains.
func (e *env) backlogRate(c *child, first, n int, during func()) float64 {
	e.t.Helper()
	base := c.committed()
	c.signal(syscall.SIGSTOP)
	e.publish(first, first+n)
	during()
	c.signal(syscall.SIGCONT)
	var began time.Time
	var beganN int64
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got := c.committed() - base
		now := time.Now()
		if got > 0 && began.IsZero() {
			began, beganN = now, got
		}
		if got >= int64(n) {
			return float64(got-beganN) / now.Sub(began).Seconds()
		}
		if now.After(deadline) {
			e.t.Fatalf("the live replica committed %d of %d", got, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// median, min and max of xs, formatted.
func spread(xs []float64) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("median %.2f (min %.2f, max %.2f, n=%d)", s[len(s)/2], s[0], s[len(s)-1], len(s))
}

// TestMeasureAudit is the measured cost of issue 30 (`pubsink audit`). It
// takes about six minutes, so it runs only with PUBSINK_MEASURE_AUDIT=1
// (PUBSINK_MEASURE_AUDIT_REPS sets the repetitions of the second part, 3 by
// default):
//
//	PUBSINK_MEASURE_AUDIT=1 go test -count=1 -run TestMeasureAudit -v -timeout 30m ./e2e
//
// First, one live replica writes ranges of 20,000, 100,000 and 180,000
// messages, and each is audited beside it, with the default 64 MiB spill
// bound and with PUBSINK_AUDIT_SPILL_MEMORY at 4 MiB: wall time, the read
// pass's messages/s, the compare pass, peak RSS, the largest live heap,
// spill files. Second, the live replica drains a backlog of 60,000 new
// messages alone, beside an audit of the 100,000 range, and beside one
// with --rate 5000 and --rate 1000: its committed/s, and the ratio to
// alone. On the emulators the Pub/Sub emulator is the shared bottleneck
// (it serves the live and the audit subscriptions from one process), so
// the ratios are a bound of the emulator's more than of pubsink's.
func TestMeasureAudit(t *testing.T) {
	if ok, _ := strconv.ParseBool(os.Getenv("PUBSINK_MEASURE_AUDIT")); !ok {
		t.Skip("a measurement: set PUBSINK_MEASURE_AUDIT=1")
	}
	reps := 3
	if v, err := strconv.Atoi(os.Getenv("PUBSINK_MEASURE_AUDIT_REPS")); err == nil && v > 0 {
		reps = v
	}
	e := newEnv(t)
	yaml := e.configYAML(config.ModeExactlyOnce, "")
	sub := "      subscription: " + e.sub + "\n"
	yaml = strings.Replace(yaml, sub, sub+"      topic_message_retention: 1h\n", 1)
	path, cfg := e.writeConfig(yaml)
	live := e.start(path, cfg)
	live.waitReady(time.Minute)

	// Part 1: three ranges, written by the live replica, then audited.
	type rng struct {
		from, until time.Time
		n           int64
	}
	var committed int64
	publishRange := func(first, n int) rng {
		from := time.Now().UTC()
		time.Sleep(100 * time.Millisecond)
		began := time.Now()
		e.publish(first, first+n)
		published := time.Since(began)
		committed += int64(n)
		pollUntil(t, fmt.Sprintf("%d messages committed", committed), 10*time.Minute, func() bool { return live.committed() >= committed })
		t.Logf("%d messages published in %v, committed by the live replica %v after the first publish", n, published.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
		time.Sleep(time.Second)
		return rng{from, time.Now().UTC(), int64(n)}
	}
	small := publishRange(0, 20000)
	large := publishRange(20000, 100000)
	larger := publishRange(120000, 180000)
	for _, spillMem := range []string{"", fmt.Sprint(4 << 20)} {
		var env []string
		label := "spill bound 64 MiB (default)"
		if spillMem != "" {
			env = []string{"PUBSINK_AUDIT_SPILL_MEMORY=" + spillMem}
			label = "spill bound 4 MiB"
		}
		for _, r := range []rng{small, large, larger} {
			t.Logf("audit, %s: %v", label, e.measureAudit(path, r.from, r.until, r.n, env))
		}
	}

	// Part 2: a backlog drained alone and beside an audit of the 100,000
	// range, unpaced and paced.
	const backlog = 60000
	next := 300000
	drain := func(audit []string) float64 {
		var a *reprocessRun
		r := e.backlogRate(live, next, backlog, func() {
			if audit == nil {
				return
			}
			a = e.startJob("audit", path, append([]string{"--pipeline", "e2e", "--from", large.from.Format(time.RFC3339Nano), "--until", large.until.Format(time.RFC3339Nano), "--idle", "3s"}, audit...)...)
			pollUntil(t, "the audit reading", time.Minute, func() bool { p, done := a.auditPhase(); return p == "reading" && done > 0 })
		})
		next += backlog
		if a != nil {
			if phase, done := a.auditPhase(); phase != "reading" && phase != "comparing" {
				t.Errorf("the audit was %q (%d done) when the backlog was committed: it did not overlap it all", phase, done)
			}
			a.cmd.Process.Signal(syscall.SIGTERM)
			a.wait(t, time.Minute)
		}
		return r
	}
	conditions := []struct {
		name  string
		audit []string
	}{{"alone", nil}, {"beside an audit", []string{}}, {"beside an audit --rate 5000", []string{"--rate", "5000"}}, {"beside an audit --rate 1000", []string{"--rate", "1000"}}}
	rates := make([][]float64, len(conditions))
	t.Logf("warm-up (not counted): alone %.0f/s", drain(nil))
	for i := range reps {
		line := fmt.Sprintf("repetition %d:", i+1)
		for c, cond := range conditions {
			rates[c] = append(rates[c], drain(cond.audit))
			line += fmt.Sprintf(" %s %.0f/s (%.2f);", cond.name, rates[c][i], rates[c][i]/rates[0][i])
		}
		t.Logf("%s", line)
	}
	ratios := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i := range xs {
			out[i] = xs[i] / rates[0][i]
		}
		return out
	}
	t.Logf("live committed/s draining a backlog of %d alone: %s", backlog, spread(rates[0]))
	for c, cond := range conditions[1:] {
		t.Logf("%s of %d: ratio to alone %s", cond.name, large.n, spread(ratios(rates[c+1])))
	}
}
