package main

// reprocess.go runs the campaign's `pubsink reprocess` (doc.go, "Payload
// formats and reprocess"): started once the range is published, beside
// the live replicas, through the same proxies (every proxy fault hits it),
// interrupted by a SIGKILL and a SIGTERM of its own and by every kill or
// term of the schedule while it runs, and started again each time with the
// same arguments until it ends with exit 0.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// reprocessIdle is the reprocess's --idle: the default, longer than a
// message can stay out of sight (a lease after a broken stream).
const reprocessIdle = 30 * time.Second

// reprocessExit is how one reprocess process ended.
type reprocessExit struct {
	gen  int
	sent string // the signal the campaign sent ("" none)
	why  string // what sent it: "own", or the schedule's fault
	code int    // exit code, -1 for a signal
	text string // exitText
	// lapsing says it stopped on its own (exit 3, resumable) because it
	// could not renew its lock in time: the state table stalled.
	lapsing bool
}

// lapsingSays is what a reprocess prints when it stops because it could
// not renew its lock in time (reprocess.ErrLapsing).
const lapsingSays = "the reprocess lock could not be renewed in time"

// reprocessor runs the reprocess; the campaign's mu guards exits, done and
// running.
type reprocessor struct {
	args    []string
	env     []string
	hits    chan syscall.Signal // the schedule's kills and terms, while it runs
	exits   []reprocessExit
	done    bool // a process ended with exit 0
	running bool
	// own are its own interruptions: a SIGTERM, then a SIGKILL, each a
	// seeded 3-7 s after a start.
	own []ownHit
}

type ownHit struct {
	sig   syscall.Signal
	after time.Duration
}

func newReprocessor(seed uint64) *reprocessor {
	r := rand.New(rand.NewPCG(seed, 0x7265707263)) // "reprc"
	return &reprocessor{
		hits: make(chan syscall.Signal, 1),
		own: []ownHit{
			{syscall.SIGTERM, time.Duration(3000+r.IntN(4000)) * time.Millisecond},
			{syscall.SIGKILL, time.Duration(3000+r.IntN(4000)) * time.Millisecond},
		},
	}
}

// hit asks the reprocess's supervisor to stop its process with sig (and
// start it again); false if no reprocess process runs.
func (c *campaign) hitReprocess(sig syscall.Signal) bool {
	if c.rp == nil {
		return false
	}
	c.mu.Lock()
	running := c.rp.running
	c.mu.Unlock()
	if !running {
		return false
	}
	select {
	case c.rp.hits <- sig:
		return true
	default:
		return false // one is pending already
	}
}

// superviseReprocess waits for the range, then runs the reprocess until a
// process of it ends with exit 0 (or ctx ends: the campaign stops it).
func (c *campaign) superviseReprocess(ctx context.Context) {
	select {
	case <-c.fmt.rangeDone:
	case <-ctx.Done():
		return
	}
	c.mu.Lock()
	from, until := c.fmt.from, c.fmt.until
	c.mu.Unlock()
	rp := c.rp
	rp.args = []string{"reprocess", "--config", c.reprocessConfig, "--pipeline", reprocessed,
		"--from", from.UTC().Format(time.RFC3339Nano), "--until", until.UTC().Format(time.RFC3339Nano),
		"--idle", reprocessIdle.String(), "--http-addr", "-"}
	rp.env = []string{"PUBSUB_EMULATOR_HOST=" + c.psProxy.Addr(), "BIGTABLE_EMULATOR_HOST=" + c.btProxy.Addr()}
	c.logf("reprocess of %s from %s until %s: starting (%s)", reprocessed, fmtTime(from), fmtTime(until), filepath.Base(c.reprocessConfig))
	for gen := 1; ; gen++ {
		ch, err := startCommand(c.binary, rp.args, filepath.Join(c.opts.Dir, fmt.Sprintf("reprocess-%02d.log", gen)), gen, 0, rp.env)
		if err != nil {
			c.recordNotReady(fmt.Errorf("reprocess %d: %w", gen, err))
			return
		}
		c.mu.Lock()
		rp.running = true
		c.mu.Unlock()
		var timer <-chan time.Time
		var own ownHit
		if len(rp.own) > 0 {
			own, rp.own = rp.own[0], rp.own[1:]
			timer = time.After(own.after)
		}
		e := reprocessExit{gen: gen}
		var sig syscall.Signal
		select {
		case <-ch.done:
		case s := <-rp.hits:
			sig, e.why = s, "the schedule's"
		case <-timer:
			sig, e.why = own.sig, "its own"
		case <-ctx.Done():
			ch.signal(syscall.SIGKILL)
			ch.wait(10 * time.Second)
			return
		}
		if sig != 0 {
			e.sent = sig.String()
			ch.signal(sig)
			if _, err := ch.wait(shutdownTimeout + 20*time.Second); err != nil {
				c.logf("VIOLATION: reprocess %d: %v; killing it", gen, err)
				ch.signal(syscall.SIGKILL)
				ch.wait(10 * time.Second)
			}
		}
		e.code, e.text = ch.state.ExitCode(), ch.exitText()
		if e.sent == "" && e.code == 3 {
			log, _ := os.ReadFile(ch.logPath)
			e.lapsing = bytes.Contains(log, []byte(lapsingSays))
		}
		c.mu.Lock()
		rp.running = false
		rp.exits = append(rp.exits, e)
		if e.code == 0 {
			rp.done = true
		}
		c.mu.Unlock()
		if e.sent != "" {
			c.logf("reprocess %d: %s (%s interruption): %s", gen, e.sent, e.why, e.text)
		} else {
			c.logf("reprocess %d ended: %s; log %s", gen, e.text, ch.logPath)
		}
		if e.code == 0 {
			return
		}
		if e.sent == "" && gen >= 8 {
			c.logf("VIOLATION: reprocess %d failed on its own (%s); not started again", gen, e.text)
			return
		}
		if !sleep(ctx, time.Second) {
			return
		}
	}
}
