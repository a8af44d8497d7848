package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Add once Close has been called.
var ErrClosed = errors.New("batch: batcher is closed")

// DefaultMaxInFlight is the number of concurrent flushes when
// Config.MaxInFlight is 0. Four keeps a slow flush (one ApplyBulk retrying
// inside the client) from stalling the batches behind it, without letting
// one pipeline open an unbounded number of concurrent writes.
const DefaultMaxInFlight = 4

// maxPrealloc caps the capacity a batch reserves up front, so that a very
// large MaxItems does not cost memory per batch that is rarely used.
const maxPrealloc = 1024

// Config bounds the batches of a Batcher. A zero or negative bound is not
// applied.
type Config struct {
	// MaxItems sends a batch once it holds this many items; an item added
	// with AddN counts as n. An item that counts as more than MaxItems is
	// sent in a batch of its own.
	MaxItems int
	// MaxBytes sends a batch once the sizes given to Add reach this sum. An
	// item larger than MaxBytes is sent in a batch of its own.
	MaxBytes int
	// MaxDelay sends a batch this long after its first item was added, full
	// or not. When it is 0 a batch is ready at once: it is sent as soon as a
	// flush slot is free and gathers items only while every slot is busy.
	MaxDelay time.Duration
	// MaxInFlight is the number of flushes that may run at once; 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
}

// FlushFunc writes one batch. It returns nil when every item succeeded, or
// one error per item, in the order of items (nil for an item that
// succeeded). It must not retain items after it returns, and it must return
// promptly once ctx is cancelled: Close relies on that when it is cut short.
type FlushFunc[T any] func(ctx context.Context, items []T) []error

// Batcher groups items added by concurrent callers into batches and hands
// each batch to a FlushFunc, at most Config.MaxInFlight at a time. It is
// safe for concurrent use. The zero value is not usable: call New.
type Batcher[T any] struct {
	maxItems    int
	maxBytes    int
	maxDelay    time.Duration
	maxInFlight int
	flush       FlushFunc[T]

	// ctx is the flushes' context. It belongs to the batcher, not to any
	// caller of Add, so that one caller giving up does not fail the other
	// items of its batch. Close cancels it when its own ctx ends first.
	ctx    context.Context
	cancel context.CancelFunc

	// wg counts the goroutines the batcher owns: flush loops and pending
	// MaxDelay timer callbacks. Close waits for all of them.
	wg sync.WaitGroup

	mu sync.Mutex
	// cur takes new items; nil until the first item after the previous
	// batch left. It is left in place, marked ready, while every flush slot
	// is busy and pending is taken.
	cur *batch[T]
	// pending is the next batch to flush: ready, taking no more items,
	// waiting for a flush slot. It is only set while inFlight == maxInFlight.
	pending  *batch[T]
	inFlight int
	// space is closed to wake Add callers that wait because cur is full and
	// cannot move on; nil while nobody waits.
	space   chan struct{}
	closed  bool
	drained chan struct{} // closed once Close saw every goroutine finish
}

// batch is the one allocation made per batch (besides its backing array,
// done and wake channels and timer): callers keep a pointer to it and an
// index.
type batch[T any] struct {
	items []T
	count int // the items' counts against MaxItems (AddN)
	bytes int
	full  bool // takes no more items
	ready bool // goes as soon as a slot is free: full, timed out, or closing
	timer *time.Timer
	done  chan struct{} // closed after errs is set
	errs  []error       // nil, or one per item

	// The callers of a batch nearly always share one context (the
	// pipeline's work context), whose Done channel is shared by every
	// caller of every batch: if each of them selected on it and on done,
	// each would lock that one channel twice, and queue on it, for the
	// batch's few milliseconds. Instead the first caller whose context can
	// end watches it for the batch (see wait): its Done channel is watched,
	// and the callers whose Done channel is the same one wait on wake
	// alone, which is closed once done is, or once the watcher saw the
	// context end. Set with mu while the batch takes items.
	watched <-chan struct{}
	wake    chan struct{}
	woken   atomic.Bool // wake is closed
}

