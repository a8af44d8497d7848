package setupplan

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/state"
)

// AckDeadline is the ack deadline of the subscriptions setup creates. The
// client extends leases anyway; 60 s (rather than Pub/Sub's 10 s default)
// spares extension calls for messages that wait in a batch, and bounds how
// long a crashed process holds its messages.
const AckDeadline = 60 * time.Second

// TrackingAckDeadline is the ack deadline setup gives a tracking
// subscription: Pub/Sub's minimum. Its reader acks each batch within
// milliseconds and extends no lease, and the deadline is how long the
// messages of a Pull whose answer was lost stay out of sight, which the
// watermark waits for after a failed pull, a restart or a change of
// leader (app: the tracker's lease is the longer of it and 15 s).
const TrackingAckDeadline = 10 * time.Second

// Redelivery is the retry policy setup gives a pipeline's main
// subscription. Without one, Pub/Sub redelivers a nacked message at once:
// a poison message with no dead-letter output, or one whose output keeps
// failing, would loop as fast as the pipeline nacks it. With it, the n-th
// redelivery of a message waits about 2^(n-1) s, up to 5 s. The maximum is
// short because it adds to how long a message leased to a crashed process
// or a broken stream can stay out of sight, which the watermark's guards
// wait for (run reads it from the subscription). The tracking
// subscription, which nacks nothing, gets none.
var Redelivery = Backoff{Min: time.Second, Max: 5 * time.Second}

// SchemaSuffix names the schema setup creates for topic T: T-schema, in
// T's project.
const SchemaSuffix = "-schema"

// Plan is every object setup wants for a configuration, in the order setup
// applies them: each pipeline's, then the state table.
type Plan struct {
	Pipelines []Pipeline
	State     *Table // nil when no pipeline needs the state table
}

// Pipeline is what one pipeline wants, in the order setup applies it:
// its topic, its subscriptions, its dead-letter topic and subscription,
// its tables (the sink's, then the dead-letter table).
type Pipeline struct {
	Name                   string
	Topic                  *Topic // source.topic; nil when not set
	Subscription           Subscription
	Tracking               *Subscription // nil without source.tracking_subscription
	DeadLetterTopic        *Topic        // nil without dead_letter.topic
	DeadLetterSubscription *Subscription // set with DeadLetterTopic
	Tables                 []Table
	// Err is what kept the pipeline's plan from being computed (a schema
	// file that cannot be read, a config built without its defaults); the
	// pipeline then has no objects.
	Err error
}

// Topic is a Pub/Sub topic setup creates.
type Topic struct {
	Name      string        // projects/P/topics/T
	Role      string        // RoleSource or RoleDeadLetter
	Retention time.Duration // message retention; 0: Pub/Sub's default (none)
	Schema    *Schema       // the payload.schema file's; nil: none
	// ReadsTopicSchema is set when the pipeline reads the topic's own
	// schema (payload.schema: topic, avro or protobuf): a topic without
	// one leaves it nothing to decode with.
	ReadsTopicSchema bool
}

// Roles of topics, subscriptions and tables.
const (
	RoleSource     = "source"
	RoleMain       = "main"
	RoleTracking   = "tracking"
	RoleDeadLetter = "dead_letter"
	RoleSink       = "sink"
	RoleState      = "state"
)

// Schema is the Pub/Sub schema a topic is created with.
type Schema struct {
	Name       string // projects/P/schemas/T-schema
	File       string // payload.schema, as written
	Type       string // SchemaAvro or SchemaProtocolBuffer
	Definition string // the file's text
	Encoding   string // EncodingBinary or EncodingJSON
}

// Schema types (gcloud's --type) and message encodings (Pub/Sub's names).
const (
	SchemaAvro           = "avro"
	SchemaProtocolBuffer = "protocol-buffer"
	EncodingBinary       = "BINARY"
	EncodingJSON         = "JSON"
)

// Subscription is a Pub/Sub subscription setup creates.
type Subscription struct {
	Name string // projects/P/subscriptions/S
	Role string // RoleMain, RoleTracking or RoleDeadLetter
	// Topic is the topic to create it on; "": none configured, it must
	// exist already.
	Topic       string
	AckDeadline time.Duration
	Retry       *Backoff // nil: no retry policy
	Ordering    bool
	// CheckOrdering is set for a main subscription: an existing one's
	// message ordering is compared with Ordering (source.ordering).
	CheckOrdering bool
	// CheckAckDeadline is set for a tracking subscription: an existing one
	// with a longer ack deadline is noted.
	CheckAckDeadline bool
}

