package warm

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// deep uses about n KiB of stack.
//
//go:noinline
func deep(n int) int {
	var buf [1024]byte
	buf[n%1024] = byte(n)
	if n == 0 {
		return int(buf[0])
	}
	return deep(n-1) + int(buf[n%1024])
}

func TestDoRunsEveryCallAndWaitsForIt(t *testing.T) {
	p := New(8, time.Second)
	var n atomic.Int64
	var running, most atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ran := false
			p.Do(func() {
				r := running.Add(1)
				for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				ran = true
				n.Add(1)
				running.Add(-1)
			})
			if !ran {
				t.Error("Do returned before its call ran")
			}
		}()
	}
	wg.Wait()
	if n.Load() != 100 {
		t.Fatalf("%d calls ran, want 100", n.Load())
	}
	if m := most.Load(); m > 8 || m < 2 {
		t.Fatalf("at most %d calls ran at once; want between 2 and the limit, 8", m)
	}
}

// TestSequentialCallsReuseOneGoroutine: calls one after another run on the
// same goroutine, whose stack has grown already; a goroutine left idle
// ends.
func TestSequentialCallsReuseOneGoroutine(t *testing.T) {
	p := New(4, 50*time.Millisecond)
	before := runtime.NumGoroutine()
	ids := map[uintptr]bool{}
	for i := 0; i < 20; i++ {
		p.Do(func() {
			deep(16)
			var st [64]byte
			n := runtime.Stack(st[:], false)
			ids[uintptr(goroutineID(st[:n]))] = true
		})
	}
	if len(ids) != 1 {
		t.Fatalf("20 sequential calls ran on %d goroutines, want 1", len(ids))
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Fatalf("%d goroutines after the idle time, %d before: the worker did not end", g, before)
	}
}

// goroutineID reads N from a stack trace's "goroutine N [".
func goroutineID(st []byte) int {
	id := 0
	for _, c := range st[len("goroutine "):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + int(c-'0')
	}
	return id
}

// BenchmarkDeepCall compares a call that needs ~16 KiB of stack made from
// a fresh goroutine (as a Pub/Sub callback makes it) directly and through
// a Pool.
func BenchmarkDeepCall(b *testing.B) {
	run := func(b *testing.B, call func()) {
		var wg sync.WaitGroup
		for i := 0; i < b.N; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); call() }()
			wg.Wait()
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, func() { deep(16) }) })
	p := New(4, time.Second)
	b.Run("pool", func(b *testing.B) { run(b, func() { p.Do(func() { deep(16) }) }) })
}
