package dedupe

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// probeFP returns the fraction of n keys never added that r reports maybe.
func probeFP(r *ring, n int) float64 {
	hits := 0
	for i := 0; i < n; i++ {
		if r.test(hashOf(fmt.Sprintf("absent-%d", i))) {
			hits++
		}
	}
	return float64(hits) / float64(n)
}

func TestRingHoldsEveryKeyOfTheWindow(t *testing.T) {
	const (
		n     = 6
		width = int64(time.Second)
		step  = int64(100 * time.Millisecond)
	)
	window := n * width
	r := newRing(width, n, 0.001, 1024)
	start := int64(1_700_000_000) * int64(time.Second)
	var added []int64
	for i := 0; i < 200; i++ {
		now := start + int64(i)*step
		r.advance(now)
		r.add(hashOf(fmt.Sprint(i)), now)
		added = append(added, now)
		for j, at := range added {
			if now-at < window && !r.test(hashOf(fmt.Sprint(j))) {
				t.Fatalf("at step %d key %d, committed %v ago, is not in the filters", i, j, time.Duration(now-at))
			}
		}
	}
	// Keys older than (N+1)/N windows have left.
	now := start + 200*step
	gone := 0
	for j, at := range added {
		if now-at > window+width && !r.test(hashOf(fmt.Sprint(j))) {
			gone++
		}
	}
	if gone == 0 {
		t.Fatal("no old key left the filters")
	}
}

func TestRingTakesKeysByTheirTime(t *testing.T) {
	width := int64(time.Minute)
	r := newRing(width, 10, 0.001, 1024)
	now := int64(1_700_000_000) * int64(time.Second)
	r.advance(now)

	t.Run("a key from the past goes into its own slice", func(t *testing.T) {
		r.add(hashOf("old"), now-5*width)
		if s := r.slot(r.index(now - 5*width)); s.keys != 1 {
			t.Fatalf("slice of 5 minutes ago holds %d keys", s.keys)
		}
	})
	t.Run("a key from the future goes into the current slice", func(t *testing.T) {
		r.add(hashOf("future"), now+3*width)
		if s := r.slot(r.cur); s.keys != 1 || !r.test(hashOf("future")) {
			t.Fatalf("current slice holds %d keys", s.keys)
		}
	})
	t.Run("a key older than the ring is dropped", func(t *testing.T) {
		before := r.stats().keys
		r.add(hashOf("ancient"), now-20*width)
		if r.stats().keys != before || r.test(hashOf("ancient")) {
			t.Fatal("a key older than the ring was added")
		}
	})
	t.Run("time going backwards keeps the ring", func(t *testing.T) {
		cur := r.cur
		r.advance(now - 3*width)
		if r.cur != cur || !r.test(hashOf("old")) {
			t.Fatal("the ring moved back")
		}
	})
}

func TestRingChainsFiltersAndStaysUnderItsTarget(t *testing.T) {
	const p = 0.001
	for _, over := range []int{1, 4, 20} {
		t.Run(fmt.Sprintf("every slice takes %dx the keys it was sized for", over), func(t *testing.T) {
			width := int64(time.Minute)
			r := newRing(width, 10, p, 1024)
			now := int64(1_700_000_000) * int64(time.Second)
			r.advance(now)
			var b [8]byte
			for s := int64(0); s <= 10; s++ {
				for i := 0; i < 1024*over; i++ {
					binary.LittleEndian.PutUint64(b[:], uint64(s)<<32|uint64(i))
					r.add(hashOf(string(b[:])), now-s*width)
				}
			}
			st := r.stats()
			fp := probeFP(r, 400_000)
			t.Logf("%d filters in 11 slices, %.1f bits/key; false positives: measured %.5f, estimated %.5f, target %.3f",
				st.filters, float64(st.bits)/float64(st.keys), fp, st.fpRate, p)
			if over > 1 && st.filters <= 11 {
				t.Errorf("%d filters: overfull slices did not chain", st.filters)
			}
			if st.fpRate > p {
				t.Errorf("estimated false-positive rate %.5f over the target %v", st.fpRate, p)
			}
			// 400k probes at 0.1%: 400 ± 20 hits; 15% of margin is 3σ.
			if fp > p*1.15 {
				t.Errorf("measured false-positive rate %.5f over the target %v", fp, p)
			}
		})
	}
}

func TestRingSizesASliceFromThePreviousOne(t *testing.T) {
	width := int64(time.Minute)
	r := newRing(width, 10, 0.001, 1024)
	now := int64(1_700_000_000) * int64(time.Second)
	r.advance(now)
	for i := 0; i < 5000; i++ {
		r.add(hashOf(fmt.Sprint(i)), now)
	}
	r.advance(now + width)
	if got := r.slot(r.cur).filters[0].cap; got < 6250 || got > 7032 {
		t.Fatalf("next slice sized for %d keys, want about 5/4 of 5000", got)
	}
	r.advance(now + 2*width)
	if got := r.slot(r.cur).filters[0].cap; got != 1024 {
		t.Fatalf("slice after an empty one sized for %d keys, want the expected 1024", got)
	}
}

func TestRoundUp(t *testing.T) {
	for n, want := range map[uint]uint{0: 16, 9: 16, 17: 18, 1000: 1024, 1024: 1024, 1025: 1152, 6250: 6656} {
		if got := roundUp(n); got != want {
			t.Errorf("roundUp(%d) = %d, want %d", n, got, want)
		}
	}
}
