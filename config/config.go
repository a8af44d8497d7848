package config

import (
	"slices"
	"time"
)

// Config is one loaded, validated configuration file. It is read-only once
// Load returns: every consumer receives its own section by value.
type Config struct {
	// Project is the default GCP project for Pub/Sub and Bigtable.
	Project         string        `mapstructure:"project"`
	Log             Log           `mapstructure:"log"`
	HTTP            HTTP          `mapstructure:"http"`
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	State           State         `mapstructure:"state"`
	Pipelines       []Pipeline    `mapstructure:"pipelines"`
}

// Log configures the process logger.
type Log struct {
	Level  string `mapstructure:"level"`  // debug | info | warn | error
	Format string `mapstructure:"format"` // json | console
}

// HTTP configures the metrics, health and status server.
type HTTP struct {
	Addr string `mapstructure:"addr"`
}

// State names the Bigtable table that holds dedupe records, watermarks and
// filter snapshots.
type State struct {
	Instance string `mapstructure:"instance"`
	Table    string `mapstructure:"table"`
	// AppProfile is the app profile of the requests to the state table and
	// to a dead-letter table; "": the instance's default profile.
	// exactly_once needs one that runs conditional mutations: single-cluster
	// routing with transactional writes allowed.
	AppProfile string `mapstructure:"app_profile"`
}

// Mode values of Pipeline.Mode.
const (
	ModeExactlyOnce = "exactly_once"
	ModeAtLeastOnce = "at_least_once"
)

// Pipeline is one subscription flowing into one sink.
type Pipeline struct {
	Name      string    `mapstructure:"name"`
	Mode      string    `mapstructure:"mode"`
	Source    Source    `mapstructure:"source"`
	Dedupe    Dedupe    `mapstructure:"dedupe"`
	Watermark Watermark `mapstructure:"watermark"`
	// Payload says how to read the messages' data (format and schema).
	Payload Payload `mapstructure:"payload"`
	// Filter is a CEL expression over the message: a message for which it
	// is false is acked unwritten and counted as filtered. "": no filter.
	Filter     string     `mapstructure:"filter"`
	Sink       Sink       `mapstructure:"sink"`
	DeadLetter DeadLetter `mapstructure:"dead_letter"`
}

// Payload formats of Payload.Format.
const (
	FormatJSON     = "json"
	FormatAvro     = "avro"
	FormatProtobuf = "protobuf"
	FormatString   = "string"
	FormatRaw      = "raw"
)

// Schema sources and encodings of Payload.Schema and Payload.Encoding.
const (
	// SchemaTopic: the schema of each message is the revision of the
	// topic's Pub/Sub schema that its googclient_schema* attributes name.
	SchemaTopic    = "topic"
	EncodingBinary = "binary"
	EncodingJSON   = "json"
)

// Payload says how the messages' data is read: its format and, for avro
// and protobuf, where its schema comes from.
type Payload struct {
	Format string `mapstructure:"format"`
	// Schema is SchemaTopic, or the path of a schema file (.avsc for avro,
	// .proto for protobuf, whose imports are resolved from its folder; a
	// relative path is relative to the working directory).
	Schema string `mapstructure:"schema"`
	// Message is the full name of the message type of a .proto schema file.
	Message string `mapstructure:"message"`
	// Encoding is the encoding of messages read with a schema file:
	// EncodingBinary or EncodingJSON. Topic schemas take it from each
	// message's googclient_schemaencoding attribute.
	Encoding string `mapstructure:"encoding"`
}

// TopicSchema reports whether the schema comes from the topic.
func (p Payload) TopicSchema() bool { return p.Schema == SchemaTopic }

