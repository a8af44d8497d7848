package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// TestEveryMessageBecomesOneVersionOfEachCell is test (a) of the spine: a
// backlog of 5,000 messages drained by the binary; every row present, one
// version per column, the event time truncated to milliseconds as its
// timestamp.
func TestEveryMessageBecomesOneVersionOfEachCell(t *testing.T) {
	const n = 5000
	e := newEnv(t)
	path, cfg := e.writeConfig(e.configYAML(config.ModeExactlyOnce, ""))
	e.publish(0, n)

	c := e.start(path, cfg)
	start := time.Now()
	c.waitReady(30 * time.Second)
	e.waitRows(e.table, n, 3*time.Minute)
	elapsed := time.Since(start)
	// Rows are durable before their acks are sent; let the last acks go.
	waitStatus(t, c, func(st map[string]any) bool { return st["committed"].(float64) >= n && st["in_flight"].(float64) == 0 }, 30*time.Second)

	peak := c.peakRSS()
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	e.checkRows(n)
	t.Logf("drained %d messages in %v: %.0f msg/s (from process start); peak RSS %.1f MiB",
		n, elapsed.Round(time.Millisecond), n/elapsed.Seconds(), float64(peak)/(1<<20))
}

// flakySink fails every write with a transient error while failing is set.
type flakySink struct {
	sinks.Sink
	failing  atomic.Bool
	failures atomic.Int64
}

func (f *flakySink) Write(ctx context.Context, rows []sinks.Row) error {
	if f.failing.Load() {
		f.failures.Add(1)
		return status.Error(codes.Unavailable, "injected: tablet server unavailable")
	}
	return f.Sink.Write(ctx, rows)
}

// slowDrain makes a test configuration read one stream with a smaller
// flow-control window: ~1.8k msg/s on the emulator against ~10k with the
// defaults, so that a drain of a few thousand messages lasts seconds and a
// fault or a signal sent after a row count (which takes a poll to notice)
// lands mid-stream on a fast machine too.
func slowDrain(yaml string) string {
	return strings.NewReplacer("streams: 8", "streams: 1", "max_outstanding_messages: 2000", "max_outstanding_messages: 500").Replace(yaml)
}

