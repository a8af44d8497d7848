package dedupe

// Holds: a claimed key held by this process until its caller ends the hold
// (Commit, Release), and what the Claims waiting for it learn.

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/bigtable"
)

// end ends the hold token on key, if it is still held: its waiters learn
// whether it was committed (then they are duplicates) or released (then
// they look again, and find the claim). It reports whether it ended the
// hold.
func (d *Keys) end(key string, token uint64, committed bool) bool {
	d.mu.Lock()
	hd, ok := d.held[key]
	if !ok || hd.token != token {
		d.mu.Unlock()
		return false
	}
	d.endLocked(key, hd, committed)
	return true
}

// endLocked ends hd, the hold on key, which Keys.mu guards and which it
// unlocks.
func (d *Keys) endLocked(key string, hd *hold, committed bool) {
	delete(d.held, key)
	if w := hd.wait; w != nil {
		w.committed = committed
		close(w.done)
	}
	d.mu.Unlock()
	*hd = hold{}
	d.holds.Put(hd)
}

// hold is a held key's entry in Keys.held. Holds are recycled once ended:
// a Claim names its hold by key and token, never by pointer, so that a
// Claim used after its hold ended finds nothing instead of another's hold.
type hold struct {
	token  uint64
	id     catalogID
	h      hashes
	row    string
	winner string
	record bool     // Commit writes a record (ClaimOnce)
	wait   *waiters // guarded by Keys.mu
}

// waiters is what the Claims waiting for a held key learn of its outcome.
// It is apart from the hold, which is recycled once ended.
type waiters struct {
	done      chan struct{}
	committed bool   // set before done is closed
	row       string // the key's catalog row, for a rival's ruling
}

// waiters returns hd's waiters, created on first use. Called with Keys.mu.
func (hd *hold) waiters() *waiters {
	if hd.wait == nil {
		hd.wait = &waiters{done: make(chan struct{}), row: hd.row}
	}
	return hd.wait
}

// errNotHeld is Commit's error for a hold that had already ended.
var errNotHeld = errors.New("dedupe: commit of a key that is not held (released or committed already)")

// Commit ends the hold token on key once the caller's effect is durable:
// waiters are duplicates. The claim already decided the key, so a Claim's
// Commit writes nothing; a ClaimOnce's writes the record first (batched,
// with the commit time as the cell's timestamp). If that write fails, the
// hold stays (waiters keep waiting) and the error is returned: call Commit
// again to retry, or Release to give up. The error is the catalog's, or
// ctx's if it ended first (the record may still be written: it is
// idempotent). A hold that had ended already is an error, and nothing is
// written.
func (d *Keys) Commit(ctx context.Context, key string, token uint64) error {
	d.mu.Lock()
	hd, ok := d.held[key]
	if !ok || hd.token != token {
		d.mu.Unlock()
		return errNotHeld
	}
	if !hd.record && !d.compat.Load() {
		d.endLocked(key, hd, true) // the common case: one lock, nothing to write
		return nil
	}
	h, row := hd.h, hd.row
	d.mu.Unlock()

	at := bigtable.Time(d.now()).TruncateToMilliseconds()
	if err := d.writes.Add(ctx, cell{row: row, at: at, h: h}, len(row)); err != nil {
		if ctx.Err() == nil {
			err = fmt.Errorf("dedupe: record key in catalog: %w", err)
		}
		return err
	}
	d.end(key, token, true)
	return nil
}

// Release ends the hold token on key without a commit: a waiter looks
// again, and finds the claim, which stays (it decided the key: the
// message is redelivered and finishes its work). A hold that had ended
// already (committed, or released) is left alone, so Release is safe to
// call more than once and after Commit.
func (d *Keys) Release(key string, token uint64) {
	d.end(key, token, false)
}
