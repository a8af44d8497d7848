package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// toolEnv makes the test binary run the command instead of the tests, so
// that the test drives the tool as a separate process (signals, exit code,
// its emulators' process groups) without building it.
const toolEnv = "PUBSINK_EMULATORS_TOOL_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(toolEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// tool is the command running as a child process.
type tool struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	env    map[string]string // from its export lines
}

// syncBuffer is a bytes.Buffer that the child's stderr copier and the test
// read and write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func ci() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// startTool starts the command and waits for its two export lines. A missing
// emulator or JDK skips the test outside CI, as the emulator rigs do.
func startTool(t *testing.T, args ...string) *tool {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), toolEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tl := &tool{cmd: cmd, stderr: &syncBuffer{}, env: map[string]string{}}
	cmd.Stderr = tl.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // its emulators die with it (Pdeathsig)
			_ = cmd.Wait()
		}
	})

	lines := make(chan []string, 1)
	go func() {
		var got []string
		sc := bufio.NewScanner(stdout)
		for len(got) < 2 && sc.Scan() {
			got = append(got, sc.Text())
		}
		lines <- got
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var got []string
	select {
	case got = <-lines:
	case <-time.After(2 * time.Minute):
		t.Fatalf("no export lines within 2m; stderr:\n%s", tl.stderr)
	}
	if len(got) < 2 {
		_ = cmd.Wait()
		if strings.Contains(tl.stderr.String(), emulator.ErrNotInstalled.Error()) && !ci() {
			t.Skipf("skipping: %s(with CI=true this is a failure)", tl.stderr)
		}
		t.Fatalf("the tool printed %q and exited (%v); stderr:\n%s", got, cmd.ProcessState, tl.stderr)
	}
	for _, line := range got {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "export" {
			t.Fatalf("stdout line %q is not an export line", line)
		}
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("stdout line %q: %q is not NAME=VALUE", line, kv)
			}
			tl.env[k] = v
		}
	}
	return tl
}

var pidLine = regexp.MustCompile(`emulators: (Pub/Sub|Bigtable)\b.*, pid (\d+),`)

// pids are the emulators' process IDs, from the tool's stderr. The tool
// writes them before its export lines, but the copy of its stderr into the
// buffer may lag behind the stdout pipe: wait for it a little.
func (tl *tool) pids(t *testing.T) []int {
	t.Helper()
	var pids []int
	for deadline := time.Now().Add(5 * time.Second); len(pids) != 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		pids = pids[:0]
		for _, m := range pidLine.FindAllStringSubmatch(tl.stderr.String(), -1) {
			pid, _ := strconv.Atoi(m[2])
			pids = append(pids, pid)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("found %d emulator pids in the tool's stderr, want 2:\n%s", len(pids), tl.stderr)
	}
	return pids
}

