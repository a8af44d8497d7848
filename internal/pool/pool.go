package pool

import "sync"

// Pool holds reusable *T. The zero value is ready: Get makes a new T when
// the pool is empty.
type Pool[T any] struct{ p sync.Pool }

// Get returns a *T from the pool, or a new zero one.
func (p *Pool[T]) Get() *T {
	if v, ok := p.p.Get().(*T); ok {
		return v
	}
	return new(T)
}

// Put returns v to the pool; the caller must not use it afterwards.
func (p *Pool[T]) Put(v *T) { p.p.Put(v) }
