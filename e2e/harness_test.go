package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/pipeline"
)

const (
	project  = "e2e-project"
	instance = "e2e-instance"
)

// binary is the pubsink binary built once for the package.
var binary string

// The emulators are shared by the package's tests (each test uses fresh
// topic, subscription and table names); they are started on first use.
var (
	emuOnce sync.Once
	emuPS   *emulator.PubSub
	emuBT   *emulator.Bigtable
	emuErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pubsink-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "pubsink")
	build := exec.Command("go", "build", "-o", binary, "github.com/pubsink/pubsink")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building pubsink:", err)
		os.Exit(1)
	}
	code := m.Run()
	if emuPS != nil {
		emuPS.Stop()
	}
	if emuBT != nil {
		emuBT.Stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's view of the emulators: clients and fresh names.
type env struct {
	t        *testing.T
	ps       *emulator.PubSub
	bt       *emulator.Bigtable
	pubsub   *pubsub.Client
	bigtable *bigtable.Client
	admin    *bigtable.AdminClient
	dir      string

	// Fresh names for this test.
	topic, sub, tracking, table, stateTable string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	emuOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if emuPS, emuErr = emulator.StartPubSub(ctx, emulator.Options{}); emuErr == nil {
			emuBT, emuErr = emulator.StartBigtable(ctx, emulator.Options{})
		}
	})
	if emuErr != nil {
		ci, _ := strconv.ParseBool(os.Getenv("CI"))
		if errors.Is(emuErr, emulator.ErrNotInstalled) && !ci {
			t.Skipf("skipping: %v (with CI=true this is a failure)", emuErr)
		}
		t.Fatalf("emulators: %v", emuErr)
	}
	ctx := context.Background()
	e := &env{t: t, ps: emuPS, bt: emuBT, dir: t.TempDir()}
	var err error
	if e.pubsub, err = emuPS.Client(ctx, project); err != nil {
		t.Fatal(err)
	}
	if e.bigtable, e.admin, err = emuBT.Clients(ctx, project, instance); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.pubsub.Close(); e.bigtable.Close(); e.admin.Close() })
	suffix := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())) + fmt.Sprintf("-%d", time.Now().UnixNano()%1e9)
	e.topic = "t-" + suffix
	e.sub = "s-" + suffix
	e.tracking = "tr-" + suffix
	e.table = "rows-" + suffix
	e.stateTable = "state-" + suffix
	return e
}

// pipelineYAML is the default pipeline of these tests: rows keyed by the
// "id" attribute, event time in microseconds (so that truncation to
// milliseconds is exercised), streams enough for the emulator's slow
// StreamingPull.
func (e *env) configYAML(mode string, extra string) string {
	return fmt.Sprintf(`
project: %[1]s
log: {level: info, format: json}
http: {addr: "127.0.0.1:%[2]s"}
shutdown_timeout: 10s
state: {instance: %[3]s, table: %[4]s}
pipelines:
  - name: e2e
    mode: %[5]s
    source:
      topic: %[6]s
      subscription: %[7]s
      id_attribute: id
      timestamp_attribute: ts
      timestamp_format: unix_us
      streams: 8
      max_outstanding_messages: 2000
    sink:
      table: %[8]s
      column_family: d
      row_key: "{attributes.id}"
      columns: {data: "{data}", n: "{data.n}"}
%[9]s
`, project, freePort(e.t), instance, e.stateTable, mode, e.topic, e.sub, e.table, extra)
}

// writeConfig writes YAML to a file, runs setup for it, and returns the path
// and the parsed config.
func (e *env) writeConfig(yaml string) (string, *config.Config) {
	e.t.Helper()
	path := filepath.Join(e.dir, "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		e.t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		e.t.Fatalf("config: %v\n%s", err, yaml)
	}
	admin := func(ctx context.Context, inst string) (*bigtable.AdminClient, error) {
		_, a, err := e.bt.Clients(ctx, project, inst)
		return a, err
	}
	var out bytes.Buffer
	if err := app.Setup(context.Background(), cfg, e.pubsub, admin, &out); err != nil {
		e.t.Fatalf("setup: %v\n%s", err, out.String())
	}
	return path, cfg
}

// eventTime of message i: whole microseconds, not whole milliseconds.
func eventTime(i int) time.Time {
	return time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Millisecond + 123*time.Microsecond)
}

func rowKey(i int) string { return fmt.Sprintf("r%06d", i) }

// publish publishes messages i in [from, to) to the test topic.
func (e *env) publish(from, to int) {
	e.t.Helper()
	ctx := context.Background()
	pub := e.pubsub.Publisher(e.topic)
	defer pub.Stop()
	results := make([]*pubsub.PublishResult, 0, to-from)
	for i := from; i < to; i++ {
		results = append(results, pub.Publish(ctx, &pubsub.Message{
			Data: []byte(fmt.Sprintf(`{"n":%d,"payload":"reading %d of the e2e stream"}`, i, i)),
			Attributes: map[string]string{
				"id": rowKey(i),
				"ts": fmt.Sprint(eventTime(i).UnixMicro()),
			},
		}))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			e.t.Fatalf("publish: %v", err)
		}
	}
}

// cell is one version of a cell as read back.
type cell struct {
	value string
	ts    bigtable.Timestamp
}

