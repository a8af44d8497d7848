package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
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

// Setup creates what cfg names and is missing: topics (a source topic with
// the Pub/Sub schema of the payload's schema file), subscriptions (main,
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
		var fams []family
		for _, f := range state.Families(s.maxWindow()) {
			fams = append(fams, family{Family: f})
		}
		if err := s.table(ctx, cfg.State.Instance, cfg.State.Table, fams); err != nil {
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
}

func (s *setup) pipeline(ctx context.Context, p config.Pipeline) (err error) {
	src := p.Source
	var topic string
	if src.Topic != "" {
		topic = s.cfg.TopicName(src.Topic)
		if err := s.sourceTopic(ctx, topic, src.TopicMessageRetention, p.Payload); err != nil {
			return err
		}
	}
	// A main subscription without the message ordering source.ordering
	// asks for fails the pipeline, after the rest of it is set up.
	var unordered error
	defer func() { err = errors.Join(unordered, err) }()
	ordering := src.Ordering
	if err := s.subscription(ctx, s.cfg.SubscriptionName(src.Subscription), topic, subSpec{retry: redeliveryPolicy, ordering: &ordering}); errors.As(err, new(*orderingError)) {
		unordered = err
	} else if err != nil {
		return err
	}
	if src.TrackingSubscription != "" {
		if err := s.subscription(ctx, s.cfg.SubscriptionName(src.TrackingSubscription), topic, subSpec{ackDeadline: trackingAckDeadlineSeconds}); err != nil {
			return err
		}
	}
	if dl := p.DeadLetter; dl.Topic != "" {
		t := s.cfg.TopicName(dl.Topic)
		if err := s.topic(ctx, t, 0, nil); err != nil {
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
		families := map[string][]family{}
		for _, m := range p.Sink.AllMappings() {
			if _, seen := families[m.Table]; !seen {
				tables = append(tables, m.Table)
			}
			f := family{Family: state.Family{Name: m.ColumnFamily}} // no GC rule: every version is kept, so a duplicate write would show
			if !slices.Contains(families[m.Table], f) {
				families[m.Table] = append(families[m.Table], f)
			}
		}
		// A table that a change mapping writes holds its tombstones in a
		// family of their own, collected after sink.tombstone_retention.
		// (Validation refuses a tombstone family that is a mapping's.)
		for _, t := range p.Sink.ChangeTables() {
			if p.Sink.TombstoneFamily == "" || p.Sink.TombstoneRetention <= 0 { // a config built without its defaults: no rule that collects at once
				return fmt.Errorf("table %s is written by a change mapping, but sink.tombstone_family is %q and sink.tombstone_retention %v", t, p.Sink.TombstoneFamily, p.Sink.TombstoneRetention)
			}
			if slices.ContainsFunc(families[t], func(f family) bool { return f.Name == p.Sink.TombstoneFamily }) {
				continue
			}
			families[t] = append(families[t], family{
				Family:  state.Family{Name: p.Sink.TombstoneFamily, GC: bigtable.MaxAgePolicy(p.Sink.TombstoneRetention)},
				setting: "sink.tombstone_retention",
			})
		}
		for _, t := range tables {
			if err := s.table(ctx, p.Sink.Instance, t, families[t]); err != nil {
				return err
			}
		}
	}
	if dl := p.DeadLetter; dl.BigtableTable != "" {
		fam := []family{{Family: state.Family{Name: state.FamilyDeadLetter}}}
		if err := s.table(ctx, s.cfg.State.Instance, dl.BigtableTable, fam); err != nil {
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
	var what []string
	if schema != nil {
		what = append(what, fmt.Sprintf("schema %s, encoding %s", schema.Schema, schema.Encoding))
	}
	if retention > 0 {
		t.MessageRetentionDuration = durationpb.New(retention)
		what = append(what, fmt.Sprintf("message retention %v", retention))
	}
	_, err := s.ps.TopicAdminClient.CreateTopic(ctx, t)
	switch status.Code(err) {
	case codes.OK:
		if len(what) > 0 {
			s.say("created topic %s (%s)", name, strings.Join(what, "; "))
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
			return s.widenRetention(ctx, name, have, retention)
		}
		s.say("topic %s exists", name)
	default:
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return nil
}

// subSpec is what setup gives a subscription it creates: a retry policy
// (nil: none), an ack deadline in seconds (0: ackDeadlineSeconds; set, it
// is also the longest setup lets an existing one keep without a note), and
// message ordering (nil: none, and an existing one's is not looked at;
// set, source.ordering of a main subscription, which an existing one's is
// checked against).
type subSpec struct {
	retry       *pubsubpb.RetryPolicy
	ackDeadline int32
	ordering    *bool
}

// orderingError is an existing main subscription without the message
// ordering that source.ordering asks for, which Pub/Sub cannot add to it
// and run refuses.
type orderingError struct{ error }

// widenRetention raises an existing topic's message retention from have to
// want. Pub/Sub retains from now on only: what was published before stays
// out of reach of a reprocess --from, which the note says.
func (s *setup) widenRetention(ctx context.Context, name string, have, want time.Duration) error {
	_, err := s.ps.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: name, MessageRetentionDuration: durationpb.New(want)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"message_retention_duration"}},
	})
	if err != nil {
		return fmt.Errorf("topic %s retains messages for %v, less than source.topic_message_retention %v, and setup could not widen it: %w; "+
			"widen it with `gcloud pubsub topics update %s --message-retention-duration=%ds`", name, have, want, err, name, int64(want.Seconds()))
	}
	from := "none"
	if have > 0 {
		from = have.String()
	}
	s.say("topic %s exists: widened its message retention from %s to %v\n  note: Pub/Sub retains only messages published from now on, so reprocess and audit --from cannot reach before now; the emulator gives a subscription created after this change no history at all (to try them locally, create the topic with its retention)", name, from, want)
	return nil
}

