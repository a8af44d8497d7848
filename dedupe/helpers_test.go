package dedupe

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/metrics"
)

const testTable = "state"

// clock is a fake processing-time clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock {
	// Near the real time, so that bttest's view of timestamps is sane.
	return &clock{now: time.Now().Truncate(time.Hour)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// bttestClient starts an in-memory Bigtable (bttest) with the state table
// and returns a data client on it.
func bttestClient(t testing.TB) *bigtable.Client {
	return fake.StateTableFor(t, testTable, time.Hour)
}

// deliveries numbers the message IDs of test deliveries.
var deliveries atomic.Int64

// delivery returns a new message ID: each call is another delivery.
func delivery() string { return fmt.Sprintf("m%d", deliveries.Add(1)) }

// countingStore counts the catalog I/O of a store and injects failures.
// Claims are counted apart from records (writes).
type countingStore struct {
	store
	readRows, writeRows, reads, writes, claimRows atomic.Int64
	journalRows                                   atomic.Int64
	readErr, writeErr                             atomic.Pointer[error]
}

func (s *countingStore) read(ctx context.Context, rows []string, since bigtable.Timestamp) ([]rowState, error) {
	s.reads.Add(1)
	s.readRows.Add(int64(len(rows)))
	if err := s.readErr.Load(); err != nil {
		return nil, *err
	}
	return s.store.read(ctx, rows, since)
}

// put counts its claims in claimRows, its records in writeRows, its
// journal rows in journalRows, and each call in writes.
func (s *countingStore) put(ctx context.Context, cells []cell) ([]error, error) {
	s.writes.Add(1)
	for _, c := range cells {
		switch {
		case c.journal != nil:
			s.journalRows.Add(1)
		case c.winner != "":
			s.claimRows.Add(1)
		default:
			s.writeRows.Add(1)
		}
	}
	if err := s.writeErr.Load(); err != nil {
		return nil, *err
	}
	return s.store.put(ctx, cells)
}

func (s *countingStore) failReads(err error) {
	if err == nil {
		s.readErr.Store(nil)
		return
	}
	s.readErr.Store(&err)
}

func (s *countingStore) failWrites(err error) {
	if err == nil {
		s.writeErr.Store(nil)
		return
	}
	s.writeErr.Store(&err)
}

// memStore is a catalog in a map, for benchmarks that measure the
// in-memory path without RPCs.
type memStore struct {
	mu     sync.Mutex
	rows   map[string]bigtable.Timestamp            // row → latest record
	claims map[string]map[string]bigtable.Timestamp // row → winner → latest claim
	// jrows holds the journal rows, marks the marker's versions.
	jrows map[string]cell
	marks []time.Time
	// rulings holds the ruling rows: row → winners named.
	rulings map[string][]string
}

func newMemStore() *memStore {
	return &memStore{rows: map[string]bigtable.Timestamp{}, claims: map[string]map[string]bigtable.Timestamp{}, jrows: map[string]cell{}}
}

func (s *memStore) stateLocked(row string, since bigtable.Timestamp) rowState {
	var st rowState
	at, ok := s.rows[row]
	st.recorded = ok && at >= since
	for _, w := range slices.Sorted(maps.Keys(s.claims[row])) {
		if s.claims[row][w] >= since {
			st.claimants = append(st.claimants, w)
		}
	}
	return st
}

func (s *memStore) read(_ context.Context, rows []string, since bigtable.Timestamp) ([]rowState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]rowState, len(rows))
	for i, r := range rows {
		out[i] = s.stateLocked(r, since)
	}
	return out, nil
}

func (s *memStore) put(_ context.Context, cells []cell) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cells {
		switch {
		case c.journal != nil:
			s.jrows[c.row] = c
		case c.winner != "":
			s.setClaimLocked(c.row, c.winner, c.at)
		default:
			s.rows[c.row] = max(s.rows[c.row], c.at)
		}
	}
	return nil, nil
}

func (s *memStore) setClaimLocked(row, winner string, at bigtable.Timestamp) {
	if s.claims[row] == nil {
		s.claims[row] = map[string]bigtable.Timestamp{}
	}
	s.claims[row][winner] = max(s.claims[row][winner], at)
}

func (s *memStore) claimIf(_ context.Context, row, winner string, at, since bigtable.Timestamp) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stateLocked(row, since); st.recorded || len(st.claimants) > 0 {
		return true, nil
	}
	s.setClaimLocked(row, winner, at)
	return false, nil
}

func (s *memStore) unclaim(_ context.Context, row, winner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims[row], winner)
	return nil
}

func (s *memStore) scan(_ context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(string, bigtable.Timestamp) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	latest := maps.Clone(s.rows) // a row's latest record or claim
	for r, ws := range s.claims {
		for _, at := range ws {
			latest[r] = max(latest[r], at)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(latest)) { // in row order, as Bigtable
		if at := latest[r]; rng.Contains(r) && at >= since && !fn(r, at) {
			return nil
		}
	}
	return nil
}

func (s *memStore) journal(_ context.Context, rng bigtable.RowRange, since bigtable.Timestamp, fn func(bigtable.Timestamp, []byte) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range slices.Sorted(maps.Keys(s.jrows)) {
		if c := s.jrows[r]; rng.Contains(r) && c.at >= since && !fn(c.at, c.journal) {
			return nil
		}
	}
	return nil
}

func (s *memStore) readSince(context.Context, string) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.marks) == 0 {
		return time.Time{}, false, nil
	}
	return slices.MaxFunc(s.marks, time.Time.Compare), true, nil
}

