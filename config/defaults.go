package config

import (
	"strings"
	"time"

	"github.com/spf13/viper"
)

// This file is the one place where defaults live.
//
// Top-level keys are registered with viper (SetDefault), and each is bound
// to its environment variable PUBSINK_<KEY> with dots as underscores: viper
// only consults the environment for keys it already knows, so a key without
// a registered default would never see its override (spf13/viper#761).
//
// viper cannot default the elements of a list, so per-pipeline defaults are
// applied after decoding, by applyPipelineDefaults below, to every element of
// pipelines, and only to keys that the file does not set: an explicit zero
// stays zero and fails validation instead of turning silently into the
// default.

// envPrefix prefixes every environment override: PUBSINK_STATE_INSTANCE.
const envPrefix = "PUBSINK"

// topDefaults are the top-level defaults, in file order. Each key here can be
// overridden from the environment.
var topDefaults = []struct {
	key   string
	value any
}{
	// No default project: writing to the wrong project is worse than
	// refusing to start. Registered so that PUBSINK_PROJECT works.
	{"project", ""},
	// info keeps a busy pipeline's log to start-up, shutdown and failures.
	{"log.level", "info"},
	// json is what Cloud Logging parses into severity, message and time.
	{"log.format", "json"},
	// 8080 is what Cloud Run sends traffic and probes to; $PORT, when set,
	// overrides the file (see portOverride).
	{"http.addr", ":8080"},
	// Long enough to flush a batch (max_delay 20ms) and wait out one slow
	// Bigtable write, and within GKE's default 30s termination grace period.
	// Cloud Run allows only 10s after SIGTERM: set 8s there.
	{"shutdown_timeout", 20 * time.Second},
	// No default instance: required only when a pipeline needs state.
	// Registered so that PUBSINK_STATE_INSTANCE works.
	{"state.instance", ""},
	// One table per deployment for dedupe records, watermarks and snapshots;
	// setup creates it.
	{"state.table", "pubsink_state"},
	// The instance's default profile, which suits an instance of one
	// cluster. With several clusters it is usually multi-cluster routing,
	// which refuses the conditional mutations of exactly_once: run checks
	// and says how to make a profile (docs/reference.md, "What setup
	// creates"). Registered so that PUBSINK_STATE_APP_PROFILE works.
	{"state.app_profile", ""},
}

// newViper returns a viper with every top-level default registered and its
// environment variable bound, except the keys in skipEnv (whose variable
// holds a value of the wrong type, reported already).
func newViper(skipEnv map[string]bool) *viper.Viper {
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	for _, d := range topDefaults {
		v.SetDefault(d.key, d.value)
		if !skipEnv[d.key] {
			_ = v.BindEnv(d.key) // only fails without a key
		}
	}
	return v
}

