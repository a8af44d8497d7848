package dedupe

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/batch"
)

// Rerun is the dedupe of a reprocess run of a pipeline whose dedupe key is
// not the message ID: it keeps the live pipeline's decision for every key
// instead of deciding rivals again.
//
// For each message of the range it reads what the live pipeline's catalog
// names for the message's key: the messages of its claims, whatever their
// age, and of its ruling (rulings.go), which outlives the claim.
//
//   - A named message is written: the live pipeline wrote it. Every named
//     message of a key is (rivals claimed more than a window apart were
//     each written live), each once in the run, whatever its redeliveries,
//     a kill and a resume: it is held by its message ID.
//   - Another message of a named key is a duplicate: the live pipeline
//     decided the key for another, and a run never switches the winner.
//   - A key nothing is named for (the live pipeline has not seen it, or
//     the catalog forgot it: no rival, and its claim collected) is decided
//     in the run's own scope, as live: the first message the run receives
//     wins, the others are duplicates.
//
// The run's own scope is the embedded Keys, under the run's name; the live
// catalog is only read.
type Rerun struct {
	*Keys
	*LiveCatalog
}

// LiveCatalog reads, and never writes, what a live pipeline's catalog
// decided for keys: a reprocess run's (Rerun) and an audit's view of which
// message won a key. Reads of concurrent callers are batched.
type LiveCatalog struct {
	store store
	live  catalog
	reads *batch.Batcher[decision]
}

// decision is one batched read of the live pipeline's decision for a key:
// its claim row and its ruling row.
type decision struct {
	rows [2]string
	out  *[]string
}

// NewRerun returns the dedupe of a reprocess run of the live pipeline
// live: cfg is the run's (its Pipeline the run's name), in the same state
// table.
func NewRerun(client *bigtable.Client, log *zap.Logger, cfg Config, live string) *Rerun {
	return newRerun(btStore{table: client.Open(cfg.Table)}, log, cfg, live)
}

func newRerun(s store, log *zap.Logger, cfg Config, live string) *Rerun {
	return &Rerun{Keys: newKeys(s, log, cfg), LiveCatalog: newLiveCatalog(s, live)}
}

// NewLiveCatalog returns a reader of pipeline live's catalog in the state
// table table.
func NewLiveCatalog(client *bigtable.Client, table, live string) *LiveCatalog {
	return newLiveCatalog(btStore{table: client.Open(table)}, live)
}

func newLiveCatalog(s store, live string) *LiveCatalog {
	c := &LiveCatalog{store: s, live: newCatalog(live)}
	c.reads = batch.New(readBatch, c.flushDecisions)
	return c
}

// Claim holds key for winner's message if the live pipeline wrote it (its
// catalog names it), or if the live catalog names nothing for key and
// winner is the first message of key in the run's scope; otherwise it is
// a duplicate (dup). A Commit makes a redelivery a duplicate.
func (r *Rerun) Claim(ctx context.Context, key, winner string) (Claim, bool, error) {
	live, err := r.LiveWinners(ctx, key)
	switch {
	case err != nil:
		return Claim{}, false, err
	case len(live) == 0:
		return r.Keys.Claim(ctx, key, winner)
	case slices.Contains(live, winner):
		return r.Keys.ClaimOnce(ctx, namedKey(winner), winner)
	}
	return Claim{}, true, nil
}

// ClaimAhead is Claim: a run's claims are waited for (its Keys' fast path
// would otherwise bypass the live catalog's decisions).
func (r *Rerun) ClaimAhead(ctx context.Context, key, winner string) (Claim, bool, error) {
	return r.Claim(ctx, key, winner)
}

// namedKey is the run's key for a message the live catalog names: its
// message ID, apart from every dedupe key (a key cannot start with 0xff,
// as a dead-letter copy's cannot: 0xff is never in a UTF-8 attribute).
func namedKey(messageID string) string { return "\xffnamed\xff" + messageID }

// Resume is Claim: a reprocess run has no watermark, so nothing it
// replays is late.
func (r *Rerun) Resume(ctx context.Context, key, winner string) (Claim, bool, error) {
	return r.Claim(ctx, key, winner)
}

// LiveWinners returns the messages the live pipeline's catalog names for
// key: the winners of its claims, whatever their age, and of its ruling.
// None: the catalog has forgotten the key, or never saw it.
func (c *LiveCatalog) LiveWinners(ctx context.Context, key string) ([]string, error) {
	id := idOf(key)
	row := c.live.row(id, hashOf(id.id))
	var out []string
	d := decision{rows: [2]string{row, c.live.rulingRow(row)}, out: &out}
	if err := c.reads.Add(ctx, d, 2*len(row)); err != nil {
		return nil, fmt.Errorf("dedupe: read the live pipeline's decision for the key: %w", err)
	}
	return out, nil
}

func (c *LiveCatalog) flushDecisions(ctx context.Context, ds []decision) []error {
	rows := make([]string, 0, 2*len(ds))
	for _, d := range ds {
		rows = append(rows, d.rows[:]...)
	}
	ws, err := c.store.winners(ctx, rows)
	errs := make([]error, len(ds))
	for i, d := range ds {
		if err != nil {
			errs[i] = err
			continue
		}
		*d.out = append(slices.Clone(ws[2*i]), ws[2*i+1]...)
	}
	return errs
}

// Close ends the reads.
func (c *LiveCatalog) Close(ctx context.Context) error { return c.reads.Close(ctx) }

// Close flushes the run's records and ends the reads of the live catalog.
func (r *Rerun) Close(ctx context.Context) error {
	return errors.Join(r.LiveCatalog.Close(ctx), r.Keys.Close(ctx))
}
