package source

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// These tests run on the real Pub/Sub emulator and pin what it does with
// snapshots, Seek and message retention, which a reprocess command would
// replay a pipeline's messages with (docs/emulator-seek.md names the test
// of each fact), so that a changed emulator fails a test instead of making
// the page wrong. Messages carry their tag in attribute i.

const (
	// seekPollTimeout bounds the wait for messages that must come.
	seekPollTimeout = 20 * time.Second
	// seekQuiet is how long a Pull must stay empty for "nothing more is
	// delivered". The emulator answers a Pull at once when a message is
	// ready, so a message it means to deliver shows up well within it.
	seekQuiet = 1500 * time.Millisecond
	// seekWeek is the longest snapshot lifetime.
	seekWeek = 7 * 24 * time.Hour
)

// seekEmulator is a Pub/Sub emulator with a client in a project named
// after the test.
type seekEmulator struct {
	project string
	client  *pubsub.Client
}

func newSeekEmulator(t *testing.T) *seekEmulator {
	t.Helper()
	e := emulator.RequirePubSub(t)
	project := "seek-" + strings.ToLower(strings.TrimPrefix(t.Name(), "TestEmulator"))
	client, err := e.Client(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return &seekEmulator{project: project, client: client}
}

func (se *seekEmulator) name(kind, id string) string {
	return "projects/" + se.project + "/" + kind + "/" + id
}

// topic creates topic id, with message retention if retention is not 0.
func (se *seekEmulator) topic(t *testing.T, id string, retention time.Duration) string {
	t.Helper()
	tp := &pubsubpb.Topic{Name: se.name("topics", id)}
	if retention != 0 {
		tp.MessageRetentionDuration = durationpb.New(retention)
	}
	if _, err := se.client.TopicAdminClient.CreateTopic(context.Background(), tp); err != nil {
		t.Fatal(err)
	}
	return tp.Name
}

// sub creates subscription id on topic, with a lease (60 s) longer than any
// test, so that nothing comes back by expiry.
func (se *seekEmulator) sub(t *testing.T, id, topic string, retainAcked bool) string {
	t.Helper()
	s := &pubsubpb.Subscription{Name: se.name("subscriptions", id), Topic: topic, AckDeadlineSeconds: 60, RetainAckedMessages: retainAcked}
	if _, err := se.client.SubscriptionAdminClient.CreateSubscription(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s.Name
}

// publish publishes one message per tag, in one request.
func (se *seekEmulator) publish(t *testing.T, topic string, tags ...string) {
	t.Helper()
	req := &pubsubpb.PublishRequest{Topic: topic}
	for _, tag := range tags {
		req.Messages = append(req.Messages, &pubsubpb.PubsubMessage{Data: []byte(tag), Attributes: map[string]string{"i": tag}})
	}
	if _, err := se.client.TopicAdminClient.Publish(context.Background(), req); err != nil {
		t.Fatalf("publish %v: %v", tags, err)
	}
}

// pullOnce makes one Pull of at most d and returns what it got.
func (se *seekEmulator) pullOnce(t *testing.T, sub string, d time.Duration) []*pubsubpb.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := se.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 100})
	if err != nil && status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pull %s: %v", sub, err)
	}
	return resp.GetReceivedMessages()
}

// receive pulls from sub until it has every message of want, and returns
// them by tag, not acked. A message not in want is an error.
func (se *seekEmulator) receive(t *testing.T, sub string, want ...string) map[string]*pubsubpb.ReceivedMessage {
	t.Helper()
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w] = true
	}
	got := map[string]*pubsubpb.ReceivedMessage{}
	deadline := time.Now().Add(seekPollTimeout)
	for len(got) < len(wanted) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: received %v within %v; want %v", sub, seekTags(got), seekPollTimeout, want)
		}
		ms := se.pullOnce(t, sub, 3*time.Second)
		if len(ms) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		for _, m := range ms {
			tag := m.Message.Attributes["i"]
			if !wanted[tag] {
				t.Errorf("%s: received %q; want only %v", sub, tag, want)
				continue
			}
			got[tag] = m
		}
	}
	return got
}

