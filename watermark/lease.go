package watermark

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultLeaderLease is how long the leader cell may stay unchanged before
// another member takes it over. The leader renews it every quarter of that;
// a leader that cannot renew stops acting as one after three quarters.
const DefaultLeaderLease = 10 * time.Second

// lease is the value of the leader cell (m:leader of row watermark#PIPELINE):
// "EPOCH/SEQ/MEMBER". EPOCH grows by one at every takeover, SEQ at every
// renewal, so that the value changes at every write and a follower can tell
// a live leader from a dead one by watching it. A vacant cell (a leader that
// stopped cleanly) has no member. The value is the fencing token: the
// leader stores the watermark and renews only by a conditional write on the
// exact value it wrote last, which fails once anyone else wrote the cell.
type lease struct {
	epoch, seq uint64
	member     string
}

func (l lease) String() string {
	return strconv.FormatUint(l.epoch, 10) + "/" + strconv.FormatUint(l.seq, 10) + "/" + l.member
}

// parseLease reads a leader cell; a value it cannot read counts as a vacant
// lease of epoch 0, which any member may take at once.
func parseLease(v string) lease {
	parts := strings.SplitN(v, "/", 3)
	if len(parts) != 3 {
		return lease{}
	}
	epoch, err1 := strconv.ParseUint(parts[0], 10, 64)
	seq, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return lease{}
	}
	return lease{epoch: epoch, seq: seq, member: parts[2]}
}

// leadership decides, from what a member reads of the leader cell, whether
// it leads the pipeline's watermark. It is owned by one goroutine (the
// tracker's io loop); it does I/O only through Store.Take.
//
// The rules, each checked by a conditional write (Store.Take):
//   - a vacant cell, or none, is taken at once;
//   - a cell held by another member is taken only once it has stayed
//     unchanged for a lease on this member's own monotonic clock: its
//     holder renews every lease/4, so it has gone a whole lease without a
//     successful write;
//   - the leader renews with the exact value it wrote last; a renewal that
//     does not match means someone took the cell over.
//
// A leader trusts itself until the send time of its last successful write
// plus lease minus a margin (a quarter): a follower could take over only a
// lease after it first read that write, so the leader stops acting before
// anyone else can start, as long as the clocks of the two hosts run at the
// same rate to within the margin. Timing decides only how long a leader
// keeps reading the tracking subscription; what it stores is fenced.
type leadership struct {
	store  Store
	member string
	lease  time.Duration
	now    func() time.Time

	mine       lease     // the value this member wrote last while leading
	leading    bool      // mine is the cell's value, as far as this member knows
	validUntil time.Time // monotonic: leading is trusted until then
	renewed    time.Time // send time of the last successful write

	seen      string    // the cell's value as last read
	seenSince time.Time // monotonic: when this member first read seen
	holder    string    // the member of seen ("" while vacant)
	takeovers int64
}

func newLeadership(s Store, member string, leaseDur time.Duration, now func() time.Time) *leadership {
	return &leadership{store: s, member: member, lease: leaseDur, now: now}
}

// trusted reports whether this member may act as the leader at now.
func (l *leadership) trusted(now time.Time) bool {
	return l.leading && now.Before(l.validUntil)
}

// observe takes the leader cell's value as just read (cell, "" when there is
// none) and renews or takes the lease when the rules allow. It returns
// whether this member leads afterwards. Errors of the write are returned with
// the role as known: a write whose reply was lost is settled by the next
// read.
func (l *leadership) observe(ctx context.Context, cell string) (bool, error) {
	now := l.now()
	if cell != l.seen {
		l.seen, l.seenSince = cell, now
	}
	cur := parseLease(cell)
	l.holder = cur.member
	switch {
	case l.leading && cell != l.mine.String():
		if cur.member == l.member && cur.epoch == l.mine.epoch {
			l.mine = cur // a renewal whose reply was lost: it applied
		} else {
			l.leading = false // taken over
			return false, nil
		}
	case !l.leading && cur.member == l.member && cell != "":
		// The cell still holds a lease this process wrote: it lost the
		// role only by failing to renew in time, and nobody took it since.
		// The conditional write below settles that.
		l.mine, l.leading = cur, true
		l.validUntil = time.Time{}
	}
	if l.leading {
		if now.Sub(l.renewed) < l.lease/4 && l.trusted(now) {
			return true, nil
		}
		next := lease{epoch: l.mine.epoch, seq: l.mine.seq + 1, member: l.member}
		return l.write(ctx, l.mine.String(), next, now)
	}
	if cur.member != "" && now.Sub(l.seenSince) < l.lease {
		return false, nil // a live leader, or not yet proven dead
	}
	next := lease{epoch: cur.epoch + 1, member: l.member}
	ok, err := l.write(ctx, cell, next, now)
	if ok {
		l.takeovers++
	}
	return ok, err
}

// write replaces the cell's value expect by next, conditionally.
func (l *leadership) write(ctx context.Context, expect string, next lease, sent time.Time) (bool, error) {
	ok, err := l.store.Take(ctx, expect, next.String())
	if err != nil {
		return l.leading && l.trusted(l.now()), fmt.Errorf("leader lease: %w", err)
	}
	if !ok {
		l.leading = false
		return false, nil
	}
	l.mine, l.leading, l.renewed = next, true, sent
	l.validUntil = sent.Add(l.lease - l.lease/4)
	l.seen, l.seenSince = next.String(), sent
	l.holder = l.member
	return true, nil
}

// release vacates the cell if this member still holds it, so that another
// member takes over at once instead of after a lease (a clean stop).
func (l *leadership) release(ctx context.Context) error {
	if !l.leading {
		return nil
	}
	l.leading = false
	vacant := lease{epoch: l.mine.epoch, seq: l.mine.seq + 1}
	if _, err := l.store.Take(ctx, l.mine.String(), vacant.String()); err != nil {
		return fmt.Errorf("release the leader lease: %w", err)
	}
	return nil
}

// fenced notes that a fenced write (Store.Save) found the cell changed.
func (l *leadership) fenced() { l.leading = false }
