package source

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
)

// LeaseExtension is the longest lease pubsink asks for at a time. Pub/Sub's
// stream default is 60 s: after a crash (SIGKILL, OOM, lost node) the
// messages the process held would come back only a minute later. 15 s makes
// that a quarter, for one extension call per 15 s per stream's inventory.
// It is also how long a message can stay out of sight after the process or
// the stream that held it died: the watermark waits that long (package
// watermark). A message a Puller pulled is leased for the subscription's
// ack deadline instead (Info.AckDeadline), which nothing extends.
const LeaseExtension = 15 * time.Second

// Handler decides the fate of one message. It is called concurrently, once
// per delivery, and blocks until the message's outcome is durable (or known
// to have failed). It returns true to ack, false to nack. ctx is the work
// context given to Run: it outlives the end of receiving, so that in-flight
// messages can still commit during a graceful stop.
type Handler func(ctx context.Context, m *Message) (ack bool)

// Source runs the subscriber of one subscription.
type Source struct {
	client       *pubsub.Client
	log          *zap.Logger
	subscription string // full name: projects/P/subscriptions/S
	settings     pubsub.ReceiveSettings

	receiving atomic.Bool

	// The watchdog (watchdog.go): stall is source.stall_timeout (0: none).
	stall   time.Duration
	dog     *watchdog
	hooks   WatchdogHooks
	largest atomic.Int64                   // the largest message seen, as the flow control counts it
	peek    func(ctx context.Context) bool // replaces the peek (tests)
}

// New returns a Source for subscription (a full name) with the flow control
// of cfg. maxBytes is the resolved max_outstanding_bytes (see
// DefaultMaxOutstandingBytes); it is passed apart from cfg because its
// default depends on the process, not on the file.
func New(client *pubsub.Client, log *zap.Logger, subscription string, cfg config.Source, maxBytes int64) *Source {
	s := pubsub.DefaultReceiveSettings
	s.NumGoroutines = cfg.Streams
	// Flow control per stream, with the budget split between the streams:
	// each stream tells the server its own limit, so the server never
	// leases us more than the budget in total. With one shared client-side
	// limit, every stream would announce the whole budget and the server
	// would push streams × budget messages, most of them sitting unread in
	// stream buffers under a lease: slow to come back after a stop or crash.
	s.EnablePerStreamFlowControl = true
	s.MaxOutstandingMessages = max(1, ceilDiv(cfg.MaxOutstandingMessages, cfg.Streams))
	s.MaxOutstandingBytes = int(max(1, ceilDiv(maxBytes, int64(cfg.Streams))))
	// Lease extension stays on (MaxExtension from the defaults): a message
	// waiting in a batch or in a retry must not be redelivered meanwhile.
	// Each extension is at most LeaseExtension long, which bounds how long
	// the messages of a crashed process stay leased to it.
	s.MaxDurationPerAckExtension = LeaseExtension
	// ShutdownOptions stays nil: Receive waits for every handler to return
	// and for its ack or nack to be sent. The handler itself is bounded by
	// the work context, which the caller cancels after shutdown_timeout.
	return &Source{
		client:       client,
		log:          log.Named("source").With(zap.String("subscription", subscription)),
		subscription: subscription,
		settings:     s,
		stall:        cfg.StallTimeout,
		dog:          &watchdog{timeout: cfg.StallTimeout, sub: subscription},
	}
}

// Subscription returns the full name of the subscription.
func (s *Source) Subscription() string { return s.subscription }

// Info is what Check learns of a subscription.
type Info struct {
	// Topic is the full name of the topic the subscription is attached to.
	Topic string
	// RedeliveryBackoff is the longest delay the subscription's retry
	// policy puts before a redelivery, after a nack or an expired lease:
	// its maximum backoff (Pub/Sub's default of 600 s when the policy
	// names none). Zero without a retry policy: redelivery is immediate.
	RedeliveryBackoff time.Duration
	// AckDeadline is the subscription's ack deadline: the lease of a message
	// delivered by a unary Pull (a Puller), which no client extends. A Pull
	// whose answer was lost leaves its messages out of sight that long.
	// StreamingPull (a Source) asks for its own leases (LeaseExtension).
	AckDeadline time.Duration
}