// readTable returns every row of table: row key → column → versions.
func (e *env) readTable(table string) map[string]map[string][]cell {
	e.t.Helper()
	out := map[string]map[string][]cell{}
	err := e.bigtable.Open(table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		cols := map[string][]cell{}
		for _, items := range r {
			for _, it := range items {
				col := it.Column[strings.IndexByte(it.Column, ':')+1:]
				cols[col] = append(cols[col], cell{string(it.Value), it.Timestamp})
			}
		}
		out[r.Key()] = cols
		return true
	})
	if err != nil {
		e.t.Fatalf("read %s: %v", table, err)
	}
	return out
}

// countRows counts the rows of table.
func (e *env) countRows(table string) int { return e.countRowsIn(table, bigtable.InfiniteRange("")) }

// countRowsIn counts the rows of table in rows.
func (e *env) countRowsIn(table string, rows bigtable.RowSet) int {
	n := 0
	err := e.bigtable.Open(table).ReadRows(context.Background(), rows, func(bigtable.Row) bool {
		n++
		return true
	}, bigtable.RowFilter(bigtable.StripValueFilter()))
	if err != nil {
		e.t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// waitRows waits until table has want rows, failing after timeout.
func (e *env) waitRows(table string, want int, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	for {
		n := e.countRows(table)
		if n >= want {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			e.t.Fatalf("%d of %d rows after %v", n, want, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkRows verifies rows [0, n): present, exactly one version per column,
// the event time truncated to milliseconds as cell timestamp, the payload.
func (e *env) checkRows(n int) {
	e.t.Helper()
	rows := e.readTable(e.table)
	if len(rows) != n {
		e.t.Errorf("%d rows in %s, want %d", len(rows), e.table, n)
	}
	bad := 0
	for i := 0; i < n; i++ {
		cols, ok := rows[rowKey(i)]
		want := bigtable.Time(eventTime(i)).TruncateToMilliseconds()
		switch {
		case !ok:
			e.t.Errorf("row %s is missing", rowKey(i))
		case len(cols["data"]) != 1 || len(cols["n"]) != 1:
			e.t.Errorf("row %s: %d versions of data, %d of n; want 1 each", rowKey(i), len(cols["data"]), len(cols["n"]))
		case cols["data"][0].ts != want || cols["n"][0].ts != want:
			e.t.Errorf("row %s: timestamps %d/%d, want %d", rowKey(i), cols["data"][0].ts, cols["n"][0].ts, want)
		case cols["n"][0].value != fmt.Sprint(i):
			e.t.Errorf("row %s: n = %q, want %d", rowKey(i), cols["n"][0].value, i)
		default:
			continue
		}
		if bad++; bad > 10 {
			e.t.Fatal("too many bad rows")
		}
	}
}

// child is pubsink running as a child process.
type child struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	log  *os.File
	done chan struct{}
	err  error
}

// start runs the binary with `run --config path`, pointed at the emulators.
func (e *env) start(path string, cfg *config.Config) *child {
	e.t.Helper()
	logf, err := os.CreateTemp(e.dir, "pubsink-*.log")
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "--config", path)
	cmd.Env = append(os.Environ(), e.ps.Env()...)
	cmd.Env = append(cmd.Env, e.bt.Env()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	c := &child{t: e.t, cmd: cmd, addr: cfg.HTTP.Addr, log: logf, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	e.t.Cleanup(func() {
		if c.running() {
			cmd.Process.Kill()
			<-c.done
		}
		if e.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			e.t.Logf("pubsink log (%s):\n%s", logf.Name(), tail(string(b), 60))
		}
	})
	return c
}

func (c *child) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// waitReady waits for /readyz to answer 200.
func (c *child) waitReady(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !c.running() {
			c.t.Fatalf("pubsink exited before it was ready: %v", c.err)
		}
		resp, err := http.Get("http://" + c.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("pubsink not ready after %v", timeout)
}

// status reads /status of the first pipeline.
func (c *child) status() map[string]any {
	c.t.Helper()
	resp, err := http.Get("http://" + c.addr + "/status")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Pipelines []map[string]any `json:"pipelines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Pipelines) == 0 {
		c.t.Fatalf("status: %v", err)
	}
	return st.Pipelines[0]
}

// signal sends sig and, for SIGKILL, waits for the exit.
func (c *child) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
	if sig == syscall.SIGKILL {
		<-c.done
	}
}

// wait waits for the child to exit and returns its exit code.
func (c *child) wait(timeout time.Duration) int {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.t.Fatalf("pubsink still running %v after being told to stop", timeout)
	}
	return c.cmd.ProcessState.ExitCode()
}

// peakRSS is the child's peak resident set size so far, in bytes, from
// /proc (VmHWM); call it while the child runs. The rusage of a reaped
// child is no good here: on Linux its maxrss starts from the parent's peak
// (the mm the child was forked from), so it would report the test's memory.
func (c *child) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func nopLogger() *zap.Logger { return zap.NewNop() }

// bigtableFor opens a data client on the emulator for app.Options.Bigtable.
func (e *env) bigtableFor(ctx context.Context, inst string) (*bigtable.Client, error) {
	c, a, err := e.bt.Clients(ctx, project, inst)
	if a != nil {
		a.Close()
	}
	return c, err
}

// waitCommitted waits until an in-process pipeline has committed at least n
// messages and has none in flight: rows are durable before their acks, so
// this is when the last acks have been sent.
func waitCommitted(t *testing.T, p *pipeline.Pipeline, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for st := p.Status(); st.Committed < n || st.InFlight > 0; st = p.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("status after %v: %+v", timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
