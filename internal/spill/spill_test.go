package spill

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

type record struct{ key, value []byte }

// randomRecords makes n records with short keys from a small alphabet (so
// that many keys repeat) and values that name their place in the input.
func randomRecords(seed uint64, n int) []record {
	rng := rand.New(rand.NewPCG(seed, seed))
	recs := make([]record, n)
	for i := range recs {
		key := make([]byte, rng.IntN(6))
		for j := range key {
			key[j] = byte('a' + rng.IntN(4))
		}
		recs[i] = record{key: key, value: fmt.Appendf(nil, "%d", i)}
	}
	return recs
}

// setFanIn lowers maxOpenRuns for one test.
func setFanIn(t *testing.T, n int) {
	old := maxOpenRuns
	maxOpenRuns = n
	t.Cleanup(func() { maxOpenRuns = old })
}

// sortAll adds recs to s and returns what it gives back, copied.
func sortAll(t *testing.T, s *Sorter, recs []record) []record {
	t.Helper()
	for _, r := range recs {
		if err := s.Add(r.key, r.value); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	it, err := s.Sorted()
	if err != nil {
		t.Fatalf("Sorted: %v", err)
	}
	var got []record
	for it.Next() {
		got = append(got, record{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if err := it.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	return got
}

func checkSame(t *testing.T, got, want []record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].key, want[i].key) || !bytes.Equal(got[i].value, want[i].value) {
			t.Fatalf("record %d: got (%q, %q), want (%q, %q)", i, got[i].key, got[i].value, want[i].key, want[i].value)
		}
	}
}

// checkEmpty fails unless dir holds no file.
func checkEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
}

func TestSortedEqualsStableSort(t *testing.T) {
	for _, tc := range []struct {
		name       string
		memory     int
		fanIn      int
		spills     bool
		multiPass  bool
		numRecords int
	}{
		{name: "in memory", memory: 1 << 30, fanIn: 64, numRecords: 20000},
		{name: "one merge", memory: 16 << 10, fanIn: 64, spills: true, numRecords: 20000},
		{name: "multi-pass", memory: 2 << 10, fanIn: 3, spills: true, multiPass: true, numRecords: 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setFanIn(t, tc.fanIn)
			recs := randomRecords(42, tc.numRecords)
			want := append([]record(nil), recs...)
			sort.SliceStable(want, func(i, j int) bool { return bytes.Compare(want[i].key, want[j].key) < 0 })

			dir := t.TempDir()
			s := New(dir, tc.memory)
			got := sortAll(t, s, recs)
			checkSame(t, got, want)
			if len(s.readers) > tc.fanIn {
				t.Errorf("%d runs open at once, more than the fan-in %d", len(s.readers), tc.fanIn)
			}

			st := s.Stats()
			t.Logf("%+v", st)
			if st.Records != int64(len(recs)) {
				t.Errorf("Stats.Records = %d, want %d", st.Records, len(recs))
			}
			if tc.spills != (st.Runs > 0) {
				t.Errorf("Stats.Runs = %d, want spills: %v", st.Runs, tc.spills)
			}
			if tc.multiPass != (st.MergePasses > 1) {
				t.Errorf("Stats.MergePasses = %d, want several: %v", st.MergePasses, tc.multiPass)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, dir)
		})
	}
}

// The memory bound is what decides the runs: records of a fixed size, so
// many of them fit, and no more.
func TestMemoryBoundsRuns(t *testing.T) {
	const perRun, runs = 10, 7
	size := 8 + 8 + recordOverhead
	s := New(t.TempDir(), perRun*size+size-1) // one byte short of an 11th record
	defer s.Close()
	var buf [16]byte
	for i := range perRun * runs {
		binary.BigEndian.PutUint64(buf[:8], uint64(i))
		if err := s.Add(buf[:8], buf[8:]); err != nil {
			t.Fatal(err)
		}
	}
	// The last run stays in memory.
	if got := s.Stats().Runs; got != runs-1 {
		t.Errorf("Stats.Runs = %d, want %d", got, runs-1)
	}
	if s.held != perRun*size {
		t.Errorf("held %d bytes in memory, want %d", s.held, perRun*size)
	}
}

func TestDuplicateKeysKeepInsertionOrder(t *testing.T) {
	setFanIn(t, 2)
	var recs []record
	for i := range 3000 {
		key := []byte("same")
		if i%3 == 0 {
			key = []byte("other") // interleaved, sorting after
		}
		recs = append(recs, record{key: key, value: fmt.Appendf(nil, "%04d", i)})
	}
	s := New(t.TempDir(), 1<<10)
	defer s.Close()
	got := sortAll(t, s, recs)
	if st := s.Stats(); st.Runs < 10 || st.MergePasses < 2 {
		t.Fatalf("Stats %+v: want many runs and passes, so that duplicates span them", st)
	}
	var last = map[string][]byte{}
	for _, r := range got {
		if prev := last[string(r.key)]; prev != nil && bytes.Compare(prev, r.value) >= 0 {
			t.Fatalf("key %q: value %s after %s", r.key, r.value, prev)
		}
		last[string(r.key)] = r.value
	}
	if len(got) != len(recs) {
		t.Fatalf("got %d records, want %d", len(got), len(recs))
	}
}