// TestTransientSinkFailuresLoseAndDoubleNothing is test (b): the sink fails
// transiently for a while mid-stream; nothing is lost, nothing doubled,
// nothing dead-lettered.
func TestTransientSinkFailuresLoseAndDoubleNothing(t *testing.T) {
	const n = 3000
	e := newEnv(t)
	_, cfg := e.writeConfig(slowDrain(e.configYAML(config.ModeExactlyOnce, "")))
	e.publish(0, n)

	var flaky *flakySink
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.Open(ctx, nopLogger(), cfg, app.Options{
		PubSub:   e.pubsub,
		Bigtable: e.bigtableFor,
		WrapSink: func(_ string, s sinks.Sink) sinks.Sink {
			flaky = &flakySink{Sink: s}
			return flaky
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	e.waitRows(e.table, n/5, time.Minute)
	flaky.failing.Store(true)
	time.Sleep(3 * time.Second)
	flaky.failing.Store(false)
	e.waitRows(e.table, n, 2*time.Minute)
	p := a.Pipelines()[0]
	waitCommitted(t, p, n, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if flaky.failures.Load() == 0 {
		t.Fatal("no write failed: the fault was not injected")
	}
	st := p.Status()
	for reason, count := range st.DeadLettered {
		if count != 0 {
			t.Errorf("%d messages dead-lettered as %s: transient failures must be retried", count, reason)
		}
	}
	e.checkRows(n)
	t.Logf("%d injected write failures; committed %d, retried %d deliveries", flaky.failures.Load(), st.Committed, st.Retried)
}

// TestKilledTwiceMidStreamLosesNothing is test (c): the binary is killed
// with SIGKILL twice while draining (checked: rows were still missing) and
// restarted each time. Every tenth record also has a rival (same key,
// another payload and event time) published right after it, so that a
// dedupe failure shows as a second version. At the end: every row is there
// with one version of each cell (the original's or its rival's), nothing
// was dead-lettered, and nothing is left on the subscription.
func TestKilledTwiceMidStreamLosesNothing(t *testing.T) {
	const n = 5000
	e := newEnv(t)
	path, cfg := e.writeConfig(slowDrain(e.configYAML(config.ModeExactlyOnce, e.deadLetterYAML(deadletter.KindTopic))))
	originals, rivals := dupBatch(n, 0), dupBatch(n, 1)
	var msgs []dupMsg
	for i := range n {
		msgs = append(msgs, originals[i])
		if i%10 == 0 {
			msgs = append(msgs, rivals[i])
		}
	}
	e.publishDup(msgs)

	var killed time.Time
	for round, at := range []int{n / 4, n / 2} {
		c := e.start(path, cfg)
		c.waitReady(30 * time.Second)
		e.waitRows(e.table, at, 2*time.Minute)
		c.signal(syscall.SIGKILL)
		killed = time.Now()
		written := e.countRows(e.table)
		if written >= n {
			t.Fatalf("kill %d came after the drain (%d rows): nothing was killed mid-stream", round+1, written)
		}
		t.Logf("kill %d: SIGKILL with %d of %d rows written", round+1, written, n)
	}
	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	e.waitRows(e.table, n, 3*time.Minute)
	// What the killed process held comes back once its leases expire (a
	// lease, 15s, plus transit): only after that, and once the survivor has
	// settled, is "nothing left on the subscription" a fair question.
	time.Sleep(time.Until(killed.Add(source.LeaseExtension + 2*time.Second)))
	settle(t, []*child{c})
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}

	rows := e.readTable(e.table)
	if len(rows) != n {
		t.Errorf("%d rows, want %d", len(rows), n)
	}
	bad := 0
	for i := range n {
		cols := rows[rowKey(i)]
		data, num := cols["data"], cols["n"]
		ok := len(data) == 1 && len(num) == 1 && num[0].value == fmt.Sprint(i)
		if ok {
			ts := data[0].ts
			ok = ts == bigtable.Time(originals[i].ts).TruncateToMilliseconds() ||
				(i%10 == 0 && ts == bigtable.Time(rivals[i].ts).TruncateToMilliseconds())
		}
		if !ok {
			if bad++; bad <= 5 {
				t.Errorf("row %s: %d versions of data, %d of n: %+v", rowKey(i), len(data), len(num), cols)
			}
		}
	}
	_, dlSub, _ := e.deadLetterNames()
	if copies := e.pull(dlSub, 0, time.Minute); len(copies) != 0 {
		t.Errorf("%d dead letters of valid records", len(copies))
	}
	if left := e.pull(e.sub, 0, time.Minute); len(left) != 0 {
		t.Errorf("%d messages left on the subscription after the drain", len(left))
	}
}

// TestSigtermMidStreamExitsCleanlyAndRestartFinishes is test (d): SIGTERM
// while draining exits 0 within shutdown_timeout; a restart finishes.
func TestSigtermMidStreamExitsCleanlyAndRestartFinishes(t *testing.T) {
	const n = 5000
	e := newEnv(t)
	path, cfg := e.writeConfig(slowDrain(e.configYAML(config.ModeExactlyOnce, "")))
	e.publish(0, n)

	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	e.waitRows(e.table, n/3, 2*time.Minute)
	stop := time.Now()
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 5*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	took := time.Since(stop)
	if took > cfg.ShutdownTimeout+2*time.Second {
		t.Fatalf("stopping took %v, over shutdown_timeout %v", took, cfg.ShutdownTimeout)
	}
	written := e.countRows(e.table)
	if written >= n {
		t.Fatalf("all %d rows written before the stop: the test stopped nothing mid-stream", written)
	}
	t.Logf("SIGTERM with about %d of %d rows written; exited 0 in %v", written, n, took.Round(time.Millisecond))

	c = e.start(path, cfg)
	c.waitReady(30 * time.Second)
	took = e.waitRows(e.table, n, 3*time.Minute)
	t.Logf("restart finished the job in %v", took.Round(time.Millisecond))
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after the second SIGTERM, want 0", code)
	}
	e.checkRows(n)
}

// waitStatus polls the child's /status until ok says so.
func waitStatus(t *testing.T, c *child, ok func(map[string]any) bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := c.status()
		if ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after %v: %v", timeout, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
