package spill

import (
	"bytes"
	"cmp"
	"errors"
	"io/fs"
	"os"
	"slices"
	"unsafe"
)

// maxOpenRuns is the merge's fan-in: the most run files open at once. A
// variable so that the tests can lower it to reach the multi-pass merge with
// few records.
var maxOpenRuns = 64

const (
	// DefaultMemory is the memory New uses when given none.
	DefaultMemory = 64 << 20
	// recordOverhead is what a record costs in memory besides its key and
	// value: its entry in the index that is sorted.
	recordOverhead = int(unsafe.Sizeof(entry{}))
)

var (
	errSorted = errors.New("spill: Add or Sorted after Sorted")
	errClosed = errors.New("spill: sorter closed")
)

// Stats says what a sorter did, for the audit's summary and the tests.
type Stats struct {
	Records      int64 // records added
	Runs         int   // sorted runs spilled from memory to temp files
	MergePasses  int   // passes that merged runs into bigger ones, to open at most maxOpenRuns at once
	BytesSpilled int64 // bytes written to temp files, by the spills and by the merge passes
}

// Sorter collects records (a sort key and a value) and returns them in key
// order: bytes.Compare of the keys, equal keys in the order they were added.
type Sorter struct {
	dir    string
	memory int

	// The records held in memory: keys and values back to back in data, an
	// entry each in entries. Both keep their capacity from one run to the
	// next. An entry's offset in data is also its order of addition, which
	// makes the in-memory sort stable.
	data    []byte
	entries []entry
	held    int // bytes counted against memory

	runs    []run               // spilled runs, oldest first
	files   map[string]struct{} // temp files not yet removed
	readers []*runReader        // the final merge's open runs, closed by Close
	stats   Stats
	err     error // sticky: a failed spill or merge
	sorted  bool
	closed  bool
}

type entry struct{ off, keyLen, valueLen int }

// New returns a sorter that writes its runs to dir ("" is os.TempDir()) and
// holds up to memory bytes of records (len(key)+len(value) plus a fixed
// overhead each) before it spills them, sorted, to a run; memory <= 0 is
// DefaultMemory.
func New(dir string, memory int) *Sorter {
	if memory <= 0 {
		memory = DefaultMemory
	}
	return &Sorter{dir: dir, memory: memory, files: map[string]struct{}{}}
}

// Add adds a record. It copies key and value; the caller may reuse them.
func (s *Sorter) Add(key, value []byte) error {
	switch {
	case s.closed:
		return errClosed
	case s.sorted:
		return errSorted
	case s.err != nil:
		return s.err
	}
	size := len(key) + len(value) + recordOverhead
	if s.held > 0 && s.held+size > s.memory {
		if err := s.spill(); err != nil {
			s.err = err
			return err
		}
	}
	s.grow(len(key) + len(value))
	off := len(s.data)
	s.data = append(append(s.data, key...), value...)
	s.entries = append(s.entries, entry{off: off, keyLen: len(key), valueLen: len(value)})
	s.held += size
	s.stats.Records++
	return nil
}

// grow makes room for n more bytes in data, growing it by doubling as append
// would, but never past the memory bound (that single record aside): append
// alone could take data's capacity to nearly twice the bound.
func (s *Sorter) grow(n int) {
	need := len(s.data) + n
	if need <= cap(s.data) {
		return
	}
	newCap := min(max(2*cap(s.data), need, 4096), max(s.memory, need))
	data := make([]byte, len(s.data), newCap)
	copy(data, s.data)
	s.data = data
}