// subscription creates sub on topic as spec says, or checks that an
// existing sub is attached to topic; it leaves an existing sub's retry
// policy, ack deadline and message ordering as they are, and says when it
// lacks the policy, has a longer deadline than it would have been given or
// orders messages unasked. An existing sub without the message ordering
// spec asks for is an *orderingError. With no topic configured, sub must
// exist already.
func (s *setup) subscription(ctx context.Context, sub, topic string, spec subSpec) error {
	retry := spec.retry
	ordering := spec.ordering != nil && *spec.ordering
	got, err := s.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	switch {
	case err == nil:
		if topic != "" && got.Topic != topic {
			return fmt.Errorf("subscription %s exists but is attached to %s, not %s", sub, got.Topic, topic)
		}
		s.say("subscription %s exists", sub)
		var unordered error
		if spec.ordering != nil && got.EnableMessageOrdering != ordering {
			if ordering {
				unordered = &orderingError{fmt.Errorf("subscription %s has no message ordering, and source.ordering is true (run refuses it); Pub/Sub cannot add ordering to an existing subscription: create a new one, gcloud pubsub subscriptions create NEW --topic=%s --enable-message-ordering, and name it in source.subscription, or set source.ordering to false", sub, got.Topic)}
			} else {
				s.say("  note: it has message ordering, which source.ordering does not ask for: the client hands the messages of each ordering key over one at a time, in publish order; setup changes nothing (set source.ordering to true to say so, or create a subscription without --enable-message-ordering)")
			}
		}
		if retry != nil && got.RetryPolicy == nil {
			s.say("  note: it has no retry policy, so a nacked message comes back at once; pubsink's is a backoff of %v to %v (docs/reference.md, \"What setup creates\")",
				retry.MinimumBackoff.AsDuration(), retry.MaximumBackoff.AsDuration())
		}
		if spec.ackDeadline > 0 && got.AckDeadlineSeconds > spec.ackDeadline {
			s.say("  note: its ack deadline is %d s; after a failed pull, a restart or a new leader the watermark holds that long, where %d s would do (gcloud pubsub subscriptions update %s --ack-deadline=%d)",
				got.AckDeadlineSeconds, spec.ackDeadline, sub, spec.ackDeadline)
		}
		return unordered
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
		Name:                  sub,
		Topic:                 topic,
		AckDeadlineSeconds:    deadline,
		RetryPolicy:           retry,
		EnableMessageOrdering: ordering,
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create subscription %s: %w", sub, err)
	}
	if ordering {
		s.say("created subscription %s on %s (message ordering)", sub, topic)
	} else {
		s.say("created subscription %s on %s", sub, topic)
	}
	return nil
}

// family is a column family setup creates. setting, when set, names the
// key of its max-age rule: an existing family whose rule is not a max age
// is then reported (and left as it is).
type family struct {
	state.Family
	setting string
}

// table creates table with families, or adds the families it lacks.
func (s *setup) table(ctx context.Context, instance, table string, families []family) error {
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
		if f.setting != "" {
			s.say("created column family %s:%s (GC rule %s)", table, f.Name, f.GC)
		} else {
			s.say("created column family %s:%s", table, f.Name)
		}
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
func (s *setup) widen(ctx context.Context, ac *bigtable.AdminClient, table string, info *bigtable.TableInfo, f family) error {
	want, ok := state.MaxAge(f.GC)
	if !ok {
		return nil
	}
	for _, fi := range info.FamilyInfos {
		if fi.Name != f.Name {
			continue
		}
		have, ok := state.MaxAge(fi.FullGCPolicy)
		if !ok && f.setting != "" {
			rule := "it has no GC rule"
			if r := fi.FullGCPolicy.String(); r != "" {
				rule = "its GC rule is " + r + ", not a max age"
			}
			s.say("column family %s:%s exists\n  note: %s; setup leaves it as it is (%s asks for %s: the tombstones of deletes must outlive any older change that can still arrive)",
				table, f.Name, rule, f.setting, f.GC)
			return nil
		}
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
