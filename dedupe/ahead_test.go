package dedupe

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pubsink/pubsink/members"
)

// gatedStore holds every put until its gate is opened.
type gatedStore struct {
	store
	gate chan struct{}
}

func (s gatedStore) put(ctx context.Context, cells []cell) ([]error, error) {
	<-s.gate
	return s.store.put(ctx, cells)
}

// TestAClaimAheadIsQueuedAndWaitedForByItsRows: alone, a new key's
// ClaimAhead returns while its claim's write is still on its way; Ready
// (and Wait, and Commit) wait for it, and then the key is claimed, in the
// catalog and for any later delivery.
func TestAClaimAheadIsQueuedAndWaitedForByItsRows(t *testing.T) {
	gate := make(chan struct{})
	d := newTest(t, gatedStore{store: btStore{table: bttestClient(t).Open(testTable)}, gate: gate}, realClock(), Config{}, true)

	c, dup, err := d.ClaimAhead(context.Background(), "k", "m1")
	if err != nil || dup || !c.Held() || c.Ready() == nil {
		t.Fatalf("ClaimAhead = held %v, dup %v, ready %v, %v; want a claim queued ahead", c.Held(), dup, c.Ready() != nil, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Ready().Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ready's Wait while the write is held: %v; want it still waiting", err)
	}
	close(gate)
	if err := c.Ready().Wait(context.Background()); err != nil {
		t.Fatalf("Ready's Wait once written: %v", err)
	}
	if err := c.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c2, dup, err := d.Claim(context.Background(), "k", "m2"); err != nil || !dup {
		t.Fatalf("a rival's Claim after the commit = held %v, dup %v, %v; want a duplicate", c2.Held(), dup, err)
	}
	sts, err := d.store.read(context.Background(), []string{d.cat.row(idOf("k"), hashOf("k"))}, 0)
	if err != nil || len(sts[0].claimants) != 1 || sts[0].claimants[0] != "m1" {
		t.Fatalf("the row %+v, %v; want m1's claim", sts, err)
	}
}

// TestAClaimAheadWhoseWriteFailsDecidesNothing: the write's error is
// Ready's (and Commit's); the caller gives the key up, and a claim made
// again finds no claim in the catalog (the filters sent it there).
func TestAClaimAheadWhoseWriteFailsDecidesNothing(t *testing.T) {
	cs := &countingStore{store: btStore{table: bttestClient(t).Open(testTable)}}
	d := newTest(t, cs, realClock(), Config{}, true)
	boom := errors.New("unavailable")
	cs.failWrites(boom)
	c, dup, err := d.ClaimAhead(context.Background(), "k", "m1")
	if err != nil || dup || c.Ready() == nil {
		t.Fatalf("ClaimAhead = dup %v, ready %v, %v", dup, c.Ready() != nil, err)
	}
	if err := c.Wait(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Wait: %v; want the write's error", err)
	}
	if err := c.Commit(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Commit: %v; want the write's error (no ack for a claim that decided nothing)", err)
	}
	c.Release()
	cs.failWrites(nil)
	reads := cs.readRows.Load()
	c2, dup, err := d.Claim(context.Background(), "k", "m1")
	if err != nil || dup || c2.Resumed() {
		t.Fatalf("the claim made again = dup %v, resumed %v, %v; want a new claim", dup, c2.Resumed(), err)
	}
	if cs.readRows.Load() == reads {
		t.Fatal("the claim made again did not read the catalog: the filters must hold a key whose claim failed")
	}
	c2.Release()
}

// TestAClaimAheadTrustedTooLateIsMadeAgainConditionally: the fast path
// closes while the claim is on its way (a newcomer joined). Once durable,
// the claim is made again conditionally: alone in its row it is confirmed;
// beside a newcomer's claim of the key (made first) it is withdrawn and
// Ready says ErrClaimLost.
func TestAClaimAheadTrustedTooLateIsMadeAgainConditionally(t *testing.T) {
	for _, rival := range []bool{false, true} {
		name := map[bool]string{false: "confirmed alone", true: "lost to the newcomer's claim"}[rival]
		t.Run(name, func(t *testing.T) {
			s := btStore{table: bttestClient(t).Open(testTable)}
			ctx := context.Background()
			newcomer := process(t, s, sharedView())
			view := aloneView()
			var theirs Claim
			var once sync.Once
			old := process(t, rivalFirst{store: s, before: func() {
				once.Do(func() {
					if rival {
						var err error
						if theirs, _, err = newcomer.Claim(ctx, "k", "m2"); err != nil || !theirs.Held() {
							t.Errorf("the newcomer's claim: %v", err)
						}
					}
					view.set(members.View{Joined: true}) // the old process saw the newcomer
				})
			}}, view)
			c, dup, err := old.ClaimAhead(ctx, "k", "m1")
			if err != nil || dup || c.Ready() == nil {
				t.Fatalf("ClaimAhead = dup %v, ready %v, %v; want a claim queued ahead", dup, c.Ready() != nil, err)
			}
			err = c.Wait(ctx)
			if st := old.Stats(); st.Upgrades != 1 || st.ConditionalClaims != 1 {
				t.Fatalf("stats %+v; want the claim made again conditionally", st)
			}
			want := "m1"
			if rival {
				want = "m2"
				if !errors.Is(err, ErrClaimLost) {
					t.Fatalf("Wait: %v; want ErrClaimLost", err)
				}
				if err := theirs.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				t.Fatalf("Wait: %v; want the claim confirmed", err)
			}
			c.Release()
			sts, err := s.read(ctx, []string{old.cat.row(idOf("k"), hashOf("k"))}, 0)
			if err != nil || len(sts[0].claimants) != 1 || sts[0].claimants[0] != want {
				t.Fatalf("the row's claims %+v, %v; want %s's alone", sts, err, want)
			}
		})
	}
}

// TestClaimAheadIsClaimOffTheFastPath: shared, or for a key the filters
// may hold, ClaimAhead claims as Claim does and has nothing to wait for.
func TestClaimAheadIsClaimOffTheFastPath(t *testing.T) {
	s := btStore{table: bttestClient(t).Open(testTable)}
	ctx := context.Background()
	shared := process(t, s, sharedView())
	c, dup, err := shared.ClaimAhead(ctx, "k", "m1")
	if err != nil || dup || c.Ready() != nil {
		t.Fatalf("shared ClaimAhead = dup %v, ready %v, %v; want a conditional claim, made", dup, c.Ready() != nil, err)
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	alone := process(t, s, aloneView())
	c, dup, err = alone.ClaimAhead(ctx, "k", "m1") // its filters hold k (rebuilt from the journal)
	if err != nil || dup || !c.Resumed() || c.Ready() != nil {
		t.Fatalf("a redelivery's ClaimAhead = dup %v, resumed %v, ready %v, %v; want it resumed after a read", dup, c.Resumed(), c.Ready() != nil, err)
	}
	c.Release()
}
