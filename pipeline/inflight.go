package pipeline

import (
	"sync"
	"time"
)

// inFlight counts the messages being processed by publish second, so that
// /status can show the oldest publish time still in flight. Memory is one
// map entry per distinct second in flight, bounded by flow control.
type inFlight struct {
	mu     sync.Mutex
	counts map[int64]int
}

func newInFlight() *inFlight { return &inFlight{counts: make(map[int64]int)} }

func (f *inFlight) add(publish time.Time) int64 {
	s := publish.Unix()
	f.mu.Lock()
	f.counts[s]++
	f.mu.Unlock()
	return s
}

func (f *inFlight) remove(s int64) {
	f.mu.Lock()
	if f.counts[s]--; f.counts[s] <= 0 {
		delete(f.counts, s)
	}
	f.mu.Unlock()
}

// oldest returns the oldest publish second in flight, or false if none.
func (f *inFlight) oldest() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var min int64
	found := false
	for s := range f.counts {
		if !found || s < min {
			min, found = s, true
		}
	}
	if !found {
		return time.Time{}, false
	}
	return time.Unix(min, 0).UTC(), true
}
