package dedupe

// The claim path: how Claim, ClaimOnce and Resume decide a key, from the
// filters, the holds of this process and the catalog (alone: a batched
// write; shared: a conditional mutation), and what a rival leaves.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/members"
)

// What a Claim asks for (see Keys.Claim, ClaimOnce and Resume).
type claimKind uint8

const (
	// claimDecides: the first claim of the key decides it for the window;
	// Commit writes nothing.
	claimDecides claimKind = iota
	// claimOnce: a key only winner's message can have: no claim is
	// written; Commit writes a record, which makes later deliveries
	// duplicates.
	claimOnce
	// claimResume: the key is held only if winner claimed it already; a
	// key nobody claimed is left alone, nothing written.
	claimResume
	// claimAhead: claimDecides, but a claim made on the fast path is queued
	// and not waited for (ClaimAhead).
	claimAhead
)

// Claim decides which message a key belongs to, for the window. The first
// durable claim of key names winner (the delivery's message ID, the same in
// every redelivery): winner then holds key until the caller ends the hold
// through the returned Claim, Commit once its rows are durable, or
// Release. A key claimed within the window by another message, or
// recorded, is a duplicate (dup): that message was committed, or has not
// been acked and comes back until it is (doc.go, "The claim decides").
// A key that winner itself claimed before (a redelivery: the earlier
// delivery committed, or stopped before it could) is held again with
// Resumed true, and its rows are to be written again: the same cells.
// While another caller in this process holds key, Claim waits for it
// first.
//
// The claim is durable before Claim returns: while this process is alone
// (Config.Members) an unconditional write in a batch, with no read for a
// key that no filter may hold; otherwise one conditional mutation
// (CheckAndMutateRow) that applies only if the row holds nothing within
// the window.
//
// Errors are the catalog's (transient; Claim does not retry them) or
// ctx's when it ends while waiting; the key is not held then.
func (d *Keys) Claim(ctx context.Context, key, winner string) (Claim, bool, error) {
	return d.claim(ctx, key, winner, claimDecides)
}

// ClaimAhead is Claim for a caller whose rows wait for the claim: when this
// process is alone and the filters answer "new" (the fast path), the claim's
// write is queued and ClaimAhead returns at once, without waiting for it;
// the returned Claim's Ready is then what to wait for before the rows are
// written (the sink waits for it: sinks.Row.After), and its Wait and Commit
// wait for it too. Every other claim is made as Claim makes it, and its
// Ready is nil.
//
// So the claim's write, batched for longer than a synchronous claim's
// (Config.ClaimDelay), is on its way while the rows gather in the sink's
// batch, instead of before them: a message of the fast path waits once,
// for its rows, not twice.
//
// A claim that Ready finds not durable (its write failed) or not trusted
// any more and lost to another process's (doc.go, "The claim decides") has
// decided nothing for its message: the caller gives the key up (Release)
// and claims it again with Claim.
func (d *Keys) ClaimAhead(ctx context.Context, key, winner string) (Claim, bool, error) {
	return d.claim(ctx, key, winner, claimAhead)
}

// ClaimOnce is Claim for a key that only winner's message can have: its
// message ID (a pipeline without id_attribute or id_template), or its
// dead-letter copy's key. No other message can be a rival, so no claim is
// written: a record within the window makes the key a duplicate, and
// otherwise winner holds it in this process; Commit writes the record
// (batched), once the effect is durable. So a redelivery after the record
// is a duplicate and writes nothing (a redelivery of a committed message,
// a seek back), and one before it (a crash between the effect and the
// record) repeats the effect: the same cells, or a second dead-letter copy.
// One state write per key, as Claim's.
func (d *Keys) ClaimOnce(ctx context.Context, key, winner string) (Claim, bool, error) {
	return d.claim(ctx, key, winner, claimOnce)
}

// Resume holds key only if winner claimed it already (Resumed true), and
// reports dup if another message did or it is recorded. A key that nobody
// claimed within the window is neither: the zero Claim and false, and
// nothing is written. The pipeline asks it for a late message, which may
// be written only if an earlier delivery of it was judged on time and
// claimed its key.
func (d *Keys) Resume(ctx context.Context, key, winner string) (Claim, bool, error) {
	return d.claim(ctx, key, winner, claimResume)
}

