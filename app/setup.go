package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/state"
)

// ackDeadlineSeconds is the ack deadline of the subscriptions setup
// creates. The client extends leases anyway; 60 s (rather than Pub/Sub's
// 10 s default) spares extension calls for messages that wait in a batch,
// and bounds how long a crashed process holds its messages.
const ackDeadlineSeconds = 60

// trackingAckDeadlineSeconds is the ack deadline setup gives a tracking
// subscription: Pub/Sub's minimum. Its reader acks each batch within
// milliseconds and extends no lease, and the deadline is how long the
// messages of a Pull whose answer was lost stay out of sight, which the
// watermark waits for after a failed pull, a restart or a change of
// leader (app: the tracker's lease is the longer of it and 15 s).
const trackingAckDeadlineSeconds = 10

// redeliveryPolicy is the retry policy setup gives a pipeline's main
// subscription. Without one, Pub/Sub redelivers a nacked message at once:
// a poison message with no dead-letter output, or one whose output keeps
// failing, would loop as fast as the pipeline nacks it. With it, the n-th
// redelivery of a message waits about 2^(n-1) s, up to 5 s. The maximum is
// short because it adds to how long a message leased to a crashed process
// or a broken stream can stay out of sight, which the watermark's guards
// wait for (run reads it from the subscription). The tracking
// subscription, which nacks nothing, gets none.
var redeliveryPolicy = &pubsubpb.RetryPolicy{
	MinimumBackoff: durationpb.New(time.Second),
	MaximumBackoff: durationpb.New(5 * time.Second),
}

// Admin opens a Bigtable admin client for an instance.
type Admin func(ctx context.Context, instance string) (*bigtable.AdminClient, error)

// Setup creates what cfg names and is missing: topics, subscriptions (main,
// tracking, dead-letter), sink tables and their column families, and the
// state table. It is idempotent: what exists is left as it is (and checked
// where a mismatch would break pubsink). Each action is reported on out.
func Setup(ctx context.Context, cfg *config.Config, ps *pubsub.Client, admin Admin, out io.Writer) error {
	s := &setup{cfg: cfg, ps: ps, admin: admin, out: out, admins: map[string]*bigtable.AdminClient{}}
	defer s.close()
	var errs []error
	for _, p := range cfg.Pipelines {
		if err := s.pipeline(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("pipeline %s: %w", p.Name, err))
		}
	}
	if s.needsState() {
		if err := s.table(ctx, cfg.State.Instance, cfg.State.Table, state.Families(s.maxWindow())); err != nil {
			errs = append(errs, fmt.Errorf("state table: %w", err))
		}
	}
	return errors.Join(errs...)
}

type setup struct {
	cfg    *config.Config
	ps     *pubsub.Client
	admin  Admin
	out    io.Writer
	admins map[string]*bigtable.AdminClient
}

func (s *setup) pipeline(ctx context.Context, p config.Pipeline) error {
	src := p.Source
	var topic string
	if src.Topic != "" {
		topic = s.cfg.TopicName(src.Topic)
		if err := s.topic(ctx, topic, src.TopicMessageRetention); err != nil {
			return err
		}
	}
	if err := s.subscription(ctx, s.cfg.SubscriptionName(src.Subscription), topic, subSpec{retry: redeliveryPolicy}); err != nil {
		return err
	}
	if src.TrackingSubscription != "" {
		if err := s.subscription(ctx, s.cfg.SubscriptionName(src.TrackingSubscription), topic, subSpec{ackDeadline: trackingAckDeadlineSeconds}); err != nil {
			return err
		}
	}
	if dl := p.DeadLetter; dl.Topic != "" {
		t := s.cfg.TopicName(dl.Topic)
		if err := s.topic(ctx, t, 0); err != nil {
			return err
		}
		// Pub/Sub drops what is published to a topic without subscriptions:
		// the dead-letter topic gets one, which replay reads.
		if err := s.subscription(ctx, s.cfg.SubscriptionName(p.DeadLetter.Subscription), t, subSpec{}); err != nil {
			return err
		}
	}
	if p.Sink.Type == config.SinkBigtable {
		// Every table the mappings write, with the families they name, in
		// the order the mappings name them.
		var tables []string
		families := map[string][]state.Family{}
		for _, m := range p.Sink.AllMappings() {
			if _, seen := families[m.Table]; !seen {
				tables = append(tables, m.Table)
			}
			f := state.Family{Name: m.ColumnFamily} // no GC rule: every version is kept, so a duplicate write would show
			if !slices.Contains(families[m.Table], f) {
				families[m.Table] = append(families[m.Table], f)
			}
		}
		for _, t := range tables {
			if err := s.table(ctx, p.Sink.Instance, t, families[t]); err != nil {
				return err
			}
		}
	}
	if dl := p.DeadLetter; dl.BigtableTable != "" {
		fam := []state.Family{{Name: state.FamilyDeadLetter}}
		if err := s.table(ctx, s.cfg.State.Instance, dl.BigtableTable, fam); err != nil {
			return err
		}
	}
	return nil
}