// ack acknowledges ms on sub.
func (se *seekEmulator) ack(t *testing.T, sub string, ms map[string]*pubsubpb.ReceivedMessage) {
	t.Helper()
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.AckId)
	}
	if len(ids) == 0 {
		return
	}
	if err := se.client.SubscriptionAdminClient.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ids}); err != nil {
		t.Fatalf("ack on %s: %v", sub, err)
	}
}

// quiet fails if sub delivers anything within seekQuiet.
func (se *seekEmulator) quiet(t *testing.T, sub string) {
	t.Helper()
	if ms := se.pullOnce(t, sub, seekQuiet); len(ms) > 0 {
		got := map[string]*pubsubpb.ReceivedMessage{}
		for _, m := range ms {
			got[m.Message.Attributes["i"]] = m
		}
		t.Errorf("%s delivered %v; want nothing", sub, seekTags(got))
	}
}

// drain receives exactly want from sub, acks it, and checks that nothing
// else comes.
func (se *seekEmulator) drain(t *testing.T, sub string, want ...string) map[string]*pubsubpb.ReceivedMessage {
	t.Helper()
	got := se.receive(t, sub, want...)
	se.ack(t, sub, got)
	se.quiet(t, sub)
	return got
}

func (se *seekEmulator) seekTime(t *testing.T, sub string, at time.Time) {
	t.Helper()
	if _, err := se.client.SubscriptionAdminClient.Seek(context.Background(), &pubsubpb.SeekRequest{Subscription: sub,
		Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(at)}}); err != nil {
		t.Fatalf("seek %s to %v: %v", sub, at, err)
	}
}

func (se *seekEmulator) seekSnapshot(t *testing.T, sub, snap string) error {
	t.Helper()
	_, err := se.client.SubscriptionAdminClient.Seek(context.Background(), &pubsubpb.SeekRequest{Subscription: sub,
		Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: snap}})
	return err
}

func (se *seekEmulator) snapshot(t *testing.T, id, sub string) *pubsubpb.Snapshot {
	t.Helper()
	s, err := se.client.SubscriptionAdminClient.CreateSnapshot(context.Background(), &pubsubpb.CreateSnapshotRequest{Name: se.name("snapshots", id), Subscription: sub})
	if err != nil {
		t.Fatalf("CreateSnapshot(%s of %s): %v", id, sub, err)
	}
	return s
}