// defaultMaxBackoff is Pub/Sub's maximum backoff of a retry policy that
// does not name one.
const defaultMaxBackoff = 600 * time.Second

// defaultAckDeadline is Pub/Sub's ack deadline of a subscription created
// without one; a subscription that reads back without one (a fake) is
// taken to have it.
const defaultAckDeadline = 10 * time.Second

// Check verifies that the subscription exists and returns its topic, retry
// policy and ack deadline.
func (s *Source) Check(ctx context.Context) (Info, error) {
	return SubscriptionInfo(ctx, s.client, s.subscription)
}

// SubscriptionInfo reads the subscription named sub (a full name), with an
// error that says what to do when it does not exist.
func SubscriptionInfo(ctx context.Context, client *pubsub.Client, sub string) (Info, error) {
	got, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	if status.Code(err) == codes.NotFound {
		return Info{}, fmt.Errorf("subscription %s does not exist (create it, or run `pubsink setup`)", sub)
	}
	if err != nil {
		return Info{}, fmt.Errorf("get subscription %s: %w", sub, err)
	}
	info := Info{Topic: got.Topic, AckDeadline: defaultAckDeadline}
	if got.AckDeadlineSeconds > 0 {
		info.AckDeadline = time.Duration(got.AckDeadlineSeconds) * time.Second
	}
	if rp := got.RetryPolicy; rp != nil {
		info.RedeliveryBackoff = defaultMaxBackoff
		if rp.MaximumBackoff != nil {
			info.RedeliveryBackoff = rp.MaximumBackoff.AsDuration()
		}
	}
	return info, nil
}

// Receiving reports whether Run is pulling messages.
func (s *Source) Receiving() bool { return s.receiving.Load() }

// Run pulls messages and hands each to h until receiveCtx ends, then waits
// for every handler to return and its ack or nack to be sent, and returns
// nil. Handlers get workCtx; cancelling it (after the shutdown timeout)
// makes them give up and nack. Run returns an error when the service fails
// permanently (for example the subscription was deleted). Run must not be
// called twice at once. With a stall timeout, the watchdog may end a
// Receive whose streams hang and start another (see doc.go, "Watchdog").
func (s *Source) Run(receiveCtx, workCtx context.Context, h Handler) error {
	s.receiving.Store(true)
	defer s.receiving.Store(false)
	s.log.Info("receiving",
		zap.Int("streams", s.settings.NumGoroutines),
		zap.Int("max_outstanding_messages", s.settings.MaxOutstandingMessages),
		zap.Int("max_outstanding_bytes", s.settings.MaxOutstandingBytes),
		zap.Duration("stall_timeout", s.stall))
	return s.runGenerations(receiveCtx, workCtx, h)
}

// receive is one Receive, one set of streams, until ctx ends; g counts what
// its handlers hold.
func (s *Source) receive(ctx, workCtx context.Context, h Handler, g *generation) error {
	sub := s.client.Subscriber(s.subscription)
	sub.ReceiveSettings = s.settings
	err := sub.Receive(ctx, func(_ context.Context, pm *pubsub.Message) {
		held := g.began(s, len(pm.Data))
		defer g.ended(held)
		// The callback's own context ends with receiveCtx; the outcome of a
		// message already received must not be cut short by that.
		m := &Message{
			ID:          pm.ID,
			Data:        pm.Data,
			Attributes:  pm.Attributes,
			PublishTime: pm.PublishTime,
			OrderingKey: pm.OrderingKey,
			ReceivedAt:  time.Now(),
		}
		if pm.DeliveryAttempt != nil {
			m.DeliveryAttempt = *pm.DeliveryAttempt
		}
		// Ack and nack happen here, inside the callback: the client's flow
		// control counts a message as outstanding until the callback returns.
		if h(workCtx, m) {
			pm.Ack()
		} else {
			pm.Nack()
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("receive from %s: %w", s.subscription, err)
	}
	return nil
}

func ceilDiv[T int | int64](a, b T) T {
	if b <= 0 {
		return a
	}
	return (a + b - 1) / b
}
