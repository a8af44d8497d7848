package dedupe

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/metrics"
)

func TestNewKeysCostNoCatalogIO(t *testing.T) {
	s := &countingStore{store: btStore{bttestClient(t).Open(testTable)}}
	d := newTest(t, s, newClock(), Config{}, true)
	const n = 2000
	commitRange(t, d, 0, n)
	// At most a false positive or two at 0.1%.
	if got := s.readRows.Load(); got > 3 {
		t.Errorf("%d catalog reads for %d new keys", got, n)
	}
	// One state write per key: its claim, which decides it; no record.
	if got, recs := s.claimRows.Load(), s.writeRows.Load(); got != n || recs != 0 {
		t.Errorf("%d claims and %d records written, want %d claims and no record", got, recs, n)
	}
}

func TestCommittedKeyIsADuplicateForTheWindow(t *testing.T) {
	clk := newClock()
	s := &countingStore{store: btStore{bttestClient(t).Open(testTable)}}
	d := newTest(t, s, clk, Config{Window: 10 * time.Minute}, true)
	commitNew(t, d, "a")

	t.Run("at once", func(t *testing.T) {
		if !isDup(t, d, "a") {
			t.Fatal("a key committed just now is new")
		}
	})
	t.Run("at the end of the window", func(t *testing.T) {
		clk.Advance(10*time.Minute - time.Millisecond)
		if !isDup(t, d, "a") {
			t.Fatal("a key committed a window minus 1 ms ago is new")
		}
	})
	t.Run("once the window has passed, though the filters still hold it", func(t *testing.T) {
		clk.Advance(2 * time.Millisecond)
		before := s.readRows.Load()
		if isDup(t, d, "a") {
			t.Fatal("a key committed a window and 1 ms ago is a duplicate")
		}
		if s.readRows.Load() == before {
			t.Fatal("the catalog was not asked: the key left the filters before (N+1)/N windows")
		}
	})
	t.Run("after (N+1)/N windows without a catalog read", func(t *testing.T) {
		clk.Advance(time.Minute + time.Millisecond)
		before := s.readRows.Load()
		if isDup(t, d, "a") {
			t.Fatal("duplicate after the window")
		}
		if got := s.readRows.Load() - before; got != 0 {
			t.Fatalf("%d catalog reads: the expired slice was kept", got)
		}
	})
}

func TestRestartFindsKeysInTheCatalog(t *testing.T) {
	client := bttestClient(t)
	clk := newClock()
	first := newTest(t, btStore{client.Open(testTable)}, clk, Config{}, true)
	commitRange(t, first, 0, 100)
	first.Close(context.Background())
	clk.Advance(3 * time.Minute)

	t.Run("before the rebuild every lookup reads the catalog", func(t *testing.T) {
		s := &countingStore{store: btStore{client.Open(testTable)}}
		d := newTest(t, s, clk, Config{}, false)
		if !isDup(t, d, keyN(7)) {
			t.Error("a committed key is new after a restart")
		}
		if isDup(t, d, "never-seen") {
			t.Error("a new key is a duplicate")
		}
		if got := s.readRows.Load(); got != 2 {
			t.Errorf("%d catalog reads, want 2", got)
		}
	})
	t.Run("after the rebuild the filters answer", func(t *testing.T) {
		s := &countingStore{store: btStore{client.Open(testTable)}}
		d := newTest(t, s, clk, Config{}, false)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- d.Run(ctx) }()
		waitRebuilt(t, d)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		st := d.Stats()
		if st.RebuildKeys != 100 {
			t.Errorf("rebuild found %d keys, want 100", st.RebuildKeys)
		}
		for i := 0; i < 100; i++ {
			if !isDup(t, d, keyN(i)) {
				t.Fatalf("%s is new after the rebuild", keyN(i))
			}
		}
		reads := s.readRows.Load()
		commitRange(t, d, 100, 1100)
		if got := s.readRows.Load() - reads; got > 3 {
			t.Errorf("%d catalog reads for 1000 new keys after the rebuild", got)
		}
	})
	t.Run("the rebuild skips records older than the window", func(t *testing.T) {
		clk.Advance(8 * time.Minute)
		d := newTest(t, btStore{client.Open(testTable)}, clk, Config{}, true)
		if st := d.Stats(); st.RebuildKeys != 1000 {
			t.Errorf("rebuild found %d keys, want the 1000 within the window", st.RebuildKeys)
		}
	})
}

