package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// recorder is a FlushFunc that keeps every batch it saw.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
}

func (r *recorder) flush(_ context.Context, items []int) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, slices.Clone(items))
	return nil
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n []int
	for _, b := range r.batches {
		n = append(n, len(b))
	}
	return n
}

func (r *recorder) all() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []int
	for _, b := range r.batches {
		all = append(all, b...)
	}
	slices.Sort(all)
	return all
}

// addAll adds items concurrently, each with size 1, and returns their errors
// in the order of items.
func addAll(ctx context.Context, b *Batcher[int], items []int) []error {
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = b.Add(ctx, it, 1) })
	}
	wg.Wait()
	return errs
}

func seq(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}

func closeOK(t *testing.T, b interface{ Close(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestBatchIsSentWhenMaxItemsIsReached(t *testing.T) {
	var r recorder
	b := New(Config{MaxItems: 5, MaxDelay: time.Hour}, r.flush)
	defer closeOK(t, b)

	for _, err := range addAll(t.Context(), b, seq(0, 10)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := r.sizes(); !slices.Equal(got, []int{5, 5}) {
		t.Errorf("batch sizes = %v, want [5 5] (the timer is an hour away)", got)
	}
	if got := r.all(); !slices.Equal(got, seq(0, 10)) {
		t.Errorf("flushed %v, want every item once", got)
	}
}

func TestBatchIsSentWhenMaxBytesIsReached(t *testing.T) {
	t.Run("a batch whose sizes reach MaxBytes goes at once", func(t *testing.T) {
		var r recorder
		b := New(Config{MaxItems: 100, MaxBytes: 10, MaxDelay: time.Hour}, r.flush)
		defer closeOK(t, b)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				if err := b.Add(t.Context(), i, 5); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got := r.sizes(); !slices.Equal(got, []int{2}) {
			t.Errorf("batch sizes = %v, want [2]", got)
		}
	})
	t.Run("an item that does not fit sends the batch before it", func(t *testing.T) {
		var r recorder
		b := New(Config{MaxItems: 100, MaxBytes: 10, MaxDelay: time.Hour}, r.flush)
		first := make(chan error, 1)
		go func() { first <- b.Add(t.Context(), 1, 6) }()
		waitFor(t, func() bool { return b.curLen() == 1 })
		second := make(chan error, 1)
		go func() { second <- b.Add(t.Context(), 2, 6) }()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if got := r.sizes(); !slices.Equal(got, []int{1}) {
			t.Errorf("batch sizes = %v, want [1]: item 2 waits in the next batch", got)
		}
		closeOK(t, b)
		if err := <-second; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an item larger than MaxBytes goes alone", func(t *testing.T) {
		var r recorder
		b := New(Config{MaxItems: 100, MaxBytes: 10, MaxDelay: time.Hour}, r.flush)
		small := make(chan error, 1)
		go func() { small <- b.Add(t.Context(), 1, 3) }()
		waitFor(t, func() bool { return b.curLen() == 1 })
		if err := b.Add(t.Context(), 2, 50); err != nil {
			t.Fatal(err)
		}
		if err := <-small; err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		got := slices.Clone(r.batches)
		r.mu.Unlock()
		slices.SortFunc(got, func(a, b []int) int { return a[0] - b[0] })
		if fmt.Sprint(got) != "[[1] [2]]" {
			t.Errorf("batches = %v, want [[1] [2]]", got)
		}
		closeOK(t, b)
	})
}

func TestAddNCountsAsNItemsAgainstMaxItems(t *testing.T) {
	t.Run("items of weight 2 fill a batch of MaxItems 4 with two", func(t *testing.T) {
		var r recorder
		b := New(Config{MaxItems: 4, MaxDelay: time.Hour}, r.flush)
		defer closeOK(t, b)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				if err := b.AddN(t.Context(), i, 2, 1); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got := r.sizes(); !slices.Equal(got, []int{2, 2}) {
			t.Errorf("batch sizes = %v, want [2 2] (the timer is an hour away)", got)
		}
	})
	t.Run("an item that does not fit sends the batch before it", func(t *testing.T) {
		var r recorder
		b := New(Config{MaxItems: 4, MaxDelay: time.Hour}, r.flush)
		first := make(chan error, 1)
		go func() { first <- b.AddN(t.Context(), 1, 3, 1) }()
		waitFor(t, func() bool { return b.curLen() == 1 })
		second := make(chan error, 1)
		go func() { second <- b.AddN(t.Context(), 2, 2, 1) }()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if got := r.sizes(); !slices.Equal(got, []int{1}) {
			t.Errorf("batch sizes = %v, want [1]: item 2 waits in the next batch", got)
		}
		closeOK(t, b)
		if err := <-second; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an item counting more than MaxItems goes alone", func(t *testing.T) {
		var r recorder
		b := New(Config{MaxItems: 4, MaxDelay: time.Hour}, r.flush)
		small := make(chan error, 1)
		go func() { small <- b.Add(t.Context(), 1, 1) }()
		waitFor(t, func() bool { return b.curLen() == 1 })
		if err := b.AddN(t.Context(), 2, 9, 1); err != nil {
			t.Fatal(err)
		}
		if err := <-small; err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		got := slices.Clone(r.batches)
		r.mu.Unlock()
		slices.SortFunc(got, func(a, b []int) int { return a[0] - b[0] })
		if fmt.Sprint(got) != "[[1] [2]]" {
			t.Errorf("batches = %v, want [[1] [2]]", got)
		}
		closeOK(t, b)
	})
}

func TestBatchIsSentMaxDelayAfterItsFirstItem(t *testing.T) {
	var r recorder
	const delay = 30 * time.Millisecond
	b := New(Config{MaxItems: 100, MaxDelay: delay}, r.flush)
	defer closeOK(t, b)

	start := time.Now()
	if err := b.Add(t.Context(), 1, 1); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay || took > delay+2*time.Second {
		t.Errorf("a lone item was flushed after %v, want about %v", took, delay)
	}
	if got := r.sizes(); !slices.Equal(got, []int{1}) {
		t.Errorf("batch sizes = %v, want [1]", got)
	}
}

func TestZeroMaxDelaySendsAsSoonAsASlotIsFree(t *testing.T) {
	var r recorder
	b := New(Config{MaxItems: 100}, r.flush)
	defer closeOK(t, b)
	for _, err := range addAll(t.Context(), b, seq(0, 50)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := r.all(); !slices.Equal(got, seq(0, 50)) {
		t.Errorf("flushed %v, want every item once", got)
	}
}

func TestEachCallerGetsTheErrorOfItsOwnItem(t *testing.T) {
	flush := func(_ context.Context, items []int) []error {
		errs := make([]error, len(items))
		for i, it := range items {
			if it%3 == 0 {
				errs[i] = fmt.Errorf("item %d failed", it)
			}
		}
		return errs
	}
	b := New(Config{MaxItems: 7, MaxDelay: 5 * time.Millisecond}, flush)
	defer closeOK(t, b)

	items := seq(0, 100)
	for i, err := range addAll(t.Context(), b, items) {
		var want string
		if items[i]%3 == 0 {
			want = fmt.Sprintf("item %d failed", items[i])
		}
		if got := fmt.Sprint(err); (want == "" && err != nil) || (want != "" && got != want) {
			t.Errorf("item %d: error %v, want %q", items[i], err, want)
		}
	}
}

func TestFlushReturningTheWrongNumberOfErrorsFailsEveryItem(t *testing.T) {
	b := New(Config{MaxItems: 3, MaxDelay: time.Hour}, func(context.Context, []int) []error {
		return []error{nil}
	})
	defer closeOK(t, b)
	for _, err := range addAll(t.Context(), b, seq(0, 3)) {
		if err == nil {
			t.Error("an item succeeded although flush returned 1 error for 3 items")
		}
	}
}

func TestAddReturnsWhenItsCtxEndsButTheItemIsStillFlushed(t *testing.T) {
	release := make(chan struct{})
	var r recorder
	b := New(Config{MaxItems: 1}, func(ctx context.Context, items []int) []error {
		<-release
		return r.flush(ctx, items)
	})

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := b.Add(ctx, 7, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Add = %v, want context.DeadlineExceeded", err)
	}
	close(release)
	closeOK(t, b)
	if got := r.all(); !slices.Equal(got, []int{7}) {
		t.Errorf("flushed %v, want [7]: a queued item is written even if its caller left", got)
	}
}

func TestCallersSharingACtxReturnWhenItEnds(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var r recorder
	b := New(Config{MaxItems: 10, MaxDelay: time.Hour}, func(ctx context.Context, items []int) []error {
		close(started)
		<-release
		return r.flush(ctx, items)
	})
	type key struct{}
	ctx, cancel := context.WithCancel(t.Context())
	errs := make(chan error, 10)
	for i := range 10 {
		c := ctx
		if i%2 == 1 {
			c = context.WithValue(ctx, key{}, i) // the same Done channel
		}
		go func() { errs <- b.Add(c, i, 1) }()
	}
	<-started // all ten queued: the batch went
	cancel()
	for range 10 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("Add = %v, want context.Canceled", err)
		}
	}
	close(release)
	closeOK(t, b)
	if got := r.all(); !slices.Equal(got, seq(0, 10)) {
		t.Errorf("flushed %v, want 0..9: queued items are written even if their callers left", got)
	}
}

func TestACallerWhoseCtxEndsLeavesTheOthersWaiting(t *testing.T) {
	release := make(chan struct{})
	var r recorder
	b := New(Config{MaxItems: 3, MaxDelay: time.Hour}, func(ctx context.Context, items []int) []error {
		<-release
		return r.flush(ctx, items)
	})
	first, cancelFirst := context.WithCancel(t.Context()) // watches the batch
	defer cancelFirst()
	second, cancelSecond := context.WithCancel(t.Context())
	errs := make([]chan error, 3)
	for i, ctx := range []context.Context{first, second, first} {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- b.Add(ctx, i, 1) }()
		waitFor(t, func() bool { return b.curLen() == i+1 || i == 2 })
	}
	cancelSecond()
	if err := <-errs[1]; !errors.Is(err, context.Canceled) {
		t.Fatalf("Add with the cancelled ctx = %v, want context.Canceled", err)
	}
	select {
	case err := <-errs[0]:
		t.Fatalf("Add with a live ctx returned %v before its batch was flushed", err)
	case err := <-errs[2]:
		t.Fatalf("Add with a live ctx returned %v before its batch was flushed", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	for _, i := range []int{0, 2} {
		if err := <-errs[i]; err != nil {
			t.Fatalf("Add %d = %v, want nil", i, err)
		}
	}
	closeOK(t, b)
}

func TestAddWithAnEndedCtxQueuesNothing(t *testing.T) {
	var r recorder
	b := New(Config{MaxItems: 1}, r.flush)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Add(ctx, 1, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Add = %v, want context.Canceled", err)
	}
	closeOK(t, b)
	if got := r.sizes(); len(got) != 0 {
		t.Errorf("flushed %v, want nothing", got)
	}
}

func TestFlushCtxBelongsToTheBatcher(t *testing.T) {
	var sawCancelled atomic.Bool
	b := New(Config{MaxItems: 2, MaxDelay: time.Hour}, func(ctx context.Context, items []int) []error {
		time.Sleep(10 * time.Millisecond)
		sawCancelled.Store(ctx.Err() != nil)
		return nil
	})
	defer closeOK(t, b)

	short, cancel := context.WithCancel(t.Context())
	errShort := make(chan error, 1)
	go func() { errShort <- b.Add(short, 1, 1) }()
	waitFor(t, func() bool { return b.curLen() == 1 })
	cancel()
	if err := <-errShort; !errors.Is(err, context.Canceled) {
		t.Fatalf("Add = %v, want context.Canceled", err)
	}
	if err := b.Add(t.Context(), 2, 1); err != nil {
		t.Fatalf("the batch-mate of a cancelled caller failed: %v", err)
	}
	if sawCancelled.Load() {
		t.Error("the flush saw a cancelled ctx because one caller gave up")
	}
}

func TestAtMostMaxInFlightFlushesRunAtOnce(t *testing.T) {
	var running, peak atomic.Int32
	var r recorder
	b := New(Config{MaxItems: 2, MaxDelay: time.Millisecond, MaxInFlight: 3}, func(ctx context.Context, items []int) []error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(3 * time.Millisecond)
		running.Add(-1)
		return r.flush(ctx, items)
	})
	for _, err := range addAll(t.Context(), b, seq(0, 200)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	closeOK(t, b)
	if p := peak.Load(); p > 3 {
		t.Errorf("%d flushes ran at once, want at most 3", p)
	} else if p < 2 {
		t.Logf("only %d flush ran at once (slow machine?)", p)
	}
	if got := r.all(); !slices.Equal(got, seq(0, 200)) {
		t.Errorf("flushed %d items, want 200 once each", len(got))
	}
}

func TestBackpressureWhenEveryFlushSlotIsBusy(t *testing.T) {
	release := make(chan struct{})
	var r recorder
	b := New(Config{MaxItems: 2, MaxDelay: time.Hour, MaxInFlight: 1}, func(ctx context.Context, items []int) []error {
		<-release
		return r.flush(ctx, items)
	})

	results := make(chan error, 10)
	add := func(v int) { results <- b.Add(t.Context(), v, 1) }
	// 2 in flight, 2 pending, 2 in the following (full) batch.
	for v := range 6 {
		go add(v)
	}
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inFlight == 1 && b.pending != nil && len(b.pending.items) == 2 && b.cur != nil && b.cur.full
	})

	// The seventh caller cannot queue: it waits, and gives up with its ctx.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := b.Add(ctx, 100, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Add while every slot and batch is full = %v, want context.DeadlineExceeded", err)
	}
	// An eighth caller waits and gets in once a slot frees.
	go add(6)
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.space != nil
	})

	close(release)
	// Item 6 gets in, alone in a batch whose timer is an hour away.
	waitFor(t, func() bool { return b.curLen() == 1 })
	closeOK(t, b)
	for range 7 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := r.all(); !slices.Equal(got, seq(0, 7)) {
		t.Errorf("flushed %v, want 0..6 (100 gave up before it was queued)", got)
	}
}

