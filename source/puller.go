package source

import (
	"context"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// PullerConfig configures a Puller. Zero fields take the defaults below.
type PullerConfig struct {
	// Loops is the number of concurrent pull loops (default 2): while one
	// waits for a Pull's answer, another runs its handlers.
	Loops int
	// MaxMessages is the most messages one Pull asks for (default 1000).
	MaxMessages int
	// StallTimeout is source.stall_timeout: Stalled reports an error when
	// no pull has been answered for this long while Run runs; 0: never.
	StallTimeout time.Duration
	// PullTimeout bounds one Pull, so that a hung call becomes an error
	// rather than a stuck loop (default: a quarter of StallTimeout, from
	// 2 s to 30 s; 30 s without one).
	PullTimeout time.Duration
	// OnError, if set, is called with the method's name ("Pull",
	// "Acknowledge", "ModifyAckDeadline") after each call that failed
	// (app counts them in pubsink_tracking_errors_total).
	OnError func(method string)
	// Now is the clock of Stalled and State; nil means time.Now.
	Now func() time.Time
}

// Defaults of PullerConfig.
const (
	DefaultPullLoops       = 2
	DefaultPullMaxMessages = 1000
	// A Pull on an empty subscription waits server-side until a message
	// comes or its deadline. The deadline must stay well under the stall
	// timeout, since an idle Pull on Pub/Sub ends only with it, and long
	// enough that an idle subscription costs few calls.
	minPullTimeout = 2 * time.Second
	maxPullTimeout = 30 * time.Second
)

// Puller reads one subscription with unary Pull calls in large batches:
// the cheap way to read a subscription whose handler takes microseconds
// and needs no lease extension (the watermark's tracking subscription).
// Each of its loops pulls up to MaxMessages, calls the handler for each
// message in turn, in the loop's goroutine, then sends one Acknowledge for
// those the handler accepted and one ModifyAckDeadline 0 for those it
// refused. There is no flow control, no lease extension and no per-message
// goroutine: a handler that blocks stops its loop, which is the
// back-pressure, and the messages of its batch that outlive the
// subscription's ack deadline meanwhile are redelivered (a handler must
// take a second delivery of a message calmly). See doc.go, "Puller", for
// breaks and stalls.
type Puller struct {
	client       *pubsub.Client
	log          *zap.Logger
	subscription string
	cfg          PullerConfig
	health       pullHealth
	ackWarn      rateLimit
}

// NewPuller returns a Puller of subscription (a full name). It does no I/O.
func NewPuller(client *pubsub.Client, log *zap.Logger, subscription string, cfg PullerConfig) *Puller {
	if cfg.Loops <= 0 {
		cfg.Loops = DefaultPullLoops
	}
	if cfg.MaxMessages <= 0 {
		cfg.MaxMessages = DefaultPullMaxMessages
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = maxPullTimeout
		if cfg.StallTimeout > 0 {
			cfg.PullTimeout = min(max(cfg.StallTimeout/4, minPullTimeout), maxPullTimeout)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnError == nil {
		cfg.OnError = func(string) {}
	}
	return &Puller{
		client:       client,
		log:          log.Named("source").With(zap.String("subscription", subscription), zap.String("reader", "pull")),
		subscription: subscription,
		cfg:          cfg,
	}
}

// Subscription returns the full name of the subscription.
func (p *Puller) Subscription() string { return p.subscription }

// Check verifies that the subscription exists and returns what Source.Check
// does; its AckDeadline is how long the messages of a lost Pull answer stay
// out of sight.
func (p *Puller) Check(ctx context.Context) (Info, error) {
	return SubscriptionInfo(ctx, p.client, p.subscription)
}

// Run pulls and hands each message to h until receiveCtx ends, then lets
// every loop finish its batch and send its acks and nacks, and returns nil.
// Handlers get workCtx. The Message a handler gets is reused once it
// returned. Run returns an error when a Pull fails permanently (the
// subscription was deleted, permissions were revoked); it retries every
// other failure with a backoff, recording a break (State). Run must not be
// called twice at once.
func (p *Puller) Run(receiveCtx, workCtx context.Context, h Handler) error {
	p.health.begin(p.cfg.Now())
	defer p.health.end()
	p.log.Info("receiving",
		zap.Int("loops", p.cfg.Loops),
		zap.Int("max_messages", p.cfg.MaxMessages),
		zap.Duration("pull_timeout", p.cfg.PullTimeout),
		zap.Duration("stall_timeout", p.cfg.StallTimeout))
	g, gctx := errgroup.WithContext(receiveCtx)
	for range p.cfg.Loops {
		g.Go(func() error { return p.newLoop().run(gctx, workCtx, h) })
	}
	return g.Wait()
}

// State reports the pull loops as a StreamWatch reports streams, for the
// watermark tracker (watermark.Config.Streams): Open is the number of loops
// running whose last Pull did not fail, Broke the last time a Pull failed
// (the messages of its lost answer, if any, stay leased until the ack
// deadline) or a nack could not be sent.
func (p *Puller) State() StreamState { return p.health.state() }

// Stalled returns nil unless Run runs with a stall timeout and no Pull has
// been answered for that long, while no loop is inside its handlers (a
// handler that waits is back-pressure, not a stall): then an error naming
// the subscription, how long it has been silent and the last error.
func (p *Puller) Stalled() error {
	if p == nil {
		return nil
	}
	return p.health.stalled(p.cfg.Now(), p.cfg.StallTimeout, p.subscription)
}