func seekTags(ms map[string]*pubsubpb.ReceivedMessage) []string {
	var tags []string
	for tag := range ms {
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	return tags
}

// publishedBetween publishes before, waits until the emulator's clock
// (milliseconds) has moved on, publishes after, receives both on every
// sub and acks them there, and returns the publish time of the first of
// after: a seek to it falls between the two groups, and puts that first
// message after it. Publish times are whole milliseconds.
func (se *seekEmulator) publishedBetween(t *testing.T, topic string, before, after []string, subs ...string) time.Time {
	t.Helper()
	se.publish(t, topic, before...)
	time.Sleep(20 * time.Millisecond)
	se.publish(t, topic, after...)
	var mid time.Time
	for _, sub := range subs {
		got := se.drain(t, sub, append(append([]string(nil), before...), after...)...)
		for tag, m := range got {
			if m.Message.PublishTime.GetNanos()%int32(time.Millisecond) != 0 {
				t.Errorf("%s: publish time %v is finer than milliseconds", tag, m.Message.PublishTime.AsTime())
			}
		}
		if mid.IsZero() {
			for _, tag := range after {
				if pt := got[tag].Message.PublishTime.AsTime(); mid.IsZero() || pt.Before(mid) {
					mid = pt
				}
			}
			for _, tag := range before {
				if pt := got[tag].Message.PublishTime.AsTime(); !pt.Before(mid) {
					t.Fatalf("%s published at %v, not before %v", tag, pt, mid)
				}
			}
		}
	}
	return mid
}

// TestEmulatorSnapshotLifecycle pins CreateSnapshot, GetSnapshot,
// ListSnapshots, ListTopicSnapshots, UpdateSnapshot and DeleteSnapshot, and
// the errors of Seek to a snapshot.
func TestEmulatorSnapshotLifecycle(t *testing.T) {
	se := newSeekEmulator(t)
	ctx := context.Background()
	sc := se.client.SubscriptionAdminClient
	topic := se.topic(t, "events", 0)
	sub := se.sub(t, "live", topic, false)
	empty := se.sub(t, "empty", topic, false)
	// Three publish times, in this order.
	for _, tag := range []string{"acked", "oldest", "newer"} {
		se.publish(t, topic, tag)
		time.Sleep(20 * time.Millisecond)
	}
	got := se.receive(t, sub, "acked", "oldest", "newer")
	se.ack(t, sub, map[string]*pubsubpb.ReceivedMessage{"acked": got["acked"]})
	// The empty subscription gets the messages too; ack them all.
	se.drain(t, empty, "acked", "oldest", "newer")

	// Name and topic as asked; labels dropped; expire_time = publish time
	// of the oldest unacked message + 7 days.
	snap, err := sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: se.name("snapshots", "snap"), Subscription: sub, Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	wantExpire := got["oldest"].Message.PublishTime.AsTime().Add(seekWeek)
	if a, o, n := got["acked"].Message.PublishTime.AsTime(), got["oldest"].Message.PublishTime.AsTime(), got["newer"].Message.PublishTime.AsTime(); !a.Before(o) || !o.Before(n) {
		t.Fatalf("publish times %v, %v, %v; want them increasing", a, o, n)
	}
	if snap.Name != se.name("snapshots", "snap") || snap.Topic != topic || !snap.ExpireTime.AsTime().Equal(wantExpire) || len(snap.Labels) != 0 {
		t.Errorf("CreateSnapshot = %v; want topic %s, expire_time %v (oldest unacked + 7 days), no labels", snap, topic, wantExpire)
	}
	// No backlog: now + 7 days.
	before := time.Now().Truncate(time.Millisecond)
	snapEmpty := se.snapshot(t, "a-empty", empty)
	after := time.Now()
	if e := snapEmpty.ExpireTime.AsTime(); e.Before(before.Add(seekWeek)) || e.After(after.Add(seekWeek)) {
		t.Errorf("snapshot of a subscription without backlog expires %v; want now + 7 days (%v)", e, before.Add(seekWeek))
	}

	g, err := sc.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: snap.Name})
	if err != nil || g.Name != snap.Name || g.Topic != topic || !g.ExpireTime.AsTime().Equal(wantExpire) || len(g.Labels) != 0 {
		t.Errorf("GetSnapshot = %v, %v; want what CreateSnapshot returned", g, err)
	}
	var listed []string
	for it := sc.ListSnapshots(ctx, &pubsubpb.ListSnapshotsRequest{Project: "projects/" + se.project}); ; {
		s, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, s.Name)
	}
	if want := []string{snapEmpty.Name, snap.Name}; strings.Join(listed, " ") != strings.Join(want, " ") {
		t.Errorf("ListSnapshots = %v; want %v (by name)", listed, want)
	}
	var byTopic []string
	for it := se.client.TopicAdminClient.ListTopicSnapshots(ctx, &pubsubpb.ListTopicSnapshotsRequest{Topic: topic}); ; {
		s, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		byTopic = append(byTopic, s)
	}
	if want := []string{snapEmpty.Name, snap.Name}; strings.Join(byTopic, " ") != strings.Join(want, " ") {
		t.Errorf("ListTopicSnapshots = %v; want %v", byTopic, want)
	}

	_, err = sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: snap.Name, Subscription: sub})
	wantCode(t, "CreateSnapshot(existing name)", err, codes.AlreadyExists, "Snapshot already exists")
	_, err = sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: se.name("snapshots", "orphan"), Subscription: se.name("subscriptions", "nothing")})
	wantCode(t, "CreateSnapshot(unknown subscription)", err, codes.NotFound, "Subscription does not exist")
	_, err = sc.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Subscription: sub})
	wantCode(t, "CreateSnapshot(no name)", err, codes.InvalidArgument, "Invalid [snapshots] name: (name=)")
	_, err = sc.UpdateSnapshot(ctx, &pubsubpb.UpdateSnapshotRequest{Snapshot: &pubsubpb.Snapshot{Name: snap.Name, Labels: map[string]string{"k": "w"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}})
	wantCode(t, "UpdateSnapshot", err, codes.Unimplemented, "")

	_, err = sc.Seek(ctx, &pubsubpb.SeekRequest{Subscription: sub})
	wantCode(t, "Seek without a target", err, codes.InvalidArgument, "No target was specified in the SeekRequest. Must specify either a time or a snapshot")
	otherTopic := se.topic(t, "other", 0)
	other := se.sub(t, "other", otherTopic, false)
	err = se.seekSnapshot(t, other, snap.Name)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "is different from that of the snapshot") {
		t.Errorf("Seek of a subscription of another topic = %v; want FailedPrecondition", err)
	}

	// The snapshot outlives its subscription.
	if err := sc.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: sub}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: snap.Name}); err != nil {
		t.Errorf("GetSnapshot after its subscription was deleted = %v", err)
	}
	if err := sc.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: snap.Name}); err != nil {
		t.Fatal(err)
	}
	_, err = sc.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: snap.Name})
	wantCode(t, "GetSnapshot(deleted)", err, codes.NotFound, "Snapshot does not exist")
	wantCode(t, "DeleteSnapshot(deleted)", sc.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: snap.Name}), codes.NotFound, "Snapshot does not exist")
	wantCode(t, "Seek to a deleted snapshot", se.seekSnapshot(t, empty, snap.Name), codes.NotFound, "Snapshot does not exist")
}