// New returns a Batcher that calls flush for each batch. Close it to flush
// what is pending and wait for its goroutines.
func New[T any](cfg Config, flush func(ctx context.Context, items []T) []error) *Batcher[T] {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Batcher[T]{
		maxItems:    cfg.MaxItems,
		maxBytes:    cfg.MaxBytes,
		maxDelay:    cfg.MaxDelay,
		maxInFlight: cfg.MaxInFlight,
		flush:       flush,
		ctx:         ctx,
		cancel:      cancel,
	}
}

// Add queues item, whose weight against MaxBytes is size, and blocks until
// the batch holding it was flushed; it returns that item's error from the
// flush. While every flush slot is busy and the next batch is full, Add
// blocks before queuing (backpressure).
//
// If ctx ends first, Add returns ctx.Err(). An item that was already queued
// stays in its batch and may still be written afterwards, so callers must
// only batch idempotent work and must not change what item refers to.
// After Close, Add returns ErrClosed. Add is safe for concurrent use.
func (b *Batcher[T]) Add(ctx context.Context, item T, size int) error {
	return b.AddN(ctx, item, 1, size)
}

// AddN is Add for an item that counts as n items against MaxItems (n at
// least 1): one that stands for several, such as the rows of one message,
// which must travel in the same batch. An item that counts as more than
// MaxItems goes in a batch of its own, as one larger than MaxBytes does.
func (b *Batcher[T]) AddN(ctx context.Context, item T, n, size int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n = max(n, 1)
	// Queuing and waiting are apart so that their frames are not on the
	// stack at once: callers may run on small goroutine stacks (the
	// Bigtable sink's, in a callback of the Pub/Sub client).
	bt, i, w, err := b.queue(ctx, item, n, size)
	if err != nil {
		return err
	}
	return bt.wait(ctx, i, w)
}

// Enqueue queues item as AddN does, without waiting for its batch: the
// returned Ticket waits for it, once or more, from any goroutine. It blocks
// only as AddN does before queuing (backpressure), and returns ctx.Err()
// or ErrClosed then.
//
// The item is flushed with the others of its batch whether or not anyone
// waits for its ticket.
func (b *Batcher[T]) Enqueue(ctx context.Context, item T, n, size int) (Ticket[T], error) {
	if err := ctx.Err(); err != nil {
		return Ticket[T]{}, err
	}
	// The ticket's waits may come from other goroutines with contexts of
	// their own: it is queued as a caller whose context cannot end, and
	// each Wait selects on its own.
	bt, i, _, err := b.queue(context.Background(), item, max(n, 1), size)
	if err != nil {
		return Ticket[T]{}, err
	}
	return Ticket[T]{bt: bt, i: i}, nil
}

// Ticket is an item Enqueue queued: Wait gives its result. The zero Ticket
// is no item, and its Wait returns nil at once.
type Ticket[T any] struct {
	bt *batch[T]
	i  int
}

// Wait blocks until the item's batch was flushed, and returns the item's
// error from the flush; ctx.Err() if ctx ends first (the item may still be
// flushed). It is safe to call from several goroutines, and again.
func (t Ticket[T]) Wait(ctx context.Context) error {
	if t.bt == nil {
		return nil
	}
	select {
	case <-t.bt.done:
		return t.bt.err(t.i)
	default:
	}
	return t.bt.waitCtx(ctx, t.i, false)
}