// sortMemory sorts the records held in memory, stably.
func (s *Sorter) sortMemory() {
	data := s.data
	slices.SortFunc(s.entries, func(a, b entry) int {
		if c := bytes.Compare(data[a.off:a.off+a.keyLen], data[b.off:b.off+b.keyLen]); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
}

// spill writes the records held in memory, sorted, to a new run.
func (s *Sorter) spill() error {
	s.sortMemory()
	w, err := s.createRun(uint64(len(s.entries)))
	if err != nil {
		return err
	}
	mem := memSource{data: s.data, entries: s.entries, i: -1}
	for mem.next() {
		w.record(mem.key(), mem.value())
	}
	r, err := s.finishRun(w)
	if err != nil {
		return err
	}
	s.runs = append(s.runs, r)
	s.stats.Runs++
	s.data, s.entries, s.held = s.data[:0], s.entries[:0], 0
	return nil
}

// Sorted ends the adding and returns the records in order: a merge of the
// spilled runs and of what is still in memory (which is never spilled).
// With more than maxOpenRuns runs, it first merges them into fewer.
func (s *Sorter) Sorted() (*Iterator, error) {
	switch {
	case s.closed:
		return nil, errClosed
	case s.sorted:
		return nil, errSorted
	case s.err != nil:
		return nil, s.err
	}
	s.sorted = true
	s.sortMemory()
	for len(s.runs) > maxOpenRuns {
		if err := s.mergePass(); err != nil {
			s.err = err
			return nil, err
		}
	}
	sources := make([]source, 0, len(s.runs)+1)
	for _, r := range s.runs {
		rr, err := openRunReader(r)
		if err != nil {
			s.err = err
			return nil, err
		}
		s.readers = append(s.readers, rr)
		sources = append(sources, rr)
	}
	// Last, as the newest records: on equal keys the merge takes the
	// earlier source first.
	sources = append(sources, &memSource{data: s.data, entries: s.entries, i: -1})
	return &Iterator{s: s, m: merger{sources: sources}}, nil
}

// mergePass merges the runs, maxOpenRuns consecutive runs at a time, each
// group into one run in its place, so that the order of the runs (and so the
// stability of the sort) is kept.
func (s *Sorter) mergePass() error {
	var merged []run
	for i := 0; i < len(s.runs); i += maxOpenRuns {
		group := s.runs[i:min(i+maxOpenRuns, len(s.runs))]
		if len(group) == 1 {
			merged = append(merged, group[0])
			continue
		}
		r, err := s.mergeRuns(group)
		if err != nil {
			return err
		}
		merged = append(merged, r)
	}
	s.runs = merged
	s.stats.MergePasses++
	return nil
}

// mergeRuns merges runs into a new one and removes them.
func (s *Sorter) mergeRuns(runs []run) (run, error) {
	var readers []*runReader
	defer func() {
		for _, rr := range readers {
			rr.f.Close()
		}
	}()
	m := merger{}
	var count uint64
	for _, r := range runs {
		rr, err := openRunReader(r)
		if err != nil {
			return run{}, err
		}
		readers = append(readers, rr)
		m.sources = append(m.sources, rr)
		count += r.count
	}
	w, err := s.createRun(count)
	if err != nil {
		return run{}, err
	}
	for m.next() {
		w.record(m.key(), m.value())
	}
	if m.err != nil {
		w.f.Close()
		s.remove(w.f.Name())
		return run{}, m.err
	}
	out, err := s.finishRun(w)
	if err != nil {
		return run{}, err
	}
	for _, r := range runs {
		s.remove(r.path)
	}
	return out, nil
}

// createRun creates a temp file for a run of count records.
func (s *Sorter) createRun(count uint64) (*runWriter, error) {
	f, err := os.CreateTemp(s.dir, "pubsink-spill-*")
	if err != nil {
		return nil, err
	}
	s.files[f.Name()] = struct{}{}
	return newRunWriter(f, count), nil
}

// finishRun ends a run's file; a run that could not be written is removed.
func (s *Sorter) finishRun(w *runWriter) (run, error) {
	r, err := w.finish()
	s.stats.BytesSpilled += w.written
	if err != nil {
		s.remove(w.f.Name())
		return run{}, err
	}
	return r, nil
}

// remove removes a temp file, and forgets it once it is gone.
func (s *Sorter) remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	delete(s.files, path)
	return nil
}

// Close removes every temp file of the sorter and releases its memory. It
// can be called at any time, more than once; an Iterator of a closed sorter
// ends with an error.
func (s *Sorter) Close() error {
	s.closed = true
	for _, rr := range s.readers {
		rr.f.Close() // read-only: nothing to lose
	}
	s.readers = nil
	var errs []error
	for path := range s.files {
		errs = append(errs, s.remove(path)) // a file it failed to remove stays, for a second Close
	}
	s.data, s.entries, s.runs = nil, nil, nil
	return errors.Join(errs...)
}

// Stats returns what the sorter did so far.
func (s *Sorter) Stats() Stats { return s.stats }

// Iterator returns a sorter's records in order.
type Iterator struct {
	s *Sorter
	m merger
}

// Next moves to the next record and says whether there is one. When it
// returns false, Err says whether the records ended or something failed.
func (it *Iterator) Next() bool {
	if it.s.closed {
		if it.m.err == nil {
			it.m.err = errClosed
		}
		return false
	}
	return it.m.next()
}

// Key returns the current record's key. The slice is valid until the next
// call to Next, which may reuse it, and must not be modified.
func (it *Iterator) Key() []byte { return it.m.key() }

// Value returns the current record's value, valid as Key's slice is.
func (it *Iterator) Value() []byte { return it.m.value() }

// Err returns the error that ended the iteration, if any; an error wrapping
// ErrCorrupt when a run file was truncated or corrupted. Check it after the
// last Next: the records before an error are not all to be trusted.
func (it *Iterator) Err() error { return it.m.err }

// memSource is a source of the records held in memory, once sorted.
type memSource struct {
	data    []byte
	entries []entry
	i       int
}

func (m *memSource) next() bool { m.i++; return m.i < len(m.entries) }

func (m *memSource) key() []byte {
	e := m.entries[m.i]
	return m.data[e.off : e.off+e.keyLen : e.off+e.keyLen]
}

func (m *memSource) value() []byte {
	e := m.entries[m.i]
	end := e.off + e.keyLen + e.valueLen
	return m.data[e.off+e.keyLen : end : end]
}

func (m *memSource) err() error { return nil }
