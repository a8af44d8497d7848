package source

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/retry"
)

// One pull loop of a Puller: Pull, the handlers, then the acks and nacks
// (settle.go). See doc.go, "Puller", for why a timeout is checked.

// pullRetry spaces the Pulls of a loop whose Pulls fail: quick for a blip,
// at most 5 s apart during an outage (the watermark holds meanwhile).
var pullRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

// emptyBackoff is the pause after a Pull answered with no message. Pub/Sub
// holds a Pull until a message comes or its deadline; the emulator answers
// empty after about 4 s, pstest after 0.5 s, and a subscription that
// answers empty at once must not make a loop spin. The other loops keep
// pulling meanwhile.
const emptyBackoff = 100 * time.Millisecond

// confirmTimeout bounds the immediate Pull that checks a Pull which timed
// out: the subscription answers it at once if it answers at all.
const confirmTimeout = 2 * time.Second

// confirmSlack is how much earlier than the start of a Pull that timed out
// a message must have been published to prove that Pull hung: one that
// old was waiting all along, and a working Pull would have returned it.
// The slack covers a service clock behind the host's (publish times are
// the service's) by far more than NTP lets it drift; a message that came
// back to the subscription later (a nack elsewhere) can still pass for
// evidence, which costs a needless hold, no more.
const confirmSlack = 250 * time.Millisecond

// noRetry turns off the client's own retries of a Pull (it retries
// Unavailable, Internal, Unknown and Aborted inside one call): a failed
// attempt may have leased messages whose answer was lost, and the
// watermark must hear of every such attempt.
var noRetry = gax.WithRetry(func() gax.Retryer { return nil })

// errHung is the break of a Pull that timed out while messages waited.
var errHung = errors.New("a pull got no answer until its deadline though messages were waiting")

type pullLoop struct {
	p       *Puller
	healthy bool // this loop's last Pull did not fail (pullHealth.open)
	req     pubsubpb.PullRequest
	now     *pubsubpb.PullRequest // the check of a timed-out Pull
	msg     Message               // reused for every message: the handler does not keep it
	acks    []string
	nacks   []string
}

func (p *Puller) newLoop() *pullLoop {
	l := &pullLoop{p: p}
	l.req = pubsubpb.PullRequest{Subscription: p.subscription, MaxMessages: int32(p.cfg.MaxMessages)}
	//lint:ignore SA1019 the check of a timed-out Pull needs an answer now; deprecated for performance only.
	l.now = &pubsubpb.PullRequest{Subscription: p.subscription, MaxMessages: int32(p.cfg.MaxMessages), ReturnImmediately: true}
	return l
}

// run is the loop, until receiveCtx ends (nil) or a Pull fails
// permanently (its error).
func (l *pullLoop) run(receiveCtx, workCtx context.Context, h Handler) error {
	l.p.health.joined(&l.healthy)
	defer l.p.health.left(&l.healthy)
	for receiveCtx.Err() == nil {
		var got pulled
		err := pullRetry.Do(receiveCtx, transient, func() error {
			got = l.pull(receiveCtx)
			return got.err
		}, func(_ int, err error) { l.failed(err) })
		if receiveCtx.Err() != nil && err != nil {
			// Stopping: a Pull cut short may have leased messages whose
			// answer is lost; they come back after the ack deadline, which
			// the next reader's startup guard waits for.
			return nil
		}
		if err != nil {
			l.p.cfg.OnError("Pull")
			return fmt.Errorf("pull from %s: %w", l.p.subscription, err)
		}
		if got.hung != nil {
			l.failed(got.hung)
		}
		if n := l.p.health.pulled(l.p.cfg.Now(), &l.healthy); n > 0 {
			l.p.log.Info("the subscription answers pulls again", zap.Int("failed_pulls", n))
		}
		acked := l.deliver(workCtx, h, got.msgs, got.at)
		l.settle(receiveCtx)
		if acked == 0 {
			// Nothing came, or the handler refused everything (a tracker
			// that is not sure it leads: its term ends within a second).
			sleep(receiveCtx, emptyBackoff)
		}
	}
	return nil
}

