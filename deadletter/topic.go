package deadletter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pubsink/pubsink/source"
)

// Pub/Sub's limits on one message (https://cloud.google.com/pubsub/quotas).
const (
	// maxAttributes is the most attributes a message may carry.
	maxAttributes = 100
	// maxAttrKeyBytes is the longest attribute key.
	maxAttrKeyBytes = 256
	// requestSlack is kept free under the client's request limit for the
	// request's own framing, beyond what the client itself reserves.
	requestSlack = 64
)

// Checking that the topic has a subscription while running. Pub/Sub drops
// what is published to a topic without one and still confirms it, so a
// copy must not go out once the last subscription is gone; asking before
// every copy would cost a ListTopicSubscriptions each, so sends and
// readiness probes share one check per period.
const (
	// subscriptionCheckPeriod is how long one check answers for. A
	// subscription deleted while running is noticed within it: copies
	// published in between are lost.
	subscriptionCheckPeriod = 30 * time.Second
	// listTimeout bounds one check, which the sends and probes waiting
	// for it wait for too.
	listTimeout = 10 * time.Second
)

// Topic publishes dead-letter copies to a Pub/Sub topic: the original data
// and attributes plus the pubsink_* attributes. Concurrent sends are batched
// by the client's publisher (10 ms, 100 messages or 1 MB).
type Topic struct {
	log      *zap.Logger
	name     string // projects/P/topics/T
	pipeline string
	pub      *pubsub.Publisher
	now      func() time.Time
	// subs says whether the topic still has a subscription; nil when
	// this identity may not list them (not checked).
	subs *subscriptionWatch
	// reprocess marks every copy (Clients.Reprocess); "" for the live
	// pipeline.
	reprocess string

	// unsettled counts the publishes that may still be pending in the
	// publisher: sends in progress, and sends that gave up on their ctx
	// (never decremented). With none, stopping the publisher is immediate.
	unsettled atomic.Int64
	stopOnce  sync.Once
	stopped   chan struct{} // closed once the publisher has stopped
}

// openTopic checks that the topic exists and has a subscription (Pub/Sub
// drops what is published to a topic without one), and returns its output.
func openTopic(ctx context.Context, log *zap.Logger, client *pubsub.Client, name, pipeline string, now func() time.Time) (*Topic, error) {
	log = log.With(zap.String("topic", name))
	_, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound:
		return nil, topicMissing(name)
	case codes.PermissionDenied:
		// roles/pubsub.publisher may publish but not read the topic. A
		// missing topic then shows as failing sends, which are retried and
		// logged, never acked.
		log.Warn("cannot check that the dead-letter topic exists (no pubsub.topics.get permission)", zap.Error(err))
	default:
		return nil, fmt.Errorf("get dead-letter topic %s: %w", name, err)
	}
	subs, err := watchSubscriptions(ctx, log, client, name, now)
	if err != nil {
		return nil, err
	}
	return &Topic{
		log:      log,
		name:     name,
		pipeline: pipeline,
		pub:      client.Publisher(name),
		now:      now,
		subs:     subs,
		stopped:  make(chan struct{}),
	}, nil
}

func topicMissing(name string) error {
	return fmt.Errorf("dead-letter topic %s does not exist (create it with its replay subscription, or run `pubsink setup`)", name)
}

// errNoSubscription is hasSubscription's answer for a topic without any.
var errNoSubscription = errors.New("no subscription")

// hasSubscription returns nil if the topic has a subscription,
// errNoSubscription if it has none, or the error of the request.
func hasSubscription(ctx context.Context, client *pubsub.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	it := client.TopicAdminClient.ListTopicSubscriptions(ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: name, PageSize: 1})
	_, err := it.Next()
	if errors.Is(err, iterator.Done) {
		return errNoSubscription
	}
	return err
}