func waitRebuilt(t *testing.T, d *Keys) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !d.Stats().Rebuilt {
		if time.Now().After(deadline) {
			t.Fatal("not rebuilt after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRebuildResumesAfterAFailedScan(t *testing.T) {
	mem := newMemStore()
	clk := newClock()
	first := newTest(t, mem, clk, Config{}, true)
	commitRange(t, first, 0, 50)
	s := &flakyScan{store: mem, failures: 3}
	d := newTest(t, s, clk, Config{}, true)
	if st := d.Stats(); !st.Rebuilt || st.RebuildKeys != 50 {
		t.Fatalf("rebuilt %v with %d keys after failed scans, want 50", st.Rebuilt, st.RebuildKeys)
	}
}

// flakyScan fails its first scans, each after one row.
type flakyScan struct {
	store
	mu       sync.Mutex
	failures int
}

func (s *flakyScan) scan(ctx context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(string, bigtable.Timestamp) bool) error {
	s.mu.Lock()
	fail := s.failures > 0
	s.failures--
	s.mu.Unlock()
	if !fail {
		return s.store.scan(ctx, rng, since, fn)
	}
	s.store.scan(ctx, rng, since, func(row string, at bigtable.Timestamp) bool {
		fn(row, at)
		return false
	})
	return status.Error(codes.Unavailable, "injected")
}

func TestConcurrentClaimsOfOneKey(t *testing.T) {
	ctx := context.Background()
	newD := func(t *testing.T) *Keys {
		return newTest(t, btStore{bttestClient(t).Open(testTable)}, newClock(), Config{}, true)
	}
	// second claims key in the background and reports its outcome.
	second := func(d *Keys, key string) chan error {
		out := make(chan error, 1)
		go func() {
			c, dup, err := d.Claim(ctx, key, delivery())
			switch {
			case err != nil:
				out <- err
			case dup:
				out <- errDupForTest
			default:
				c.Release()
				out <- nil
			}
		}()
		return out
	}
	waiting := func(t *testing.T, out chan error) {
		t.Helper()
		select {
		case err := <-out:
			t.Fatalf("the second Claim returned (%v) while the first held the key", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	t.Run("the second is a duplicate once the first commits", func(t *testing.T) {
		d := newD(t)
		first := claimNew(t, d, "k")
		out := second(d, "k")
		waiting(t, out)
		if err := first.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-out; err != errDupForTest {
			t.Fatalf("second Claim: %v, want a duplicate", err)
		}
	})
	t.Run("a rival is a duplicate once the first releases: the first's claim decided the key", func(t *testing.T) {
		d := newD(t)
		first := claimNew(t, d, "k")
		out := second(d, "k")
		waiting(t, out)
		first.Release()
		if err := <-out; err != errDupForTest {
			t.Fatalf("second Claim: %v, want a duplicate", err)
		}
	})
	t.Run("a redelivery of the first's message resumes once the first releases", func(t *testing.T) {
		d := newD(t)
		const msg = "m-first"
		first, dup, err := d.Claim(ctx, "k", msg)
		if err != nil || dup || first.Resumed() {
			t.Fatalf("first Claim = dup %v, resumed %v, %v; want a new claim", dup, first.Resumed(), err)
		}
		out := make(chan Claim, 1)
		go func() {
			c, dup, err := d.Claim(ctx, "k", msg)
			if err != nil || dup {
				t.Errorf("the redelivery's Claim = dup %v, %v; want the key", dup, err)
			}
			out <- c
		}()
		select {
		case <-out:
			t.Fatal("the redelivery's Claim returned while the first held the key")
		case <-time.After(50 * time.Millisecond):
		}
		first.Release()
		if c := <-out; !c.Held() || !c.Resumed() {
			t.Fatalf("the redelivery holds %v, resumed %v; want it to resume the first's claim", c.Held(), c.Resumed())
		}
	})
	t.Run("a waiting claim gives up when its context ends", func(t *testing.T) {
		d := newD(t)
		first := claimNew(t, d, "k")
		defer first.Release()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, _, err := d.Claim(cctx, "k", delivery())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Claim = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("of many concurrent claims one commits and the rest are duplicates", func(t *testing.T) {
		d := newD(t)
		const n = 50
		var wg sync.WaitGroup
		var mu sync.Mutex
		commits, dups := 0, 0
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, dup, err := d.Claim(ctx, "k", delivery())
				if err != nil {
					t.Error(err)
					return
				}
				if dup {
					mu.Lock()
					dups++
					mu.Unlock()
					return
				}
				time.Sleep(time.Millisecond) // the row write
				if err := c.Commit(ctx); err != nil {
					t.Error(err)
				}
				mu.Lock()
				commits++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if commits != 1 || dups != n-1 {
			t.Fatalf("%d commits and %d duplicates of %d claims, want 1 and %d", commits, dups, n, n-1)
		}
	})
}

var errDupForTest = errors.New("duplicate")

func TestCatalogErrorsAreReturnedAsTheyAre(t *testing.T) {
	ctx := context.Background()
	unavailable := status.Error(codes.Unavailable, "injected: tablet server unavailable")

	t.Run("a failed read returns the error and does not hold the key", func(t *testing.T) {
		s := &countingStore{store: newMemStore()}
		d := newTest(t, s, newClock(), Config{}, false) // untrusted filters: every Claim reads
		s.failReads(unavailable)
		_, _, err := d.Claim(ctx, "k", delivery())
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Claim = %v, want Unavailable", err)
		}
		s.failReads(nil)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, dup, err := d.Claim(cctx, "k", delivery())
		if err != nil || dup {
			t.Fatalf("Claim after the failure = dup %v, %v; want the key", dup, err)
		}
		c.Release()
	})
	t.Run("after a failed claim write the next Claim asks the catalog: the claim may have landed", func(t *testing.T) {
		s := &countingStore{store: newMemStore()}
		d := newTest(t, s, newClock(), Config{}, true)
		s.failWrites(unavailable)
		if _, _, err := d.Claim(ctx, "k", "m1"); status.Code(err) != codes.Unavailable {
			t.Fatalf("Claim = %v, want Unavailable", err)
		}
		s.failWrites(nil)
		reads := s.readRows.Load()
		c, _, err := d.Claim(ctx, "k", "m2")
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		if s.readRows.Load() == reads {
			t.Fatal("the key of a failed claim write was answered by the filters without a catalog read")
		}
	})
	t.Run("a failed record keeps the key held until Commit succeeds", func(t *testing.T) {
		s := &countingStore{store: newMemStore()}
		d := newTest(t, s, newClock(), Config{}, true)
		c := claimOnceNew(t, d, "k", "m1")
		s.failWrites(unavailable)
		if err := c.Commit(ctx); status.Code(err) != codes.Unavailable {
			t.Fatalf("Commit = %v, want Unavailable", err)
		}
		// A second delivery waits: with the record missing, answering it
		// would let a duplicate through.
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, _, err := d.Claim(wctx, "k", delivery())
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Claim of a held key = %v, want it to wait (deadline exceeded)", err)
		}
		s.failWrites(nil)
		if err := c.Commit(ctx); err != nil {
			t.Fatalf("Commit again: %v", err)
		}
		if !isDup(t, d, "k") {
			t.Fatal("a key committed on the second try is new")
		}
	})
	t.Run("Release after a failed record lets the message's redelivery take the key again", func(t *testing.T) {
		s := &countingStore{store: newMemStore()}
		d := newTest(t, s, newClock(), Config{}, true)
		c := claimOnceNew(t, d, "k", "m1")
		s.failWrites(unavailable)
		c.Commit(ctx)
		c.Release()
		s.failWrites(nil)
		reads := s.readRows.Load()
		again, dup, err := d.ClaimOnce(ctx, "k", "m1")
		if err != nil || dup || !again.Held() {
			t.Fatalf("the redelivery's ClaimOnce = held %v, dup %v, %v; want the key (no record)", again.Held(), dup, err)
		}
		again.Release()
		if s.readRows.Load() == reads {
			t.Fatal("the failed key was answered by the filters without a catalog read")
		}
	})
}

func TestLongKeysAreDigested(t *testing.T) {
	client := bttestClient(t)
	d := newTest(t, btStore{client.Open(testTable)}, newClock(), Config{}, true)
	long := strings.Repeat("x", 5000)
	commitNew(t, d, long)
	if !isDup(t, d, long) {
		t.Fatal("a committed long key is new")
	}
	if isDup(t, d, long[:4999]+"y") {
		t.Fatal("another long key is a duplicate")
	}
	var rows []string
	client.Open(testTable).ReadRows(context.Background(), bigtable.PrefixRange("dedupe#orders#"), func(r bigtable.Row) bool {
		if !strings.HasPrefix(r.Key(), "dedupe#orders#~") { // the journal's
			rows = append(rows, r.Key())
		}
		return true
	})
	if len(rows) != 1 || len(rows[0]) > 100 || rows[0][len("dedupe#orders#")+2] != '=' {
		t.Fatalf("rows %q, want one digested row key", rows)
	}
}

func TestRowKeysSpreadOverBuckets(t *testing.T) {
	cat := newCatalog("orders")
	counts := map[string]int{}
	const n = 256 * 100
	for i := 0; i < n; i++ {
		id := idOf(keyN(i)) // sequential keys, as message IDs are
		row := cat.row(id, hashOf(id.id))
		if !strings.HasPrefix(row, "dedupe#orders#") {
			t.Fatalf("row %q", row)
		}
		got, ok := cat.parse(row)
		if !ok || got != keyN(i) {
			t.Fatalf("parse(%q) = %q, %v", row, got, ok)
		}
		counts[row[len("dedupe#orders#"):][:2]]++
	}
	if len(counts) != buckets {
		t.Fatalf("%d buckets used, want %d", len(counts), buckets)
	}
	for b, c := range counts {
		if c < 50 || c > 150 {
			t.Errorf("bucket %s has %d of %d keys: uneven", b, c, n)
		}
	}
	// The rebuild's ranges cover every bucket, once.
	rs := cat.ranges(rebuildScans)
	for b := range counts {
		row := "dedupe#orders#" + b + "#x"
		in := 0
		for _, r := range rs {
			if bigtable.NewRange(r.start, r.end).Contains(row) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("row %s is in %d ranges", row, in)
		}
	}
	if bigtable.NewRange(rs[len(rs)-1].start, rs[len(rs)-1].end).Contains("dedupe#orders-eu#00#x") {
		t.Error("the last range reaches into another pipeline's rows")
	}
}

func TestCloseFlushesAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	s := &countingStore{store: newMemStore()}
	d := newTest(t, s, newClock(), Config{}, true)
	c := claimNew(t, d, "k")
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := d.Claim(ctx, "k", delivery()); err == nil {
		t.Error("Claim of a key needing a read succeeded after Close")
	}
}

// TestReleaseIsSafeAtAnyTime: a caller releases with one defer, so Release
// after Commit, a second Release, and a Release after the key passed to
// another claim must all leave the key's state alone.
func TestReleaseIsSafeAtAnyTime(t *testing.T) {
	ctx := context.Background()
	newD := func(t *testing.T) *Keys {
		return newTest(t, btStore{bttestClient(t).Open(testTable)}, newClock(), Config{}, true)
	}
	t.Run("after Commit the key stays committed", func(t *testing.T) {
		d := newD(t)
		c := claimNew(t, d, "k")
		if err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		c.Release()
		c.Release()
		if _, dup, err := d.Claim(ctx, "k", delivery()); err != nil || !dup {
			t.Fatalf("Claim after Commit and two Releases = dup %v, %v; want a duplicate", dup, err)
		}
	})
	t.Run("a second Release does not free another claim's hold", func(t *testing.T) {
		d := newD(t)
		first, _, err := d.Claim(ctx, "k", "m1")
		if err != nil {
			t.Fatal(err)
		}
		first.Release()
		second, _, err := d.Claim(ctx, "k", "m1") // the message's redelivery: the key passed on
		if err != nil || !second.Held() {
			t.Fatalf("the redelivery's Claim = held %v, %v", second.Held(), err)
		}
		first.Release() // stale: must not end second's hold
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		if _, _, err := d.Claim(cctx, "k", delivery()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("third Claim = %v; want it to wait for the second's hold", err)
		}
		if err := first.Commit(ctx); err == nil {
			t.Fatal("Commit of a released claim succeeded")
		}
		if err := second.Commit(ctx); err != nil {
			t.Fatalf("the second claim's Commit: %v", err)
		}
	})
	t.Run("the zero Claim holds nothing", func(t *testing.T) {
		var c Claim
		c.Release()
		if c.Held() || c.Commit(ctx) == nil {
			t.Fatal("the zero Claim holds a key or commits")
		}
	})
}

// TestClaimOfANewKeyAllocatesOnlyItsCatalogWrites: the claim of a new key
// and its commit cost one batched catalog write (the claim cell; Commit
// writes nothing); everything Keys does around it (hashing, the filters,
// the hold) allocates nothing but the key's row name.
func TestClaimOfANewKeyAllocatesOnlyItsCatalogWrites(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	d := newTest(t, nopStore{}, newClock(), Config{}, true)
	ctx := context.Background()
	const runs = 1000
	keys := make([]string, runs+2) // AllocsPerRun runs once more to warm up
	for i := range keys {
		keys[i] = keyN(i)
	}
	winner, row := "m", d.cat.row(idOf(keys[0]), hashOf(keys[0]))
	at := bigtable.Time(time.Now()).TruncateToMilliseconds()
	writes := testing.AllocsPerRun(runs, func() {
		d.writes.Add(ctx, cell{row: row, winner: winner, at: at}, len(row))
	})
	i := 0
	claims := testing.AllocsPerRun(runs, func() {
		i++
		c, dup, err := d.Claim(ctx, keys[i], winner)
		if err != nil || dup {
			t.Fatalf("Claim(%s) = %v, %v", keys[i], dup, err)
		}
		c.Commit(ctx)
	})
	if claims > writes+1 {
		t.Fatalf("Claim+Commit of a new key: %v allocations; its two batched writes alone take %v, the row name 1", claims, writes)
	}
	t.Logf("Claim+Commit: %v allocations; the two batched writes: %v", claims, writes)
}

func TestStatsAndGaugesReportTheFilters(t *testing.T) {
	m := metrics.New().Pipeline("orders")
	clk := newClock()
	d := newTest(t, newMemStore(), clk, Config{Metrics: m}, true)
	commitRange(t, d, 0, 500)
	d.refresh()
	st := d.Stats()
	if !st.Rebuilt || st.Slices != 11 || st.Keys != 500 || st.FillRatio <= 0 || st.EstimatedFalsePositiveRate <= 0 ||
		st.EstimatedFalsePositiveRate > st.TargetFalsePositiveRate || st.KeysInFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
	if metrics.Value(m.FilterFill) != st.FillRatio || metrics.Value(m.FilterFPRate) != st.EstimatedFalsePositiveRate {
		t.Errorf("gauges %v %v, stats %v %v", metrics.Value(m.FilterFill), metrics.Value(m.FilterFPRate), st.FillRatio, st.EstimatedFalsePositiveRate)
	}
	clk.Advance(11 * time.Minute)
	d.refresh()
	if st := d.Stats(); st.Keys != 0 || st.Slices != 11 {
		t.Errorf("after the window: %+v", st)
	}
}

// TestStatsServeTheFiguresOfTheLastRefresh: /status reads Stats at every
// request; counting the filters' bits is left to the periodic refresh, so
// that a request never holds the lock Claims take for that long.
func TestStatsServeTheFiguresOfTheLastRefresh(t *testing.T) {
	clk := newClock()
	d := newTest(t, newMemStore(), clk, Config{Metrics: metrics.New().Pipeline("orders")}, true)
	commitRange(t, d, 0, 500)
	d.refresh()
	commitRange(t, d, 500, 600)
	if st := d.Stats(); st.Keys != 500 {
		t.Fatalf("Stats counted %d keys between refreshes, want the refresh's 500", st.Keys)
	}
	d.refresh()
	if st := d.Stats(); st.Keys != 600 {
		t.Fatalf("after a refresh %d keys, want 600", st.Keys)
	}
}