func TestEmpty(t *testing.T) {
	dir := t.TempDir()
	s := New(dir, 0)
	it, err := s.Sorted()
	if err != nil {
		t.Fatal(err)
	}
	if it.Next() {
		t.Errorf("Next on an empty sorter: true, key %q", it.Key())
	}
	if err := it.Err(); err != nil {
		t.Errorf("Err: %v", err)
	}
	if st := s.Stats(); st != (Stats{}) {
		t.Errorf("Stats = %+v, want zero", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, dir)
}

func TestCloseRemovesEveryFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sorted bool
		read   int // records to read; -1 all
	}{
		{name: "before Sorted"},
		{name: "after Sorted", sorted: true},
		{name: "during iteration", sorted: true, read: 100},
		{name: "after iteration", sorted: true, read: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setFanIn(t, 4) // so that Sorted merges too, and its files are counted
			dir := t.TempDir()
			s := New(dir, 2<<10)
			for _, r := range randomRecords(7, 5000) {
				if err := s.Add(r.key, r.value); err != nil {
					t.Fatal(err)
				}
			}
			if tc.sorted {
				it, err := s.Sorted()
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; (tc.read < 0 || i < tc.read) && it.Next(); i++ {
				}
				if err := it.Err(); err != nil {
					t.Fatal(err)
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) == 0 {
				t.Fatal("no run file before Close: the test checks nothing")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, dir)
			if err := s.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := s.Add([]byte("k"), nil); err == nil {
				t.Error("Add after Close: no error")
			}
		})
	}
}

func TestIteratorOfClosedSorterFails(t *testing.T) {
	s := New(t.TempDir(), 1<<10)
	for _, r := range randomRecords(3, 500) {
		s.Add(r.key, r.value)
	}
	it, err := s.Sorted()
	if err != nil {
		t.Fatal(err)
	}
	it.Next()
	s.Close()
	if it.Next() {
		t.Error("Next after Close: true")
	}
	if it.Err() == nil {
		t.Error("Err after Close: nil")
	}
}

func TestAddAfterSortedFails(t *testing.T) {
	s := New(t.TempDir(), 0)
	defer s.Close()
	if _, err := s.Sorted(); err != nil {
		t.Fatal(err)
	}
	if err := s.Add([]byte("k"), nil); err == nil {
		t.Error("Add after Sorted: no error")
	}
	if _, err := s.Sorted(); err == nil {
		t.Error("Sorted twice: no error")
	}
}

// A run file damaged after it was written ends the iteration with an error,
// never with a shorter, silent end.
func TestDamagedRunFails(t *testing.T) {
	const recordSize = 1 + 8 + 1 + 8 // lengths and bytes of one record
	for _, tc := range []struct {
		name   string
		damage func(data []byte) []byte
	}{
		{"checksum cut", func(d []byte) []byte { return d[:len(d)-4] }},
		{"last record cut whole", func(d []byte) []byte { return d[:len(d)-4-recordSize] }},
		{"cut in a record", func(d []byte) []byte { return d[:len(d)/2] }},
		{"cut after the count", func(d []byte) []byte { return d[:1] }},
		{"empty", func(d []byte) []byte { return d[:0] }},
		{"a byte changed", func(d []byte) []byte { d[len(d)/2] ^= 0x20; return d }},
		{"a length changed", func(d []byte) []byte { d[1] = 0xff; return d }},
		{"bytes added", func(d []byte) []byte { return append(d, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			size := recordSize + recordOverhead
			s := New(dir, 10*size) // runs of 10 records
			defer s.Close()
			var buf [16]byte
			for i := range 35 {
				binary.BigEndian.PutUint64(buf[:8], uint64(i))
				binary.BigEndian.PutUint64(buf[8:], uint64(i))
				if err := s.Add(buf[:8], buf[8:]); err != nil {
					t.Fatal(err)
				}
			}
			if s.Stats().Runs != 3 {
				t.Fatalf("%d runs, want 3", s.Stats().Runs)
			}
			path := s.runs[1].path
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(data), 0o600); err != nil {
				t.Fatal(err)
			}

			it, err := s.Sorted()
			if err == nil {
				for it.Next() {
				}
				err = it.Err()
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v, want one wrapping ErrCorrupt", err)
			}
			t.Log(err)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, dir)
		})
	}
}

// A damaged run that a merge pass reads fails Sorted.
func TestDamagedRunFailsMergePass(t *testing.T) {
	setFanIn(t, 2)
	dir := t.TempDir()
	s := New(dir, 1<<10)
	defer s.Close()
	for _, r := range randomRecords(5, 2000) {
		s.Add(r.key, r.value)
	}
	path := s.runs[0].path
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sorted(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Sorted: %v, want an error wrapping ErrCorrupt", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, dir)
	if matches, _ := filepath.Glob(filepath.Join(dir, "*")); len(matches) != 0 {
		t.Errorf("left behind: %v", matches)
	}
}

// BenchmarkSort sorts 1M records of ~80 bytes, spilling at 8 MiB and all in
// memory.
func BenchmarkSort(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]record, n)
	for i := range recs {
		key := fmt.Appendf(nil, "table/row-%016x/cf:col", rng.Uint64()) // 32 bytes
		value := make([]byte, 48)
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		recs[i] = record{key, value}
	}
	for _, bc := range []struct {
		name   string
		memory int
	}{{"spill-8MiB", 8 << 20}, {"in-memory", 1 << 30}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			dir := b.TempDir()
			var st Stats
			for b.Loop() {
				s := New(dir, bc.memory)
				for _, r := range recs {
					if err := s.Add(r.key, r.value); err != nil {
						b.Fatal(err)
					}
				}
				it, err := s.Sorted()
				if err != nil {
					b.Fatal(err)
				}
				count := 0
				for it.Next() {
					count++
				}
				if it.Err() != nil || count != n {
					b.Fatalf("%d records, %v", count, it.Err())
				}
				st = s.Stats()
				s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
			b.ReportMetric(float64(st.Runs), "runs")
		})
	}
}