// watchSubscriptions refuses a topic without subscription, which would
// confirm every copy and lose it, and returns the watch that goes on
// checking; nil (with a warning) when this identity may not list the
// topic's subscriptions, which a later check could not either.
func watchSubscriptions(ctx context.Context, log *zap.Logger, client *pubsub.Client, name string, now func() time.Time) (*subscriptionWatch, error) {
	err := hasSubscription(ctx, client, name)
	switch {
	case err == nil:
		return &subscriptionWatch{log: log, client: client, topic: name, turn: make(chan struct{}, 1), checked: now()}, nil
	case errors.Is(err, errNoSubscription):
		return nil, fmt.Errorf("dead_letter.topic %s has no subscription, and Pub/Sub discards what is published to a topic without one: every dead-lettered message would be lost (`pubsink setup` creates dead_letter.subscription on it)", name)
	case status.Code(err) == codes.NotFound:
		return nil, topicMissing(name)
	case status.Code(err) == codes.PermissionDenied:
		log.Warn("cannot list the subscriptions of the dead-letter topic: whether it has one is not checked, at start or while running; Pub/Sub discards what is published to a topic without one", zap.Error(err))
		return nil, nil
	}
	return nil, fmt.Errorf("list the subscriptions of dead-letter topic %s: %w", name, err)
}

// subscriptionWatch remembers what the last check of a topic's
// subscriptions found, and checks again once that is a period old. The
// caller that checks holds turn meanwhile, and the others wait for its
// answer: no copy goes out on an answer older than a period.
type subscriptionWatch struct {
	log    *zap.Logger
	client *pubsub.Client
	topic  string
	turn   chan struct{} // a lock that a waiter can give up on

	// Guarded by turn:
	checked time.Time // the last check, or the last failed attempt
	missing error     // nil: the topic had a subscription at checked
}

// current returns nil if the topic had a subscription at a check at most
// a period before now, checking again if needed, or what it lacks.
func (w *subscriptionWatch) current(ctx context.Context, now time.Time) error {
	select {
	case w.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-w.turn }()
	if now.Sub(w.checked) >= subscriptionCheckPeriod {
		w.check(ctx, now)
	}
	return w.missing
}

// check asks Pub/Sub again. A request that fails says nothing about the
// subscriptions: the last answer stands for another period (holding every
// copy while the admin API is unavailable would stop dead-lettering that
// works). If the caller gave up (its ctx ended), nothing is recorded and
// the next caller asks.
func (w *subscriptionWatch) check(ctx context.Context, now time.Time) {
	var missing error
	switch err := hasSubscription(ctx, w.client, w.topic); {
	case err == nil:
	case errors.Is(err, errNoSubscription):
		missing = fmt.Errorf("dead-letter topic %s has no subscription any more, and Pub/Sub would discard the copies: messages to dead-letter are held, unacked, until one exists (`pubsink setup` creates dead_letter.subscription)", w.topic)
	case status.Code(err) == codes.NotFound:
		missing = fmt.Errorf("dead-letter topic %s does not exist any more: messages to dead-letter are held, unacked, until it is back with a subscription (`pubsink setup` creates both)", w.topic)
	case ctx.Err() != nil:
		return
	default:
		w.log.Warn("cannot check that the dead-letter topic still has a subscription; going by the last check", zap.Error(err))
		w.checked = now
		return
	}
	switch {
	case missing != nil && w.missing == nil:
		w.log.Error("the dead-letter topic lost its last subscription; holding what is to be dead-lettered", zap.Error(missing))
	case missing == nil && w.missing != nil:
		w.log.Info("the dead-letter topic has a subscription again; dead-lettering resumes")
	}
	w.checked, w.missing = now, missing
}

// Send publishes the copy of m and returns once Pub/Sub confirmed it. See
// Output.
func (t *Topic) Send(ctx context.Context, m *source.Message, reason Reason, cause error) error {
	if err := t.Check(ctx); err != nil {
		return err // a copy published now would be confirmed and dropped
	}
	c := newCopy(t.pipeline, m, reason, cause, t.now())
	c.Reprocess = t.reprocess
	msg := fitPubSub(c, t.name)
	if c.Truncated != "" {
		t.log.Error("the dead-letter copy does not fit in a Pub/Sub message and was truncated; use a bigtable_table or file output to keep such messages whole",
			zap.String("message_id", m.ID), zap.String("reason", string(reason)), zap.String("truncated", c.Truncated))
	}
	t.unsettled.Add(1)
	res := t.pub.Publish(ctx, msg)
	_, err := res.Get(ctx)
	select {
	case <-res.Ready():
		t.unsettled.Add(-1)
	default: // ctx ended first: the publish may still go out
	}
	if err != nil {
		return fmt.Errorf("publish to dead-letter topic %s: %w", t.name, err)
	}
	return nil
}