// Mapping is one kind of row that a message makes: its table, family, row
// key and columns, with an optional condition and an optional list to make
// one row per element of.
type Mapping struct {
	// Table defaults to Sink.Table; ColumnFamily to Sink.ColumnFamily.
	Table        string            `mapstructure:"table"`
	ColumnFamily string            `mapstructure:"column_family"`
	RowKey       string            `mapstructure:"row_key"`
	Columns      map[string]string `mapstructure:"columns"`
	// Timestamp is CellTimeEvent, CellTimePublish, or a template whose
	// rendering is a time (RFC 3339, or a number read as
	// Source.TimestampFormat).
	Timestamp string `mapstructure:"timestamp"`
	// When is a CEL condition: the mapping makes rows only where it is
	// true. "": always.
	When string `mapstructure:"when"`
	// Each is a CEL expression of a list: one row per element, which the
	// templates and expressions read as item. "": one row.
	Each string `mapstructure:"each"`
	// Op is the operation of the mapping's rows: OpSet, OpDelete,
	// OpDeleteFamily or OpDeleteColumns, or a CEL expression of type
	// string that names one per message. "": OpSet. A mapping that sets
	// it is a change mapping (IsChange).
	Op string `mapstructure:"op"`
	// WriteMode is WriteUpsert, WriteInsert or WriteReplaceIfNewer; "":
	// the sink's (Sink.WriteMode, at use: AllMappings).
	WriteMode string `mapstructure:"write_mode"`
	// OnMissing is what a column whose value is missing gets (a Missing*
	// policy); "": the sink's (Sink.OnMissing, at use: AllMappings).
	// OnMissingColumns overrides it per column qualifier.
	OnMissing        string            `mapstructure:"on_missing"`
	OnMissingColumns map[string]string `mapstructure:"on_missing_columns"`
	// DeleteColumns are the qualifiers that OpDeleteColumns deletes; empty:
	// those of Columns.
	DeleteColumns []string `mapstructure:"delete_columns"`
}

// Operations of Mapping.Op (docs/reference.md, "Changes").
const (
	OpSet           = "set"
	OpDelete        = "delete"
	OpDeleteFamily  = "delete_family"
	OpDeleteColumns = "delete_columns"
)

// Write modes of Mapping.WriteMode.
const (
	WriteUpsert         = "upsert"
	WriteInsert         = "insert"
	WriteReplaceIfNewer = "replace_if_newer"
)

// Missing-value policies of Mapping.OnMissing and OnMissingColumns.
const (
	MissingDeadLetter = "dead_letter"
	MissingSkip       = "skip"
	MissingEmpty      = "empty"
	MissingDelete     = "delete"
)

// IsChange reports whether m is a change mapping: one whose rows are
// applied by event time against what their row holds (conditional writes,
// tombstones, one version per cell) rather than set as they come. It is one
// that sets Op, has a WriteMode other than upsert, or deletes a column whose
// value is missing. m must have its defaults (AllMappings).
func (m Mapping) IsChange() bool {
	if m.Op != "" || (m.WriteMode != "" && m.WriteMode != WriteUpsert) || m.OnMissing == MissingDelete {
		return true
	}
	for _, p := range m.OnMissingColumns {
		if p == MissingDelete {
			return true
		}
	}
	return false
}

// MissingPolicy is the policy of column: its own, else the mapping's, else
// dead_letter.
func (m Mapping) MissingPolicy(column string) string {
	if p := m.OnMissingColumns[column]; p != "" {
		return p
	}
	if m.OnMissing != "" {
		return m.OnMissing
	}
	return MissingDeadLetter
}

// Timestamp formats of Source.TimestampFormat.
const (
	TimestampAuto    = "auto"
	TimestampRFC3339 = "rfc3339"
	TimestampUnixS   = "unix_s"
	TimestampUnixMS  = "unix_ms"
	TimestampUnixUS  = "unix_us"
	TimestampUnixNS  = "unix_ns"
)

