package dedupe

import (
	"context"
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

// TestACrashAfterTheClaimLetsOnlyTheWinnerFinish: the process that won a
// key dies after its claim (and perhaps its row), before its ack. A rival
// delivery of the key is a duplicate at once: the winner was not acked and
// comes back; the winner's redelivery, in another process, resumes the
// claim and finishes the job. Both for a process alone (a restart) and for
// replicas sharing the catalog.
func TestACrashAfterTheClaimLetsOnlyTheWinnerFinish(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode func() Membership) {
		s := btStore{table: bttestClient(t).Open(testTable)}
		ctx := context.Background()
		crashed := process(t, s, mode())
		if _, dup, err := crashed.Claim(ctx, "k", "m1"); err != nil || dup {
			t.Fatalf("first claim: %v, %v", dup, err)
		}
		// crashed dies here: no Commit, no Release.

		next := process(t, s, mode()) // the restart, or another replica
		if c, dup, err := next.Claim(ctx, "k", "m2"); err != nil || !dup {
			t.Fatalf("the rival's claim = held %v, dup %v, %v; want a duplicate", c.Held(), dup, err)
		}
		c, dup, err := next.Claim(ctx, "k", "m1") // the winner, redelivered
		if err != nil || dup || !c.Resumed() {
			t.Fatalf("the winner's redelivery: dup %v, resumed %v, %v; want it to resume the key", dup, c.Resumed(), err)
		}
		if err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, dup, err := next.Claim(ctx, "k", "m2"); err != nil || !dup {
			t.Fatalf("the rival after the commit: dup %v, %v; want a duplicate", dup, err)
		}
	})
}

// TestAReleasedClaimStillDecidesTheKey: a winner that gives its hold up
// (a stop, a write that kept failing: the message is nacked) leaves its
// claim: a rival in another process is a duplicate, and the winner's
// redelivery resumes.
func TestAReleasedClaimStillDecidesTheKey(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	ctx := context.Background()
	a, b := process(t, s, sharedView()), process(t, s, sharedView())
	c, _, err := a.Claim(ctx, "k", "m1")
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if c2, dup, err := b.Claim(ctx, "k", "m2"); err != nil || !dup {
		t.Fatalf("the rival after the release: held %v, dup %v, %v; want a duplicate", c2.Held(), dup, err)
	}
	c3, dup, err := b.Claim(ctx, "k", "m1")
	if err != nil || dup || !c3.Resumed() {
		t.Fatalf("the winner's redelivery after the release: dup %v, resumed %v, %v; want it to resume", dup, c3.Resumed(), err)
	}
	c3.Release()
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
	if err != nil || dup || c.Resumed() {
		t.Fatalf("Claim with a lost reply = dup %v, resumed %v, %v; want the key, read back, as a new claim", dup, c.Resumed(), err)
	}
	c.Release()
}

// TestResumeHoldsOnlyWhatTheMessageClaimed: Resume, which the pipeline asks
// for a late message, holds a key only if the message claimed it before,
// answers a duplicate if another did, and writes nothing for a key nobody
// claimed. Alone and shared.
func TestResumeHoldsOnlyWhatTheMessageClaimed(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode func() Membership) {
		cs := &countingStore{store: btStore{table: bttestClient(t).Open(testTable)}}
		ctx := context.Background()
		d := process(t, cs, mode())
		c, dup, err := d.Resume(ctx, "free", "m1")
		if err != nil || dup || c.Held() {
			t.Fatalf("Resume of a key nobody claimed = held %v, dup %v, %v; want neither", c.Held(), dup, err)
		}
		if n := cs.claimRows.Load(); n != 0 {
			t.Fatalf("Resume wrote %d claims", n)
		}
		first, _, err := d.Claim(ctx, "k", "m1")
		if err != nil {
			t.Fatal(err)
		}
		first.Release()
		if c, dup, err := d.Resume(ctx, "k", "m2"); err != nil || !dup {
			t.Fatalf("Resume by a rival = held %v, dup %v, %v; want a duplicate", c.Held(), dup, err)
		}
		c, dup, err = d.Resume(ctx, "k", "m1")
		if err != nil || dup || !c.Held() || !c.Resumed() {
			t.Fatalf("Resume by the winner = held %v, resumed %v, dup %v, %v; want the key, resumed", c.Held(), c.Resumed(), dup, err)
		}
		c.Release()
	})
}