// Check returns nil unless the topic had no subscription (or no longer
// existed) at the last check, made at most subscriptionCheckPeriod ago; it
// checks again when that is older. It is the output's part of the
// pipeline's readiness, and Send refuses copies while it fails (the
// pipeline keeps their messages unacked and retries). Without
// permission to list the topic's subscriptions it always returns nil.
func (t *Topic) Check(ctx context.Context) error {
	if t.subs == nil {
		return nil
	}
	return t.subs.current(ctx, t.now())
}

// Close flushes the publisher and stops it. See Output. If ctx ends first,
// the publisher goes on stopping in the background, and a later Close waits
// for it.
func (t *Topic) Close(ctx context.Context) error {
	t.stopOnce.Do(func() {
		if t.unsettled.Load() == 0 {
			// Nothing to flush: stop at once, so that a Close given an
			// expired ctx (after shutdown_timeout) still succeeds.
			t.pub.Stop()
			close(t.stopped)
			return
		}
		go func() {
			t.pub.Stop()
			close(t.stopped)
		}()
	})
	select {
	case <-t.stopped:
		return nil
	case <-ctx.Done():
		select { // a stop that finished meanwhile is not cut short
		case <-t.stopped:
			return nil
		default:
			return ctx.Err()
		}
	}
}

// maxMessageBytes is the largest encoded message the client publishes to
// topic: its request limit less the request's framing.
func maxMessageBytes(topic string) int {
	return pubsub.MaxPublishRequestBytes - len(topic) - requestSlack
}

// fitPubSub returns the Pub/Sub message carrying c, within Pub/Sub's limits
// for a publish to topic. A copy of a message that Pub/Sub delivered almost
// always fits; when it does not, it is cut, in this order, and c is updated
// to say what it carries:
//
//  1. An original goog* attribute whose key, renamed (see googPrefix), is
//     over maxAttrKeyBytes (a key of 249 to 256 bytes) is left out
//     (Truncated says how many attributes were kept).
//  2. More than maxAttributes attributes with the pubsink_* ones: the
//     original attributes are kept in key order up to the limit (Truncated
//     says how many were kept).
//  3. Over the size limit (an original within about 1 KiB of it): the error
//     text is shortened first (it is only for humans), then the data is cut
//     at the end (Truncated says how many bytes were kept).
//
// A cut copy is still a copy: the original is acked and nothing is dropped
// silently; the cut is logged and marked, and replay does not republish it.
func fitPubSub(c *Copy, topic string) *pubsub.Message {
	n := len(c.Attributes)
	var cuts []string
	markAttributes := func() {
		cuts = []string{fmt.Sprintf("attributes: %d of %d kept", len(c.Attributes), n)}
		c.Truncated = cuts[0]
	}
	// c.Attributes is the copy's own map (newCopy): deleting from it leaves
	// the original alone.
	maps.DeleteFunc(c.Attributes, func(k, _ string) bool { return len(publishedKey(k)) > maxAttrKeyBytes })
	if len(c.Attributes) < n {
		markAttributes()
	}
	// keepAttributes keeps the first of the original's attributes (in key
	// order) that leave room for pubsink's own and for pubsink_truncated.
	keepAttributes := func() {
		keep := maxAttributes - len(c.fields()) - 1
		if c.Truncated != "" {
			keep++ // pubsink_truncated is already among the fields
		}
		kept := make(map[string]string, keep)
		for _, k := range slices.Sorted(maps.Keys(c.Attributes))[:keep] {
			kept[k] = c.Attributes[k]
		}
		c.Attributes = kept
		markAttributes()
	}
	if len(c.Attributes)+len(c.fields()) > maxAttributes {
		keepAttributes()
	}
	limit := maxMessageBytes(topic)
	size := func() int {
		return proto.Size(&pubsubpb.PubsubMessage{Data: c.Data, Attributes: c.AllAttributes()})
	}
	if over := size() - limit; over > 0 {
		c.Error = truncateUTF8(c.Error, max(0, len(c.Error)-over))
	}
	// Cutting the data adds pubsink_truncated; when the attributes fitted
	// exactly, it would be one too many, so one more original attribute
	// goes, which may be enough on its own.
	if size() > limit && c.Truncated == "" && len(c.Attributes)+len(c.fields())+1 > maxAttributes {
		keepAttributes()
	}
	if over := size() - limit; over > 0 {
		// The marker's own length depends on the kept length; reserve it
		// with the widest value (the full length), then fill it in. The
		// number can only get shorter, so the message only gets smaller.
		full := len(c.Data)
		mark := func(kept int) string {
			return strings.Join(append(cuts, fmt.Sprintf("data: %d of %d bytes kept", kept, full)), "; ")
		}
		c.Truncated = mark(full)
		over = size() - limit
		kept := max(0, full-over)
		c.Data = c.Data[:kept:kept]
		c.Truncated = mark(kept)
	}
	return &pubsub.Message{Data: c.Data, Attributes: c.AllAttributes()}
}