// failed records a failed Pull: a break for the watermark.
func (l *pullLoop) failed(err error) {
	l.p.cfg.OnError("Pull")
	if l.p.health.failed(l.p.cfg.Now(), err, &l.healthy) {
		l.p.log.Warn("a pull failed; retrying (the watermark holds for what its lost answer may have leased)", zap.Error(err))
	}
}

// pulled is the outcome of one pull: the messages, when they came, and err
// (nil when the subscription answered). hung, with err nil, says that the
// answer came only from the check of a Pull that had timed out while those
// messages waited: the Pull hung, and what it may have leased is lost.
type pulled struct {
	msgs []*pubsubpb.ReceivedMessage
	at   time.Time
	hung error
	err  error
}

// pull is one Pull. One that times out is no failure in itself: on Pub/Sub
// an idle Pull ends only with its deadline. So an immediate Pull checks the
// subscription: if it fails, so did the pull; if it returns a message
// published before the timed-out Pull began, that Pull should have returned
// it and hung instead; otherwise the subscription was idle.
func (l *pullLoop) pull(ctx context.Context) pulled {
	began := time.Now()
	resp, err := l.call(ctx, &l.req, l.p.cfg.PullTimeout)
	if err == nil || ctx.Err() != nil || !timedOut(err) {
		return pulled{msgs: resp.GetReceivedMessages(), at: time.Now(), err: err}
	}
	resp, err = l.call(ctx, l.now, confirmTimeout)
	if err != nil {
		return pulled{err: fmt.Errorf("a pull got no answer within %v, and an immediate one failed: %w", l.p.cfg.PullTimeout, err)}
	}
	got := pulled{msgs: resp.GetReceivedMessages(), at: time.Now()}
	for _, m := range got.msgs {
		if m.GetMessage().GetPublishTime().AsTime().Before(began.Add(-confirmSlack)) {
			got.hung = errHung
			break
		}
	}
	return got
}

// call sends req with its own deadline.
func (l *pullLoop) call(ctx context.Context, req *pubsubpb.PullRequest, timeout time.Duration) (*pubsubpb.PullResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return l.p.client.SubscriptionAdminClient.Pull(cctx, req, noRetry)
}

// timedOut says whether a Pull ended with a deadline: its own (how an idle
// Pull ends on Pub/Sub), or one the service or a proxy on the way reported
// (which may end idle Pulls before theirs). Either is checked the same way.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// transient says which Pull errors are worth another Pull. The others say
// that the subscription is gone or out of reach for good, as the client's
// Receive takes them.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument,
		codes.FailedPrecondition, codes.Unimplemented:
		return false
	}
	return true
}

// deliver hands each message to h in turn and sorts its ack ID by the
// verdict; it returns how many were accepted.
func (l *pullLoop) deliver(workCtx context.Context, h Handler, msgs []*pubsubpb.ReceivedMessage, at time.Time) int {
	l.acks, l.nacks = l.acks[:0], l.nacks[:0]
	if len(msgs) == 0 {
		return 0
	}
	l.p.health.handlingBegan()
	for _, rm := range msgs {
		pm := rm.GetMessage()
		l.msg = Message{
			ID:              pm.GetMessageId(),
			Data:            pm.GetData(),
			Attributes:      pm.GetAttributes(),
			PublishTime:     pm.GetPublishTime().AsTime(),
			OrderingKey:     pm.GetOrderingKey(),
			DeliveryAttempt: int(rm.GetDeliveryAttempt()),
			ReceivedAt:      at,
		}
		if h(workCtx, &l.msg) {
			l.acks = append(l.acks, rm.GetAckId())
		} else {
			l.nacks = append(l.nacks, rm.GetAckId())
		}
	}
	l.msg = Message{} // let the batch go
	l.p.health.handlingEnded(l.p.cfg.Now())
	return len(l.acks)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