func TestCloseFlushesWhatIsPending(t *testing.T) {
	var r recorder
	b := New(Config{MaxItems: 100, MaxDelay: time.Hour}, r.flush)
	errs := make(chan error, 10)
	for v := range 10 {
		go func() { errs <- b.Add(t.Context(), v, 1) }()
	}
	waitFor(t, func() bool { return b.curLen() == 10 })
	closeOK(t, b)
	for range 10 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := r.all(); !slices.Equal(got, seq(0, 10)) {
		t.Errorf("flushed %v, want 0..9", got)
	}

	t.Run("Close is idempotent", func(t *testing.T) {
		closeOK(t, b)
		closeOK(t, b)
	})
	t.Run("Add after Close returns ErrClosed", func(t *testing.T) {
		if err := b.Add(t.Context(), 1, 1); !errors.Is(err, ErrClosed) {
			t.Errorf("Add = %v, want ErrClosed", err)
		}
	})
}

func TestCloseCutShortCancelsTheFlushesAndWaitsForThem(t *testing.T) {
	started := make(chan struct{}, 10)
	var returned atomic.Int32
	b := New(Config{MaxItems: 1, MaxInFlight: 1}, func(ctx context.Context, items []int) []error {
		started <- struct{}{}
		<-ctx.Done()
		returned.Add(1)
		return []error{ctx.Err()}
	})
	errs := make(chan error, 2)
	go func() { errs <- b.Add(context.Background(), 1, 1) }()
	<-started
	go func() { errs <- b.Add(context.Background(), 2, 1) }() // pending behind the first
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.pending != nil
	})

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want context.DeadlineExceeded", err)
	}
	if n := returned.Load(); n != 2 {
		t.Errorf("Close returned while %d of 2 flushes had not", 2-n)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("Add = %v, want context.Canceled from the hard stop", err)
		}
	}
	// Idempotent even after a hard stop.
	closeOK(t, b)
}