// The read side, as OpenReader returns it for a topic output: a Reader of
// the replay subscription.

// Pulling the replay subscription: Pub/Sub may answer a Pull with no
// messages while some remain, so the subscription counts as drained only
// after pullEmptyRounds pulls in a row brought nothing new, each waiting up
// to pullWait.
const (
	pullWait        = 3 * time.Second
	pullEmptyRounds = 2
	// lookPullWait is pullWait for a reader that only looks (ReaderOptions.Look):
	// `pubsink deadletter list` waits for it twice at the end of a listing
	// shorter than its limit, and a person waits for that.
	lookPullWait = time.Second
	// lookPause is the mean pause of a look between pulls that brought
	// copies it had seen (it releases what it pulls at once, so they come
	// back): jittered by half either way, so that two looks started
	// together do not pull in step, each missing what the other holds for
	// the instant between its pull and its release.
	lookPause = time.Second
	// replayLease is the ack deadline of the copies a replay holds: long
	// enough that copies it skips are not redelivered to it while it runs
	// (Pub/Sub's maximum).
	replayLease = 600
	// ackChunk bounds the ack IDs of one Acknowledge or ModifyAckDeadline
	// request (Pub/Sub caps a request at 512 KB).
	ackChunk = 500
)

// topicReader pulls copies from the replay subscription of a topic output.
type topicReader struct {
	log    *zap.Logger
	client *pubsub.Client
	sub    string
	// look releases every copy as soon as it is pulled (ReaderOptions.Look):
	// a copy a reader holds is hidden from every other reader of the
	// subscription, so a look that held its copies while it ran would
	// hide them from a concurrent audit, list or replay.
	look bool
	// lease is the ack deadline (seconds) the copies pulled are held for
	// until Remove or Release; 0 leaves the subscription's own.
	lease int32
	// wait bounds each Pull (pullWait, or lookPullWait for a look).
	wait time.Duration
	// seen holds the Pub/Sub IDs of the copies returned so far; a copy
	// pulled again (its lease ran out) is not returned twice.
	seen map[string]bool
	// removed holds the copies acked; redelivered acks IDs of those are
	// acked, of the others released at the end.
	removed map[string]bool
	again   []string          // ack IDs of redeliveries to release at the end
	copyIDs map[string]string // ack ID → Pub/Sub ID of the copies returned
}

