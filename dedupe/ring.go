package dedupe

import (
	"math"
	"math/bits"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
)

// maxK bounds the hash functions of one filter, so that a lookup computes
// its bit locations once into an array on the stack. A filter chained deep
// into a slice stops getting tighter at this depth (see sliceFilterP).
const maxK = 48

// chainShare is the part of a slice's false-positive budget that goes to
// its first filter; the filters chained after it share the rest, each half
// of what is left (a scalable Bloom filter, Almeida et al. 2007, with
// tightening ratio 1/4 and growth 2). Three quarters keeps the first
// filter, the one that takes all the keys at the expected rate, within
// 0.6 bits per key of spending the whole budget on it.
const chainShare = 0.75

// maxChain bounds the filters of one slice. At growth 2 the last one holds
// 2^maxChain times the first one's keys: only a flood far past any sizing
// gets there, and then the filter keeps taking keys at a rising
// false-positive rate (lookups cost catalog reads; nothing is missed).
const maxChain = 16

// hashes are the two 64-bit hashes of a catalog id from which every bit
// location is derived (double hashing, Kirsch and Mitzenmacher 2006:
// location i is h1 + i·h2). The key is hashed once per lookup, not once
// per filter. h2 is derived from h1, so a key is effectively its 64-bit
// xxhash: two keys that collide in it (odds ~n/2⁶⁴) share their Bloom bits,
// which costs a catalog read, never a wrong answer.
type hashes struct{ h1, h2 uint64 }

func hashOf(id string) hashes {
	h := xxhash.Sum64String(id)
	return hashes{h, mix(h) | 1}
}

// mix is the finalizer of splitmix64: a bijection that spreads every bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// locations fills locs with the first len(locs) bit locations of h, in the
// form bloom.BloomFilter.TestLocations takes (it reduces them modulo m).
// A filter with k hash functions uses locs[:k]: the locations of a key do
// not depend on k, so filters of different k share one computation.
func (h hashes) locations(locs []uint64) {
	for i := range locs {
		locs[i] = h.h1 + uint64(i)*h.h2
	}
}

// filter is one Bloom filter of a slice, with the number of keys it was
// sized for and has taken.
type filter struct {
	bf   *bloom.BloomFilter
	cap  uint
	keys uint
}

func (f *filter) add(locs []uint64) {
	m := uint64(f.bf.Cap())
	bs := f.bf.BitSet()
	for _, l := range locs[:f.bf.K()] {
		bs.Set(uint(l % m))
	}
	f.keys++
}

// slice is the filters of one slice of processing time: the keys committed
// in [idx·width, (idx+1)·width).
type slice struct {
	idx     int64
	filters []filter // nil when the slot holds no live slice
	keys    uint
}

// ring is the rolling set of slices that covers the window: with N slices
// per window it keeps N+1 (the current one, partly filled, and the N before
// it, the oldest partly expired), so that every key committed within the
// window is in a live slice. It is not safe for concurrent use: Keys
// guards it with its mutex.
type ring struct {
	width  int64 // nanoseconds of processing time per slice
	slots  []slice
	cur    int64 // newest slice number; slots hold cur-len(slots)+1 .. cur
	budget float64
	// expected is the number of keys the first filter of a slice is sized
	// for at least; a slice is sized for 5/4 of what the previous one took
	// when that is more.
	expected uint
	k        uint // largest k of any live filter: how many locations to compute
}

// newRing returns a ring of n+1 slices of width nanoseconds whose lookups
// answer "maybe" for a new key with probability at most p when no slice
// holds more keys than its filters are sized for (chaining keeps that
// true when they do).
func newRing(width int64, n int, p float64, expected uint) *ring {
	return &ring{
		width:    width,
		slots:    make([]slice, n+1),
		cur:      math.MinInt64,
		budget:   p / float64(n+1),
		expected: expected,
	}
}

// index is the slice number of a time in nanoseconds since the epoch.
func (r *ring) index(ns int64) int64 {
	i := ns / r.width
	if ns < 0 && ns%r.width != 0 {
		i--
	}
	return i
}

func (r *ring) slot(idx int64) *slice {
	n := int64(len(r.slots))
	return &r.slots[((idx%n)+n)%n]
}

// live reports whether slice idx is held by the ring.
func (r *ring) live(idx int64) bool {
	return idx <= r.cur && idx > r.cur-int64(len(r.slots))
}

