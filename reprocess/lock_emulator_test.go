package reprocess

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/internal/testenv/faultproxy"
)

// stallableStateTable returns a state table on the Bigtable emulator twice:
// through a fault proxy the test can stall (the run's), and direct (a
// successor's, or the test's view).
func stallableStateTable(t *testing.T) (proxied, direct *bigtable.Table, proxy *faultproxy.Proxy) {
	t.Helper()
	bt := emulator.RequireBigtable(t)
	ctx := context.Background()
	client, admin, err := bt.Clients(ctx, "lock", "lock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); admin.Close() })
	if err := fake.CreateStateTable(ctx, admin, "state", time.Minute); err != nil {
		t.Fatal(err)
	}
	proxy, err = faultproxy.Start(bt.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	pclient, padmin, err := (&emulator.Bigtable{Host: proxy.Addr()}).Clients(ctx, "lock", "lock")
	if err != nil {
		t.Fatal(err)
	}
	padmin.Close()
	t.Cleanup(func() { pclient.Close() })
	return pclient.Open("state"), client.Open("state"), proxy
}

// loadCPU keeps every core busy until the test ends: the lock must hold on
// a loaded machine, where its renewal waits for a core.
func loadCPU(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range runtime.NumCPU() {
		go func() {
			for ctx.Err() == nil {
			}
		}()
	}
}

// TestALockKeptThroughAStateTableStallShorterThanItsMargin: the state
// table stalls for two renewal intervals, on a loaded machine; the run
// keeps its lock, and renews it once the table answers again.
func TestALockKeptThroughAStateTableStallShorterThanItsMargin(t *testing.T) {
	proxied, direct, proxy := stallableStateTable(t)
	loadCPU(t)
	ctx := context.Background()
	l, err := NewStore(proxied, "orders", nil).Acquire(ctx, "run-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	failures := make(chan error, 16)
	go func() {
		kept <- l.Keep(kctx, func(err error) {
			select {
			case failures <- err:
			default:
			}
		})
	}()
	time.Sleep(LockRenew / 2)
	proxy.Stall()
	time.Sleep(2 * LockRenew) // longer than a renewal interval, shorter than LockLease-StopMargin
	proxy.Resume()
	time.Sleep(2 * LockRenew)
	select {
	case err := <-kept:
		t.Fatalf("Keep returned %v through a stall of %v", err, 2*LockRenew)
	default:
	}
	if len(failures) == 0 {
		t.Error("no renewal failed during the stall: the stall did not stall the lock's writes")
	}
	h, err := NewStore(direct, "orders", nil).Held(ctx)
	if err != nil || h == nil || h.ID != "run-a" || time.Until(h.Until) < LockLease-2*LockRenew {
		t.Errorf("the lock after the stall: %+v, %v; want run-a's, renewed since", h, err)
	}
	stop()
	if err := <-kept; err != nil {
		t.Errorf("Keep after its context ended: %v", err)
	}
}

// TestALockStalledPastItsLeaseStopsItsHolderBeforeASuccessorTakesIt: the
// state table stalls for good, for the run only; Keep gives up
// (ErrLapsing) before the lock lapses, and so before a successor, which
// sees the table, takes it over; the old holder then writes nothing.
func TestALockStalledPastItsLeaseStopsItsHolderBeforeASuccessorTakesIt(t *testing.T) {
	proxied, direct, proxy := stallableStateTable(t)
	loadCPU(t)
	ctx := context.Background()
	old, err := NewStore(proxied, "orders", nil).Acquire(ctx, "run-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Save(ctx, &Record{Name: "orders~r1", Pipeline: "orders"}); err != nil {
		t.Fatal(err)
	}
	proxy.Stall()
	defer proxy.Resume()
	type result struct {
		at  time.Time
		err error
	}
	stopped := make(chan result, 1)
	go func() {
		err := old.Keep(ctx, nil)
		stopped <- result{time.Now(), err}
	}()
	succeeded := make(chan result, 1)
	var next *Lock
	go func() {
		var err error
		next, err = NewStore(direct, "orders", nil).Acquire(ctx, "run-b", nil)
		succeeded <- result{time.Now(), err}
	}()
	s := <-stopped
	if !errors.Is(s.err, ErrLapsing) {
		t.Fatalf("Keep on a stalled state table: %v, want ErrLapsing", s.err)
	}
	n := <-succeeded
	if n.err != nil {
		t.Fatalf("the successor: %v", n.err)
	}
	if gap := n.at.Sub(s.at); gap < StopMargin/2 {
		t.Errorf("the holder stopped %v before its successor took over, want about StopMargin (%v) or more", gap, StopMargin)
	}
	proxy.Resume()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := old.Save(wctx, &Record{Name: "stale"}); !errors.Is(err, ErrLostLock) {
		t.Errorf("the old holder saved after the takeover: %v", err)
	}
	if got, err := NewStore(direct, "orders", nil).Load(ctx); err != nil || got == nil || got.Name != "orders~r1" {
		t.Errorf("the record after the old holder's attempt: %+v, %v", got, err)
	}
	if err := next.Finish(ctx); err != nil {
		t.Errorf("the successor's finish: %v", err)
	}
}