// gcloud runs gcloud with the tool's gcloud line exported; a failure is an
// error of the test (it may run on another goroutine than the test's).
func (tl *tool) gcloud(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("gcloud", args...)
	cmd.Env = os.Environ()
	for _, k := range []string{"CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB", "CLOUDSDK_AUTH_DISABLE_CREDENTIALS"} {
		cmd.Env = append(cmd.Env, k+"="+tl.env[k])
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("gcloud %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

const (
	project  = "emulators-tool"
	instance = "local"
	schema   = `{"type":"record","name":"Reading","fields":[{"name":"id","type":"string"},{"name":"temp","type":"double"}]}`
)

// The tool's lines are all a user needs: a topic with an Avro schema and
// JSON encoding made and published to with gcloud alone, `setup` and `run`
// reaching the emulators through PUBSUB_EMULATOR_HOST and
// BIGTABLE_EMULATOR_HOST, one row per reading, and after SIGTERM the tool
// exits 0 with both emulator processes gone.
func TestEmulatorsCommandCarriesAPipelineAndStopsBoth(t *testing.T) {
	if _, err := exec.LookPath("gcloud"); err != nil {
		if ci() {
			t.Fatalf("gcloud is not installed: %v (CI=true: it must be; it comes with the emulators)", err)
		}
		t.Skipf("skipping: gcloud is not installed: %v (with CI=true this is a failure)", err)
	}
	tl := startTool(t, "--log-dir", t.TempDir())
	for _, k := range []string{"PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST"} {
		if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(tl.env[k]) {
			t.Fatalf("%s=%q, want 127.0.0.1:PORT", k, tl.env[k])
		}
		t.Setenv(k, tl.env[k])
	}
	if want := "http://" + tl.env["PUBSUB_EMULATOR_HOST"] + "/"; tl.env["CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB"] != want {
		t.Fatalf("CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=%q, want %q", tl.env["CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB"], want)
	}
	pids := tl.pids(t)

	tl.gcloud(t, "pubsub", "schemas", "create", "reading", "--project="+project, "--type=avro", "--definition="+schema)
	tl.gcloud(t, "pubsub", "topics", "create", "readings", "--project="+project, "--schema=reading", "--message-encoding=json")
	if t.Failed() {
		t.FailNow()
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "pubsink.yaml")
	writeFile(t, cfg, fmt.Sprintf(`
project: %s
log: {level: warn, format: json}
http: {addr: "127.0.0.1:0"}
shutdown_timeout: 5s
state: {instance: %s}
pipelines:
  - name: readings
    mode: at_least_once
    source: {topic: readings, subscription: readings-pubsink}
    payload: {format: avro, schema: topic}
    sink:
      table: readings
      row_key: "{data.id}"
      columns: {temp: "{data.temp}"}
`, project, instance))
	ctx := context.Background()
	var setupOut bytes.Buffer
	if err := app.SetupFile(ctx, cfg, &setupOut); err != nil {
		t.Fatalf("setup: %v\n%s", err, setupOut.String())
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	logs := &syncBuffer{}
	runErr := make(chan error, 1)
	go func() { runErr <- app.RunFile(runCtx, cfg, logs) }()

	// gcloud takes about a second of CPU to start: publish in parallel.
	want := map[string]string{"r1": "21.5", "r2": "-3.25", "r3": "0.125"}
	var published sync.WaitGroup
	for id, temp := range want {
		published.Go(func() {
			tl.gcloud(t, "pubsub", "topics", "publish", "readings", "--project="+project, fmt.Sprintf(`--message={"id":%q,"temp":%s}`, id, temp))
		})
	}
	published.Wait()
	if got := waitRows(t, tl.env["BIGTABLE_EMULATOR_HOST"], len(want), 10*time.Second); !maps.Equal(got, want) {
		t.Errorf("rows (key: temp) = %v, want %v\nrun's log:\n%s", got, want, logs)
	}

	stopRun()
	if err := <-runErr; err != nil {
		t.Errorf("run: %v\n%s", err, logs)
	}

	if err := tl.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- tl.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the tool exited with %v after SIGTERM, want 0; stderr:\n%s", err, tl.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the tool did not exit within 15s of SIGTERM; stderr:\n%s", tl.stderr)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("emulator pid %d still there after the tool exited (kill 0: %v)", pid, err)
		}
	}
}

// waitRows reads the sink table until it has n rows or timeout passes, and
// returns each row's temp cell by row key.
func waitRows(t *testing.T, host string, n int, timeout time.Duration) map[string]string {
	t.Helper()
	ctx := context.Background()
	client, admin, err := (&emulator.Bigtable{Host: host}).Clients(ctx, project, instance)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer admin.Close()
	rows := map[string]string{}
	for deadline := time.Now().Add(timeout); ; {
		clear(rows)
		err := client.Open("readings").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			for _, c := range r["d"] {
				rows[r.Key()] = string(c.Value)
			}
			return true
		})
		if err == nil && len(rows) >= n || time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("read rows: %v", err)
			}
			return rows
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