func (d *Keys) claim(ctx context.Context, key, winner string, kind claimKind) (Claim, bool, error) {
	id := idOf(key)
	h := hashOf(id.id)
	wait := conflictWait
	for {
		now := d.now()
		d.mu.Lock()
		if other, ok := d.held[key]; ok {
			w := other.waiters()
			d.mu.Unlock()
			if c, dup, err, again := d.waitHeld(ctx, w, winner, kind); !again {
				return c, dup, err
			}
			continue // released: look again
		}
		v := d.cfg.Members.View()
		if !v.Joined || (v.Alone && d.waitRebuild != nil && d.waitRebuild.waiting()) {
			g := d.waitRebuild
			d.mu.Unlock()
			if err := d.waitReady(ctx, v, g); err != nil {
				return Claim{}, false, err
			}
			continue
		}
		d.ring.advance(now.UnixNano())
		fast := v.Alone && d.rebuilt && d.rebuiltEpoch == v.AloneEpoch && !d.ring.test(h)
		d.tokens++
		hd := d.holds.Get().(*hold)
		hd.token, hd.id, hd.h, hd.winner = d.tokens, id, h, winner
		hd.record = kind == claimOnce
		hd.row = d.cat.row(id, h)
		d.held[key] = hd
		token := hd.token
		row := hd.row
		if fast && kind == claimAhead {
			// The claim is on its way: the filters learn the key now (a write
			// that fails leaves the key in them, which costs a read later,
			// never a wrong answer), and the caller waits for it with the
			// rows (pending).
			at := d.now().UnixNano()
			d.ring.advance(at)
			d.ring.add(h, at)
			d.mu.Unlock()
			p, err := d.claimAheadOf(ctx, row, h, winner, v)
			if err != nil {
				c, dup, err, _ := d.notClaimed(ctx, key, token, row, h, winner, "", kind, free, err, &wait)
				return c, dup, err
			}
			return Claim{holder: d, key: key, token: token, ready: p}, false, nil
		}
		d.mu.Unlock()

		var by string // the other message whose claim makes this a duplicate
		out, err := d.decide(ctx, row, h, winner, v, fast, kind, &by)
		if err != nil || out != claimed && out != mine {
			if c, dup, err, again := d.notClaimed(ctx, key, token, row, h, winner, by, kind, out, err, &wait); !again {
				return c, dup, err
			}
			continue
		}
		// The claim is durable: the filters learn the key now, so that a
		// later delivery of it in this process asks the catalog.
		at := d.now().UnixNano()
		d.mu.Lock()
		d.ring.advance(at)
		d.ring.add(h, at)
		d.mu.Unlock()
		return Claim{holder: d, key: key, token: token, resumed: out == mine}, false, nil
	}
}

// The rare paths of claim are functions of their own, so that the frame of
// claim, on the path of every message, stays small: the Pub/Sub client's
// callback goroutine that calls it starts with a stack of a few kilobytes,
// which a deeper path makes the runtime copy to a larger one, once per
// message (pipeline's BenchmarkCallback counts it as grown/msg).

// waitHeld waits for the hold whose waiters are w, held by another Claim
// of the key in this process: if it commits, this delivery is a duplicate
// (again false); if it is released, the caller looks again (again true).
//
//go:noinline
func (d *Keys) waitHeld(ctx context.Context, w *waiters, winner string, kind claimKind) (c Claim, dup bool, err error, again bool) {
	select {
	case <-w.done:
		if w.committed {
			c, dup, err = d.duplicate(ctx, w.row, winner, "", kind)
			return c, dup, err, false
		}
		return Claim{}, false, nil, true
	case <-ctx.Done():
		return Claim{}, false, ctx.Err(), false
	}
}

