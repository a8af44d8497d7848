package app

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pubsink/pubsink/reprocess"
)

// ownSubscriptionExpiry is the expiration policy of a read-only command's
// own subscription (audit, try): Pub/Sub's minimum, so that a killed
// run's subscription goes by itself a day after its last use.
const ownSubscriptionExpiry = 24 * time.Hour

// ownSubscription is the subscription a read-only command (audit, try)
// reads through: its own, on the live topic, never the live one.
type ownSubscription struct {
	command string // "audit" or "try": the name's infix, the label and the errors' first word
	live    *pubsubpb.Subscription
}

// name is the subscription's name for a run stamped stamp:
// <live>-<command>-<stamp>.
func (o ownSubscription) name(stamp string) string {
	return o.live.GetName() + "-" + o.command + "-" + stamp
}

// create creates the subscription of stamp on the live topic, with the
// live subscription's ack deadline and retry policy, expiring after a day
// unused, and seeks it to the range's start (rf's --from or snapshot;
// neither: not seeked, it gets what is published from now on). A name
// that exists is another run's, never joined: it takes a new stamp of
// start, calls renamed with it, and tries again, five times at most. It
// returns the subscription's name.
func (o ownSubscription) create(ctx context.Context, ps *pubsub.Client, rf rangeFlags, stamp string, start time.Time, renamed func(stamp string)) (string, error) {
	for tries := 1; ; tries++ {
		name := o.name(stamp)
		err := o.createNamed(ctx, ps, name, rf)
		if err == nil {
			return name, nil
		}
		if status.Code(err) != codes.AlreadyExists || tries == 5 {
			return "", err
		}
		stamp = reprocess.Stamp(start)
		if renamed != nil {
			renamed(stamp)
		}
	}
}

func (o ownSubscription) createNamed(ctx context.Context, ps *pubsub.Client, name string, rf rangeFlags) error {
	_, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: name, Topic: o.live.GetTopic(), AckDeadlineSeconds: o.live.GetAckDeadlineSeconds(),
		RetryPolicy:      o.live.GetRetryPolicy(),
		ExpirationPolicy: &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(ownSubscriptionExpiry)},
		Labels:           map[string]string{"pubsink-" + o.command: "true"},
	})
	if err != nil {
		return fmt.Errorf("%s: create the %s's subscription %s: %w", o.command, o.command, name, err)
	}
	seek := &pubsubpb.SeekRequest{Subscription: name}
	switch {
	case rf.snapshot != "":
		seek.Target = &pubsubpb.SeekRequest_Snapshot{Snapshot: rf.snapshot}
	case !rf.from.IsZero():
		seek.Target = &pubsubpb.SeekRequest_Time{Time: timestamppb.New(rf.from)}
	default:
		return nil
	}
	if _, err := ps.SubscriptionAdminClient.Seek(ctx, seek); err != nil {
		return fmt.Errorf("%s: seek the %s's subscription %s: %w", o.command, o.command, name, err)
	}
	return nil
}

// delete deletes the subscription name, also once ctx ended (bounded by
// 30 seconds of its own). A failure is logged, and returned: the
// subscription expires after a day unused.
func (o ownSubscription) delete(ctx context.Context, log *zap.Logger, ps *pubsub.Client, name string) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := ps.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name})
	if err != nil && status.Code(err) != codes.NotFound {
		log.Warn("could not delete the "+o.command+"'s subscription; it expires after a day unused", zap.String("subscription", name), zap.Error(err))
		return fmt.Errorf("%s: delete the %s's subscription %s (it expires after a day unused): %w", o.command, o.command, name, err)
	}
	return nil
}
