package watermark

import (
	"hash/maphash"
	"math"
	"sync"
)

// The histogram is the tracker's bookkeeping: per publish second, which
// messages the tracker has seen and which the pipeline has finished, the
// minimum event time among them, and how many are seen-but-unfinished
// ("pending") or finished-but-unseen ("early"). It is split into shards by
// message ID, each with its own lock, so that the tracking subscription's
// streams and the pipeline's handlers rarely wait for one another.

// nShards is the number of histogram shards. Eight keeps lock contention
// negligible on the few cores pubsink runs on, while a tick scans at most
// eight buckets per publish second.
const nShards = 8

// never is the "unknown" or "no such time" value of unix-nanosecond times.
const never = math.MinInt64

// noEvent is a bucket's minimum event time before it holds any message.
const noEvent = math.MaxInt64

// seed hashes message IDs. It is per process: hashes are never stored.
var seed = maphash.MakeSeed()

type bucket struct {
	sec      int64 // publish second (Unix)
	minEvent int64 // unix ns; the minimum over every message recorded in it
	pending  int   // seen by the tracker, not finished by the pipeline
	early    int   // finished by the pipeline, not (yet) seen by the tracker
	ids      idset
}

// evidence is what one side (tracker or pipeline) did since the last tick:
// how many messages, and the oldest publish time among them.
type evidence struct {
	n      int64
	minPub int64 // unix ns; noEvent when n == 0
}

func (e *evidence) add(pub int64) {
	e.n++
	if pub < e.minPub {
		e.minPub = pub
	}
}

type shard struct {
	mu      sync.Mutex
	buckets map[int64]*bucket
	last    *bucket // the bucket used last: most arrivals share a second
	// floor is the publish second below which buckets were retired: an
	// arrival for a second below it that has no bucket is ignored.
	floor int64
	seen  evidence // tracker deliveries since the last tick
	fin   evidence // pipeline finishes since the last tick
	stats counts
	free  []idset // tables of retired buckets, for reuse

	_ [64]byte // keep shards on separate cache lines
}

// counts are cumulative counters of unusual arrivals, for logs and tests.
type counts struct {
	dupSeen      int64 // a second delivery of a message to the tracker
	dupFinished  int64 // a message finished a second time (a redelivery)
	lateSeen     int64 // tracker delivery below the floor: ignored
	lateFinished int64 // finish below the floor: ignored
}

func (c *counts) add(o counts) {
	c.dupSeen += o.dupSeen
	c.dupFinished += o.dupFinished
	c.lateSeen += o.lateSeen
	c.lateFinished += o.lateFinished
}

// maxFree bounds the recycled tables of one shard.
const maxFree = 4

type histogram struct {
	shards [nShards]shard
}

func newHistogram() *histogram {
	h := &histogram{}
	for i := range h.shards {
		s := &h.shards[i]
		s.buckets = make(map[int64]*bucket)
		s.floor = math.MinInt64
		s.seen = evidence{minPub: noEvent}
		s.fin = evidence{minPub: noEvent}
	}
	return h
}

// record notes that the tracker saw (flag == flagSeen) or the pipeline
// finished (flag == flagFinished) the message id, published at pub with
// event time ev (unix ns).
func (h *histogram) record(id string, pub, ev int64, flag uint64) {
	x := maphash.String(seed, id)
	s := &h.shards[x>>(64-3)] // top 3 bits: nShards == 8
	k := idKey(x)
	sec := floorDiv(pub, 1e9)

	s.mu.Lock()
	if flag == flagSeen {
		s.seen.add(pub)
	} else {
		s.fin.add(pub)
	}
	b := s.last
	if b == nil || b.sec != sec {
		b = s.buckets[sec]
		if b == nil {
			if sec < s.floor {
				if flag == flagSeen {
					s.stats.lateSeen++
				} else {
					s.stats.lateFinished++
				}
				s.mu.Unlock()
				return
			}
			b = s.newBucket(sec)
		}
		s.last = b
	}
	before := b.ids.mark(k, flag)
	switch {
	case before&flag != 0: // the same message again
		if flag == flagSeen {
			s.stats.dupSeen++
		} else {
			s.stats.dupFinished++
		}
	case flag == flagSeen && before == 0:
		b.pending++
	case flag == flagSeen: // finished before the tracker saw it
		b.early--
	case before == 0: // finished before the tracker saw it
		b.early++
	default: // finished after the tracker saw it
		b.pending--
	}
	if ev < b.minEvent {
		b.minEvent = ev
	}
	s.mu.Unlock()
}

