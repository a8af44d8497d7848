package dedupe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// emulatorClient starts the real Bigtable emulator with a state table and
// returns a data client on it.
func emulatorClient(t testing.TB) *bigtable.Client {
	t.Helper()
	emu := emulator.RequireBigtable(t)
	client, admin, err := emu.Clients(context.Background(), "dedupe-test", "state")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	defer admin.Close()
	if err := fake.CreateStateTable(context.Background(), admin, testTable, time.Hour); err != nil {
		t.Fatal(err)
	}
	return client
}

// TestCatalogOnTheBigtableEmulator runs the catalog's reads, writes and
// scans against the real emulator, with a fake clock for the window.
func TestCatalogOnTheBigtableEmulator(t *testing.T) {
	client := emulatorClient(t)
	clk := newClock()
	s := &countingStore{store: btStore{client.Open(testTable)}}
	d := newTest(t, s, clk, Config{}, true)
	if err := d.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	commitRange(t, d, 0, 500)
	long := strings.Repeat("k", 3000)
	commitNew(t, d, long)

	t.Run("a committed key is a duplicate within the window", func(t *testing.T) {
		clk.Advance(9 * time.Minute)
		for _, k := range []string{keyN(0), keyN(499), long} {
			if !isDup(t, d, k) {
				t.Errorf("%.20s is new", k)
			}
		}
	})
	t.Run("a restart finds the keys before and after its rebuild", func(t *testing.T) {
		s2 := &countingStore{store: btStore{client.Open(testTable)}}
		d2 := newTest(t, s2, clk, Config{}, false)
		if !isDup(t, d2, keyN(42)) || s2.readRows.Load() != 1 {
			t.Fatalf("before the rebuild: not a duplicate, or %d reads", s2.readRows.Load())
		}
		d2.rebuildFilters(context.Background())
		if st := d2.Stats(); !st.Rebuilt || st.RebuildKeys != 501 {
			t.Fatalf("rebuild: %+v", st)
		}
		if !isDup(t, d2, keyN(43)) || !isDup(t, d2, long) {
			t.Fatal("a committed key is new after the rebuild")
		}
	})
	t.Run("after the window the key is new again", func(t *testing.T) {
		clk.Advance(time.Minute + time.Millisecond)
		for _, k := range []string{keyN(0), long} {
			if isDup(t, d, k) {
				t.Errorf("%.20s is a duplicate after the window", k)
			}
		}
		d3 := newTest(t, btStore{client.Open(testTable)}, clk, Config{}, true)
		if st := d3.Stats(); st.RebuildKeys != 0 {
			t.Errorf("a rebuild after the window found %d keys", st.RebuildKeys)
		}
	})
	t.Run("Check fails when the table is missing", func(t *testing.T) {
		d := newTest(t, btStore{client.Open("missing")}, clk, Config{}, false)
		if err := d.Check(context.Background()); err == nil {
			t.Fatal("Check of a missing table succeeded")
		}
	})
	t.Run("the catalog's rows are spread over buckets", func(t *testing.T) {
		seen := map[string]bool{}
		err := client.Open(testTable).ReadRows(context.Background(), bigtable.PrefixRange("dedupe#orders#"), func(r bigtable.Row) bool {
			seen[r.Key()[len("dedupe#orders#"):][:2]] = true
			return true
		}, bigtable.RowFilter(bigtable.StripValueFilter()))
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) < 200 {
			t.Errorf("501 keys in %d buckets", len(seen))
		}
	})
}