// envName is the environment variable that overrides key.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Per-pipeline defaults. Each says why.
const (
	// exactly_once is what pubsink is for; at_least_once must be asked for.
	defaultMode = ModeExactlyOnce
	// auto reads ms since the epoch or RFC 3339, as Beam's timestampAttribute.
	defaultTimestampFormat = TimestampAuto
	// The v2 client defaults to one StreamingPull stream, good for about
	// 10 MB/s; four give headroom for a busy subscription without pinning
	// the two cores of a small container on stream bookkeeping.
	defaultStreams = 4
	// The client library's own default (ReceiveSettings.MaxOutstandingMessages);
	// enough for two full 500-message batches in flight.
	defaultMaxOutstandingMessages = 1000
	// 0: the source derives it from the container's memory limit at start,
	// which a static default cannot know.
	defaultMaxOutstandingBytes ByteSize = 0
	// Two minutes of silence while messages wait and flow control has room
	// is far outside what a working stream does (it delivers within
	// milliseconds), and leaves the client library's own keepalive, which
	// closes a stream whose server stopped answering after about 45 s, its
	// chance first. A hung stream then costs at most about 2.5 minutes
	// before it is reopened, and 5 before /healthz asks for a restart.
	defaultStallTimeout = 2 * time.Minute
	// Pub/Sub's longest ack deadline is 10 minutes, so a redelivery caused by
	// an expired deadline arrives within about one window.
	defaultDedupeWindow = 10 * time.Minute
	// Dataflow's default assumption about how far event times are out of
	// order.
	defaultEstimationBand = 10 * time.Second
	// Beam's default: data behind the watermark is late at once (and, with
	// late_data accept, still written).
	defaultAllowedLateness = 0
	// Never lose data by default: a late message is still written.
	defaultLateData = LateAccept
	defaultSinkType = SinkBigtable
	// A one-letter family: its name is stored with every cell.
	defaultColumnFamily = "d"
	// The whole payload in one column loses nothing.
	defaultColumnName, defaultColumnValue = "data", "{data}"
	// Cells carry the event time, so reads by time range see event time.
	defaultCellTimestamp = CellTimeEvent
	// 500 rows keep one ApplyBulk request small enough to retry cheaply
	// (the API allows 100,000 mutations) and let two batches fill from the
	// default 1000 outstanding messages.
	defaultBatchMessages = 500
	// 4 MiB is a request that is quick to send and resend, far below the
	// request limit, and holds 500 rows of up to ~8 KiB.
	defaultBatchBytes = 4 * MiB
	// 20ms adds little to commit latency while letting concurrent messages
	// share a request.
	defaultBatchDelay = 20 * time.Millisecond
	// setup creates the replay subscription under this suffix.
	defaultDeadLetterSubscriptionSuffix = "-replay"
	// JSON is what pubsink read before payload formats existed, and what
	// most publishers send: a file written then means the same now.
	defaultPayloadFormat = FormatJSON
	// An avro or protobuf payload cannot be read without a schema; the
	// topic's own Pub/Sub schema is the one its publishers were checked
	// against, so it needs no copy to keep in step.
	defaultPayloadSchema = SchemaTopic
	// Binary is what Avro and protobuf publishers send unless told
	// otherwise (a topic schema's messages say their own encoding).
	defaultPayloadEncoding = EncodingBinary
	// A message of a 50-element batch, under each, makes 50 rows; 1000 is
	// far above what a legitimate message makes and bounds a hostile one
	// (a list of a million elements) to what one ApplyBulk takes
	// comfortably (the API allows 100,000 mutations per request).
	defaultMaxRows = 1000
	// Pub/Sub's own default, and the faster: an ordered subscription hands
	// each ordering key's messages over one at a time. Order must be asked
	// for, where a key's changes must apply in publish order.
	defaultOrdering = false
	// A mapping sets its cells as messages come, as it always did, unless
	// it says otherwise.
	defaultWriteMode = WriteUpsert
	// A missing value is a message the mapping did not expect: keep it,
	// with its reason, rather than write a row without the column.
	defaultOnMissing = MissingDeadLetter
	// The tombstones' family is named for what it holds (its name is
	// stored with each tombstone, which a change's row holds at most a few
	// of).
	defaultTombstoneFamily = "tombstone"
	// A week: longer than any redelivery, a dead-letter replay of last
	// week's poison, or a reprocess of the default topic retention; shorter
	// than a month of deleted rows' tombstones kept for nothing.
	defaultTombstoneRetention = 7 * 24 * time.Hour
)

