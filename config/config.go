package config

import "time"

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
	Name       string     `mapstructure:"name"`
	Mode       string     `mapstructure:"mode"`
	Source     Source     `mapstructure:"source"`
	Dedupe     Dedupe     `mapstructure:"dedupe"`
	Watermark  Watermark  `mapstructure:"watermark"`
	Sink       Sink       `mapstructure:"sink"`
	DeadLetter DeadLetter `mapstructure:"dead_letter"`
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
	TimestampAttribute     string   `mapstructure:"timestamp_attribute"`
	TimestampFormat        string   `mapstructure:"timestamp_format"`
	Streams                int      `mapstructure:"streams"`
	MaxOutstandingMessages int      `mapstructure:"max_outstanding_messages"`
	MaxOutstandingBytes    ByteSize `mapstructure:"max_outstanding_bytes"` // 0: derived from the memory limit
	// StallTimeout is how long a subscription may deliver nothing, while
	// its flow control has room and messages wait in it, before the
	// source's watchdog reopens its streams (and, if that does not help,
	// fails /healthz). 0: no watchdog. See package source, "Watchdog".
	StallTimeout time.Duration `mapstructure:"stall_timeout"`
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

// Sink configures where committed rows go. RowKey and the values of Columns
// are templates (package template); Columns maps a column qualifier, case
// kept as written, to its template.
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
	Batch        Batch             `mapstructure:"batch"`
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