// Backoff is a subscription's retry policy.
type Backoff struct{ Min, Max time.Duration }

// Table is a Bigtable table setup creates, with its column families.
type Table struct {
	Instance string
	Name     string
	Role     string // RoleSink, RoleDeadLetter or RoleState
	Families []Family
}

// Family is a column family setup creates. Setting, when set, names the
// key of its max-age rule: an existing family whose rule is not a max age
// is then reported (and left as it is).
type Family struct {
	state.Family
	Setting string
}

// New computes the plan for cfg. It reads each payload.schema file (its
// text is the schema's definition) and nothing else: no network. A
// pipeline whose plan cannot be computed has its Err set.
func New(cfg *config.Config) *Plan {
	pl := &Plan{}
	var needsState bool
	var maxWindow time.Duration
	for _, p := range cfg.Pipelines {
		pp, err := pipeline(cfg, p)
		if err != nil {
			pp = Pipeline{Err: err}
		}
		pp.Name = p.Name
		pl.Pipelines = append(pl.Pipelines, pp)
		needsState = needsState || p.ExactlyOnce() || p.Source.TrackingSubscription != ""
		maxWindow = max(maxWindow, p.Dedupe.Window)
	}
	if needsState {
		t := &Table{Instance: cfg.State.Instance, Name: cfg.State.Table, Role: RoleState}
		for _, f := range state.Families(maxWindow) {
			t.Families = append(t.Families, Family{Family: f})
		}
		pl.State = t
	}
	return pl
}

func pipeline(cfg *config.Config, p config.Pipeline) (Pipeline, error) {
	var pp Pipeline
	src := p.Source
	var topic string
	if src.Topic != "" {
		topic = cfg.TopicName(src.Topic)
		schema, err := schemaOf(topic, p.Payload)
		if err != nil {
			return pp, err
		}
		pp.Topic = &Topic{
			Name: topic, Role: RoleSource, Retention: src.TopicMessageRetention, Schema: schema,
			ReadsTopicSchema: p.Payload.TopicSchema() && (p.Payload.Format == config.FormatAvro || p.Payload.Format == config.FormatProtobuf),
		}
	}
	retry := Redelivery
	pp.Subscription = Subscription{
		Name: cfg.SubscriptionName(src.Subscription), Role: RoleMain, Topic: topic,
		AckDeadline: AckDeadline, Retry: &retry, Ordering: src.Ordering, CheckOrdering: true,
	}
	if src.TrackingSubscription != "" {
		pp.Tracking = &Subscription{
			Name: cfg.SubscriptionName(src.TrackingSubscription), Role: RoleTracking, Topic: topic,
			AckDeadline: TrackingAckDeadline, CheckAckDeadline: true,
		}
	}
	if dl := p.DeadLetter; dl.Topic != "" {
		pp.DeadLetterTopic = &Topic{Name: cfg.TopicName(dl.Topic), Role: RoleDeadLetter}
		// Pub/Sub drops what is published to a topic without subscriptions:
		// the dead-letter topic gets one, which replay reads.
		pp.DeadLetterSubscription = &Subscription{
			Name: cfg.SubscriptionName(dl.Subscription), Role: RoleDeadLetter, Topic: pp.DeadLetterTopic.Name,
			AckDeadline: AckDeadline,
		}
	}
	if p.Sink.Type == config.SinkBigtable {
		tables, err := sinkTables(p.Sink)
		if err != nil {
			return pp, err
		}
		pp.Tables = tables
	}
	if dl := p.DeadLetter; dl.BigtableTable != "" {
		pp.Tables = append(pp.Tables, Table{
			Instance: cfg.State.Instance, Name: dl.BigtableTable, Role: RoleDeadLetter,
			Families: []Family{{Family: state.Family{Name: state.FamilyDeadLetter}}},
		})
	}
	return pp, nil
}

