package dedupe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/members"
)

// membership is a Membership a test sets: joined, and alone or not.
type membership struct {
	mu sync.Mutex
	v  members.View
}

func sharedView() *membership { return &membership{v: members.View{Joined: true}} }
func aloneView() *membership {
	return &membership{v: members.View{Joined: true, Alone: true, FastUntil: time.Now().Add(time.Hour)}}
}

func (m *membership) View() members.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.v
}
func (m *membership) Joined(context.Context) error { return nil }
func (m *membership) Peers() []string              { return nil }
func (m *membership) set(v members.View) {
	m.mu.Lock()
	m.v = v
	m.mu.Unlock()
}

// process is one pubsink process's Keys on the shared catalog s.
func process(t *testing.T, s store, m Membership) *Keys {
	t.Helper()
	return newTest(t, s, realClock(), Config{Members: m}, true)
}

// realClock is the wall clock: claims of several processes are compared
// by their timestamps against the window.
func realClock() *clock { return &clock{now: time.Now()} }

// TestConditionalClaimsOfOneKeyHaveOneWinner: N processes, each with its
// own Keys on one catalog (bttest), claim one key for N deliveries at once
// through the conditional mutation: one wins and commits, every other is a
// duplicate.
func TestConditionalClaimsOfOneKeyHaveOneWinner(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	const n = 16
	var start sync.WaitGroup
	start.Add(1)
	var wins, dups atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		d := process(t, s, sharedView())
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, dup, err := d.Claim(ctx, "k", delivery())
			switch {
			case err != nil:
				t.Error(err)
			case dup:
				dups.Add(1)
			default:
				wins.Add(1)
				time.Sleep(5 * time.Millisecond) // the row write
				if err := c.Commit(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	start.Done()
	wg.Wait()
	if wins.Load() != 1 || dups.Load() != n-1 {
		t.Fatalf("%d winners and %d duplicates of %d claims; want 1 and %d", wins.Load(), dups.Load(), n, n-1)
	}
}

// TestTheStoresConditionalClaimLetsOneThrough is the same race one level
// down: N concurrent claimIf calls of one row by N winners.
func TestTheStoresConditionalClaimLetsOneThrough(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	row := newCatalog("orders").row(idOf("k"), hashOf("k"))
	now := time.Now()
	at, since := bigtable.Time(now).TruncateToMilliseconds(), bigtable.Time(now.Add(-time.Minute)).TruncateToMilliseconds()
	const n = 32
	var through atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			blocked, err := s.claimIf(context.Background(), row, delivery(), at, since)
			if err != nil {
				t.Error(err)
			}
			if !blocked {
				through.Add(1)
			}
		}()
	}
	wg.Wait()
	if through.Load() != 1 {
		t.Fatalf("%d of %d conditional claims went through; want exactly 1", through.Load(), n)
	}
	sts, err := s.read(context.Background(), []string{row}, since)
	if err != nil || len(sts[0].claimants) != 1 {
		t.Fatalf("row state %+v, %v; want one claimant", sts, err)
	}
}

// TestACrashBetweenRowAndRecordLetsOnlyTheWinnerFinish: the process that
// won a key dies after its claim (and perhaps its row), before the record.
// A rival delivery of the key waits; the winner's redelivery, in another
// process, finishes the job; then the rival is a duplicate. Both for a
// process alone (a restart) and for replicas sharing the catalog.
func TestACrashBetweenRowAndRecordLetsOnlyTheWinnerFinish(t *testing.T) {
	for _, mode := range []struct {
		name string
		m    func() Membership
	}{{"alone", func() Membership { return aloneView() }}, {"shared", func() Membership { return sharedView() }}} {
		t.Run(mode.name, func(t *testing.T) {
			s := btStore{table: bttestClient(t).Open(testTable)}
			ctx := context.Background()
			crashed := process(t, s, mode.m())
			if _, dup, err := crashed.Claim(ctx, "k", "m1"); err != nil || dup {
				t.Fatalf("first claim: %v, %v", dup, err)
			}
			// crashed dies here: no Commit, no Release.

			next := process(t, s, mode.m()) // the restart, or another replica
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if _, _, err := next.Claim(wctx, "k", "m2"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the rival's claim = %v; want it to wait for the winner", err)
			}
			c, dup, err := next.Claim(ctx, "k", "m1") // the winner, redelivered
			if err != nil || dup {
				t.Fatalf("the winner's redelivery: dup %v, %v; want the key", dup, err)
			}
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if _, dup, err := next.Claim(ctx, "k", "m2"); err != nil || !dup {
				t.Fatalf("the rival after the commit: dup %v, %v; want a duplicate", dup, err)
			}
		})
	}
}

