package app

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/watermark"
)

// Flow control of the tracking subscription. Its handler records a message
// and acks it in about a microsecond, so messages are outstanding only
// while in transit: the limits are there never to bind, and the extra
// streams let the tracker pull faster than the pipeline, which must not
// get ahead of it for long.
const (
	trackingMinStreams     = 4
	trackingStreamsFactor  = 2
	trackingMinOutstanding = 10_000
	trackingOutstandingMul = 10
	// The tracking subscription's byte budget is its own, a quarter of the
	// main one's (at least 8 MiB): its messages are held for microseconds,
	// so the budget only bounds a burst in transit.
	trackingBytesDiv = 4
	trackingMinBytes = 8 << 20
	// pendingBytesPerEntry converts the main budget into the tracker's
	// bound on unfinished messages (Config.MaxPending): at about 13-17
	// bytes each, maxBytes/32 entries take about half the main budget.
	pendingBytesPerEntry = 32
)

// tracker builds the watermark tracker of a pipeline with a tracking
// subscription; nil otherwise. It checks that the tracking subscription
// exists and is attached to the main one's topic (main, as build found
// it), and reads the stored watermark (so that an unreadable state table is
// reported at start).
func (a *App) tracker(ctx context.Context, pc config.Pipeline, main *source.Source, mainInfo source.Info, maxBytes int64, mb *members.Members, m *metrics.Pipeline) (pipeline.Tracker, error) {
	if pc.Source.TrackingSubscription == "" {
		return nil, nil // an untyped nil: the pipeline tests Tracker against nil
	}
	cfg := pc.Source
	cfg.Streams = max(trackingStreamsFactor*pc.Source.Streams, trackingMinStreams)
	cfg.MaxOutstandingMessages = max(trackingOutstandingMul*pc.Source.MaxOutstandingMessages, trackingMinOutstanding)
	tracking := source.New(a.pubsub, a.log.With(zap.String("pipeline", pc.Name)),
		a.cfg.SubscriptionName(pc.Source.TrackingSubscription), cfg, max(maxBytes/trackingBytesDiv, trackingMinBytes))

	tracking.SetWatchdogHooks(a.watchdogHooks(m))

	trackingInfo, err := tracking.Check(ctx)
	if err != nil {
		return nil, fmt.Errorf("source.tracking_subscription: %w", err)
	}
	if trackingTopic, mainTopic := trackingInfo.Topic, mainInfo.Topic; trackingTopic != mainTopic {
		return nil, fmt.Errorf("source.tracking_subscription: %s is attached to topic %s, but source.subscription %s is attached to %s; "+
			"the tracking subscription must be a second subscription on the same topic",
			tracking.Subscription(), trackingTopic, main.Subscription(), mainTopic)
	}

	state, err := a.stateBigtable(ctx)
	if err != nil {
		return nil, err
	}
	wcfg := watermark.Config{
		Pipeline:           pc.Name,
		StateTable:         a.cfg.State.Table,
		TimestampAttribute: pc.Source.TimestampAttribute,
		TimestampFormat:    pc.Source.TimestampFormat,
		Band:               pc.Watermark.EstimationBand,
		Metrics:            m,
		// One member leads the watermark (a lease in the state table);
		// the others report their finishes to it.
		Member:     mb.ID(),
		Peers:      mb.Peers,
		MaxPending: maxBytes / pendingBytesPerEntry,
		Now:        a.now(),
		// A message whose lease ran out comes back only after the
		// subscription's retry policy let it: the tracker's guards wait
		// for the longer backoff of the two subscriptions on top of the
		// lease.
		Lease: source.LeaseExtension + max(mainInfo.RedeliveryBackoff, trackingInfo.RedeliveryBackoff),
	}
	if a.streams != nil {
		name := tracking.Subscription()
		wcfg.Streams = func() source.StreamState { return a.streams.State(name) }
	}
	tr, err := watermark.NewTracker(tracking, state, a.log, wcfg)
	if err != nil {
		return nil, err
	}
	if err := tr.Check(ctx); err != nil {
		return nil, fmt.Errorf("state table %s: %w", a.cfg.State.Table, err)
	}
	return tr, nil
}