func TestCloseWakesCallersWaitingForSpace(t *testing.T) {
	release := make(chan struct{})
	b := New(Config{MaxItems: 1, MaxDelay: time.Hour, MaxInFlight: 1}, func(context.Context, []int) []error {
		<-release
		return nil
	})
	results := make(chan error, 4)
	for v := range 4 { // in flight, pending, stuck cur, waiting
		go func() { results <- b.Add(t.Context(), v, 1) }()
	}
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.space != nil
	})
	closed := make(chan error, 1)
	go func() { closed <- b.Close(t.Context()) }()
	// The waiting caller never queued its item: it learns of Close at once.
	if err := <-results; !errors.Is(err, ErrClosed) {
		t.Fatalf("the waiting caller got %v, want ErrClosed", err)
	}
	close(release)
	for range 3 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

func TestNoGoroutineOutlivesClose(t *testing.T) {
	before := runtime.NumGoroutine()
	var r recorder
	b := New(Config{MaxItems: 3, MaxDelay: 2 * time.Millisecond, MaxInFlight: 2}, r.flush)
	for range 5 {
		addAll(t.Context(), b, seq(0, 20))
	}
	// Leave a batch open, with its timer, for Close to deal with (unless
	// the 2ms timer wins the race).
	added := make(chan error, 1)
	go func() { added <- b.Add(context.Background(), 99, 1) }()
	waitFor(t, func() bool { return b.curLen() == 1 || slices.Contains(r.all(), 99) })
	closeOK(t, b)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

func (b *Batcher[T]) curLen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return 0
	}
	return len(b.cur.items)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkAdd measures Add with many parallel callers, as the pipeline
