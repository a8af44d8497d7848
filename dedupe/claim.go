package dedupe

import "context"

// Claim is a held dedupe key, or nothing held: the zero Claim, which a
// duplicate or a failed Claim returns. The caller keeps it by value and
// ends the hold with Commit, once the row is durable, or Release.
//
// Release is safe at any time and any number of times: after Commit, after
// another Release, and on the zero Claim it does nothing. So a caller
// releases with one defer, and Commits on the success path.
type Claim struct {
	holder  Holder
	key     string
	token   uint64
	resumed bool
	// ready is the claim's write when ClaimAhead queued it and did not
	// wait for it (a *pending); nil otherwise.
	ready Ready
}

// Ready is a claim queued ahead of its rows: Wait blocks until it is
// durable and decided for its message, and returns nil then, or the error
// that says it decided nothing (then give the key up and Claim it again),
// or ctx's; safe to call from several goroutines, and again.
type Ready interface {
	Wait(ctx context.Context) error
}

// NewClaimAhead returns the Claim of the hold token on key that h keeps,
// queued ahead of its rows: ready is what they wait for. For a Holder's
// own fakes, as NewClaim.
func NewClaimAhead(h Holder, key string, token uint64, ready Ready) Claim {
	return Claim{holder: h, key: key, token: token, ready: ready}
}

// Ready is what the message's rows wait for before they are written: the
// claim's write queued by ClaimAhead (sinks.Row.After). Nil when there is
// nothing to wait for (the claim was made as Claim makes it, or none).
func (c Claim) Ready() Ready { return c.ready }

// Wait blocks until the claim is durable and decided (Ready's Wait), and
// returns nil at once for a claim that was.
func (c Claim) Wait(ctx context.Context) error {
	if c.ready == nil {
		return nil
	}
	return c.ready.Wait(ctx)
}

// Holder ends holds: the Keys that made a Claim, or, in a test of a
// caller, a fake that makes its own (NewClaim).
type Holder interface {
	// Commit records key durably and ends the hold token on it. On error
	// the hold stays: call Commit again, or Release. A hold that had ended
	// already is an error.
	Commit(ctx context.Context, key string, token uint64) error
	// Release ends the hold token on key without a record, if it is still
	// held; otherwise it does nothing.
	Release(key string, token uint64)
}

// NewClaim returns the Claim of the hold token on key that h keeps.
func NewClaim(h Holder, key string, token uint64) Claim {
	return Claim{holder: h, key: key, token: token}
}

// Resumed reports whether an earlier delivery of the same message had
// claimed the key: this one finishes its work, which that one may have
// done already (the rows are written again, the same cells).
func (c Claim) Resumed() bool { return c.resumed }

// Held reports whether c holds a key (it is not the zero Claim). It stays
// true after the hold ended.
func (c Claim) Held() bool { return c.holder != nil }

// Commit records the key durably and ends the hold: waiting claims of the
// key are duplicates. Call it only after the row is durable: a key
// recorded for data that never landed loses the message. On error the key
// stays held: retry Commit, or Release. Committing the zero Claim, or a
// hold that has ended, is an error.
func (c Claim) Commit(ctx context.Context) error {
	if c.holder == nil {
		return errNotHeld
	}
	if err := c.Wait(ctx); err != nil {
		return err // rows written for a claim that did not decide: the caller must not ack
	}
	return c.holder.Commit(ctx, c.key, c.token)
}

// Release gives the key up without recording it, if it is still held: a
// waiting claim of the key proceeds. Otherwise it does nothing.
func (c Claim) Release() {
	if c.holder != nil {
		c.holder.Release(c.key, c.token)
	}
}
