package dedupe

// Claims ahead of their rows (ClaimAhead): a fast-path claim's write is
// queued, not waited for, and pending is what its message's rows wait for
// before they are written.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/members"
)

// ErrClaimLost is Ready's error for a claim that was made on the fast path
// and, found not trusted once durable (another process may run the
// pipeline since), lost the key to another message's claim when it was
// made again conditionally: the message is a duplicate, which a claim made
// again (Claim) says, with its ruling.
var ErrClaimLost = errors.New("dedupe: the claim was not trusted once durable, and another message's claim decided the key")

// pending is a claim queued by ClaimAhead: the write of its claim cell in
// the claims batch, and the view of the membership it was made in, which
// the claim must still be trusted in once durable (decide has the same
// rule for a claim it waits for).
type pending struct {
	d      *Keys
	ticket batch.Ticket[cell]
	row    string
	winner string
	h      hashes
	view   members.View

	mu   sync.Mutex // serializes Wait: the check and the upgrade run once
	done bool
	err  error
}

// claimAheadOf queues the claim of row by winner in the claims batch.
func (d *Keys) claimAheadOf(ctx context.Context, row string, h hashes, winner string, v members.View) (*pending, error) {
	at := bigtable.Time(d.now()).TruncateToMilliseconds()
	t, err := d.claims.Enqueue(ctx, cell{row: row, winner: winner, at: at, h: h}, 1, len(row)+len(winner))
	if err != nil {
		return nil, fmt.Errorf("queue claim: %w", err)
	}
	return &pending{d: d, ticket: t, row: row, winner: winner, h: h, view: v}, nil
}

// Wait blocks until the claim is durable and decided for its message, and
// returns nil then: its message's rows may be written. An error says they
// may not: the claim's write failed (the catalog's error), or it was not
// trusted once durable and lost the key (ErrClaimLost); or ctx ended
// first (ctx's error: Wait may be called again). Safe for concurrent use;
// once decided, every Wait returns the same.
func (p *pending) Wait(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return p.err
	}
	err := p.ticket.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		return err // not decided yet
	}
	if err == nil {
		err = p.d.trustAhead(ctx, p)
		if err != nil && ctx.Err() != nil {
			return err
		}
	}
	if err != nil && !errors.Is(err, ErrClaimLost) {
		err = fmt.Errorf("dedupe: claim in catalog: %w", err)
	}
	p.done, p.err = true, err
	return err
}

// trustAhead decides a claim of the fast path whose write is durable, as
// decide does one it waited for: trusted if the fast path was still open;
// otherwise made again conditionally, which confirms it, or withdraws it
// when another message's claim won the key (ErrClaimLost).
func (d *Keys) trustAhead(ctx context.Context, p *pending) error {
	v := p.view
	if after := d.cfg.Members.View(); after.Alone && after.AloneEpoch == v.AloneEpoch && d.now().Before(v.FastUntil) {
		return nil
	}
	d.mu.Lock()
	d.upgrades++
	d.mu.Unlock()
	var by string
	switch out, err := d.claimShared(ctx, p.row, p.h, p.winner, true, &by); {
	case err != nil:
		return err
	case out == claimed || out == mine:
		return nil
	case out == taken:
		return errors.New("the claim was not trusted once durable and the key's row is being changed; claim again")
	}
	return ErrClaimLost
}
