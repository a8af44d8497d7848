package app

import (
	"context"
	"fmt"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/pipeline"
)

// deadLetter builds the dead-letter output of a pipeline, checked at start
// (a topic or table that does not exist is an error; a topic without a
// subscription is a warning); nil when the configuration names none. The
// pipeline counts and logs what it dead-letters; m is not needed here.
func (a *App) deadLetter(ctx context.Context, pc config.Pipeline, _ *metrics.Pipeline) (pipeline.DeadLetter, error) {
	clients := deadletter.Clients{PubSub: a.pubsub}
	switch deadletter.Kind(pc.DeadLetter) {
	case "":
		// An untyped nil: a nil *Topic in the interface would look like an
		// output to the pipeline.
		return nil, nil
	case deadletter.KindTable:
		bt, err := a.stateBigtable(ctx)
		if err != nil {
			return nil, err
		}
		clients.Bigtable = bt
	}
	out, err := deadletter.Open(ctx, a.log, a.cfg, pc, clients)
	if err != nil {
		return nil, fmt.Errorf("dead_letter: %w", err)
	}
	return out, nil
}