// topic creates the topic name, retaining its messages for retention (0:
// Pub/Sub's default); an existing topic is left as it is, with a note when
// it retains less than retention.
func (s *setup) topic(ctx context.Context, name string, retention time.Duration) error {
	t := &pubsubpb.Topic{Name: name}
	if retention > 0 {
		t.MessageRetentionDuration = durationpb.New(retention)
	}
	_, err := s.ps.TopicAdminClient.CreateTopic(ctx, t)
	switch status.Code(err) {
	case codes.OK:
		if retention > 0 {
			s.say("created topic %s (message retention %v)", name, retention)
		} else {
			s.say("created topic %s", name)
		}
	case codes.AlreadyExists:
		if retention <= 0 {
			s.say("topic %s exists", name)
			return nil
		}
		got, err := s.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
		if err != nil {
			return fmt.Errorf("topic %s: %w", name, err)
		}
		if have := got.GetMessageRetentionDuration().AsDuration(); have < retention {
			s.say("topic %s exists\n  note: it retains messages for %v, less than source.topic_message_retention %v, and reprocess --from can seek back only that far; setup changes nothing: gcloud pubsub topics update %s --message-retention-duration=%ds",
				name, have, retention, name, int64(retention.Seconds()))
		} else {
			s.say("topic %s exists", name)
		}
	default:
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return nil
}

// subSpec is what setup gives a subscription it creates: a retry policy
// (nil: none) and an ack deadline in seconds (0: ackDeadlineSeconds; set,
// it is also the longest setup lets an existing one keep without a note).
type subSpec struct {
	retry       *pubsubpb.RetryPolicy
	ackDeadline int32
}

// subscription creates sub on topic as spec says, or checks that an
// existing sub is attached to topic; it leaves an existing sub's retry
// policy and ack deadline as they are, and says when it lacks the policy
// or has a longer deadline than it would have been given. With no topic
// configured, sub must exist already.
func (s *setup) subscription(ctx context.Context, sub, topic string, spec subSpec) error {
	retry := spec.retry
	got, err := s.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	switch {
	case err == nil:
		if topic != "" && got.Topic != topic {
			return fmt.Errorf("subscription %s exists but is attached to %s, not %s", sub, got.Topic, topic)
		}
		s.say("subscription %s exists", sub)
		if retry != nil && got.RetryPolicy == nil {
			s.say("  note: it has no retry policy, so a nacked message comes back at once; pubsink's is a backoff of %v to %v (docs/reference.md, \"What setup creates\")",
				retry.MinimumBackoff.AsDuration(), retry.MaximumBackoff.AsDuration())
		}
		if spec.ackDeadline > 0 && got.AckDeadlineSeconds > spec.ackDeadline {
			s.say("  note: its ack deadline is %d s; after a failed pull, a restart or a new leader the watermark holds that long, where %d s would do (gcloud pubsub subscriptions update %s --ack-deadline=%d)",
				got.AckDeadlineSeconds, spec.ackDeadline, sub, spec.ackDeadline)
		}
		return nil
	case status.Code(err) != codes.NotFound:
		return fmt.Errorf("get subscription %s: %w", sub, err)
	case topic == "":
		return fmt.Errorf("subscription %s does not exist, and source.topic is not set to create it on", sub)
	}
	deadline := spec.ackDeadline
	if deadline == 0 {
		deadline = ackDeadlineSeconds
	}
	_, err = s.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:               sub,
		Topic:              topic,
		AckDeadlineSeconds: deadline,
		RetryPolicy:        retry,
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create subscription %s: %w", sub, err)
	}
	s.say("created subscription %s on %s", sub, topic)
	return nil
}

