package dedupe

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// benchKeys are distinct keys shaped like order IDs, made before timing.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%012d", i)
	}
	return keys
}

// fillRing puts the expected number of keys into every slice of d's ring
// but the current one, which gets half: the ring of a pipeline running at
// its expected rate, halfway through a slice.
func fillRing(d *Keys) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.ring
	r.advance(d.now().UnixNano())
	for s := int64(0); s < int64(len(r.slots)); s++ {
		n := r.expected
		if s == 0 {
			n /= 2
		}
		for i := uint(0); i < n; i++ {
			r.add(hashOf(fmt.Sprintf("filled-%d-%d", s, i)), d.now().UnixNano()-s*r.width)
		}
	}
}

// BenchmarkClaimNew is the path of a new key, one at a time: Claim (hash,
// probe the eleven filters of a ring at its expected load, hold the key,
// and write its claim through the batcher into a store that does no I/O)
// and Release (which deletes the claim in the background). The keys are
// ones the filters answer "not present" for: the 0.1% that are false
// positives wait for a catalog read (2 ms of batching, no CPU). Alone, each
// Claim is a batch of its own; BenchmarkClaimCommit shows the batches a
// loaded pipeline makes.
func BenchmarkClaimNew(b *testing.B) {
	d := newTest(b, nopStore{}, newClock(), Config{}, true)
	fillRing(d)
	keys := benchKeys(1<<16 + 1<<10)
	d.mu.Lock()
	keys = slices.DeleteFunc(keys, func(k string) bool { return d.ring.test(hashOf(k)) })[:1<<16]
	d.mu.Unlock()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, dup, err := d.Claim(ctx, keys[i&(len(keys)-1)], "m")
		if err != nil || dup {
			b.Fatal(dup, err)
		}
		c.Release()
	}
}

// BenchmarkClaimCommit is Check+Commit of new keys: Claim, then Commit
// through the write batcher into a store that does no I/O, from many
// goroutines at once as the pipeline's handlers do (a Commit waits for its
// batch). allocs/op includes the batcher's and the flush's (row keys),
// amortized over a batch.
func BenchmarkClaimCommit(b *testing.B) {
	saved := writeBatch
	defer func() { writeBatch = saved }()
	for _, delay := range []time.Duration{0, 2 * time.Millisecond} {
		b.Run(fmt.Sprintf("max_delay=%v", delay), func(b *testing.B) {
			writeBatch.MaxDelay = delay
			d := newTest(b, nopStore{}, newClock(), Config{}, true)
			fillRing(d)
			keys := benchKeys(1 << 20)
			ctx := context.Background()
			b.SetParallelism(128) // 256 handlers on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := keys[int(next.Add(1))&(len(keys)-1)]
					c, dup, err := d.Claim(ctx, key, delivery())
					if err != nil {
						b.Error(err)
						return
					}
					if dup { // a key reused after 1M ops
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

// BenchmarkProbe compares a lookup in eleven filters: the bit locations
// computed once (as Claim does) against the library's Test on each filter,
// which hashes the key again for each.
func BenchmarkProbe(b *testing.B) {
	r := newRing(int64(time.Minute), DefaultSlices, DefaultFalsePositiveRate, 60_000)
	now := time.Now().UnixNano()
	r.advance(now)
	var filters []*bloom.BloomFilter
	for s := range r.slots {
		for i := 0; i < 30_000; i++ {
			key := fmt.Sprintf("filled-%d-%d", s, i)
			r.add(hashOf(key), now-int64(s)*r.width)
		}
		// The same sizing, filled through the library's own hashing.
		f := bloom.NewWithEstimates(60_000, r.filterP(0))
		for i := 0; i < 30_000; i++ {
			f.AddString(fmt.Sprintf("filled-%d-%d", s, i))
		}
		filters = append(filters, f)
	}
	keys := benchKeys(1 << 16)
	b.Run("locations_once", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if r.test(hashOf(keys[i&(len(keys)-1)])) {
				b.StopTimer() // a false positive: rare
				b.StartTimer()
			}
		}
	})
	b.Run("library_Test_per_filter", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			key := keys[i&(len(keys)-1)]
			for _, f := range filters {
				if f.TestString(key) {
					break
				}
			}
		}
	})
}

// BenchmarkBitsPerKey reports the memory of the filters per key held and
// the false-positive rate of a lookup, at the default settings, for a ring
// whose every slice took 1×, 2× and 10× the keys it was sized for at once
// (chained filters), against the theoretical minimum of one filter at the
// target rate: −ln p / (ln 2)² ≈ 14.4 bits at 0.1%.
func BenchmarkBitsPerKey(b *testing.B) {
	const p = DefaultFalsePositiveRate
	const perSlice = 60_000 // the default rate × one slice of the default window
	for _, over := range []int{1, 2, 10} {
		b.Run(fmt.Sprintf("load=%dx", over), func(b *testing.B) {
			var st ringStats
			var fp float64
			for i := 0; i < b.N; i++ {
				r := newRing(int64(time.Minute), DefaultSlices, p, perSlice)
				now := time.Now().UnixNano()
				r.advance(now)
				for s := int64(0); s < int64(len(r.slots)); s++ {
					for j := 0; j < perSlice*over; j++ {
						r.add(hashOf(fmt.Sprintf("k-%d-%d", s, j)), now-s*r.width)
					}
				}
				st = r.stats()
				fp = probeFP(r, 200_000)
			}
			b.ReportMetric(float64(st.bits)/float64(st.keys), "bits/key")
			b.ReportMetric(-math.Log(p)/(math.Ln2*math.Ln2), "min-bits/key")
			b.ReportMetric(fp, "fp-measured")
			b.ReportMetric(st.fpRate, "fp-estimated")
		})
	}
}

// TestCatalogReadsPerThousandNewKeys simulates 20 minutes of new keys at
// the default settings, one every 1/rate seconds, each looked up and then
// added as Claim and Commit do, and counts the lookups that would read the
// catalog once the ring is in its steady state (the last 10 minutes).
func TestCatalogReadsPerThousandNewKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates millions of keys")
	}
	for _, rate := range []int{DefaultExpectedRate, 3 * DefaultExpectedRate} {
		t.Run(fmt.Sprintf("%d keys/s", rate), func(t *testing.T) {
			cfg := Config{}.withDefaults()
			width := int64(cfg.Window) / int64(cfg.Slices)
			expected := uint(math.Ceil(cfg.ExpectedRate * time.Duration(width).Seconds()))
			r := newRing(width, cfg.Slices, cfg.FalsePositiveRate, expected)
			start := time.Now().Truncate(time.Hour).UnixNano()
			step := int64(time.Second) / int64(rate)
			total := 20 * 60 * rate
			steady := total / 2
			reads := 0
			var b [8]byte
			for i := 0; i < total; i++ {
				now := start + int64(i)*step
				b = [8]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24), 'k', 'e', 'y', 's'}
				h := hashOf(string(b[:]))
				r.advance(now)
				if r.test(h) && i >= total-steady {
					reads++
				}
				r.add(h, now)
			}
			per1000 := float64(reads) / float64(steady) * 1000
			st := r.stats()
			t.Logf("%d new keys/s: %.2f catalog reads per 1,000 new keys (%d of %d); %d filters, %.1f MB, estimated fp %.5f",
				rate, per1000, reads, steady, st.filters, float64(st.bits)/8e6, st.fpRate)
			if per1000 > 1.1 {
				t.Errorf("%.2f catalog reads per 1,000 new keys, over the 0.1%% target", per1000)
			}
		})
	}
}