// TestAReleasedClaimFreesTheKeyForARival: a winner that gives the key up
// (its row was rejected, or it was late) deletes its claim, and a rival in
// another process takes the key.
func TestAReleasedClaimFreesTheKeyForARival(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	ctx := context.Background()
	a, b := process(t, s, sharedView()), process(t, s, sharedView())
	c, _, err := a.Claim(ctx, "k", "m1")
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c2, dup, err := b.Claim(wctx, "k", "m2")
	if err != nil || dup {
		t.Fatalf("the rival after the release: dup %v, %v; want the key", dup, err)
	}
	c2.Release()
}

// lostReply applies a conditional claim and then loses its reply.
type lostReply struct{ store }

func (s lostReply) claimIf(ctx context.Context, row, winner string, at, since bigtable.Timestamp) (bool, error) {
	s.store.claimIf(ctx, row, winner, at, since)
	return false, status.Error(codes.Unavailable, "injected: the reply was lost")
}

// TestALostReplyIsReadBack: Apply does not retry a conditional mutation,
// and an error leaves it unknown whether it was applied; the row, read
// back, says the claim is this delivery's.
func TestALostReplyIsReadBack(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	d := process(t, lostReply{s}, sharedView())
	c, dup, err := d.Claim(context.Background(), "k", "m1")
	if err != nil || dup {
		t.Fatalf("Claim with a lost reply = dup %v, %v; want the key, read back", dup, err)
	}
	c.Release()
}

// rivalFirst lets a rival process claim the key conditionally, and ends
// this process's fast path, while this process's unconditional claim is on
// its way: a fast-path claim confirmed after the fast path closed.
type rivalFirst struct {
	store
	before func()
}

func (s rivalFirst) put(ctx context.Context, cells []cell) ([]error, error) {
	s.before()
	return s.store.put(ctx, cells)
}

// TestAFastPathClaimConfirmedTooLateIsNotTrusted: a process alone writes
// its claim unconditionally; a newcomer claims the key conditionally
// first, and the process's fast path closes before the write returns. The
// process must not take the key: it finds the newcomer's claim and waits.
func TestAFastPathClaimConfirmedTooLateIsNotTrusted(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	ctx := context.Background()
	newcomer := process(t, s, sharedView())
	view := aloneView()
	var rival Claim
	once := sync.Once{}
	old := process(t, rivalFirst{store: s, before: func() {
		once.Do(func() {
			var err error
			if rival, _, err = newcomer.Claim(ctx, "k", "m2"); err != nil || !rival.Held() {
				t.Errorf("the newcomer's claim: %v", err)
			}
			view.set(members.View{Joined: true}) // the old process saw the newcomer
		})
	}}, view)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if c, dup, err := old.Claim(wctx, "k", "m1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the old process's claim = held %v, dup %v, %v; want it to wait for the newcomer's claim", c.Held(), dup, err)
	}
	if st := old.Stats(); st.Upgrades != 1 {
		t.Fatalf("stats %+v; want one fast-path claim upgraded", st)
	}
	if err := rival.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, dup, err := old.Claim(ctx, "k", "m1"); err != nil || !dup {
		t.Fatalf("after the newcomer committed: dup %v, %v; want a duplicate", dup, err)
	}
}

// TestTheFastPathEndsByTheProcessClock: a fast-path claim is trusted only
// if it was confirmed before View.FastUntil, read on Config.Now, the clock
// the membership runs on. A process whose clock is ahead of the host's
// (PUBSINK_CLOCK_OFFSET) has a FastUntil ahead too: by the host's clock
// the fast path would look open for as long as the offset after it ended.
func TestTheFastPathEndsByTheProcessClock(t *testing.T) {
	clk := &clock{now: time.Now().Add(10 * time.Minute)}
	m := &membership{v: members.View{Joined: true, Alone: true, FastUntil: clk.Now().Add(-time.Second)}}
	d := newTest(t, btStore{table: bttestClient(t).Open(testTable)}, clk, Config{Members: m}, true)
	c := claimNew(t, d, "k")
	if st := d.Stats(); st.Upgrades != 1 || st.ConditionalClaims != 1 {
		t.Fatalf("stats %+v; want the claim confirmed too late by the process's clock, so made conditional", st)
	}
	if err := c.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}
