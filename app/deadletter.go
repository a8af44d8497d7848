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
// (a topic that does not exist, has no subscription or is the pipeline's
// own topic, or a table that does not exist, is an error); nil when the
// configuration names none. topic is the topic of the pipeline's
// subscription, as its start-up check found it. The pipeline counts and
// logs what it dead-letters; m is not needed here.
func (a *App) deadLetter(ctx context.Context, pc config.Pipeline, topic string, _ *metrics.Pipeline) (pipeline.DeadLetter, error) {
	clients := deadletter.Clients{PubSub: a.pubsub, Now: a.now()}
	if r := a.opts.reprocess; r != nil {
		// A reprocess's copies are the live pipeline's, marked as the
		// run's (pubsink_reprocess), so that replay sends them back to
		// the live pipeline's topic.
		pc.Name, clients.Reprocess = r.live, r.record.Name
	}
	switch deadletter.Kind(pc.DeadLetter) {
	case "":
		// An untyped nil: a nil *Topic in the interface would look like an
		// output to the pipeline.
		return nil, nil
	case deadletter.KindTopic:
		if err := a.notOwnTopic(pc, topic); err != nil {
			return nil, err
		}
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

// notOwnTopic refuses a dead-letter topic that is the topic the pipeline
// reads: each poison message would be republished to the pipeline, fail
// again, and so on for ever. Validation sees this only when source.topic
// is set; here the subscription's own topic is known.
func (a *App) notOwnTopic(pc config.Pipeline, topic string) error {
	if dl := a.cfg.TopicName(pc.DeadLetter.Topic); dl == topic {
		return fmt.Errorf("dead_letter.topic %s is the topic of source.subscription %s: each dead-lettered message would come back to this pipeline, for ever; name another topic", dl, a.cfg.SubscriptionName(pc.Source.Subscription))
	}
	return nil
}
