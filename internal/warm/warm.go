package warm

import (
	"sync"
	"time"
)

// Pool runs calls on at most a limit of reused goroutines. A call goes to an idle
// goroutine of the pool if there is one, to a new one while there are
// fewer than the limit, and otherwise waits for the first to be free; a
// goroutine idle for Idle ends. The zero Pool is not usable: call New.
type Pool struct {
	jobs  chan job
	slots chan struct{} // one per live goroutine
	idle  time.Duration
	dones sync.Pool // of chan struct{}, buffered 1
}

type job struct {
	fn   func()
	done chan struct{}
}

// DefaultIdle is how long a goroutine of a Pool waits for its next call
// before it ends.
const DefaultIdle = 10 * time.Second

// New returns a Pool of at most limit goroutines (at least 1), which end
// after idle without a call (DefaultIdle if idle is not positive).
func New(limit int, idle time.Duration) *Pool {
	if idle <= 0 {
		idle = DefaultIdle
	}
	p := &Pool{jobs: make(chan job), slots: make(chan struct{}, max(limit, 1)), idle: idle}
	p.dones.New = func() any { return make(chan struct{}, 1) }
	return p
}

// Do runs fn on a goroutine of the pool and returns when it returned. fn
// must not panic (it would end the process, as in any goroutine).
func (p *Pool) Do(fn func()) {
	done := p.dones.Get().(chan struct{})
	j := job{fn: fn, done: done}
	select {
	case p.jobs <- j: // an idle goroutine took it
	default:
		select {
		case p.jobs <- j:
		case p.slots <- struct{}{}:
			go p.work(j)
		}
	}
	<-done
	p.dones.Put(done)
}

// work runs j, then the pool's next calls, until it has been idle for
// p.idle.
func (p *Pool) work(j job) {
	defer func() { <-p.slots }()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		j.fn()
		j.done <- struct{}{}
		t.Reset(p.idle)
		select {
		case j = <-p.jobs:
		case <-t.C:
			return
		}
	}
}