// calls it: each caller blocks until its batch was flushed.
func BenchmarkAdd(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  Config
		work bool
	}{
		{"items=100/delay=1ms", Config{MaxItems: 100, MaxDelay: time.Millisecond}, false},
		{"items=500/delay=0", Config{MaxItems: 500}, false},
		{"items=500/delay=20ms/ctx=work", Config{MaxItems: 500, MaxDelay: 20 * time.Millisecond}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			bt := New(c.cfg, func(context.Context, []int) []error { return nil })
			ctx := context.Background()
			parallelism := 64 // callers per GOMAXPROCS
			if c.work {
				// As the pipeline calls it: 1000 callers, all with the
				// work context, which can end.
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
				defer cancel()
				parallelism = 500
			}
			b.SetParallelism(parallelism)
			b.ReportAllocs()
			cpu := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bt.Add(ctx, 1, 8); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			// On a shared machine the CPU time of the process per Add says
			// more than the wall time per Add.
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			if err := bt.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// processCPU is the user and system time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}

func TestCloseWithNothingPendingSucceedsAfterItsDeadline(t *testing.T) {
	for range 200 { // the old code chose at random between drained and ctx.Done
		b := New(Config{MaxItems: 10, MaxDelay: time.Millisecond}, func(ctx context.Context, items []int) []error { return nil })
		if err := b.Add(context.Background(), 1, 1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		time.Sleep(time.Millisecond) // let the closer goroutine see the empty batcher
		if err := b.Close(ctx); err != nil {
			t.Fatalf("Close with nothing pending = %v, want nil", err)
		}
	}
}

// TestEnqueuedItemsAreFlushedAndTheirTicketsGiveTheirErrors: Enqueue does
// not wait; the items go in batches as Add's do, each ticket's Wait (from
// any goroutine, once or more) gives its own item's error, and an item is
// flushed whether or not its ticket is waited for.
func TestEnqueuedItemsAreFlushedAndTheirTicketsGiveTheirErrors(t *testing.T) {
	odd := errors.New("odd")
	var flushed atomic.Int64
	b := New(Config{MaxItems: 4, MaxDelay: time.Hour}, func(_ context.Context, items []int) []error {
		flushed.Add(int64(len(items)))
		errs := make([]error, len(items))
		for i, it := range items {
			if it%2 == 1 {
				errs[i] = odd
			}
		}
		return errs
	})
	defer b.Close(context.Background())
	var tickets []Ticket[int]
	for i := range 8 {
		tk, err := b.Enqueue(context.Background(), i, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	var wg sync.WaitGroup
	for i, tk := range tickets[:6] { // the last two are never waited for
		wg.Go(func() {
			for range 2 {
				if err := tk.Wait(context.Background()); (i%2 == 1) != errors.Is(err, odd) {
					t.Errorf("item %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, func() bool { return flushed.Load() == 8 })
	if err := (Ticket[int]{}).Wait(context.Background()); err != nil {
		t.Fatalf("the zero ticket: %v", err)
	}
}

// TestATicketsWaitEndsWithItsCtx: a Wait whose ctx ends returns its error,
// and a later Wait still gets the item's result.
func TestATicketsWaitEndsWithItsCtx(t *testing.T) {
	release := make(chan struct{})
	b := New(Config{MaxItems: 1}, func(_ context.Context, items []int) []error {
		<-release
		return nil
	})
	defer b.Close(context.Background())
	tk, err := b.Enqueue(context.Background(), 1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := tk.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with an ended ctx: %v", err)
	}
	close(release)
	if err := tk.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after the flush: %v", err)
	}
	if _, err := b.Enqueue(ctx, 2, 1, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enqueue with an ended ctx: %v", err)
	}
}