func (s *shard) newBucket(sec int64) *bucket {
	b := &bucket{sec: sec, minEvent: noEvent}
	if n := len(s.free); n > 0 {
		b.ids = s.free[n-1]
		s.free[n-1] = idset{}
		s.free = s.free[:n-1]
	}
	s.buckets[sec] = b
	return b
}

func (s *shard) retire(b *bucket) {
	delete(s.buckets, b.sec)
	if s.last == b {
		s.last = nil
	}
	if len(s.free) < maxFree && b.ids.slots != nil {
		b.ids.reset()
		s.free = append(s.free, b.ids)
	}
}

// drain returns and resets the evidence gathered since the last call, and
// the oldest publish second among the buckets that hold early messages at
// or after sinceSec (noEvent if none).
func (h *histogram) drain(sinceSec int64) (seen, fin evidence, earlySec int64) {
	seen = evidence{minPub: noEvent}
	fin = evidence{minPub: noEvent}
	earlySec = noEvent
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		seen.n += s.seen.n
		seen.minPub = min(seen.minPub, s.seen.minPub)
		fin.n += s.fin.n
		fin.minPub = min(fin.minPub, s.fin.minPub)
		s.seen = evidence{minPub: noEvent}
		s.fin = evidence{minPub: noEvent}
		for sec, b := range s.buckets {
			if b.early > 0 && sec >= sinceSec && sec < earlySec {
				earlySec = sec
			}
		}
		s.mu.Unlock()
	}
	return seen, fin, earlySec
}

// scan is the result of one pass over the buckets.
type scan struct {
	minPending int64 // min event time over buckets with pending messages
	minBand    int64 // min event time over buckets at or after the band's start
	pending    int64 // pending messages
	oldestSec  int64 // oldest publish second with a pending message
	buckets    int
	bytes      int64 // memory of the bookkeeping, approximately
	stats      counts
}

// bucketBytes approximates a bucket's fixed cost: the struct and its map
// entry.
const bucketBytes = 64 + 32

// sweep retires the buckets before horizonSec that hold no pending message,
// raises the floor to horizonSec, and returns the minimum event times the
// watermark is bounded by: over pending buckets, and over buckets from
// bandSec on.
func (h *histogram) sweep(horizonSec, bandSec int64) scan {
	r := scan{minPending: noEvent, minBand: noEvent, oldestSec: noEvent}
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		if horizonSec > s.floor {
			s.floor = horizonSec
		}
		for sec, b := range s.buckets {
			if sec < horizonSec && b.pending == 0 {
				s.retire(b)
				continue
			}
			if b.pending > 0 {
				r.minPending = min(r.minPending, b.minEvent)
				r.pending += int64(b.pending)
				r.oldestSec = min(r.oldestSec, sec)
			}
			if sec >= bandSec {
				r.minBand = min(r.minBand, b.minEvent)
			}
			r.buckets++
			r.bytes += bucketBytes + int64(b.ids.bytes())
		}
		for _, f := range s.free {
			r.bytes += int64(f.bytes())
		}
		r.stats.add(s.stats)
		s.mu.Unlock()
	}
	return r
}

// forget retires every bucket before sec, pending or not, raises the floor
// to sec, and returns how many pending messages it dropped.
func (h *histogram) forget(sec int64) int64 {
	var dropped int64
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		if sec > s.floor {
			s.floor = sec
		}
		for bs, b := range s.buckets {
			if bs < sec {
				dropped += int64(b.pending)
				s.retire(b)
			}
		}
		s.mu.Unlock()
	}
	return dropped
}

// ceilDiv is a / b rounded towards plus infinity (b > 0).
func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// floorDiv is a / b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
