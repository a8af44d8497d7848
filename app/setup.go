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
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/setupplan"
)

// The ack deadlines and the retry policy of the subscriptions setup
// creates, as setupplan decides them (the reasons are there).
const (
	ackDeadlineSeconds         = int32(setupplan.AckDeadline / time.Second)
	trackingAckDeadlineSeconds = int32(setupplan.TrackingAckDeadline / time.Second)
)

var redeliveryPolicy = retryPolicy(&setupplan.Redelivery)

// retryPolicy is Pub/Sub's retry policy for b (nil: none).
func retryPolicy(b *setupplan.Backoff) *pubsubpb.RetryPolicy {
	if b == nil {
		return nil
	}
	return &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(b.Min), MaximumBackoff: durationpb.New(b.Max)}
}

// Admin opens a Bigtable admin client for an instance.
type Admin func(ctx context.Context, instance string) (*bigtable.AdminClient, error)

// Setup creates what cfg names and is missing: topics (a source topic with
// the Pub/Sub schema of the payload's schema file), subscriptions (main,
// tracking, dead-letter), sink tables and their column families, and the
// state table. It is idempotent: what exists is left as it is (and checked
// where a mismatch would break pubsink). Each action is reported on out.
func Setup(ctx context.Context, cfg *config.Config, ps *pubsub.Client, admin Admin, out io.Writer) error {
	s := &setup{cfg: cfg, ps: ps, admin: admin, out: out, admins: map[string]*bigtable.AdminClient{}}
	defer s.close()
	return s.apply(ctx, setupplan.New(cfg))
}

// apply sets up every object of plan, in its order: what setupplan decided
// is what is created, or compared with what exists.
func (s *setup) apply(ctx context.Context, plan *setupplan.Plan) error {
	var errs []error
	for _, p := range plan.Pipelines {
		err := p.Err
		if err == nil {
			err = s.pipeline(ctx, p)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline %s: %w", p.Name, err))
		}
	}
	if t := plan.State; t != nil {
		if err := s.table(ctx, *t); err != nil {
			errs = append(errs, fmt.Errorf("state table: %w", err))
		}
	}
	return errors.Join(errs...)
}

type setup struct {
	cfg          *config.Config
	ps           *pubsub.Client
	schemaClient *vkit.SchemaClient // opened by schemas when a pipeline needs it
	admin        Admin
	out          io.Writer
	admins       map[string]*bigtable.AdminClient

	// dry is set for setup --plan: nothing is created or changed, and
	// what would be is said ("would create …", "would widen …"); what
	// setup would refuse is said as drift, with its fix, not returned.
	dry bool
	// status is, in a plan, what would happen to each object that does
	// not simply exist, by key ("topic NAME", "family INSTANCE/TABLE:F").
	status map[string]string
	// creates, widens and drifts count the plan's objects by what would
	// happen to them.
	creates, widens, drifts int
}

func (s *setup) pipeline(ctx context.Context, p setupplan.Pipeline) (err error) {
	if p.Topic != nil {
		if err := s.sourceTopic(ctx, *p.Topic); err != nil {
			return err
		}
	}
	// A main subscription without the message ordering source.ordering
	// asks for fails the pipeline, after the rest of it is set up.
	var unordered error
	defer func() { err = errors.Join(unordered, err) }()
	if err := s.subscription(ctx, p.Subscription); errors.As(err, new(*orderingError)) {
		unordered = err
	} else if err != nil {
		return err
	}
	if p.Tracking != nil {
		if err := s.subscription(ctx, *p.Tracking); err != nil {
			return err
		}
	}
	if p.DeadLetterTopic != nil {
		if err := s.topic(ctx, p.DeadLetterTopic.Name, p.DeadLetterTopic.Retention, nil); err != nil {
			return err
		}
		if err := s.subscription(ctx, *p.DeadLetterSubscription); err != nil {
			return err
		}
	}
	for _, t := range p.Tables {
		if err := s.table(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// topic creates the topic name, retaining its messages for retention (0:
// Pub/Sub's default), with the schema settings schema (nil: none); an
// existing topic is left as it is, with a note when it retains less than
// retention.
func (s *setup) topic(ctx context.Context, name string, retention time.Duration, schema *pubsubpb.SchemaSettings) error {
	t := &pubsubpb.Topic{Name: name, SchemaSettings: schema}
	var schemaName, encoding string
	if schema != nil {
		schemaName, encoding = schema.Schema, schema.Encoding.String()
	}
	if retention > 0 {
		t.MessageRetentionDuration = durationpb.New(retention)
	}
	var err error
	if s.dry {
		err = s.exists(s.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name}))
	} else {
		_, err = s.ps.TopicAdminClient.CreateTopic(ctx, t)
	}
	switch status.Code(err) {
	case codes.OK:
		s.created("topic "+name, setupplan.DescribeTopic(name, retention, schemaName, encoding))
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
			return s.widenRetention(ctx, name, have, retention)
		}
		s.say("topic %s exists", name)
	default:
		if s.dry {
			return fmt.Errorf("topic %s: %w", name, err)
		}
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return nil
}

// exists turns the answer of a Get into that of a Create, for a plan: an
// object found is AlreadyExists, one not found is created (nil).
func (s *setup) exists(_ any, err error) error {
	switch status.Code(err) {
	case codes.OK:
		return status.Error(codes.AlreadyExists, "exists")
	case codes.NotFound:
		return nil
	}
	return err
}

// orderingError is an existing main subscription without the message
// ordering that source.ordering asks for, which Pub/Sub cannot add to it
// and run refuses.
type orderingError struct{ error }

// widenRetention raises an existing topic's message retention from have to
// want. Pub/Sub retains from now on only: what was published before stays
// out of reach of a reprocess --from, which the note says.
func (s *setup) widenRetention(ctx context.Context, name string, have, want time.Duration) error {
	from := "none"
	if have > 0 {
		from = have.String()
	}
	if s.dry {
		s.widened("topic "+name, fmt.Sprintf("topic %s exists: would widen its message retention from %s to %v", name, from, want))
		return nil
	}
	_, err := s.ps.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: name, MessageRetentionDuration: durationpb.New(want)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"message_retention_duration"}},
	})
	if err != nil {
		return fmt.Errorf("topic %s retains messages for %v, less than source.topic_message_retention %v, and setup could not widen it: %w; "+
			"widen it with `gcloud pubsub topics update %s --message-retention-duration=%ds`", name, have, want, err, name, int64(want.Seconds()))
	}
	s.say("topic %s exists: widened its message retention from %s to %v\n  note: Pub/Sub retains only messages published from now on, so reprocess and audit --from cannot reach before now; the emulator gives a subscription created after this change no history at all (to try them locally, create the topic with its retention)", name, from, want)
	return nil
}