// TestARowSaysWhatADeliveryIs: the first claim decides; a record (a
// dead-letter copy's, or an earlier version's) is a duplicate for anyone;
// a claim of this message beside another's is an untrusted claim being
// withdrawn: look again.
func TestARowSaysWhatADeliveryIs(t *testing.T) {
	for _, c := range []struct {
		row  rowState
		want outcome
	}{
		{rowState{}, free},
		{rowState{claimants: []string{"m1"}}, mine},
		{rowState{claimants: []string{"m2"}}, seen},
		{rowState{claimants: []string{"m1", "m2"}}, taken},
		{rowState{recorded: true, claimants: []string{"m1"}}, seen},
		{rowState{recorded: true}, seen},
	} {
		if got := c.row.decide("m1"); got != c.want {
			t.Errorf("%+v.decide(m1) = %d, want %d", c.row, got, c.want)
		}
	}
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
// process must not take the key: it finds the newcomer's claim, withdraws
// its own and is a duplicate.
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
	if c, dup, err := old.Claim(ctx, "k", "m1"); err != nil || !dup {
		t.Fatalf("the old process's claim = held %v, dup %v, %v; want a duplicate of the newcomer's claim", c.Held(), dup, err)
	}
	if st := old.Stats(); st.Upgrades != 1 {
		t.Fatalf("stats %+v; want one fast-path claim upgraded", st)
	}
	sts, err := s.read(ctx, []string{old.cat.row(idOf("k"), hashOf("k"))}, 0)
	if err != nil || len(sts[0].claimants) != 1 || sts[0].claimants[0] != "m2" {
		t.Fatalf("the row's claims %+v, %v; want the newcomer's alone (the untrusted one withdrawn)", sts, err)
	}
	if err := rival.Commit(ctx); err != nil {
		t.Fatal(err)
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

// TestClaimOnceWritesOnlyItsRecord: a key only one message can have (its
// message ID) gets no claim: Commit writes the record, the one state
// write, and the message's redelivery is then a duplicate. Shared, the
// lookup is a batched read, not a conditional mutation.
func TestClaimOnceWritesOnlyItsRecord(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode func() Membership) {
		cs := &countingStore{store: btStore{table: bttestClient(t).Open(testTable)}}
		ctx := context.Background()
		d := process(t, cs, mode())
		c, dup, err := d.ClaimOnce(ctx, "m1", "m1")
		if err != nil || dup || !c.Held() {
			t.Fatalf("ClaimOnce of a new key = held %v, dup %v, %v", c.Held(), dup, err)
		}
		if err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if claims, recs := cs.claimRows.Load(), cs.writeRows.Load(); claims != 0 || recs != 1 {
			t.Fatalf("%d claims and %d records written; want the record alone", claims, recs)
		}
		if st := d.Stats(); st.ConditionalClaims != 0 {
			t.Fatalf("%d conditional claims; want none", st.ConditionalClaims)
		}
		if c, dup, err := d.ClaimOnce(ctx, "m1", "m1"); err != nil || !dup {
			t.Fatalf("the redelivery's ClaimOnce = held %v, dup %v, %v; want a duplicate", c.Held(), dup, err)
		}
	})
}

// gatedReads holds every catalog read until gate is closed.
type gatedReads struct {
	store
	gate chan struct{}
}

func (s gatedReads) read(ctx context.Context, rows []string, since bigtable.Timestamp) ([]rowState, error) {
	<-s.gate
	return s.store.read(ctx, rows, since)
}

// TestAWinnerWaitingBehindItsRivalResumes: after a crash, a process gets
// the winner's redelivery while a rival's Claim of the key is reading the
// catalog. The winner waits for the rival's hold in this process; the
// rival finds the winner's claim and is a duplicate; the winner then
// resumes its claim: the rival's answer is not the winner's (a regression:
// waiters were told "committed" and the winner was dropped as a
// duplicate, its rows never written).
func TestAWinnerWaitingBehindItsRivalResumes(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	ctx := context.Background()
	crashed := process(t, s, aloneView())
	if _, dup, err := crashed.Claim(ctx, "k", "m1"); err != nil || dup {
		t.Fatalf("first claim: %v, %v", dup, err)
	}
	gate := make(chan struct{})
	next := newTest(t, gatedReads{store: s, gate: gate}, realClock(), Config{Members: aloneView()}, false)
	rival := make(chan bool, 1)
	go func() {
		_, dup, err := next.Claim(ctx, "k", "m2")
		if err != nil {
			t.Error(err)
		}
		rival <- dup
	}()
	for deadline := time.Now().Add(5 * time.Second); next.Stats().KeysInFlight == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the rival's Claim never held the key")
		}
	}
	winner := make(chan Claim, 1)
	go func() {
		c, dup, err := next.Claim(ctx, "k", "m1")
		if err != nil || dup {
			t.Errorf("the winner's redelivery = dup %v, %v; want it to resume", dup, err)
		}
		winner <- c
	}()
	time.Sleep(20 * time.Millisecond) // the winner waits behind the rival's hold
	close(gate)
	if !<-rival {
		t.Fatal("the rival took the key")
	}
	if c := <-winner; !c.Resumed() {
		t.Fatalf("the winner's redelivery: held %v, resumed %v; want it to resume", c.Held(), c.Resumed())
	}
}

// forEachMode runs test for a process alone and for one of several.
func forEachMode(t *testing.T, test func(t *testing.T, mode func() Membership)) {
	t.Run("alone", func(t *testing.T) { test(t, func() Membership { return aloneView() }) })
	t.Run("shared", func(t *testing.T) { test(t, func() Membership { return sharedView() }) })
}
