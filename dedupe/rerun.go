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
// A message of the range is written if the live pipeline's catalog names
// it for its key (a claim, whatever its age, or a ruling: rulings.go), or
// names no message for the key at all; a message of a key the live
// pipeline decided for another message is a duplicate. So the run writes
// what the live pipeline wrote: the winner of a key that had a rival within
// the window, and every message of a key the catalog has forgotten (one
// without a rival, whose claim expired, or whose rivals came more than a
// window apart and were each written live).
//
// The run's own scope (the embedded Keys, under the run's name) is keyed by
// message ID (ClaimOnce): a message of the range is written once by the
// run, whatever its redeliveries, a kill and a resume. The live catalog is
// only read.
type Rerun struct {
	*Keys
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
	r := &Rerun{Keys: newKeys(s, log, cfg), live: newCatalog(live)}
	r.reads = batch.New(readBatch, r.flushDecisions)
	return r
}

// Claim holds key for winner's message if the live pipeline wrote it, or
// decided nothing for key; a message the live pipeline did not write, of a
// key it decided, is a duplicate (dup). The hold is the run's own, by
// message ID: Commit records it, and a redelivery after that is a
// duplicate.
func (r *Rerun) Claim(ctx context.Context, key, winner string) (Claim, bool, error) {
	live, err := r.LiveWinners(ctx, key)
	if err != nil {
		return Claim{}, false, err
	}
	if len(live) > 0 && !slices.Contains(live, winner) {
		return Claim{}, true, nil
	}
	return r.Keys.ClaimOnce(ctx, winner, winner)
}

// Resume is Claim: a reprocess run has no watermark, so nothing it
// replays is late.
func (r *Rerun) Resume(ctx context.Context, key, winner string) (Claim, bool, error) {
	return r.Claim(ctx, key, winner)
}

// LiveWinners returns the messages the live pipeline's catalog names for
// key: the winners of its claims, whatever their age, and of its ruling.
// None: the catalog has forgotten the key, or never saw it.
func (r *Rerun) LiveWinners(ctx context.Context, key string) ([]string, error) {
	id := idOf(key)
	row := r.live.row(id, hashOf(id.id))
	var out []string
	d := decision{rows: [2]string{row, r.live.rulingRow(row)}, out: &out}
	if err := r.reads.Add(ctx, d, 2*len(row)); err != nil {
		return nil, fmt.Errorf("dedupe: read the live pipeline's decision for the key: %w", err)
	}
	return out, nil
}

func (r *Rerun) flushDecisions(ctx context.Context, ds []decision) []error {
	rows := make([]string, 0, 2*len(ds))
	for _, d := range ds {
		rows = append(rows, d.rows[:]...)
	}
	ws, err := r.store.winners(ctx, rows)
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

// Close flushes the run's records and ends the reads of the live catalog.
func (r *Rerun) Close(ctx context.Context) error {
	return errors.Join(r.reads.Close(ctx), r.Keys.Close(ctx))
}