// applyPipelineDefaults fills the keys of p that its YAML element does not
// set. set reports whether a dotted key such as "sink.row_key" is set in the
// element. It runs after environment overrides, so the sink instance follows
// PUBSINK_STATE_INSTANCE too.
func applyPipelineDefaults(p *Pipeline, set func(key string) bool, state State) {
	if !set("mode") {
		p.Mode = defaultMode
	}
	if !set("payload.format") {
		p.Payload.Format = defaultPayloadFormat
	}
	// json, string and raw need no schema: none by default (setting one is
	// a problem). An explicit schema is kept, even an empty one.
	if !set("payload.schema") && (p.Payload.Format == FormatAvro || p.Payload.Format == FormatProtobuf) {
		p.Payload.Schema = defaultPayloadSchema
	}
	// Only a schema file needs to be told the encoding: a topic schema's
	// messages carry theirs in googclient_schemaencoding.
	if !set("payload.encoding") && p.Payload.Schema != "" && !p.Payload.TopicSchema() {
		p.Payload.Encoding = defaultPayloadEncoding
	}
	if !set("source.timestamp_format") {
		p.Source.TimestampFormat = defaultTimestampFormat
	}
	if !set("source.streams") {
		p.Source.Streams = defaultStreams
	}
	if !set("source.max_outstanding_messages") {
		p.Source.MaxOutstandingMessages = defaultMaxOutstandingMessages
	}
	if !set("source.max_outstanding_bytes") {
		p.Source.MaxOutstandingBytes = defaultMaxOutstandingBytes
	}
	if !set("source.stall_timeout") {
		p.Source.StallTimeout = defaultStallTimeout
	}
	if !set("source.ordering") {
		p.Source.Ordering = defaultOrdering
	}
	if !set("dedupe.window") {
		p.Dedupe.Window = defaultDedupeWindow
	}
	if !set("watermark.estimation_band") {
		p.Watermark.EstimationBand = defaultEstimationBand
	}
	if !set("watermark.allowed_lateness") {
		p.Watermark.AllowedLateness = defaultAllowedLateness
	}
	if !set("watermark.late_data") {
		p.Watermark.LateData = defaultLateData
	}
	if !set("sink.type") {
		p.Sink.Type = defaultSinkType
	}
	if !set("sink.instance") {
		// One instance for state and data is the common deployment.
		p.Sink.Instance = state.Instance
	}
	// sink.app_profile has no default here: "" is the instance's default
	// profile, even when the sink is in state.instance. state.app_profile
	// routes to one cluster so that conditional mutations are safe; the
	// sink's writes are plain idempotent ApplyBulk calls and keep the
	// failover of a multi-cluster default rather than follow the state
	// profile onto one cluster (and a profile of state.instance does not
	// exist in another instance).
	if !set("sink.column_family") {
		p.Sink.ColumnFamily = defaultColumnFamily
	}
	// With sink.mappings the sink's own row key and columns are not used:
	// no default, so that none is mistaken for one the file set.
	single := len(p.Sink.Mappings) == 0
	if single && !set("sink.row_key") {
		// The dedupe key makes a natural idempotent row key: a redelivery
		// rewrites the same row with the same cells.
		switch {
		case p.Source.IDAttribute != "":
			p.Sink.RowKey = "{attributes." + p.Source.IDAttribute + "}"
		case p.Source.IDTemplate != "":
			p.Sink.RowKey = p.Source.IDTemplate
		default:
			p.Sink.RowKey = "{message_id}"
		}
	}
	if single && !set("sink.columns") {
		p.Sink.Columns = map[string]string{defaultColumnName: defaultColumnValue}
	}
	// A mapping's table, column family and timestamp default to the sink's,
	// at use (Sink.AllMappings), so that they follow the sink's defaults.
	if !set("sink.timestamp") {
		p.Sink.Timestamp = defaultCellTimestamp
	}
	if !set("sink.write_mode") {
		p.Sink.WriteMode = defaultWriteMode
	}
	if !set("sink.on_missing") {
		p.Sink.OnMissing = defaultOnMissing
	}
	if !set("sink.tombstone_family") {
		p.Sink.TombstoneFamily = defaultTombstoneFamily
	}
	if !set("sink.tombstone_retention") {
		p.Sink.TombstoneRetention = defaultTombstoneRetention
	}
	if !set("sink.max_rows") {
		p.Sink.MaxRows = defaultMaxRows
	}
	if !set("sink.batch.max_messages") {
		p.Sink.Batch.MaxMessages = defaultBatchMessages
	}
	if !set("sink.batch.max_bytes") {
		p.Sink.Batch.MaxBytes = defaultBatchBytes
	}
	if !set("sink.batch.max_delay") {
		p.Sink.Batch.MaxDelay = defaultBatchDelay
	}
	if !set("dead_letter.subscription") && p.DeadLetter.Topic != "" {
		p.DeadLetter.Subscription = shortName(p.DeadLetter.Topic) + defaultDeadLetterSubscriptionSuffix
	}
}

// shortName is the last segment of a full resource name.
func shortName(name string) string {
	return name[strings.LastIndexByte(name, '/')+1:]
}