// TestEmulatorSeekToSnapshot: a Seek to a snapshot redelivers what was
// unacked when it was taken (leased or never delivered), what was published
// after it, and what was acked after it, even on a subscription that does
// not retain acked messages; what was acked before it stays acked. The
// snapshot can be used again.
func TestEmulatorSeekToSnapshot(t *testing.T) {
	se := newSeekEmulator(t)
	topic := se.topic(t, "events", 0)
	sub := se.sub(t, "live", topic, false)
	se.publish(t, topic, "acked1", "acked2", "leased")
	got := se.receive(t, sub, "acked1", "acked2", "leased")
	se.ack(t, sub, map[string]*pubsubpb.ReceivedMessage{"acked1": got["acked1"], "acked2": got["acked2"]})
	se.publish(t, topic, "waiting")
	snap := se.snapshot(t, "snap", sub)

	se.ack(t, sub, map[string]*pubsubpb.ReceivedMessage{"leased": got["leased"]})
	se.publish(t, topic, "after")
	se.drain(t, sub, "waiting", "after")

	if err := se.seekSnapshot(t, sub, snap.Name); err != nil {
		t.Fatal(err)
	}
	se.drain(t, sub, "leased", "waiting", "after")
	if err := se.seekSnapshot(t, sub, snap.Name); err != nil {
		t.Fatal(err)
	}
	se.drain(t, sub, "leased", "waiting", "after")
}

// TestEmulatorSeekToTimeSubscription: without topic retention a Seek to a
// time replays acked messages only on a subscription with
// retain_acked_messages, and only from its own creation on; on any
// subscription it purges (acks) what was published before the time, and
// what it purged never comes back, not even with retain_acked_messages.
func TestEmulatorSeekToTimeSubscription(t *testing.T) {
	se := newSeekEmulator(t)
	start := time.Now().Add(-time.Second)
	topic := se.topic(t, "events", 0)
	se.publish(t, topic, "early")
	plain := se.sub(t, "plain", topic, false)
	retain := se.sub(t, "retain", topic, true)
	mid := se.publishedBetween(t, topic, []string{"a1", "a2"}, []string{"b1", "b2"}, plain, retain)

	se.seekTime(t, plain, mid)
	se.quiet(t, plain)
	se.seekTime(t, plain, start)
	se.quiet(t, plain)

	se.seekTime(t, retain, mid)
	se.drain(t, retain, "b1", "b2")
	se.seekTime(t, retain, start)
	se.drain(t, retain, "a1", "a2", "b1", "b2")

	// Purge: a seek into the future acks what is waiting, on both.
	se.publish(t, topic, "purged")
	future := time.Now().Add(time.Hour)
	se.seekTime(t, plain, future)
	se.quiet(t, plain)
	se.seekTime(t, retain, future)
	se.quiet(t, retain)
	// What a seek acked never comes back, not even where acked messages
	// are retained: only an Acknowledge retains a message.
	se.seekTime(t, plain, mid)
	se.quiet(t, plain)
	se.seekTime(t, retain, mid)
	se.drain(t, retain, "b1", "b2")
}

