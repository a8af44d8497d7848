// Package pool is sync.Pool with a type: Get returns a *T, new or reused,
// without a type assertion at the caller (the pipeline's code asserts no
// type: see ARCHITECTURE.md).
//
// It owns nothing but that; what a value must be reset to before reuse is
// the caller's.
//
// # Guarantees
//
// As sync.Pool's: safe for concurrent use; a value Put may be dropped at
// any garbage collection; Get never returns nil.
package pool