// sinkTables are the tables a bigtable sink's mappings write, in the order
// the mappings name them, each with the families they name (no GC rule:
// every version is kept, so a duplicate write would show) and, for a table
// that a change mapping writes, the tombstone family, collected after
// sink.tombstone_retention. (Validation refuses a tombstone family that
// is a mapping's.)
func sinkTables(sink config.Sink) ([]Table, error) {
	var tables []Table
	index := map[string]int{}
	for _, m := range sink.AllMappings() {
		i, seen := index[m.Table]
		if !seen {
			i = len(tables)
			index[m.Table] = i
			tables = append(tables, Table{Instance: sink.Instance, Name: m.Table, Role: RoleSink})
		}
		f := Family{Family: state.Family{Name: m.ColumnFamily}}
		if !slices.Contains(tables[i].Families, f) {
			tables[i].Families = append(tables[i].Families, f)
		}
	}
	for _, name := range sink.ChangeTables() {
		if sink.TombstoneFamily == "" || sink.TombstoneRetention <= 0 { // a config built without its defaults: no rule that collects at once
			return nil, fmt.Errorf("table %s is written by a change mapping, but sink.tombstone_family is %q and sink.tombstone_retention %v", name, sink.TombstoneFamily, sink.TombstoneRetention)
		}
		i, ok := index[name]
		if !ok { // ChangeTables names tables of the mappings only
			continue
		}
		t := &tables[i]
		if slices.ContainsFunc(t.Families, func(f Family) bool { return f.Name == sink.TombstoneFamily }) {
			continue
		}
		t.Families = append(t.Families, Family{
			Family:  state.Family{Name: sink.TombstoneFamily, GC: bigtable.MaxAgePolicy(sink.TombstoneRetention)},
			Setting: "sink.tombstone_retention",
		})
	}
	return tables, nil
}

// schemaOf returns the schema that payload's schema file defines for
// topic, or nil when the payload names no schema file.
func schemaOf(topic string, p config.Payload) (*Schema, error) {
	if p.Schema == "" || p.TopicSchema() {
		return nil, nil
	}
	s := &Schema{Name: SchemaName(topic), File: p.Schema, Type: SchemaAvro, Encoding: EncodingBinary}
	if p.Format == config.FormatProtobuf {
		s.Type = SchemaProtocolBuffer
	}
	if p.Encoding == config.EncodingJSON {
		s.Encoding = EncodingJSON
	}
	// Loading the config compiled the file already: reading it again
	// fails only if it changed since.
	b, err := os.ReadFile(p.Schema)
	if err != nil {
		return nil, fmt.Errorf("payload.schema: %w", err)
	}
	s.Definition = string(b)
	return s, nil
}

// SchemaName is the name of the schema setup creates for topic
// (projects/P/topics/T): projects/P/schemas/T-schema.
func SchemaName(topic string) string {
	project, id, _ := strings.Cut(topic, "/topics/")
	return project + "/schemas/" + id + SchemaSuffix
}

// MaxVersions returns the number of a max-versions rule of f, false for
// any other rule.
func MaxVersions(f Family) (int, bool) {
	mv, ok := f.GC.(bigtable.MaxVersionsGCPolicy)
	return int(mv), ok
}

// mergedTables are the plan's tables, each once by instance and name, in
// the order they are first named: a table two pipelines name has the
// families of both, and a family both name with a max age the longer one
// (as setup widens it). A renderer that writes each table once uses them.
func (p *Plan) mergedTables() []*Table {
	var tables []*Table
	add := func(t Table) {
		for _, have := range tables {
			if have.Instance != t.Instance || have.Name != t.Name {
				continue
			}
		next:
			for _, f := range t.Families {
				for i, g := range have.Families {
					if g.Name != f.Name {
						continue
					}
					if a, ok := state.MaxAge(f.GC); ok {
						if b, ok := state.MaxAge(g.GC); ok && a > b {
							have.Families[i].GC = f.GC
						}
					}
					continue next
				}
				have.Families = append(have.Families, f)
			}
			return
		}
		t.Families = append([]Family(nil), t.Families...)
		tables = append(tables, &t)
	}
	for _, pp := range p.Pipelines {
		for _, t := range pp.Tables {
			add(t)
		}
	}
	if p.State != nil {
		add(*p.State)
	}
	return tables
}

// pubsub calls topic and subscription for each topic and subscription of
// the plan, once each by name, in the order setup creates them, and
// skipped for each pipeline whose plan could not be computed.
func (p *Plan) pubsub(topic func(Topic), subscription func(Subscription), skipped func(Pipeline)) {
	seen := map[string]bool{}
	t := func(x *Topic) {
		if x != nil && !seen["topic "+x.Name] {
			seen["topic "+x.Name] = true
			topic(*x)
		}
	}
	s := func(x *Subscription) {
		if x != nil && !seen["subscription "+x.Name] {
			seen["subscription "+x.Name] = true
			subscription(*x)
		}
	}
	for _, pp := range p.Pipelines {
		if pp.Err != nil {
			skipped(pp)
			continue
		}
		t(pp.Topic)
		s(&pp.Subscription)
		s(pp.Tracking)
		t(pp.DeadLetterTopic)
		s(pp.DeadLetterSubscription)
	}
}