// queue adds item to the current batch, once there is room, and returns the
// batch, the item's index in it and how its caller is to wait.
func (b *Batcher[T]) queue(ctx context.Context, item T, n, size int) (*batch[T], int, waiter, error) {
	b.mu.Lock()
	for {
		if b.closed {
			b.mu.Unlock()
			return nil, 0, 0, ErrClosed
		}
		cur := b.cur
		if cur == nil {
			b.cur = b.newBatch()
			break
		}
		if !cur.full {
			if cur.fits(b, n, size) {
				break
			}
			// The item would push cur past a bound: cur goes as it is, and
			// the item starts (or waits for) the next batch.
			b.markFull(cur)
			continue
		}
		// cur is full and stuck behind pending: wait for a flush to end.
		if b.space == nil {
			b.space = make(chan struct{})
		}
		space := b.space
		b.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return nil, 0, 0, ctx.Err()
		}
		b.mu.Lock()
	}
	bt := b.cur
	i := len(bt.items)
	bt.items = append(bt.items, item)
	bt.count += n
	bt.bytes += size
	w := alone
	if done := ctx.Done(); done != nil {
		switch {
		case bt.watched == nil:
			bt.watched, bt.wake = done, make(chan struct{})
			w = watcher
		case bt.watched == done:
			w = watched
		default:
			w = other
		}
	}
	if (b.maxItems > 0 && bt.count >= b.maxItems) || (b.maxBytes > 0 && bt.bytes >= b.maxBytes) {
		b.markFull(bt)
	} else if bt.ready {
		b.dispatch()
	}
	b.mu.Unlock()
	return bt, i, w, nil
}

// How a caller of Add waits for its batch (batch.wait).
type waiter uint8

const (
	alone   waiter = iota // its ctx cannot end: it waits for done
	watcher               // it watches its ctx for the batch: done or ctx
	watched               // its ctx's Done is the watcher's: it waits for wake
	other                 // another ctx: done or its ctx
)

