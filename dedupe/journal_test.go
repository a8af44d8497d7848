package dedupe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// scanCounter counts the full scans of the catalog.
type scanCounter struct {
	store
	scans atomic.Int64
}

func (s *scanCounter) scan(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(string, bigtable.Timestamp) bool) error {
	s.scans.Add(1)
	return s.store.scan(ctx, rng, since, fn)
}

// restart is a new process on s: it writes the marker and rebuilds, as
// Run begins.
func restart(t *testing.T, s store, clk *clock, cfg Config) *Keys {
	t.Helper()
	d := newTest(t, s, clk, cfg, false)
	d.mark(context.Background())
	d.rebuildFilters(context.Background())
	return d
}

func TestARestartRebuildsFromTheJournal(t *testing.T) {
	mem := newMemStore()
	clk := newClock()
	first := restart(t, mem, clk, Config{}) // writes the marker: the journal starts
	commitRange(t, first, 0, 100)
	clk.Advance(11 * time.Minute) // those 100 leave the window; the journal now covers one
	commitRange(t, first, 100, 600)
	first.Close(context.Background())

	s := &scanCounter{store: mem}
	d := restart(t, s, clk, Config{})
	st := d.Stats()
	// Each key is in the journal once, with its claim (Commit writes
	// nothing).
	if !st.Rebuilt || st.RebuildFrom != "journal" || st.RebuildKeys != 500 {
		t.Fatalf("rebuilt %v from %q with %d entries, want the 500 keys of the window from the journal, once each", st.Rebuilt, st.RebuildFrom, st.RebuildKeys)
	}
	if n := s.scans.Load(); n != 0 {
		t.Errorf("%d catalog scans with a trusted journal", n)
	}
	for i := 100; i < 600; i++ {
		if !isDup(t, d, keyN(i)) {
			t.Fatalf("%s is new after a rebuild from the journal", keyN(i))
		}
	}
}

func TestTheJournalIsTrustedOnlyOnceItCoversAWindow(t *testing.T) {
	mem := newMemStore()
	clk := newClock()
	first := restart(t, mem, clk, Config{})
	commitRange(t, first, 0, 100)
	clk.Advance(5 * time.Minute) // half a window of journal
	first.Close(context.Background())
	s := &scanCounter{store: mem}
	d := restart(t, s, clk, Config{})
	if st := d.Stats(); st.RebuildFrom != "catalog" || st.RebuildKeys != 100 || s.scans.Load() == 0 {
		t.Fatalf("rebuilt from %q with %d keys after %d scans; want a scan of the catalog", st.RebuildFrom, st.RebuildKeys, s.scans.Load())
	}
}

// peers is a process alone but for the given peers.
type peers struct {
	*membership
	ids []string
}

func (p *peers) Peers() []string { return p.ids }

func TestAPeerOfAnEarlierVersionMakesRebuildsScan(t *testing.T) {
	mem := newMemStore()
	clk := newClock()
	first := restart(t, mem, clk, Config{})
	clk.Advance(11 * time.Minute)
	commitRange(t, first, 0, 100)

	old := &peers{membership: aloneView(), ids: []string{"host-0011223344556677"}}
	d := restart(t, mem, clk, Config{Members: old})
	if st := d.Stats(); st.RebuildFrom != "catalog" {
		t.Fatalf("rebuilt from %q while a peer of an earlier version runs", st.RebuildFrom)
	}
	// Its writes are not journaled: the marker moves past them, so that
	// the journal is not trusted for a window after it was last seen.
	since, _, _ := mem.readSince(context.Background(), "")
	if !since.After(clk.Now()) {
		t.Fatalf("marker at %v with a peer of an earlier version live at %v", since, clk.Now())
	}
	old.ids = []string{"host-8899aabbccddeeff" + MemberTag}
	clk.Advance(5 * time.Minute)
	if st := restart(t, mem, clk, Config{Members: old}).Stats(); st.RebuildFrom != "catalog" {
		t.Fatalf("rebuilt from %q five minutes after a peer of an earlier version was seen", st.RebuildFrom)
	}
	clk.Advance(7 * time.Minute)
	if st := restart(t, mem, clk, Config{Members: old}).Stats(); st.RebuildFrom != "journal" {
		t.Fatalf("rebuilt from %q a window after the last peer of an earlier version", st.RebuildFrom)
	}
}

