package app

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/watermark"
)

// The tracking subscription's reader (source.Puller). Its handler records
// a message in about a microsecond, so unary Pull in large batches is
// cheaper than StreamingPull's per-message machinery; three loops keep one
// waiting for the service while the others run their handlers, which keeps
// the tracker ahead of the pipeline, as it must be.
const (
	trackingPullLoops    = 3
	trackingPullMessages = 1000
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
	tracking := source.NewPuller(a.pubsub, a.log.With(zap.String("pipeline", pc.Name)),
		a.cfg.SubscriptionName(pc.Source.TrackingSubscription), source.PullerConfig{
			Loops:        trackingPullLoops,
			MaxMessages:  trackingPullMessages,
			StallTimeout: pc.Source.StallTimeout,
			OnError:      func(method string) { m.TrackingErrors(method).Inc() },
		})

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
		// The lease of what a dead process or a broken reader left out of
		// sight: the main subscription's messages are leased by the
		// client, LeaseExtension at a time; the tracking subscription's,
		// pulled, for its ack deadline. A message whose lease ran out
		// comes back only after its subscription's retry policy let it:
		// the tracker's guards wait for the longer backoff of the two on
		// top of the longer lease.
		Lease: trackingLease(mainInfo, trackingInfo),
		// The puller's own breaks: a failed Pull (whose answer, with
		// leased messages, may be lost).
		Streams: tracking.State,
	}
	if a.streams != nil {
		// The main subscription's stream breaks in this process: what a
		// broken stream was sent stays out of sight for a lease, and the
		// startup guard waits for it (a follower says so in its reports).
		sub := main.Subscription()
		wcfg.MainStreams = func() source.StreamState { return a.streams.State(sub) }
	}
	if trackingInfo.AckDeadline > source.LeaseExtension {
		a.log.Warn("the tracking subscription's ack deadline is longer than the watermark needs: after a failed pull, a restart or a new leader, the watermark holds that long; 10 s suffices (gcloud pubsub subscriptions update SUBSCRIPTION --ack-deadline=10)",
			zap.String("pipeline", pc.Name), zap.String("subscription", tracking.Subscription()), zap.Duration("ack_deadline", trackingInfo.AckDeadline))
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

// trackingLease is watermark.Config.Lease for a pipeline whose main and
// tracking subscriptions are as Check found them.
func trackingLease(mainInfo, trackingInfo source.Info) time.Duration {
	return max(source.LeaseExtension, trackingInfo.AckDeadline) + max(mainInfo.RedeliveryBackoff, trackingInfo.RedeliveryBackoff)
}