// wait blocks until the batch was flushed or ctx ended, and returns the
// item's error or ctx.Err(). If both happened, the item's error wins.
func (bt *batch[T]) wait(ctx context.Context, i int, w waiter) error {
	switch w {
	case alone:
		<-bt.done
		return bt.err(i)
	case watched:
		<-bt.wake
		select {
		case <-bt.done:
			return bt.err(i)
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// A context whose Done channel closed but whose Err is nil
		// breaks the contract of context.Context; wait on its own.
	}
	return bt.waitCtx(ctx, i, w == watcher)
}

// waitCtx is wait for a caller that selects on its own ctx; the watcher
// wakes the callers that share its ctx when it ends.
func (bt *batch[T]) waitCtx(ctx context.Context, i int, watcher bool) error {
	select {
	case <-bt.done:
		return bt.err(i)
	case <-ctx.Done():
		if watcher {
			bt.wakeAll()
		}
		// Prefer the result if it arrived at the same time.
		select {
		case <-bt.done:
			return bt.err(i)
		default:
			return ctx.Err()
		}
	}
}

// wakeAll releases the callers waiting on wake, once.
func (bt *batch[T]) wakeAll() {
	if bt.wake != nil && bt.woken.CompareAndSwap(false, true) {
		close(bt.wake)
	}
}

// Close flushes what is pending, waits for the flushes in flight, and
// releases the batcher. Callers whose item is queued get their results as
// usual; callers still waiting for room to queue, and later calls to Add,
// return ErrClosed.
//
// Like net/http's Server.Shutdown, Close is idempotent and bounded by ctx:
// if ctx ends first, Close cancels the flushes' context (the flushes still
// running and the batches not yet sent fail with context.Canceled, which
// their callers receive), waits for the flushes to return, and returns
// ctx.Err().
func (b *Batcher[T]) Close(ctx context.Context) error {
	b.mu.Lock()
	// Nothing queued and nothing flushing: nothing can be cut short, so
	// Close succeeds even with a context that has already ended (a stop
	// that reached its deadline must not report a failure it did not have).
	idle := b.cur == nil && b.pending == nil && b.inFlight == 0
	if !b.closed {
		b.closed = true
		if cur := b.cur; cur != nil {
			b.markFull(cur)
		}
		b.wake()
		b.drained = make(chan struct{})
		// Owned by Close: every call to Close waits for it below.
		go func() {
			b.wg.Wait()
			close(b.drained)
		}()
	}
	drained := b.drained
	b.mu.Unlock()

	select {
	case <-drained:
		b.cancel()
		return nil
	case <-ctx.Done():
		b.cancel()
		<-drained
		if idle {
			return nil
		}
		return ctx.Err()
	}
}

// newBatch starts a batch and, with a MaxDelay, its timer. The caller
// makes it b.cur and adds the first item in the same critical section, so a
// batch is never dispatched empty. Called with mu.
func (b *Batcher[T]) newBatch() *batch[T] {
	// With a MaxDelay, batches are expected to fill, so reserve the whole
	// batch at once (one allocation per batch instead of one per doubling);
	// without, they hold what arrived during one flush, often a few items.
	n := maxPrealloc
	if b.maxItems > 0 {
		n = min(b.maxItems, maxPrealloc)
	}
	if b.maxDelay <= 0 {
		n = min(n, 16)
	}
	bt := &batch[T]{items: make([]T, 0, n), done: make(chan struct{})}
	if b.maxDelay <= 0 {
		bt.ready = true // Add dispatches it once the item is in
		return bt
	}
	b.wg.Add(1)
	bt.timer = time.AfterFunc(b.maxDelay, func() {
		defer b.wg.Done()
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.cur == bt && !bt.ready {
			bt.ready = true
			b.dispatch()
		}
	})
	return bt
}

// markFull stops bt (which is b.cur) taking items and sends it as soon as a
// slot is free. Called with mu.
func (b *Batcher[T]) markFull(bt *batch[T]) {
	bt.full = true
	bt.ready = true
	if bt.timer != nil && bt.timer.Stop() {
		// The callback will never run: release its hold on wg for it.
		b.wg.Done()
	}
	b.dispatch()
}

// dispatch moves a ready b.cur on: to a new flush loop when a slot is free,
// else to pending when that is free, else it stays (taking items until it
// is full). Called with mu.
func (b *Batcher[T]) dispatch() {
	cur := b.cur
	if cur == nil || !cur.ready {
		return
	}
	switch {
	case b.inFlight < b.maxInFlight:
		b.inFlight++
		b.wg.Add(1)
		go b.run(cur)
	case b.pending == nil:
		b.pending = cur
	default:
		return
	}
	b.cur = nil
	b.wake()
}

// wake releases Add callers waiting for cur to move on. Called with mu.
func (b *Batcher[T]) wake() {
	if b.space != nil {
		close(b.space)
		b.space = nil
	}
}

// run flushes bt, then whatever became pending meanwhile, and gives its
// slot back when there is nothing left.
func (b *Batcher[T]) run(bt *batch[T]) {
	defer b.wg.Done()
	for bt != nil {
		b.flushOne(bt)

		b.mu.Lock()
		bt = b.pending
		b.pending = nil
		if bt == nil {
			b.inFlight--
		} else if cur := b.cur; cur != nil && cur.ready {
			// cur waited behind pending; it is next in line now.
			b.pending = cur
			b.cur = nil
			b.wake()
		}
		b.mu.Unlock()
	}
}

func (b *Batcher[T]) flushOne(bt *batch[T]) {
	errs := b.flush(b.ctx, bt.items)
	if errs != nil && len(errs) != len(bt.items) {
		err := fmt.Errorf("batch: flush returned %d errors for %d items", len(errs), len(bt.items))
		errs = make([]error, len(bt.items))
		for i := range errs {
			errs[i] = err
		}
	}
	bt.errs = errs
	// The callers copied what they need (their index); drop the items so a
	// caller still holding bt does not keep them alive.
	clear(bt.items)
	bt.items = nil
	close(bt.done)
	bt.wakeAll()
}

func (bt *batch[T]) fits(b *Batcher[T], n, size int) bool {
	if len(bt.items) == 0 {
		return true
	}
	if b.maxItems > 0 && bt.count+n > b.maxItems {
		return false
	}
	return b.maxBytes <= 0 || bt.bytes+size <= b.maxBytes
}

func (bt *batch[T]) err(i int) error {
	if bt.errs == nil {
		return nil
	}
	return bt.errs[i]
}
