package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pubsink/pubsink/pipeline"
)

// child is one pubsink process: `pubsink run --config F`, the leader of its
// own process group.
type child struct {
	gen     int // 1 for the first process, then one more per start, over every replica
	replica int // 1..N with -replicas N > 1; 0 when one process runs
	cmd     *exec.Cmd
	logPath string
	started time.Time

	done     chan struct{} // closed once Wait returned
	state    *os.ProcessState
	signaled atomic.Bool // the campaign sent a signal on purpose
}

// logName is the name of a process's log: pubsink-GEN.log when one process
// runs (as before replicas), else pubsink-rREPLICA-NTH.log, NTH counting
// the processes of that replica, so that a replica's logs sort together and
// in order.
func logName(replica, nth, gen int) string {
	if replica == 0 {
		return fmt.Sprintf("pubsink-%02d.log", gen)
	}
	return fmt.Sprintf("pubsink-r%d-%02d.log", replica, nth)
}

// startChild starts the binary with env added to this process's
// environment, stdout and stderr going to logPath.
func startChild(binary, config, logPath string, gen, replica int, env []string) (*child, error) {
	return startCommand(binary, []string{"run", "--config", config}, logPath, gen, replica, env)
}

// startCommand starts the binary with args (a pubsink command: run, or a
// reprocess), as startChild says.
func startCommand(binary string, args []string, logPath string, gen, replica int, env []string) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pubsink: %w", err)
	}
	c := &child{gen: gen, replica: replica, cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		c.state = cmd.ProcessState
		close(c.done)
	}()
	return c, nil
}

// name is how the report calls the process: "process 3", and with
// replicas "process 3 (replica 2)".
func (c *child) name() string {
	if c.replica == 0 {
		return fmt.Sprintf("process %d", c.gen)
	}
	return fmt.Sprintf("process %d (replica %d)", c.gen, c.replica)
}

func (c *child) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the child's process group, on purpose.
func (c *child) signal(sig syscall.Signal) {
	c.signaled.Store(true)
	// ESRCH (already gone) is the only expected error.
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
}

// wait waits up to timeout for the child to exit and returns its exit code
// (-1 for a signal), or an error on timeout.
func (c *child) wait(timeout time.Duration) (int, error) {
	select {
	case <-c.done:
		return c.state.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("pubsink (%s) still running %v after the signal", c.name(), timeout)
	}
}

// exitText describes how the child ended.
func (c *child) exitText() string {
	if c.state == nil {
		return "running"
	}
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", c.state.ExitCode())
}