// subscription creates sp.Name on sp.Topic as sp says, or checks that an
// existing one is attached to sp.Topic; it leaves an existing one's retry
// policy, ack deadline and message ordering as they are, and says when it
// lacks the policy, has a longer deadline than it would have been given
// (sp.CheckAckDeadline) or orders messages unasked. An existing one
// without the message ordering sp asks for (sp.CheckOrdering) is an
// *orderingError. With no topic configured, it must exist already.
func (s *setup) subscription(ctx context.Context, sp setupplan.Subscription) error {
	sub, topic := sp.Name, sp.Topic
	retry := retryPolicy(sp.Retry)
	ordering := sp.Ordering
	deadline := int32(sp.AckDeadline / time.Second)
	got, err := s.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	switch {
	case err == nil:
		if topic != "" && got.Topic != topic {
			return s.refuse("subscription "+sub, fmt.Errorf("subscription %s exists but is attached to %s, not %s", sub, got.Topic, topic))
		}
		s.say("subscription %s exists", sub)
		var unordered error
		if sp.CheckOrdering && got.EnableMessageOrdering != ordering {
			if ordering {
				unordered = s.refuse("subscription "+sub, &orderingError{fmt.Errorf("subscription %s has no message ordering, and source.ordering is true (run refuses it); Pub/Sub cannot add ordering to an existing subscription: create a new one, gcloud pubsub subscriptions create NEW --topic=%s --enable-message-ordering, and name it in source.subscription, or set source.ordering to false", sub, got.Topic)})
			} else {
				s.say("  note: it has message ordering, which source.ordering does not ask for: the client hands the messages of each ordering key over one at a time, in publish order; setup changes nothing (set source.ordering to true to say so, or create a subscription without --enable-message-ordering)")
			}
		}
		if retry != nil && got.RetryPolicy == nil {
			s.say("  note: it has no retry policy, so a nacked message comes back at once; pubsink's is a backoff of %v to %v (docs/reference.md, \"What setup creates\")",
				retry.MinimumBackoff.AsDuration(), retry.MaximumBackoff.AsDuration())
		}
		if sp.CheckAckDeadline && got.AckDeadlineSeconds > deadline {
			s.say("  note: its ack deadline is %d s; after a failed pull, a restart or a new leader the watermark holds that long, where %d s would do (gcloud pubsub subscriptions update %s --ack-deadline=%d)",
				got.AckDeadlineSeconds, deadline, sub, deadline)
		}
		if ttl := got.GetExpirationPolicy().GetTtl(); ttl != nil || got.ExpirationPolicy == nil {
			after := "31 days" // no policy at all: Pub/Sub's default
			if ttl != nil {
				after = ttl.AsDuration().String()
			}
			s.say("  note: it expires after %s without activity, so a pipeline whose topic is quiet that long loses it; setup changes nothing (gcloud pubsub subscriptions update %s --expiration-period=never)", after, sub)
		}
		return unordered
	case status.Code(err) != codes.NotFound:
		return fmt.Errorf("get subscription %s: %w", sub, err)
	case topic == "":
		return s.refuse("subscription "+sub, fmt.Errorf("subscription %s does not exist, and source.topic is not set to create it on", sub))
	case s.dry:
		s.created("subscription "+sub, setupplan.DescribeSubscription(sp))
		return nil
	}
	_, err = s.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:                  sub,
		Topic:                 topic,
		AckDeadlineSeconds:    deadline,
		RetryPolicy:           retry,
		EnableMessageOrdering: ordering,
		// A policy without a TTL: the subscription never expires. Without
		// one Pub/Sub deletes a subscription after 31 days without
		// activity, and a pipeline of a quiet topic would find its
		// subscription gone.
		ExpirationPolicy: &pubsubpb.ExpirationPolicy{},
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create subscription %s: %w", sub, err)
	}
	s.created("subscription "+sub, setupplan.DescribeSubscription(sp))
	return nil
}

