package spill

import (
	"bytes"
	"container/heap"
)

// source is a sorted sequence of records: a run file or the memory.
type source interface {
	next() bool
	key() []byte
	value() []byte
	err() error
}

// merger merges sorted sources, a k-way merge on a heap. On equal keys the
// source that comes first in sources wins: the sources are given oldest
// first, so the merge is stable.
type merger struct {
	sources []source
	heap    cursors
	started bool
	err     error
}

// cursor is a source in the heap, with its place among the sources.
type cursor struct {
	src   source
	order int
}

type cursors []cursor

func (h cursors) Len() int { return len(h) }
func (h cursors) Less(i, j int) bool {
	if c := bytes.Compare(h[i].src.key(), h[j].src.key()); c != 0 {
		return c < 0
	}
	return h[i].order < h[j].order
}
func (h cursors) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursors) Push(x any)   { *h = append(*h, x.(cursor)) }
func (h *cursors) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// next moves to the next record: the first call reads the first record of
// every source; each later one moves on the source whose record was last.
func (m *merger) next() bool {
	if m.err != nil {
		return false
	}
	if !m.started {
		m.started = true
		for i, src := range m.sources {
			if src.next() {
				m.heap = append(m.heap, cursor{src: src, order: i})
			} else if m.err = src.err(); m.err != nil {
				return false
			}
		}
		heap.Init(&m.heap)
		return len(m.heap) > 0
	}
	if len(m.heap) == 0 {
		return false
	}
	if top := m.heap[0].src; top.next() {
		heap.Fix(&m.heap, 0)
	} else if m.err = top.err(); m.err != nil {
		m.heap = nil
		return false
	} else {
		heap.Pop(&m.heap)
	}
	return len(m.heap) > 0
}

func (m *merger) key() []byte   { return m.heap[0].src.key() }
func (m *merger) value() []byte { return m.heap[0].src.value() }