// advance makes the slice of time now (ns) the current one, dropping the
// slices that fell out of the window. Time going backwards changes nothing.
func (r *ring) advance(now int64) {
	idx := r.index(now)
	if idx <= r.cur {
		return
	}
	first := r.cur + 1
	if r.cur == math.MinInt64 || idx-first >= int64(len(r.slots)) {
		first = idx - int64(len(r.slots)) + 1
	}
	for i := first; i <= idx; i++ {
		size := r.expected
		if prev := r.slot(i - 1); prev.filters != nil && prev.idx == i-1 {
			if grown := prev.keys + prev.keys/4; grown > size {
				size = roundUp(grown)
			}
		}
		s := r.slot(i)
		var reuse *bloom.BloomFilter
		if s.filters != nil && s.filters[0].cap == size {
			reuse = s.filters[0].bf
			reuse.ClearAll()
		}
		*s = slice{idx: i, filters: append(s.filters[:0:0], r.newFilter(size, 0, reuse))}
	}
	r.cur = idx
	r.recomputeK()
}

// newFilter returns the j-th filter of a slice, sized for n keys, reusing
// bf when it is given (already cleared, of the right size).
func (r *ring) newFilter(n uint, j int, bf *bloom.BloomFilter) filter {
	if bf == nil {
		m, k := bloom.EstimateParameters(n, r.filterP(j))
		bf = bloom.New(m, min(k, maxK))
	}
	if bf.K() > r.k {
		r.k = bf.K()
	}
	return filter{bf: bf, cap: n}
}

// filterP is the false-positive rate the j-th filter of a slice is built
// for: chainShare of the slice's budget for the first, then halves of the
// rest, so that a slice never spends more than its budget in total.
func (r *ring) filterP(j int) float64 {
	if j == 0 {
		return r.budget * chainShare
	}
	j = min(j, maxChain)
	return r.budget * (1 - chainShare) * math.Ldexp(1, -j)
}

func (r *ring) recomputeK() {
	r.k = 0
	for i := range r.slots {
		for _, f := range r.slots[i].filters {
			r.k = max(r.k, f.bf.K())
		}
	}
}

// add records a key committed at time ns. A key of a slice that has already
// left the ring is dropped (it is older than the window); a key from the
// future (another process's clock) goes into the current slice, where it is
// kept at least as long as it needs.
func (r *ring) add(h hashes, ns int64) {
	idx := min(r.index(ns), r.cur)
	if !r.live(idx) {
		return
	}
	s := r.slot(idx)
	if s.filters == nil || s.idx != idx {
		return
	}
	last := &s.filters[len(s.filters)-1]
	if last.keys >= last.cap && len(s.filters) < maxChain {
		s.filters = append(s.filters, r.newFilter(last.cap*2, len(s.filters), nil))
		last = &s.filters[len(s.filters)-1]
	}
	var buf [maxK]uint64
	locs := buf[:last.bf.K()]
	h.locations(locs)
	last.add(locs)
	s.keys++
}

// test reports whether any live filter may hold the key.
func (r *ring) test(h hashes) bool {
	var buf [maxK]uint64
	locs := buf[:r.k]
	h.locations(locs)
	for i := range r.slots {
		s := &r.slots[i]
		if s.filters == nil || !r.live(s.idx) {
			continue
		}
		for j := range s.filters {
			bf := s.filters[j].bf
			if bf.TestLocations(locs[:bf.K()]) {
				return true
			}
		}
	}
	return false
}

// ringStats is what Stats and the gauges report of the filters.
type ringStats struct {
	slices, filters int
	keys            uint64
	bits            uint64
	fill            float64 // mean fraction of bits set per filter
	fpRate          float64 // estimated probability that a new key is reported maybe
}

// stats counts the set bits of every live filter: O(bits/64), about 25k
// words per MB of filters. The estimated false-positive rate of a lookup is
// 1 - Π(1 - fillᵏ) over the filters it probes.
func (r *ring) stats() ringStats {
	var st ringStats
	logPass := 0.0 // log Π(1 - fillᵏ), summed with log1p for precision
	for i := range r.slots {
		s := &r.slots[i]
		if s.filters == nil || !r.live(s.idx) {
			continue
		}
		st.slices++
		for _, f := range s.filters {
			st.filters++
			st.keys += uint64(f.keys)
			m := f.bf.Cap()
			st.bits += uint64(m)
			fill := float64(f.bf.BitSet().Count()) / float64(m)
			st.fill += fill
			logPass += math.Log1p(-math.Pow(fill, float64(f.bf.K())))
		}
	}
	if st.filters > 0 {
		st.fill /= float64(st.filters)
	}
	st.fpRate = -math.Expm1(logPass)
	return st
}

// roundUp rounds n up to four significant bits (at most 1/8 more), so that
// slices sized from slightly different counts get filters of the same size
// and reuse them.
func roundUp(n uint) uint {
	if n < 16 {
		return 16
	}
	shift := bits.Len(n) - 4
	step := uint(1) << shift
	return (n + step - 1) &^ (step - 1)
}