// BenchmarkRebuild measures the start-up rebuild of the filters from 1M
// keys committed within the window, on the Bigtable emulator: from the
// journal (the catalog written as Commit writes it, in batches of 1,000
// cells with their journal rows, and a marker older than the window), and
// from a full scan of the same catalog. Writing it is not timed.
func BenchmarkRebuild(b *testing.B) {
	const n = 1_000_000
	client := emulatorClient(b)
	clk := newClock()
	tbl := client.Open(testTable)
	// The writer's flushWrites makes the batches as in production: each
	// key's record cell, and one journal row per batch.
	w := newKeys(btStore{tbl}, zap.NewNop(), Config{Pipeline: "orders", Table: testTable, Now: clk.Now, Metrics: metrics.New().Pipeline("orders")})
	at := bigtable.Time(clk.Now().Add(-5 * time.Minute)).TruncateToMilliseconds()
	var wg sync.WaitGroup
	var next atomic.Int64
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(1000)) - 1000
				if from >= n {
					return
				}
				cells := make([]cell, 0, 1000)
				for i := from; i < min(from+1000, n); i++ {
					id := idOf(fmt.Sprintf("order-%012d", i))
					h := hashOf(id.id)
					cells = append(cells, cell{row: w.cat.row(id, h), at: at, h: h})
				}
				for _, err := range w.flushWrites(context.Background(), cells) {
					if err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	if err := (btStore{tbl}).writeSince(context.Background(), w.jrn.marker, clk.Now().Add(-time.Hour), at); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %d catalog rows and their journal in %v", n, time.Since(start).Round(time.Millisecond))
	for _, from := range []string{"journal", "catalog"} {
		b.Run(from, func(b *testing.B) {
			for b.Loop() {
				d := newKeys(btStore{tbl}, zap.NewNop(), Config{Pipeline: "orders", Table: testTable, Now: clk.Now,
					Metrics: metrics.New().Pipeline("orders"), NoJournal: from == "catalog"})
				cpu := processCPU()
				d.rebuildFilters(context.Background())
				b.ReportMetric((processCPU() - cpu).Seconds(), "client-cpu-s")
				st := d.Stats()
				if !st.Rebuilt || st.RebuildFrom != from || st.RebuildKeys != n {
					b.Fatalf("rebuilt %v from %s with %d keys", st.Rebuilt, st.RebuildFrom, st.RebuildKeys)
				}
				b.ReportMetric(st.RebuildSeconds, "rebuild-s")
				b.ReportMetric(float64(st.FilterBytes)/(1<<20), "filter-MiB")
				d.Close(context.Background())
			}
		})
	}
}

// processCPU is the CPU time this process has used: a rebuild's share of
// the work, the rest being the emulator's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClaimCommitOnTheEmulator is Check+Commit with the catalog writes
// going to the Bigtable emulator, from 500 goroutines per CPU (1,000 here,
// as many as a pipeline's default flow control holds): the full cost of a
// new key including its batched claim and record. client-cpu-µs/op is this
// process's CPU per key, the emulator's apart; keys/s is how many keys the
// emulator decides a second. alone is a process alone (claims in batches);
// shared is one of several (a conditional claim per key, each a unary
// CheckAndMutateRow, on the warm pool as a pipeline makes them): keys/s is
// then the emulator's bound on a shared pipeline's throughput. rerun is a
// reprocess run's claim (Rerun): alone's, after a batched read of the live
// catalog's claim and ruling rows of the key (which name nothing here: the
// read costs the same), so rerun/alone is what keeping the live winner
// costs a run.
func BenchmarkClaimCommitOnTheEmulator(b *testing.B) {
	client := emulatorClient(b)
	for _, mode := range []struct {
		name    string
		members Membership
	}{{"alone", nil}, {"shared", sharedView()}, {"rerun", nil}} {
		b.Run(mode.name, func(b *testing.B) {
			var d interface {
				Claim(context.Context, string, string) (Claim, bool, error)
			} = newTest(b, btStore{client.Open(testTable)}, newClock(), Config{Members: mode.members}, true)
			if mode.name == "rerun" {
				clk := newClock()
				r := newRerun(btStore{client.Open(testTable)}, zap.NewNop(), Config{Pipeline: "orders~r1", Table: testTable, Now: clk.Now, Metrics: metrics.New().Pipeline("orders~r1")}, "orders")
				r.rebuildFilters(context.Background())
				b.Cleanup(func() { r.Close(context.Background()) })
				d = r
			}
			keys := benchKeys(1 << 20)
			salt := fmt.Sprint(time.Now().UnixNano()) // every run's keys new to the table
			for i := range keys {
				keys[i] = salt + keys[i]
			}
			ctx := context.Background()
			b.SetParallelism(500)
			b.ReportAllocs()
			b.ResetTimer()
			cpu, start := processCPU(), time.Now()
			defer func() {
				b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "client-cpu-µs/op")
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "keys/s")
			}()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c, dup, err := d.Claim(ctx, keys[int(next.Add(1))&(len(keys)-1)], delivery())
					if err != nil {
						b.Error(err)
						return
					}
					if dup {
						continue
					}
					if err := c.Commit(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
