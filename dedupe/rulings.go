package dedupe

// Rulings: which message won a key that had a rival, kept for as long as
// the topic can replay the key.
//
// A claim decides a key for the window, and the catalog forgets it an hour
// after (family k's max age). A reprocess replays a range of the topic up
// to weeks old and must write the message the live pipeline wrote for each
// key, not decide rivals again (Rerun). So a delivery of another message
// than the claim's winner (a rival: a publisher's retry, another version
// of one record), before it is a duplicate, leaves a ruling naming the
// winner in a row of its own:
//
//	dedupe#PIPELINE#~r#HH#KEY   r:w/MESSAGE_ID, empty, at the ruling's time
//
// in family r (state.FamilyRulings), which keeps it for
// state.RulingsMaxAge. Its own row, not a cell of the key's catalog row:
// the catalog's reads and its conditional claim (whose predicate is "any
// cell within the window") never see it, and a key without a rival costs
// nothing more. A rival costs one batched read (which message the claim
// names) and one batched write, durable before its delivery is acked as a
// duplicate.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/internal/state"
)

// rulingInfix follows a pipeline's prefix in its ruling rows; '~' sorts
// after the hex buckets, beside the journal's "~j#".
const rulingInfix = "~r#"

// rulingBatch: rulings come with rivals only, off the path of new keys;
// a batch gathers for 2 ms, as reads do.
var rulingBatch = batch.Config{MaxItems: 256, MaxBytes: 1 << 20, MaxDelay: 2 * time.Millisecond, MaxInFlight: 2}

// rulingRow is the ruling row of the key whose catalog row is row.
func (c catalog) rulingRow(row string) string {
	return c.prefix + rulingInfix + row[len(c.prefix):]
}

// isRulingRow reports whether rest, a row key after a pipeline's prefix,
// is a ruling row.
func isRulingRow(rest string) bool { return strings.HasPrefix(rest, rulingInfix) }

// ruling is one write of a ruling row: winner won the key.
type ruling struct {
	row, winner string
	at          bigtable.Timestamp
}

// rival returns the one message other than winner that a claim of the row
// names within the window, and true; "" and true when none does (the row
// is recorded, not claimed); "" and false when several do (an untrusted
// claim is being withdrawn: look again).
func (r rowState) rival(winner string) (string, bool) {
	var other string
	for _, c := range r.claimants {
		if c == winner || c == other {
			continue
		}
		if other != "" {
			return "", false
		}
		other = c
	}
	return other, true
}

// rulingLooks is how many times ruleRival looks at a row whose claims name
// several other messages: an untrusted claim is withdrawn within a round
// trip (confirm), so the second look mostly finds one.
const rulingLooks = 5

// ruleRival is called when a delivery of winner was found a duplicate of
// row's key: if a claim of another message decided the key, a ruling names
// that message, durable before it returns. by is that message when the
// caller read it in the row already; "" makes ruleRival read the row (a
// delivery that waited in this process for the winner's commit, or a row
// whose claims named several). A key only recorded (a dead-letter copy's,
// a peer of an earlier version's) has no winner to name. An error is the
// catalog's (transient): the delivery is retried.
func (d *Keys) ruleRival(ctx context.Context, row, winner, by string) error {
	if by != "" {
		return d.writeRuling(ctx, row, by)
	}
	wait := conflictWait
	for look := 1; ; look++ {
		var st rowState
		if err := d.reads.Add(ctx, lookup{row: row, out: &st}, len(row)); err != nil {
			return fmt.Errorf("dedupe: read the claim that decided a rival's key: %w", err)
		}
		rival, one := st.rival(winner)
		switch {
		case rival != "":
			return d.writeRuling(ctx, row, rival)
		case one:
			return nil // recorded, or the claim is gone: nothing to name
		case look == rulingLooks:
			d.log.Warn("a rival's key is claimed by several messages; no ruling written (a reprocess may write more than one of them)",
				zap.String("row", row), zap.Strings("claimants", st.claimants))
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, maxConflictWait)
	}
}

// writeRuling makes the ruling "winner won row's key" durable.
func (d *Keys) writeRuling(ctx context.Context, row, winner string) error {
	at := bigtable.Time(d.now()).TruncateToMilliseconds()
	r := ruling{row: d.cat.rulingRow(row), winner: winner, at: at}
	if err := d.rulings.Add(ctx, r, len(r.row)+len(winner)); err != nil {
		return fmt.Errorf("dedupe: write the ruling of a rival's key: %w", err)
	}
	d.ruled.Add(1)
	return nil
}

// flushRulings writes one batch of rulings. They are not journaled: the
// filters hold the key already, by its claim.
func (d *Keys) flushRulings(ctx context.Context, rs []ruling) []error {
	errs, err := d.store.rule(ctx, rs)
	if err != nil {
		errs = make([]error, len(rs))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// winnersOf collects, from rows read with winnersFilter, the messages that
// claim cells (family k, whatever their age) and rulings (family r) name.
func winnersOf(r bigtable.Row, into []string) []string {
	for _, items := range r {
		for _, it := range items {
			_, q, _ := strings.Cut(it.Column, ":")
			if w, ok := strings.CutPrefix(q, claimPrefix); ok && w != "" && !slices.Contains(into, w) {
				into = append(into, w)
			}
		}
	}
	return into
}

func (s btStore) rule(ctx context.Context, rs []ruling) ([]error, error) {
	rows := make([]string, len(rs))
	muts := make([]*bigtable.Mutation, len(rs))
	for i, r := range rs {
		rows[i] = r.row
		m := bigtable.NewMutation()
		m.Set(state.FamilyRulings, claimPrefix+r.winner, r.at, nil)
		muts[i] = m
	}
	return s.table.ApplyBulk(ctx, rows, muts)
}

// winnersFilter keeps the claim and ruling cells (qualifier w/…) and
// nothing else: one filter, as recordFilter.
var winnersFilter = bigtable.RowFilter(bigtable.ColumnFilter(claimPrefix + ".*"))

func (s btStore) winners(ctx context.Context, rows []string) ([][]string, error) {
	found := make(map[string][]string, len(rows))
	err := s.table.ReadRows(ctx, bigtable.RowList(rows), func(r bigtable.Row) bool {
		found[r.Key()] = winnersOf(r, nil)
		return true
	}, winnersFilter)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(rows))
	for i, row := range rows {
		out[i] = found[row]
	}
	return out, nil
}