// TestEmulatorSeekToTimeTopicRetention: on a topic created with
// message_retention_duration a new subscription starts with every message
// the topic ever had, unacked, and a Seek to a time replays acked messages
// without retain_acked_messages, back to before the subscription existed.
func TestEmulatorSeekToTimeTopicRetention(t *testing.T) {
	se := newSeekEmulator(t)
	start := time.Now().Add(-time.Second)
	topic := se.topic(t, "events", time.Hour)
	se.publish(t, topic, "early")
	sub := se.sub(t, "replay", topic, false)
	se.drain(t, sub, "early")
	mid := se.publishedBetween(t, topic, []string{"a1"}, []string{"b1"}, sub)

	se.seekTime(t, sub, mid)
	se.drain(t, sub, "b1")
	se.seekTime(t, sub, start)
	se.drain(t, sub, "early", "a1", "b1")

	late := se.sub(t, "late", topic, false)
	se.drain(t, late, "early", "a1", "b1")
}

// TestEmulatorSeekToTimeTopicRetentionByUpdate: message_retention_duration
// set by UpdateTopic reads back but gives no history: an existing
// subscription goes on dropping acked messages, and a new one starts empty
// (it does keep its own acked messages for a seek).
func TestEmulatorSeekToTimeTopicRetentionByUpdate(t *testing.T) {
	se := newSeekEmulator(t)
	ctx := context.Background()
	start := time.Now().Add(-time.Second)
	topic := se.topic(t, "events", 0)
	old := se.sub(t, "old", topic, false)
	se.publish(t, topic, "early")
	se.drain(t, old, "early")

	tp, err := se.client.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: topic, MessageRetentionDuration: durationpb.New(time.Hour)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"message_retention_duration"}}})
	if err != nil || tp.GetMessageRetentionDuration().AsDuration() != time.Hour {
		t.Fatalf("UpdateTopic(retention 1h) = %v, %v", tp, err)
	}
	late := se.sub(t, "late", topic, false)
	se.quiet(t, late)
	se.publishedBetween(t, topic, []string{"a1"}, []string{"b1"}, old, late)

	se.seekTime(t, old, start)
	se.quiet(t, old)
	se.seekTime(t, late, start)
	se.drain(t, late, "a1", "b1")
}

// TestEmulatorSeekNewSubscriptionToSnapshot: a subscription created after a
// snapshot of another one on the same topic can be seeked to it, but gets
// only what it holds itself: on a topic without retention, none of the
// snapshot's backlog and nothing published between the snapshot and its
// creation. On a topic created with retention it gets exactly the snapshot's
// backlog and everything after.
func TestEmulatorSeekNewSubscriptionToSnapshot(t *testing.T) {
	se := newSeekEmulator(t)
	for _, c := range []struct {
		id        string
		retention time.Duration
		want      []string
	}{
		{"plain", 0, []string{"after-sub"}},
		{"kept", time.Hour, []string{"unacked", "after-snap", "after-sub"}},
	} {
		topic := se.topic(t, c.id, c.retention)
		live := se.sub(t, c.id+"-live", topic, false)
		se.publish(t, topic, "acked", "unacked")
		got := se.receive(t, live, "acked", "unacked")
		se.ack(t, live, map[string]*pubsubpb.ReceivedMessage{"acked": got["acked"]})
		snap := se.snapshot(t, c.id, live)
		se.publish(t, topic, "after-snap")
		replay := se.sub(t, c.id+"-replay", topic, false)
		se.publish(t, topic, "after-sub")
		if err := se.seekSnapshot(t, replay, snap.Name); err != nil {
			t.Fatalf("%s: seek of a new subscription to the snapshot: %v", c.id, err)
		}
		se.drain(t, replay, c.want...)
	}
}

