package reprocess

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/state"
)

// stateTable returns a client of a fresh state table on bttest.
func stateTable(t *testing.T) *bigtable.Table {
	return fake.StateTableFor(t, "state", time.Minute).Open("state")
}

// clock is a wall clock the test moves.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// TestALapsedLockIsTakenOverAndItsHolderCanChangeNothing: a run killed
// holding the lock is succeeded once the lock lapsed; the successor finds
// the record, and the old holder, woken, can neither renew nor write.
func TestALapsedLockIsTakenOverAndItsHolderCanChangeNothing(t *testing.T) {
	ctx := context.Background()
	table := stateTable(t)
	clk := &clock{}
	s := NewStore(table, "orders", clk.now)
	old, err := s.Acquire(ctx, "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{Name: NameFor("orders", Stamp(clk.now())), Pipeline: "orders", Until: clk.now(), Subscription: "projects/p/subscriptions/s-reprocess"}
	if err := old.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	clk.advance(LockLease + time.Second) // the old run was paused or killed
	var waited []Holder
	next, err := s.Acquire(ctx, "next", func(h Holder) { waited = append(waited, h) })
	if err != nil {
		t.Fatalf("taking over a lapsed lock: %v", err)
	}
	if len(waited) != 0 {
		t.Errorf("waited for a lapsed lock: %v", waited)
	}
	got, err := s.Load(ctx)
	if err != nil || got == nil || got.Name != rec.Name || got.Subscription != rec.Subscription {
		t.Fatalf("the successor found %+v, %v; want %+v", got, err, rec)
	}
	if err := old.Renew(ctx); !errors.Is(err, ErrLostLock) {
		t.Errorf("the old holder renewed: %v", err)
	}
	if err := old.Save(ctx, &Record{Name: "stale"}); !errors.Is(err, ErrLostLock) {
		t.Errorf("the old holder saved: %v", err)
	}
	if err := old.Finish(ctx); !errors.Is(err, ErrLostLock) {
		t.Errorf("the old holder finished the run: %v", err)
	}
	if got, _ := s.Load(ctx); got == nil || got.Name != rec.Name {
		t.Fatalf("the record after the old holder's attempts: %+v", got)
	}
	if err := next.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Load(ctx); got != nil {
		t.Errorf("the record after Finish: %+v", got)
	}
	if h, _ := s.Held(ctx); h != nil {
		t.Errorf("the lock after Finish: %+v", h)
	}
}

// TestARenewedLockIsRefused: while a run renews its lock, another is
// refused with ErrLocked naming the holder, within a renewal or so.
func TestARenewedLockIsRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := NewStore(stateTable(t), "orders", nil)
	first, err := s.Acquire(ctx, "first", nil)
	if err != nil {
		t.Fatal(err)
	}
	kept := make(chan error, 1)
	go func() { kept <- first.Keep(ctx, func(err error) { t.Errorf("renewal failed: %v", err) }) }()
	start := time.Now()
	var waited bool
	_, err = s.Acquire(ctx, "second", func(Holder) { waited = true })
	if !errors.Is(err, ErrLocked) || !waited {
		t.Fatalf("a second run while the first renews: %v (waited %v); want ErrLocked", err, waited)
	}
	if took := time.Since(start); took > 2*LockRenew {
		t.Errorf("refused after %v, want within about a renewal (%v)", took, LockRenew)
	}
	if h, _ := s.Held(ctx); h == nil || h.ID != "first" {
		t.Errorf("held by %+v, want first", h)
	}
	// A clean stop releases the lock: a restart takes it at once.
	cancel()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := s.Acquire(context.Background(), "restart", nil); err != nil || time.Since(start) > time.Second {
		t.Fatalf("after a release: %v after %v", err, time.Since(start))
	}
}

func TestRecordSameRange(t *testing.T) {
	from := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	until := from.Add(time.Hour)
	r := &Record{From: from, Until: until}
	later := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC) // what "2h" gives at a restart
	for _, c := range []struct {
		q    Range
		same bool
	}{
		{Range{From: from}, true}, // --until omitted: the first start's
		{Range{From: from, Until: until}, true},
		{Range{From: later, FromRelative: true}, true},                               // --from 2h again
		{Range{From: from, Until: later, UntilRelative: true}, true},                 // --until 5m again
		{Range{From: from.Add(time.Second)}, false},                                  // another time
		{Range{From: from, Until: until.Add(time.Second)}, false},                    // another end
		{Range{Snapshot: "projects/p/snapshots/s"}, false},                           // a snapshot instead
		{Range{From: later, FromRelative: true, Until: until.Add(time.Hour)}, false}, // another end still
	} {
		if got := r.Same(c.q); got != c.same {
			t.Errorf("Same(%+v) = %v", c.q, got)
		}
	}
	snap := &Record{Snapshot: "projects/p/snapshots/s", Until: until}
	if !snap.Same(Range{Snapshot: "projects/p/snapshots/s"}) || snap.Same(Range{Snapshot: "projects/p/snapshots/t"}) || snap.Same(Range{From: from}) {
		t.Error("a snapshot's run is the same only with that snapshot")
	}
}

// TestARenewalWhoseAnswerWasLostKeepsTheLock: a renewal Bigtable applied
// but whose answer the run never got (its context cancelled as the run
// stopped, a deadline under load) leaves the cell with an expiry the run
// does not know; the run still holds the lock and can finish. Another
// holder's value in the cell still fails every write.
func TestARenewalWhoseAnswerWasLostKeepsTheLock(t *testing.T) {
	ctx := context.Background()
	table := stateTable(t)
	s := NewStore(table, "orders", nil)
	l, err := s.Acquire(ctx, "run-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(ctx, &Record{Name: "orders~r1", Pipeline: "orders"}); err != nil {
		t.Fatal(err)
	}
	setLock := func(v string) {
		t.Helper()
		m := bigtable.NewMutation()
		m.DeleteCellsInColumn(state.FamilyMeta, lockColumn)
		m.Set(state.FamilyMeta, lockColumn, bigtable.Now().TruncateToMilliseconds(), []byte(v))
		if err := table.Apply(ctx, Row("orders"), m); err != nil {
			t.Fatal(err)
		}
	}
	// The renewal that landed unanswered.
	setLock("run-a@" + strconv.FormatInt(time.Now().Add(LockLease+LockRenew).UnixMilli(), 10))
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renewing after a lost answer: %v", err)
	}
	if err := l.Save(ctx, &Record{Name: "orders~r1", Pipeline: "orders", Ready: true}); err != nil {
		t.Fatalf("saving after a lost answer: %v", err)
	}
	// A holder whose id only begins like this run's is another holder.
	setLock("run-ab@" + strconv.FormatInt(time.Now().Add(LockLease).UnixMilli(), 10))
	if err := l.Save(ctx, &Record{Name: "stale"}); !errors.Is(err, ErrLostLock) {
		t.Errorf("saving under run-ab's lock: %v, want ErrLostLock", err)
	}
	setLock("run-a@" + strconv.FormatInt(time.Now().UnixMilli(), 10))
	if err := l.Finish(ctx); err != nil {
		t.Fatalf("finishing after a lost answer: %v", err)
	}
	if got, _ := s.Load(ctx); got != nil {
		t.Errorf("the record after Finish: %+v", got)
	}
}