// table creates t with its families, or adds the families it lacks and
// widens their rules (widen).
func (s *setup) table(ctx context.Context, t setupplan.Table) error {
	instance, table := t.Instance, t.Name
	ac, err := s.adminFor(ctx, instance)
	if err != nil {
		return err
	}
	info, err := ac.TableInfo(ctx, table)
	if status.Code(err) == codes.NotFound {
		if !s.dry {
			if err := ac.CreateTable(ctx, table); err != nil && status.Code(err) != codes.AlreadyExists {
				return fmt.Errorf("create table %s: %w", table, err)
			}
		}
		s.created("table "+instance+"/"+table, setupplan.DescribeTable(t))
		info = &bigtable.TableInfo{}
	} else if err != nil {
		return fmt.Errorf("table %s: %w", table, err)
	} else {
		s.say("table %s exists in instance %s", table, instance)
	}
	for _, f := range t.Families {
		if slices.Contains(info.Families, f.Name) {
			if err := s.widen(ctx, ac, instance+"/"+table, table, info, f); err != nil {
				return err
			}
			continue
		}
		key := "family " + instance + "/" + table + ":" + f.Name
		if s.dry {
			s.created(key, setupplan.DescribeFamily(table, f, true))
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
		s.created(key, setupplan.DescribeFamily(table, f, f.Setting != ""))
	}
	return nil
}

// widen lengthens the max-age rule of an existing family to f's when f's
// is longer: a dedupe window lengthened after setup ran must not be cut
// short by the catalog's garbage collection, nor a longer
// sink.tombstone_retention by the tombstones'. A shorter rule wanted is
// left alone (the records it would drop early are still read as within
// their window until they expire; tombstones kept longer only cover
// longer), and so is a rule that is not a max age, which is reported for a
// family with a setting.
func (s *setup) widen(ctx context.Context, ac *bigtable.AdminClient, t, table string, info *bigtable.TableInfo, f setupplan.Family) error {
	want, ok := state.MaxAge(f.GC)
	if !ok {
		return nil
	}
	for _, fi := range info.FamilyInfos {
		if fi.Name != f.Name {
			continue
		}
		have, ok := state.MaxAge(fi.FullGCPolicy)
		if !ok && f.Setting != "" {
			rule := "it has no GC rule"
			if r := fi.FullGCPolicy.String(); r != "" {
				rule = "its GC rule is " + r + ", not a max age"
			}
			s.say("column family %s:%s exists\n  note: %s; setup leaves it as it is (%s asks for %s: the tombstones of deletes must outlive any older change that can still arrive)",
				table, f.Name, rule, f.Setting, f.GC)
			return nil
		}
		if !ok || have >= want {
			return nil
		}
		if s.dry {
			s.widened("family "+t+":"+f.Name, fmt.Sprintf("would widen the GC rule of %s:%s from %s to %s", table, f.Name, fi.FullGCPolicy, f.GC))
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

func (s *setup) say(format string, args ...any) { fmt.Fprintf(s.out, format+"\n", args...) }

// created says that what names the object key was created, or in a plan
// that it would be.
func (s *setup) created(key, what string) {
	if !s.dry {
		s.say("created %s", what)
		return
	}
	s.creates++
	s.status[key] = "would create"
	s.say("would create %s", what)
}

// widened says, in a plan, that the rule or retention of the object key
// would be widened: line says from what to what.
func (s *setup) widened(key, line string) {
	s.widens++
	s.status[key] = "would widen"
	s.say("%s", line)
}

// refuse returns err, what setup refuses about the object key; in a plan
// it says it as drift, with the fix err names, and returns nil.
func (s *setup) refuse(key string, err error) error {
	if !s.dry {
		return err
	}
	s.drifts++
	s.status[key] = "drift: " + err.Error()
	s.say("  drift: %v", err)
	return nil
}

func (s *setup) close() {
	for _, ac := range s.admins {
		ac.Close()
	}
}
