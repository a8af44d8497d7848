package source

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
)

// The acks and nacks of a pull loop's batch: one Acknowledge for what the
// handler accepted, one ModifyAckDeadline 0 for what it refused, each split
// to stay well under Pub/Sub's 512 KB request limit.

// Pub/Sub's limit on a request is 512 KB. Real ack IDs are up to a few
// hundred bytes; the client library sends at most 1000 per request, and so
// does a Puller, within maxAckBytes of IDs (their framing is a few bytes
// each, counted in ackIDOverhead).
const (
	maxAckIDs     = 1000
	maxAckBytes   = 400 << 10
	ackIDOverhead = 4
)

// settleTimeout bounds one Acknowledge or ModifyAckDeadline (the client
// retries transient errors within it). What it does not send comes back
// after the ack deadline.
const settleTimeout = 10 * time.Second

// ackWarnEvery spaces the warnings about failed acks.
const ackWarnEvery = time.Minute

// settle sends the batch's acks and nacks. They go out even after
// receiveCtx ended, as Receive sends the acks of its last handlers: the
// handlers ran, and their verdicts stand.
func (l *pullLoop) settle(receiveCtx context.Context) {
	if len(l.acks) == 0 && len(l.nacks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(receiveCtx), settleTimeout)
	defer cancel()
	rpc := l.p.client.SubscriptionAdminClient
	for ids := range ackChunks(l.acks) {
		if err := rpc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: l.p.subscription, AckIds: ids}); err != nil {
			// The messages come back after the ack deadline: a handler
			// takes a second delivery calmly (the tracker counts a message
			// once), so a warning is all it is worth.
			l.p.cfg.OnError("Acknowledge")
			if ok, more := l.p.ackWarn.allow(l.p.cfg.Now(), ackWarnEvery); ok {
				l.p.log.Warn("acks were not sent; their messages come back after the ack deadline",
					zap.Int("messages", len(ids)), zap.Int("failures_not_logged", more), zap.Error(err))
			}
		}
	}
	for ids := range ackChunks(l.nacks) {
		err := rpc.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: l.p.subscription, AckIds: ids, AckDeadlineSeconds: 0})
		if err != nil {
			// Refused messages that stay leased for an ack deadline are out
			// of sight as those of a lost Pull answer: a break.
			l.p.cfg.OnError("ModifyAckDeadline")
			l.p.health.lost(l.p.cfg.Now())
			l.p.log.Warn("refused messages could not be released; they come back after the ack deadline",
				zap.Int("messages", len(ids)), zap.Error(err))
		}
	}
}

// ackChunks yields ids in runs of at most maxAckIDs IDs and maxAckBytes.
func ackChunks(ids []string) func(yield func([]string) bool) {
	return func(yield func([]string) bool) {
		for len(ids) > 0 {
			n, size := 0, 0
			for n < len(ids) && n < maxAckIDs {
				size += len(ids[n]) + ackIDOverhead
				if n > 0 && size > maxAckBytes {
					break
				}
				n++
			}
			if !yield(ids[:n]) {
				return
			}
			ids = ids[n:]
		}
	}
}

// rateLimit lets one event through per period and counts the others.
type rateLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether the event at now may be logged, and how many were
// held back since the last that was.
func (r *rateLimit) allow(now time.Time, every time.Duration) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < every {
		r.suppressed++
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return true, n
}
