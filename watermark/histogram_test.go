package watermark

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"testing"
	"time"
)

func TestIDSetRemembersFlagsAcrossGrowth(t *testing.T) {
	var s idset
	const n = 10_000
	for i := range n {
		k := idKey(maphash.String(seed, fmt.Sprint(i)))
		if before := s.mark(k, flagSeen); before != 0 {
			t.Fatalf("message %d: flags %b before its first mark", i, before)
		}
	}
	for i := range n {
		k := idKey(maphash.String(seed, fmt.Sprint(i)))
		if before := s.mark(k, flagFinished); before != flagSeen {
			t.Fatalf("message %d: flags %b, want seen", i, before)
		}
		if before := s.mark(k, flagFinished); before != flagMask {
			t.Fatalf("message %d: flags %b after finish, want seen|finished", i, before)
		}
	}
	if s.n != n || s.n*4 > len(s.slots)*3 {
		t.Fatalf("%d entries in %d slots", s.n, len(s.slots))
	}
	s.reset()
	if s.n != 0 || s.mark(idKey(1234), flagSeen) != 0 {
		t.Fatal("reset kept entries")
	}
}

func TestIDKeyIsNeverEmpty(t *testing.T) {
	for _, h := range []uint64{0, 1, 2, 3} {
		if idKey(h) == 0 {
			t.Fatalf("idKey(%d) = 0", h)
		}
	}
}

func TestHistogramCountsPendingAndEarly(t *testing.T) {
	h := newHistogram()
	p := t0.UnixNano()
	h.record("a", p, p-5e9, flagSeen)     // pending
	h.record("b", p, p, flagFinished)     // early
	h.record("c", p, p, flagSeen)         // pending, then finished
	h.record("c", p, p, flagFinished)     //
	h.record("c", p, p, flagFinished)     // a redelivery: no effect
	h.record("b", p, p, flagSeen)         // early, then seen
	h.record("d", p+2e9, p+2e9, flagSeen) // another second
	sc := h.sweep(never, floorDiv(p, 1e9))
	if sc.pending != 2 {
		t.Errorf("pending %d, want 2 (a, d)", sc.pending)
	}
	if sc.minPending != p-5e9 || sc.minBand != p-5e9 {
		t.Errorf("min pending %d, min band %d; want a's event time", sc.minPending-p, sc.minBand-p)
	}
	_, _, earlySec := h.drain(0)
	if earlySec != noEvent {
		t.Errorf("early second %d, want none", earlySec)
	}
	h.record("e", p+3e9, p, flagFinished)
	if _, _, earlySec = h.drain(0); earlySec != floorDiv(p+3e9, 1e9) {
		t.Errorf("early second %d, want e's", earlySec)
	}
}

func TestFloorDiv(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{{7, 2, 3}, {-7, 2, -4}, {-8, 2, -4}, {0, 5, 0}, {-1, 1e9, -1}} {
		if got := floorDiv(c.a, c.b); got != c.want {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestMemoryPerMillionTrackedMessages measures the heap the bookkeeping
// takes for a million messages the tracker received and the pipeline has
// not finished (a backlog on the main subscription), at two publish rates.
// It is the figure of the issue; run it with -v to read it.
func TestMemoryPerMillionTrackedMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a million entries")
	}
	const n = 1_000_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%016d", 17_000_000_000_000+i) // as long as Pub/Sub message IDs
	}
	for _, rate := range []int{10_000, 1_000} {
		t.Run(fmt.Sprintf("published at %d msg/s", rate), func(t *testing.T) {
			before := heapInUse()
			e := newEstimator(testParams, t0)
			step := int64(time.Second) / int64(rate)
			for i, id := range ids {
				p := t0.UnixNano() + int64(i)*step
				e.seen(id, time.Unix(0, p), time.Unix(0, p))
			}
			e.tick(time.Unix(0, t0.UnixNano()+int64(n)*step), inputs{probed: never})
			after := heapInUse()
			st := e.stats()
			if st.Pending != n {
				t.Fatalf("%d pending, want %d", st.Pending, n)
			}
			perMsg := float64(after-before) / n
			t.Logf("%d tracked messages over %d s: heap %.1f MiB (%.1f bytes/message); %d buckets; Stats.Bytes %.1f MiB",
				n, n/rate, float64(after-before)/(1<<20), perMsg, st.Buckets, float64(st.Bytes)/(1<<20))
			if perMsg > 40 {
				t.Errorf("%.1f bytes per tracked message, want at most 40", perMsg)
			}
			runtime.KeepAlive(e)
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