// TestEmulatorSeekRetentionReadBack pins what GetTopic and GetSubscription say
// about retention.
func TestEmulatorSeekRetentionReadBack(t *testing.T) {
	se := newSeekEmulator(t)
	ctx := context.Background()
	tc, sc := se.client.TopicAdminClient, se.client.SubscriptionAdminClient
	kept := se.topic(t, "kept", time.Hour)
	plain := se.topic(t, "plain", 0)
	getTopic := func(name string) *pubsubpb.Topic {
		tp, err := tc.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	if d := getTopic(kept).MessageRetentionDuration; d.AsDuration() != time.Hour {
		t.Errorf("topic created with 1h retention reads %v", d)
	}
	if d := getTopic(plain).MessageRetentionDuration; d != nil {
		t.Errorf("topic created without retention reads %v; want none", d)
	}
	// UpdateTopic naming the field without a value sets the default (31 days).
	if _, err := tc.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{Topic: &pubsubpb.Topic{Name: plain},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"message_retention_duration"}}}); err != nil {
		t.Fatal(err)
	}
	if d := getTopic(plain).MessageRetentionDuration; d.AsDuration() != 31*24*time.Hour {
		t.Errorf("topic updated with an empty retention reads %v; want 31 days", d)
	}
	_, err := tc.CreateTopic(ctx, &pubsubpb.Topic{Name: se.name("topics", "short"), MessageRetentionDuration: durationpb.New(time.Minute)})
	wantCode(t, "CreateTopic(retention 1 minute)", err, codes.InvalidArgument, "message_retention_duration out of bounds")
	_, err = tc.CreateTopic(ctx, &pubsubpb.Topic{Name: se.name("topics", "long"), MessageRetentionDuration: durationpb.New(32 * 24 * time.Hour)})
	wantCode(t, "CreateTopic(retention 32 days)", err, codes.InvalidArgument, "message_retention_duration out of bounds")

	getSub := func(name string) *pubsubpb.Subscription {
		s, err := sc.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dflt := getSub(se.sub(t, "default", kept, false))
	if dflt.TopicMessageRetentionDuration != nil || dflt.MessageRetentionDuration.AsDuration() != seekWeek || dflt.RetainAckedMessages {
		t.Errorf("subscription of a 1h-retention topic reads topic_message_retention_duration %v, message_retention_duration %v, retain_acked %v; want none, 7 days, false",
			dflt.TopicMessageRetentionDuration, dflt.MessageRetentionDuration, dflt.RetainAckedMessages)
	}
	s, err := sc.CreateSubscription(ctx, &pubsubpb.Subscription{Name: se.name("subscriptions", "set"), Topic: kept, RetainAckedMessages: true, MessageRetentionDuration: durationpb.New(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	set := getSub(s.Name)
	if set.TopicMessageRetentionDuration != nil || set.MessageRetentionDuration.AsDuration() != 2*time.Hour || !set.RetainAckedMessages {
		t.Errorf("subscription with 2h retention and retain_acked reads %v, %v, %v", set.TopicMessageRetentionDuration, set.MessageRetentionDuration, set.RetainAckedMessages)
	}
	_, err = sc.CreateSubscription(ctx, &pubsubpb.Subscription{Name: se.name("subscriptions", "long"), Topic: kept, MessageRetentionDuration: durationpb.New(8 * 24 * time.Hour)})
	wantCode(t, "CreateSubscription(retention 8 days)", err, codes.InvalidArgument, "message_retention_duration out of bounds")
}