// Source configures the Pub/Sub subscriber of one pipeline.
type Source struct {
	// Topic is the topic both subscriptions are attached to: optional for
	// run (where it is checked when set), needed by setup to create them.
	// A short name in Config.Project or a full name (projects/P/topics/T).
	Topic string `mapstructure:"topic"`
	// Subscription and TrackingSubscription are short names in Config.Project
	// or full names (projects/P/subscriptions/S). Use Config.SubscriptionName
	// for the full name. TrackingSubscription is optional: it feeds the
	// watermark estimate (docs/reference.md "Watermark and late data").
	Subscription         string `mapstructure:"subscription"`
	TrackingSubscription string `mapstructure:"tracking_subscription"`
	// IDAttribute is the attribute that holds the dedupe key; empty: the
	// Pub/Sub message ID. See Pipeline.DedupeKeyAttribute.
	IDAttribute string `mapstructure:"id_attribute"`
	// TimestampAttribute holds the event time, read as TimestampFormat;
	// empty: the publish time is the event time.
	TimestampAttribute string `mapstructure:"timestamp_attribute"`
	// IDTemplate and TimestampTemplate are the dedupe key and the event time
	// as templates (payload fields, expressions): the siblings of
	// IDAttribute and TimestampAttribute, of which each excludes its own.
	// The event time's rendering is read as TimestampFormat (a lone
	// expression of CEL type timestamp is taken as it is).
	IDTemplate             string   `mapstructure:"id_template"`
	TimestampTemplate      string   `mapstructure:"timestamp_template"`
	TimestampFormat        string   `mapstructure:"timestamp_format"`
	Streams                int      `mapstructure:"streams"`
	MaxOutstandingMessages int      `mapstructure:"max_outstanding_messages"`
	MaxOutstandingBytes    ByteSize `mapstructure:"max_outstanding_bytes"` // 0: derived from the memory limit
	// StallTimeout is how long a subscription may deliver nothing, while
	// its flow control has room and messages wait in it, before the
	// source's watchdog reopens its streams (and, if that does not help,
	// fails /healthz). 0: no watchdog. See package source, "Watchdog".
	StallTimeout time.Duration `mapstructure:"stall_timeout"`
	// TopicMessageRetention is how long setup makes a topic it creates keep
	// its messages, acknowledged or not, so that `pubsink reprocess --from`
	// can seek back that far. 0: Pub/Sub's default (none).
	TopicMessageRetention time.Duration `mapstructure:"topic_message_retention"`
	// Ordering says the subscription delivers the messages of each ordering
	// key in publish order (Pub/Sub message ordering): setup creates it so,
	// and run refuses a subscription without it. The client then hands the
	// messages of one key to the handler one at a time.
	Ordering bool `mapstructure:"ordering"`
}

// Dedupe configures the dedupe window of an exactly_once pipeline.
type Dedupe struct {
	Window time.Duration `mapstructure:"window"`
}

// Late-data policies of Watermark.LateData.
const (
	LateAccept     = "accept"
	LateDeadLetter = "dead_letter"
	LateDrop       = "drop"
)

// Watermark configures event-time tracking.
type Watermark struct {
	EstimationBand  time.Duration `mapstructure:"estimation_band"`
	AllowedLateness time.Duration `mapstructure:"allowed_lateness"`
	LateData        string        `mapstructure:"late_data"`
}

// Sink types of Sink.Type.
const (
	SinkBigtable = "bigtable"
	SinkStdout   = "stdout"
)

// Cell timestamp sources of Sink.Timestamp.
const (
	CellTimeEvent   = "event_time"
	CellTimePublish = "publish_time"
)