func openTopicReader(ctx context.Context, log *zap.Logger, client *pubsub.Client, sub string, look bool) (*topicReader, error) {
	_, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("replay subscription %s does not exist (`pubsink setup` creates it on the dead-letter topic; set dead_letter.subscription to use another)", sub)
	}
	if err != nil {
		return nil, fmt.Errorf("replay subscription %s: %w", sub, err)
	}
	r := &topicReader{log: log, client: client, sub: sub, lease: replayLease, wait: pullWait,
		seen: map[string]bool{}, removed: map[string]bool{}, copyIDs: map[string]string{}}
	if look {
		r.lease, r.wait, r.look = 0, lookPullWait, true
	}
	return r, nil
}

// Next pulls up to n copies not returned before and holds them for
// replayLease (a look: releases them at once). See Reader.
func (s *topicReader) Next(ctx context.Context, n int) ([]*Entry, error) {
	for empty := 0; empty < pullEmptyRounds; empty++ {
		if s.look && empty > 0 {
			// The copies released come back at once: pull again after a
			// pause, not in a loop, and not in step with another look.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(lookPause/2 + rand.N(lookPause)):
			}
		}
		pctx, cancel := context.WithTimeout(ctx, s.wait)
		resp, err := s.client.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: s.sub, MaxMessages: int32(n)})
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
			continue // nothing within pullWait
		case err != nil:
			return nil, fmt.Errorf("pull %s: %w", s.sub, err)
		}
		var out []*Entry
		var fresh, ack []string
		for _, rm := range resp.ReceivedMessages {
			id := rm.GetMessage().GetMessageId()
			switch {
			case s.removed[id]:
				ack = append(ack, rm.AckId)
			case s.seen[id]:
				if !s.look {
					s.again = append(s.again, rm.AckId)
				}
				fresh = append(fresh, rm.AckId)
			default:
				s.seen[id] = true
				s.copyIDs[rm.AckId] = id
				fresh = append(fresh, rm.AckId)
				c, err := copyFromAttributes(rm.Message.Data, rm.Message.Attributes)
				out = append(out, &Entry{Copy: c, Err: err, Location: "dead-letter message " + id, ref: rm.AckId})
			}
		}
		// Hold what this replay keeps until it releases it, so that it is
		// not pulled again meanwhile. A look holds nothing: it has read
		// the copies, and they go back for the other readers at once.
		switch {
		case s.look:
			if err := s.modify(ctx, fresh, 0); err != nil {
				return nil, err
			}
		case s.lease > 0:
			if err := s.modify(ctx, fresh, s.lease); err != nil {
				return nil, err
			}
		}
		if err := s.ack(ctx, ack); err != nil {
			return nil, err
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, nil
}

// Remove acks es. See Reader.
func (s *topicReader) Remove(ctx context.Context, es []*Entry) error {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ref
		s.removed[s.copyIDs[e.ref]] = true
	}
	return s.ack(ctx, ids)
}

// Release ends the lease of es and of the redeliveries held (a look's
// were released as they were pulled). See Reader.
func (s *topicReader) Release(ctx context.Context, es []*Entry) error {
	if s.look {
		return nil
	}
	ids := append([]string(nil), s.again...)
	for _, e := range es {
		ids = append(ids, e.ref)
	}
	s.again = nil
	return s.modify(ctx, ids, 0)
}

// Close does nothing: the client is the caller's. See Reader.
func (s *topicReader) Close() error { return nil }

func (s *topicReader) ack(ctx context.Context, ids []string) error {
	for c := range chunks(ids) {
		if err := s.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: s.sub, AckIds: c}); err != nil {
			return fmt.Errorf("acknowledge on %s: %w", s.sub, err)
		}
	}
	return nil
}

func (s *topicReader) modify(ctx context.Context, ids []string, seconds int32) error {
	for c := range chunks(ids) {
		err := s.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: s.sub, AckIds: c, AckDeadlineSeconds: seconds})
		if err != nil {
			return fmt.Errorf("modify ack deadline on %s: %w", s.sub, err)
		}
	}
	return nil
}

// chunks yields ids in slices of at most ackChunk.
func chunks(ids []string) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for len(ids) > 0 {
			n := min(len(ids), ackChunk)
			if !yield(ids[:n]) {
				return
			}
			ids = ids[n:]
		}
	}
}
