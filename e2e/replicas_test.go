package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
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
// subscription and publishes every record with a rival, some right after
// it and some a wave later, while one process is killed -9 and replaced,
// one is replaced as a rolling update does (start the new, SIGTERM the
// old), and one is stopped (SIGSTOP) for longer than its membership lease
// and resumed. Every key must end with one row holding one version of each
// cell: one of the two rivals, never both.
func TestReplicasWriteEachKeyOnce(t *testing.T) {
	const perWave = 1500
	e := newEnv(t)
	yaml := e.configYAML(config.ModeExactlyOnce, "")
	_, cfg := e.writeConfig(yaml) // runs setup
	var procs []*child
	startReplica := func() *child {
		path, c := e.replicaConfig(yaml, len(procs))
		ch := e.start(path, c)
		procs = append(procs, ch)
		return ch
	}
	waves := []rivalWave{{0, perWave}, {perWave, 2 * perWave}, {2 * perWave, 3 * perWave}, {3 * perWave, 4 * perWave}}
	var all []dupMsg
	publish := func(msgs []dupMsg) {
		e.publishDup(msgs)
		all = append(all, msgs...)
	}

	a, b, c := startReplica(), startReplica(), startReplica()
	for _, p := range []*child{a, b, c} {
		p.waitReady(60 * time.Second)
	}

	publish(waves[0].together())
	e.waitRows(e.table, perWave/2, time.Minute)

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

	// A process paused past its lease, then resumed.
	c.signal(syscall.SIGSTOP)
	publish(append(waves[2].later(), waves[3].together()...))
	time.Sleep(members.DefaultLease + 5*time.Second)
	c.signal(syscall.SIGCONT)
	publish(waves[3].later())

	e.waitRows(e.table, 4*perWave, 3*time.Minute)
	settle(t, []*child{b2, c, d})
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