// logTail returns the last n lines of the child's log.
func (c *child) logTail(n int) string {
	b, _ := os.ReadFile(c.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// httpClient is for the child's endpoints: short timeouts, since a
// process being killed may leave a request hanging.
var httpClient = &http.Client{Timeout: 2 * time.Second}

// get returns the body of http://addr/path, or an error unless it is 200.
func get(ctx context.Context, addr, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return b, nil
}

// waitReady waits for /readyz of the child to answer 200.
func (c *child) waitReady(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if !c.running() {
			return fmt.Errorf("pubsink (%s) exited before it was ready (%s); log %s ends:\n%s", c.name(), c.exitText(), c.logPath, c.logTail(15))
		}
		if _, err := get(ctx, addr, "/readyz"); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pubsink (%s) not ready after %v; log %s ends:\n%s", c.name(), timeout, c.logPath, c.logTail(15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Status is what /status says of one pipeline: the campaign reads it
// as the product writes it.
type Status = pipeline.Status

// readStatus reads /status: every pipeline's.
func readStatus(ctx context.Context, addr string) ([]Status, error) {
	b, err := get(ctx, addr, "/status")
	if err != nil {
		return nil, err
	}
	var st struct {
		Pipelines []Status `json:"pipelines"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("/status: %w", err)
	}
	if len(st.Pipelines) == 0 {
		return nil, errors.New("/status: no pipeline")
	}
	return st.Pipelines, nil
}

// statusOf picks the status of one pipeline.
func statusOf(sts []Status, pipeline string) (Status, bool) {
	for _, st := range sts {
		if st.Name == pipeline {
			return st, true
		}
	}
	return Status{}, false
}

// Counters are the pubsink_ counters of one pipeline, from /metrics.
type Counters struct {
	Received, Committed, Duplicate, Late, Dropped, Retried, InFlight float64
	DeadLettered                                                     map[string]float64 // by reason
	// Rows is pubsink_rows_committed_total; Ops is
	// pubsink_row_operations_total by "OPERATION/RESULT" (nil until one is
	// read).
	Rows float64
	Ops  map[string]float64
	At   time.Time
}

// DeadLetteredTotal is the sum over reasons.
func (c Counters) DeadLetteredTotal() float64 {
	var n float64
	for _, v := range c.DeadLettered {
		n += v
	}
	return n
}

// add adds o's counts to c's (c.DeadLettered must not be nil).
func (c *Counters) add(o Counters) {
	c.Received += o.Received
	c.Committed += o.Committed
	c.Duplicate += o.Duplicate
	c.Late += o.Late
	c.Dropped += o.Dropped
	c.Retried += o.Retried
	c.InFlight += o.InFlight
	for r, n := range o.DeadLettered {
		c.DeadLettered[r] += n
	}
	c.Rows += o.Rows
	for k, n := range o.Ops {
		if c.Ops == nil {
			c.Ops = map[string]float64{}
		}
		c.Ops[k] += n
	}
}

// readCounters scrapes /metrics for pipeline.
func readCounters(ctx context.Context, addr, pipeline string) (Counters, error) {
	b, err := get(ctx, addr, "/metrics")
	if err != nil {
		return Counters{}, err
	}
	return parseCounters(string(b), pipeline)
}

// parseCounters reads the counters of pipeline from Prometheus text. Only
// the sample lines of the metrics it knows are read; the format is the
// text exposition format (name{labels} value).
func parseCounters(text, pipeline string) (Counters, error) {
	c := Counters{DeadLettered: map[string]float64{}, At: time.Now()}
	found := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, "pubsink_") {
			continue
		}
		name, labels, value, ok := splitSample(line)
		if !ok || labels["pipeline"] != pipeline {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return c, fmt.Errorf("metric line %q: %w", line, err)
		}
		found++
		switch name {
		case "pubsink_messages_received_total":
			c.Received = v
		case "pubsink_messages_committed_total":
			c.Committed = v
		case "pubsink_messages_duplicate_total":
			c.Duplicate = v
		case "pubsink_messages_late_total":
			c.Late = v
		case "pubsink_messages_dropped_total":
			c.Dropped = v
		case "pubsink_messages_retried_total":
			c.Retried = v
		case "pubsink_messages_in_flight":
			c.InFlight = v
		case "pubsink_messages_dead_lettered_total":
			c.DeadLettered[labels["reason"]] = v
		case "pubsink_rows_committed_total":
			c.Rows = v
		case "pubsink_row_operations_total":
			if c.Ops == nil {
				c.Ops = map[string]float64{}
			}
			c.Ops[labels["operation"]+"/"+labels["result"]] = v
		default:
			found--
		}
	}
	if found == 0 {
		return c, fmt.Errorf("no pubsink_ counters of pipeline %q in /metrics", pipeline)
	}
	return c, sc.Err()
}

// splitSample splits `name{a="x",b="y"} value` (labels optional).
func splitSample(line string) (name string, labels map[string]string, value string, ok bool) {
	labels = map[string]string{}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", nil, "", false
	}
	head, value := line[:sp], line[sp+1:]
	name = head
	if i := strings.IndexByte(head, '{'); i >= 0 {
		if !strings.HasSuffix(head, "}") {
			return "", nil, "", false
		}
		name = head[:i]
		for _, kv := range strings.Split(head[i+1:len(head)-1], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			labels[k] = strings.Trim(v, `"`)
		}
	}
	return name, labels, value, true
}