func (s *memStore) writeSince(_ context.Context, _ string, since time.Time, _ bigtable.Timestamp) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks = append(s.marks, since.Truncate(time.Millisecond))
	return nil
}

func (s *memStore) check(context.Context) error { return nil }

func (s *memStore) rule(_ context.Context, rs []ruling) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rulings == nil {
		s.rulings = map[string][]string{}
	}
	for _, r := range rs {
		if !slices.Contains(s.rulings[r.row], r.winner) {
			s.rulings[r.row] = append(s.rulings[r.row], r.winner)
		}
	}
	return nil, nil
}

func (s *memStore) winners(_ context.Context, rows []string) ([][]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = append(slices.Sorted(maps.Keys(s.claims[r])), s.rulings[r]...)
	}
	return out, nil
}

// nopStore answers "not recorded" and records nothing.
type nopStore struct{}

func (nopStore) read(_ context.Context, rows []string, _ bigtable.Timestamp) ([]rowState, error) {
	return make([]rowState, len(rows)), nil
}
func (nopStore) put(context.Context, []cell) ([]error, error) { return nil, nil }
func (nopStore) claimIf(context.Context, string, string, bigtable.Timestamp, bigtable.Timestamp) (bool, error) {
	return false, nil
}
func (nopStore) unclaim(context.Context, string, string) error { return nil }
func (nopStore) scan(context.Context, bigtable.RowRange, bigtable.Timestamp, func(string, bigtable.Timestamp) bool) error {
	return nil
}
func (nopStore) journal(context.Context, bigtable.RowRange, bigtable.Timestamp, func(bigtable.Timestamp, []byte) bool) error {
	return nil
}
func (nopStore) readSince(context.Context, string) (time.Time, bool, error) {
	return time.Time{}, false, nil
}
func (nopStore) writeSince(context.Context, string, time.Time, bigtable.Timestamp) error { return nil }
func (nopStore) check(context.Context) error                                             { return nil }
func (nopStore) rule(context.Context, []ruling) ([]error, error)                         { return nil, nil }
func (nopStore) winners(_ context.Context, rows []string) ([][]string, error) {
	return make([][]string, len(rows)), nil
}

// newTest returns Keys on s with a fake clock, closed at the end of the
// test. Its filters are trusted from the start unless rebuild is false.
func newTest(t testing.TB, s store, clk *clock, cfg Config, trusted bool) *Keys {
	t.Helper()
	if cfg.Pipeline == "" {
		cfg.Pipeline = "orders"
	}
	cfg.Table = testTable
	cfg.Now = clk.Now
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New().Pipeline(cfg.Pipeline)
	}
	d := newKeys(s, zap.NewNop(), cfg)
	t.Cleanup(func() { d.Close(context.Background()) })
	if trusted {
		d.rebuildFilters(context.Background())
	}
	return d
}

// claimNew claims key and fails unless it is new.
func claimNew(t testing.TB, d *Keys, key string) Claim {
	t.Helper()
	c, dup, err := d.Claim(context.Background(), key, delivery())
	if err != nil || dup {
		t.Fatalf("Claim(%q) = dup %v, err %v; want a new key", key, dup, err)
	}
	return c
}

// claimOnceNew claims key with ClaimOnce for message msg; key must be new.
func claimOnceNew(t testing.TB, d *Keys, key, msg string) Claim {
	t.Helper()
	c, dup, err := d.ClaimOnce(context.Background(), key, msg)
	if err != nil || dup || c.Resumed() {
		t.Fatalf("ClaimOnce(%q) = dup %v, resumed %v, err %v; want a new key", key, dup, c.Resumed(), err)
	}
	return c
}

// commitNew claims and commits key, which must be new.
func commitNew(t testing.TB, d *Keys, key string) {
	t.Helper()
	if err := claimNew(t, d, key).Commit(context.Background()); err != nil {
		t.Fatalf("Commit(%q): %v", key, err)
	}
}

// commitRange claims and commits keyN(i) for i in [from, to), all new, from
// 64 goroutines at once as a pipeline does (each Commit waits for a batch).
func commitRange(t testing.TB, d *Keys, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	next.Store(int64(from))
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
				c, dup, err := d.Claim(context.Background(), keyN(i), delivery())
				if err != nil || dup {
					t.Errorf("Claim(%q) = dup %v, err %v; want a new key", keyN(i), dup, err)
					return
				}
				if err := c.Commit(context.Background()); err != nil {
					t.Errorf("Commit(%q): %v", keyN(i), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// isDup claims key and reports whether it is a duplicate; a new key is
// released again.
// isDup reports whether a new delivery of key would be a duplicate, with
// Resume: it writes nothing, so the key stays new for the next look.
func isDup(t testing.TB, d *Keys, key string) bool {
	t.Helper()
	c, dup, err := d.Resume(context.Background(), key, delivery())
	if err != nil {
		t.Fatalf("Resume(%q): %v", key, err)
	}
	if c.Held() {
		t.Fatalf("Resume(%q) of a new delivery holds the key", key)
	}
	return dup
}

func keyN(i int) string { return fmt.Sprintf("order-%08d", i) }