// Sink configures where committed rows go. RowKey, the values of Columns
// and a Timestamp other than CellTimeEvent and CellTimePublish are templates
// (package template); Columns maps a column qualifier, case kept as written,
// to its template (so do the Columns of each Mapping).
type Sink struct {
	Type string `mapstructure:"type"`
	// Instance defaults to State.Instance.
	Instance string `mapstructure:"instance"`
	// AppProfile is the app profile of the sink's requests; "": the
	// instance's default profile (it does not follow State.AppProfile).
	AppProfile   string            `mapstructure:"app_profile"`
	Table        string            `mapstructure:"table"`
	ColumnFamily string            `mapstructure:"column_family"`
	RowKey       string            `mapstructure:"row_key"`
	Columns      map[string]string `mapstructure:"columns"`
	Timestamp    string            `mapstructure:"timestamp"`
	// When and Each are those of the sink's own mapping (see Mapping).
	When string `mapstructure:"when"`
	Each string `mapstructure:"each"`
	// Op, OnMissingColumns and DeleteColumns are those of the sink's own
	// mapping; WriteMode and OnMissing are its, and the mappings' default.
	Op               string            `mapstructure:"op"`
	WriteMode        string            `mapstructure:"write_mode"`
	OnMissing        string            `mapstructure:"on_missing"`
	OnMissingColumns map[string]string `mapstructure:"on_missing_columns"`
	DeleteColumns    []string          `mapstructure:"delete_columns"`
	// TombstoneFamily is the column family of the tombstones in every table
	// that a change mapping writes; TombstoneRetention its max-age GC rule,
	// which setup creates: how long a delete keeps an older change from
	// bringing back what it deleted.
	TombstoneFamily    string        `mapstructure:"tombstone_family"`
	TombstoneRetention time.Duration `mapstructure:"tombstone_retention"`
	// Mappings are the rows of a message when there are several kinds
	// (tables, keys): set either these or the single mapping above
	// (RowKey, Columns, When, Each), not both. Table, ColumnFamily and
	// Timestamp above are the mappings' defaults. With Mappings, RowKey and
	// Columns get no default and stay empty: use AllMappings.
	Mappings []Mapping `mapstructure:"mappings"`
	// MaxRows bounds the rows one message may make (1 to 100,000); a
	// message that would make more is dead-lettered as too_many_rows,
	// never half-written.
	MaxRows int   `mapstructure:"max_rows"`
	Batch   Batch `mapstructure:"batch"`
}

// AllMappings returns the sink's mappings: Mappings, each with its table,
// family and timestamp defaulted from the sink, or the sink's single
// mapping.
func (s Sink) AllMappings() []Mapping {
	if len(s.Mappings) == 0 {
		return []Mapping{{Table: s.Table, ColumnFamily: s.ColumnFamily, RowKey: s.RowKey, Columns: s.Columns,
			Timestamp: s.Timestamp, When: s.When, Each: s.Each,
			Op: s.Op, WriteMode: s.WriteMode, OnMissing: s.OnMissing, OnMissingColumns: s.OnMissingColumns, DeleteColumns: s.DeleteColumns}}
	}
	out := make([]Mapping, len(s.Mappings))
	for i, m := range s.Mappings {
		if m.Table == "" {
			m.Table = s.Table
		}
		if m.ColumnFamily == "" {
			m.ColumnFamily = s.ColumnFamily
		}
		if m.Timestamp == "" {
			m.Timestamp = s.Timestamp
		}
		if m.WriteMode == "" {
			m.WriteMode = s.WriteMode
		}
		if m.OnMissing == "" {
			m.OnMissing = s.OnMissing
		}
		out[i] = m
	}
	return out
}

// Batch bounds one ApplyBulk call: it is sent when any bound is reached.
type Batch struct {
	MaxMessages int           `mapstructure:"max_messages"`
	MaxBytes    ByteSize      `mapstructure:"max_bytes"`
	MaxDelay    time.Duration `mapstructure:"max_delay"`
}

// DeadLetter names at most one dead-letter output: Topic, BigtableTable or
// File. With none, a message that can never be written has nowhere to go and
// is not acked (the pipeline decides what to do with it).
type DeadLetter struct {
	// Topic is a short name in Config.Project or projects/P/topics/T.
	Topic string `mapstructure:"topic"`
	// Subscription is the subscription on Topic that setup creates and
	// replay reads: Pub/Sub drops what is published to a topic without
	// one. Default: TOPIC-replay (TOPIC's short name), when Topic is set.
	Subscription string `mapstructure:"subscription"`
	// BigtableTable is a table in State.Instance.
	BigtableTable string `mapstructure:"bigtable_table"`
	// File is a local JSON-lines file, for local runs.
	File string `mapstructure:"file"`
}

// ChangeTables returns the tables that a change mapping of the sink writes
// (Mapping.IsChange), each once, in mapping order: those that need the
// tombstone family.
func (s Sink) ChangeTables() []string {
	var out []string
	for _, m := range s.AllMappings() {
		if m.IsChange() && !slices.Contains(out, m.Table) {
			out = append(out, m.Table)
		}
	}
	return out
}
