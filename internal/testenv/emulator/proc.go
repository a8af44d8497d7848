package emulator

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
// The JVM runs its shutdown hooks on SIGTERM; that takes well under a second
// for the Pub/Sub emulator, so five seconds only matters for a wedged JVM.
const stopGrace = 5 * time.Second

// process is an emulator running as the leader of its own process group, so
// that Stop can signal everything it started (the Pub/Sub start script execs
// java, so the group is one JVM today, but the group is what we own).
type process struct {
	name      string
	cmd       *exec.Cmd
	logPath   string
	removeLog bool // the log is a temporary file that Stop removes

	exited   chan struct{} // closed once cmd.Wait has returned
	waitErr  error         // set before exited is closed
	stopping atomic.Bool

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts path with args in a new process group, with stdout and
// stderr both appended to a new log file in logDir ("" → os.TempDir(), and
// the file is removed by stop).
func startProcess(name, logDir string, env []string, path string, args ...string) (*process, error) {
	dir := logDir
	if dir == "" {
		dir = os.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("emulator: log directory: %w", err)
	}
	logf, err := os.CreateTemp(dir, name+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("emulator: log file: %w", err)
	}
	defer logf.Close() // the child has its own descriptor

	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdin = nil
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if cmd.SysProcAttr == nil {
		os.Remove(logf.Name())
		return nil, fmt.Errorf("%w: %s needs a Unix process group to be stopped reliably", ErrNotInstalled, name)
	}
	if err := cmd.Start(); err != nil {
		os.Remove(logf.Name())
		return nil, fmt.Errorf("emulator: start %s: %w", name, err)
	}
	p := &process{
		name:      name,
		cmd:       cmd,
		logPath:   logf.Name(),
		removeLog: logDir == "",
		exited:    make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop ends the process group: SIGTERM, then SIGKILL after stopGrace. It is
// idempotent and safe for concurrent use; every call returns the first
// call's result. It reports an error if the process had already exited
// before stop was called, because nothing should end an emulator but stop.
func (p *process) stop() error {
	p.stopOnce.Do(func() {
		select {
		case <-p.exited:
			p.stopErr = fmt.Errorf("emulator: %s exited on its own before Stop (%v); log: %s", p.name, p.waitErr, p.logPath)
		default:
			p.stopping.Store(true)
			pgid := p.cmd.Process.Pid
			// Errors are ignored: the only expected one is ESRCH, when the
			// group is already gone.
			_ = signalGroup(pgid, sigTerm)
			select {
			case <-p.exited:
			case <-time.After(stopGrace):
				_ = signalGroup(pgid, sigKill)
				<-p.exited
			}
		}
		if p.removeLog {
			os.Remove(p.logPath)
		}
	})
	return p.stopErr
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// pid and exitedChan answer for a nil process too: a PubSub or Bigtable
// value with just Host has none.
func (p *process) pid() int {
	if p == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *process) exitedChan() <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.exited
}

func (p *process) readLog() []byte {
	b, _ := os.ReadFile(p.logPath)
	return b
}

// logTail returns the last n lines of the log, for error messages.
func (p *process) logTail(n int) string {
	return tailLines(p.readLog(), n)
}

func tailLines(b []byte, n int) string {
	b = bytes.TrimRight(b, "\n")
	for i, lines := len(b)-1, 0; i >= 0; i-- {
		if b[i] == '\n' {
			lines++
			if lines == n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the emulator binds it; callers detect that and retry. It
// is a variable so that a test can hand out a taken port.
var freePort = func() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("emulator: free port: %w", err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// errPortTaken means the emulator lost the race for the port from freePort.
var errPortTaken = errors.New("port taken before the emulator bound it")
