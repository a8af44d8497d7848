package app

import (
	"context"
	"fmt"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/pipeline"
)

// dedupe builds the dedupe part of an exactly_once pipeline and the
// membership it claims under: both in the state table, read through the
// state instance's client. It returns untyped nils for at_least_once, so
// that the pipeline sees no Deduper and does no catalog I/O at all.
func (a *App) dedupe(ctx context.Context, pc config.Pipeline, m *metrics.Pipeline) (pipeline.Deduper, pipeline.Members, error) {
	if !pc.ExactlyOnce() {
		return nil, nil, nil
	}
	bt, err := a.stateBigtable(ctx)
	if err != nil {
		return nil, nil, err
	}
	mb := members.New(bt, a.log, members.Config{Pipeline: pc.Name, Table: a.cfg.State.Table, ID: a.id})
	d := dedupe.New(bt, a.log, dedupe.Config{
		Pipeline: pc.Name,
		Table:    a.cfg.State.Table,
		Window:   pc.Dedupe.Window,
		Members:  mb,
		Metrics:  m,
	})
	// A missing state table would fail every lookup, and the pipeline
	// would retry them forever: refuse to start instead.
	if err := d.Check(ctx); err != nil {
		return nil, nil, fmt.Errorf("%w (does `pubsink setup` need to run?)", err)
	}
	return d, mb, nil
}