// waitReady waits until this process is joined (view v says it is not),
// or, alone, until the rebuild behind gate g is done.
//
//go:noinline
func (d *Keys) waitReady(ctx context.Context, v members.View, g *gate) error {
	if !v.Joined {
		return d.cfg.Members.Joined(ctx)
	}
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notClaimed ends the hold token on key that decide did not turn into a
// claim, and says what the delivery is: an error, a duplicate, nothing
// (claimResume of a free key), or, for a row being withdrawn by another
// (taken), to look again (again) after a wait that doubles up to
// maxConflictWait.
//
//go:noinline
func (d *Keys) notClaimed(ctx context.Context, key string, token uint64, row string, h hashes, winner, by string, kind claimKind, out outcome, err error, wait *time.Duration) (c Claim, dup bool, _ error, again bool) {
	switch {
	case err != nil:
		// A failed write is ambiguous: the claim may have landed. The
		// filters learn the key, so that the next Claim of it reads
		// the catalog rather than answer "new" and claim beside it.
		d.mu.Lock()
		d.ring.add(h, d.now().UnixNano())
		d.mu.Unlock()
		d.end(key, token, false)
		if ctx.Err() == nil {
			err = fmt.Errorf("dedupe: claim in catalog: %w", err)
		}
		return Claim{}, false, err, false
	case out == seen:
		// Not "committed" for the deliveries waiting here: the message
		// that won may be one of them (its redelivery), which must
		// resume, not be a duplicate. They look for themselves.
		d.end(key, token, false)
		c, dup, err = d.duplicate(ctx, row, winner, by, kind)
		return c, dup, err, false
	case out == free: // claimResume, and nobody claimed the key
		d.end(key, token, false)
		return Claim{}, false, nil, false
	}
	// taken
	d.end(key, token, false)
	d.mu.Lock()
	d.conflicts++
	d.mu.Unlock()
	d.cfg.Metrics.Conflicts.Inc()
	select {
	case <-time.After(*wait):
	case <-ctx.Done():
		return Claim{}, false, ctx.Err(), false
	}
	*wait = min(2**wait, maxConflictWait)
	return Claim{}, false, nil, true
}

// duplicate answers a delivery of winner that found row's key decided
// (for the message by, when known): a duplicate, once the ruling that
// names the key's winner is durable when winner is a rival (rulings.go). A
// key only one message can have (ClaimOnce) has no rival.
func (d *Keys) duplicate(ctx context.Context, row, winner, by string, kind claimKind) (Claim, bool, error) {
	if kind != claimOnce {
		if err := d.ruleRival(ctx, row, winner, by); err != nil {
			return Claim{}, false, err
		}
	}
	return Claim{}, true, nil
}

// How long a Claim waits between two looks at a key whose row holds a
// claim of winner beside another's: an unconditional claim that was not
// trusted is being withdrawn (decide), within a round trip.
const (
	conflictWait    = 20 * time.Millisecond
	maxConflictWait = time.Second
)

// decide makes winner's claim of row durable, or finds why it need not or
// cannot be: claimed (made now), mine (winner's from an earlier delivery),
// seen (a duplicate), taken (look again), or free (kind claimResume, and
// the row holds nothing). v is the membership view the hold was taken
// under; fast says the filters answered "new" in it. When seen, by is set
// to the other message the row's claim names, if it names one.
func (d *Keys) decide(ctx context.Context, row string, h hashes, winner string, v members.View, fast bool, kind claimKind, by *string) (outcome, error) {
	if !v.Alone && (kind == claimDecides || kind == claimAhead) {
		return d.claimShared(ctx, row, h, winner, false, by)
	}
	if !fast { // or not alone: this process's filters miss others' keys
		if out, err := d.look(ctx, row, winner, by); out != free || err != nil {
			return out, err
		}
	}
	switch kind {
	case claimResume:
		return free, nil
	case claimOnce:
		return claimed, nil // no claim: the record at Commit decides
	}
	at := bigtable.Time(d.now()).TruncateToMilliseconds()
	if err := d.writes.Add(ctx, cell{row: row, winner: winner, at: at, h: h}, len(row)+len(winner)); err != nil {
		return free, fmt.Errorf("write claim: %w", err)
	}
	// The unconditional claim is trusted only if the fast path was still
	// open once it was confirmed: then it was durable before this process
	// acknowledged any newcomer (package members). Otherwise another
	// process may have claimed the key meanwhile: ask the catalog, in the
	// one conditional mutation.
	if after := d.cfg.Members.View(); after.Alone && after.AloneEpoch == v.AloneEpoch && d.now().Before(v.FastUntil) {
		return claimed, nil
	}
	d.mu.Lock()
	d.upgrades++
	d.mu.Unlock()
	return d.claimShared(ctx, row, h, winner, true, by)
}

// look reads row from the catalog (a batched read) and says what it means
// for winner; by is set as decide sets it.
//
//go:noinline
func (d *Keys) look(ctx context.Context, row, winner string, by *string) (outcome, error) {
	d.cfg.Metrics.Lookups.Inc()
	var st rowState
	if err := d.reads.Add(ctx, lookup{row: row, out: &st}, len(row)); err != nil {
		return free, fmt.Errorf("read: %w", err)
	}
	out := st.decide(winner)
	if out != free {
		*by, _ = st.rival(winner)
	}
	return out, nil
}

// claimShared claims row for winner with one conditional mutation and,
// when the row holds something already, reads it to say what. untrusted
// says that this delivery wrote an unconditional claim of row just before,
// which the conditional mutation now confirms or withdraws.
func (d *Keys) claimShared(ctx context.Context, row string, h hashes, winner string, untrusted bool, by *string) (outcome, error) {
	out, err := d.claimIf(ctx, row, winner, untrusted, by)
	if out != claimed || err != nil || d.cfg.NoJournal {
		return out, err
	}
	// The journal must know the key before its row is written, as it
	// knows the keys of the batched claims: should this process stop after
	// the row, a successor rebuilt from the journal must ask the catalog
	// about the key, and find the claim.
	if err := d.journals.Add(ctx, cell{at: bigtable.Time(d.now()).TruncateToMilliseconds(), h: h}, journalHashBytes); err != nil {
		return free, fmt.Errorf("journal: %w", err)
	}
	return claimed, nil
}

// claimIf claims row for winner with one conditional mutation, which
// applies only if the row holds no cell within the window. When the row
// makes it a duplicate, by is set to the other message its claim names.
func (d *Keys) claimIf(ctx context.Context, row, winner string, untrusted bool, by *string) (outcome, error) {
	now := d.now()
	at := bigtable.Time(now).TruncateToMilliseconds()
	since := bigtable.Time(now.Add(-d.cfg.Window)).TruncateToMilliseconds()
	d.mu.Lock()
	d.conditional++
	d.mu.Unlock()
	d.cfg.Metrics.Conditional.Inc()
	var blocked bool
	var err error
	// On a goroutine whose stack has grown already: from the Pub/Sub
	// callback's fresh goroutine, the call's depth copied the stack to a
	// larger one once or twice per message (internal/warm).
	d.calls.Do(func() { blocked, err = d.store.claimIf(ctx, row, winner, at, since) })
	if err == nil && !blocked {
		return claimed, nil
	}
	// Blocked, or the reply was lost (the mutation may have been applied):
	// the row says which.
	sts, rerr := d.store.read(ctx, []string{row}, since)
	if rerr != nil {
		if err != nil {
			return free, err
		}
		return free, fmt.Errorf("read back: %w", rerr)
	}
	st := sts[0]
	*by, _ = st.rival(winner)
	if untrusted {
		return d.confirm(ctx, row, winner, st)
	}
	switch out := st.decide(winner); {
	case out == free && err != nil:
		return free, err // the lost mutation was not applied: retry
	case out == free:
		return taken, nil // what blocked it is gone already: look again soon
	case out == mine && err != nil:
		return claimed, nil // the lost mutation was applied
	default:
		return out, nil
	}
}

// confirm decides an unconditional claim of row by winner that was not
// trusted (the fast path closed before it was confirmed), from the row as
// read after it: winner's claim alone is confirmed; beside another's claim
// (made while this one was not trusted: the other process won) or a record
// it is withdrawn, and the key is a duplicate.
func (d *Keys) confirm(ctx context.Context, row, winner string, st rowState) (outcome, error) {
	switch st.decide(winner) {
	case mine:
		return claimed, nil
	case free: // the unconditional write did not land after all
		return taken, nil
	}
	if slices.Contains(st.claimants, winner) {
		if err := d.store.unclaim(ctx, row, winner); err != nil {
			return free, fmt.Errorf("withdraw a claim that was not trusted: %w", err)
		}
	}
	return seen, nil
}