// table creates table with families, or adds the families it lacks.
func (s *setup) table(ctx context.Context, instance, table string, families []state.Family) error {
	ac, err := s.adminFor(ctx, instance)
	if err != nil {
		return err
	}
	info, err := ac.TableInfo(ctx, table)
	if status.Code(err) == codes.NotFound {
		if err := ac.CreateTable(ctx, table); err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create table %s: %w", table, err)
		}
		s.say("created table %s in instance %s", table, instance)
		info = &bigtable.TableInfo{}
	} else if err != nil {
		return fmt.Errorf("table %s: %w", table, err)
	} else {
		s.say("table %s exists in instance %s", table, instance)
	}
	for _, f := range families {
		if slices.Contains(info.Families, f.Name) {
			if err := s.widen(ctx, ac, table, info, f); err != nil {
				return err
			}
			continue
		}
		if err := ac.CreateColumnFamily(ctx, table, f.Name); err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create column family %s:%s: %w", table, f.Name, err)
		}
		if f.GC != nil {
			if err := ac.SetGCPolicy(ctx, table, f.Name, f.GC); err != nil {
				return fmt.Errorf("set GC rule of %s:%s: %w", table, f.Name, err)
			}
		}
		s.say("created column family %s:%s", table, f.Name)
	}
	return nil
}

// widen lengthens the max-age rule of an existing family to f's when f's
// is longer: a dedupe window lengthened after setup ran must not be cut
// short by the catalog's garbage collection. A shorter rule wanted is left
// alone (the records it would drop early are still read as within their
// window until they expire), and so is a rule that is not a max age.
func (s *setup) widen(ctx context.Context, ac *bigtable.AdminClient, table string, info *bigtable.TableInfo, f state.Family) error {
	want, ok := state.MaxAge(f.GC)
	if !ok {
		return nil
	}
	for _, fi := range info.FamilyInfos {
		if fi.Name != f.Name {
			continue
		}
		have, ok := state.MaxAge(fi.FullGCPolicy)
		if !ok || have >= want {
			return nil
		}
		if err := ac.SetGCPolicy(ctx, table, f.Name, f.GC); err != nil {
			return fmt.Errorf("widen the GC rule of %s:%s: %w", table, f.Name, err)
		}
		s.say("widened the GC rule of %s:%s from %s to %s", table, f.Name, fi.FullGCPolicy, f.GC)
	}
	return nil
}

func (s *setup) adminFor(ctx context.Context, instance string) (*bigtable.AdminClient, error) {
	if ac, ok := s.admins[instance]; ok {
		return ac, nil
	}
	ac, err := s.admin(ctx, instance)
	if err != nil {
		return nil, fmt.Errorf("bigtable admin client for instance %s: %w", instance, err)
	}
	s.admins[instance] = ac
	return ac, nil
}

func (s *setup) needsState() bool {
	for _, p := range s.cfg.Pipelines {
		if p.ExactlyOnce() || p.Source.TrackingSubscription != "" {
			return true
		}
	}
	return false
}

func (s *setup) maxWindow() time.Duration {
	var w time.Duration
	for _, p := range s.cfg.Pipelines {
		w = max(w, p.Dedupe.Window)
	}
	return w
}

func (s *setup) say(format string, args ...any) { fmt.Fprintf(s.out, format+"\n", args...) }

func (s *setup) close() {
	for _, ac := range s.admins {
		ac.Close()
	}
}
