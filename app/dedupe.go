package app

import (
	"context"
	"fmt"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/pipeline"
)

// dedupe builds the dedupe part of an exactly_once pipeline, claiming under
// the membership mb: its catalog is in the state table, read through the
// state instance's client. It returns an untyped nil for at_least_once, so
// that the pipeline sees no Deduper and does no catalog I/O at all.
func (a *App) dedupe(ctx context.Context, pc config.Pipeline, mb *members.Members, m *metrics.Pipeline) (pipeline.Deduper, error) {
	if !pc.ExactlyOnce() {
		return nil, nil
	}
	bt, err := a.stateBigtable(ctx)
	if err != nil {
		return nil, err
	}
	dc := dedupe.Config{
		Pipeline:   pc.Name,
		Table:      a.cfg.State.Table,
		Window:     pc.Dedupe.Window,
		Members:    mb,
		Metrics:    m,
		Now:        a.now(),
		ClaimDelay: claimDelay(pc.Sink.Batch.MaxDelay),
	}
	var d interface {
		pipeline.Deduper
		Check(context.Context) error
	}
	if r := a.opts.reprocess; r != nil && !pc.KeyIsMessageID() {
		// A reprocess run keeps the live pipeline's winner of every key:
		// its catalog is read, never written (dedupe.Rerun).
		d = dedupe.NewRerun(bt, a.log, dc, r.live)
	} else {
		d = dedupe.New(bt, a.log, dc)
	}
	// A missing state table would fail every lookup, and the pipeline
	// would retry them forever: refuse to start instead.
	if err := d.Check(ctx); err != nil {
		return nil, fmt.Errorf("%w (does `pubsink setup` need to run?)", err)
	}
	return d, nil
}

// claimDelay is how long the claims queued ahead of their rows gather
// (dedupe.Config.ClaimDelay), for a sink whose batches gather for
// sinkDelay: a quarter of it, so that a batch of rows rarely waits for the
// claims of its messages, and within 1 ms and dedupe's default (a sink
// that writes at once: claims gather for a millisecond, as before).
func claimDelay(sinkDelay time.Duration) time.Duration {
	return min(max(sinkDelay/4, time.Millisecond), dedupe.DefaultClaimDelay)
}

// members builds the membership of a pipeline among the processes running
// it, when some part depends on who else runs it: dedupe (which claims
// keys on the fast path only while alone) and the watermark tracker (which
// holds while not alone); nil for an at_least_once pipeline without a
// tracking subscription.
func (a *App) members(ctx context.Context, pc config.Pipeline, m *metrics.Pipeline) (*members.Members, error) {
	if !pc.ExactlyOnce() && pc.Source.TrackingSubscription == "" {
		return nil, nil
	}
	bt, err := a.stateBigtable(ctx)
	if err != nil {
		return nil, err
	}
	return members.New(bt, a.log, members.Config{Pipeline: pc.Name, Table: a.cfg.State.Table, ID: a.id, Metrics: m, Now: a.now()}), nil
}