// failJournal fails every journal row it is given.
type failJournal struct{ store }

func (s failJournal) put(ctx context.Context, cells []cell) ([]error, error) {
	errs, err := s.store.put(ctx, cells)
	if err != nil {
		return nil, err
	}
	if errs == nil {
		errs = make([]error, len(cells))
	}
	for i, c := range cells {
		if c.journal != nil {
			errs[i] = errors.New("injected")
		}
	}
	return errs, nil
}

// TestAKeyIsDurableOnlyWithItsJournalRow: a claim or record whose cell was
// written but whose journal row failed is an error, so that a successor
// rebuilt from the journal can never miss a key whose claim is durable.
func TestAKeyIsDurableOnlyWithItsJournalRow(t *testing.T) {
	mem := newMemStore()
	d := newTest(t, failJournal{mem}, newClock(), Config{}, true)
	if _, _, err := d.Claim(context.Background(), "k", delivery()); err == nil {
		t.Fatal("Claim succeeded though its journal row failed")
	}
}

// TestAConditionalClaimIsJournaled: a claim made by a conditional mutation,
// apart from the batches, still puts its key in a journal row before Claim
// returns.
func TestAConditionalClaimIsJournaled(t *testing.T) {
	mem := newMemStore()
	d := newTest(t, mem, newClock(), Config{Members: sharedView()}, true)
	c := claimNew(t, d, "k")
	defer c.Release()
	want := hashOf(idOf("k").id)
	found := false
	mem.journal(context.Background(), d.jrn.rows(), 0, func(_ bigtable.Timestamp, v []byte) bool {
		decodeJournal(v, func(h hashes) { found = found || h == want })
		return true
	})
	if !found {
		t.Fatal("the conditional claim's key is in no journal row")
	}
}

// blockedJournal holds every read of the journal until release is closed.
type blockedJournal struct {
	store
	release chan struct{}
}

func (s blockedJournal) journal(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(bigtable.Timestamp, []byte) bool) error {
	<-s.release
	return s.store.journal(ctx, rng, since, fn)
}

// TestClaimsWaitForTheJournalInsteadOfReadingTheCatalog: while a rebuild
// reads the journal (a second for 1M keys), a Claim of a new key waits for
// it rather than reading the catalog, so a restart costs no catalog read
// per key.
func TestClaimsWaitForTheJournalInsteadOfReadingTheCatalog(t *testing.T) {
	mem := newMemStore()
	clk := newClock()
	restart(t, mem, clk, Config{}).Close(context.Background())
	clk.Advance(11 * time.Minute)

	s := &countingStore{store: blockedJournal{store: mem, release: make(chan struct{})}}
	d := newTest(t, s, clk, Config{}, false)
	var rebuilt sync.WaitGroup
	rebuilt.Add(1)
	go func() { defer rebuilt.Done(); d.rebuildFilters(context.Background()) }()
	for {
		d.mu.Lock()
		g := d.waitRebuild
		d.mu.Unlock()
		if g != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	claimed := make(chan error, 1)
	go func() {
		c, _, err := d.Claim(context.Background(), "new-key", delivery())
		c.Release()
		claimed <- err
	}()
	select {
	case err := <-claimed:
		t.Fatalf("Claim returned (%v) during the rebuild from the journal, after %d catalog reads", err, s.readRows.Load())
	case <-time.After(50 * time.Millisecond):
	}
	close(s.store.(blockedJournal).release)
	rebuilt.Wait()
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	if n := s.readRows.Load(); n != 0 {
		t.Errorf("%d catalog reads for a new key claimed during the rebuild", n)
	}
}
