package config

// The checks of a decoded configuration (validate): the app's keys and each
// pipeline's names, subscriptions, payload and dead letter; the sink's are
// in validate_sink.go.

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Limits that validation enforces. Each says why.
const (
	// More StreamingPull streams than this only cost memory and connections:
	// 64 streams carry ~640 MB/s, more than one process can write.
	maxStreams = 64
	// Bigtable's MutateRows (ApplyBulk) accepts at most 100,000 mutations
	// per request.
	maxBatchMessages = 100_000
	// Bigtable rejects larger MutateRows requests (256 MB hard limit); 90 MiB
	// keeps well clear of it, as of the gRPC message limits along the way.
	maxBatchBytes = 90 * MiB
	// Below a minute, the window no longer covers a redelivery after an
	// expired ack deadline, and dedupe silently stops deduping.
	minDedupeWindow = time.Minute
	// A shorter stall timeout would take a stream that is still opening, or
	// a pause between two deliveries, for a hang.
	minStallTimeout = time.Second
	// Pub/Sub's bounds of a topic's message retention.
	minTopicRetention = 10 * time.Minute
	maxTopicRetention = 31 * 24 * time.Hour
	// A message's rows are written together, never half, so they must fit
	// in one MutateRows (ApplyBulk) request: at most 100,000 mutations.
	maxRowsPerMessage = 100_000
	// A tombstone keeps an older change from bringing back what a delete
	// deleted for as long as it lives. Under an hour it would not outlive
	// the changes that merely arrive late: a redelivery after an expired
	// ack deadline, a batch retried after a Bigtable outage, a dead-letter
	// replay the same hour.
	minTombstoneRetention = time.Hour
)

var (
	pipelineNameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)
	// Pub/Sub resource IDs: 3 to 255 characters, starting with a letter.
	pubsubIDRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._~+%-]{2,254}$`)
	// Bigtable table IDs, column family names and app profile IDs (all
	// [_a-zA-Z0-9][-_.a-zA-Z0-9]* in the API).
	bigtableIDRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	// The full name of a protobuf message type: package and name, dotted
	// identifiers (a type in no package is its name alone).
	protoMessageRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// The values of each key that takes one of a list, in the order problems
// name them (and the JSON Schema offers them, schema.go).
var (
	logLevels        = []string{"debug", "info", "warn", "error"}
	logFormats       = []string{"json", "console"}
	modes            = []string{ModeExactlyOnce, ModeAtLeastOnce}
	timestampFormats = []string{TimestampAuto, TimestampRFC3339, TimestampUnixS, TimestampUnixMS, TimestampUnixUS, TimestampUnixNS}
	lateDataPolicies = []string{LateAccept, LateDeadLetter, LateDrop}
	payloadFormats   = []string{FormatJSON, FormatAvro, FormatProtobuf, FormatString, FormatRaw}
	encodings        = []string{EncodingBinary, EncodingJSON}
	sinkTypes        = []string{SinkBigtable, SinkStdout}
	cellTimes        = []string{CellTimeEvent, CellTimePublish}
	operations       = []string{OpSet, OpDelete, OpDeleteFamily, OpDeleteColumns}
	writeModes       = []string{WriteUpsert, WriteInsert, WriteReplaceIfNewer}
	missingPolicies  = []string{MissingDeadLetter, MissingSkip, MissingEmpty, MissingDelete}
)

// checkHTTPAddr refuses an http.addr that net.Listen would: not host:port,
// or a port that is neither a number (0 to 65535; 0 picks a free one) nor a
// service this machine names. The service is looked up as listening would,
// by Go's resolver, which reads /etc/services and asks no server.
func checkHTTPAddr(c *collector, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		c.add("http.addr", "%q is not host:port (write :8080 for every interface)", addr)
		return
	}
	goResolver := &net.Resolver{PreferGo: true}
	if _, err := goResolver.LookupPort(context.Background(), "tcp", port); err != nil {
		c.add("http.addr", "the port of %q is neither a number from 0 to 65535 nor a service this machine knows (/etc/services): write a number, like :8080", addr)
	}
}

// validate checks the decoded, defaulted cfg and reports every problem.
func validate(cfg *Config, c *collector) {
	if cfg.Project == "" {
		c.add("project", "required")
	}
	oneOf(c, "log.level", cfg.Log.Level, logLevels...)
	oneOf(c, "log.format", cfg.Log.Format, logFormats...)
	checkHTTPAddr(c, cfg.HTTP.Addr)
	if cfg.ShutdownTimeout <= 0 {
		c.add("shutdown_timeout", "must be positive, not %v", cfg.ShutdownTimeout)
	}
	if cfg.State.Table == "" {
		c.add("state.table", "must not be empty")
	} else if !bigtableIDRE.MatchString(cfg.State.Table) {
		c.add("state.table", "%q is not a Bigtable table ID (letters, digits, _ . -)", cfg.State.Table)
	}
	checkAppProfile(c, "state.app_profile", cfg.State.AppProfile)
	if len(cfg.Pipelines) == 0 {
		c.add("pipelines", "at least one pipeline is required")
	}

	v := &validator{c: c, cfg: cfg, names: map[string]string{}, subs: map[string]string{}}
	for i := range cfg.Pipelines {
		v.pipeline(i, &cfg.Pipelines[i])
	}
	if cfg.State.Instance == "" && v.needState != "" {
		c.add("state.instance", "required: %s", v.needState)
	}
}

// validator holds what the checks of one pipeline need from the others.
type validator struct {
	c     *collector
	cfg   *Config
	names map[string]string // pipeline name -> path of its first use
	subs  map[string]string // full subscription name -> path of its first use
	// needState is the first reason found why state.instance is required.
	needState string
}

func (v *validator) pipeline(i int, p *Pipeline) {
	c := v.c
	at := func(key string) string { return fmt.Sprintf("pipelines[%d].%s", i, key) }

	switch first, dup := v.names[p.Name]; {
	case p.Name == "":
		c.add(at("name"), "required")
	case !pipelineNameRE.MatchString(p.Name):
		c.add(at("name"), "%q must match [a-z0-9_-]+ (it names metrics and state rows)", p.Name)
	case dup:
		c.add(at("name"), "%q is already the name of %s", p.Name, strings.TrimSuffix(first, ".name"))
	default:
		v.names[p.Name] = at("name")
	}
	oneOf(c, at("mode"), p.Mode, modes...)

	// Source.
	s := &p.Source
	if s.Topic != "" {
		checkName(c, at("source.topic"), s.Topic, "topics")
	}
	if s.Subscription == "" {
		c.add(at("source.subscription"), "required")
	} else if checkName(c, at("source.subscription"), s.Subscription, "subscriptions") {
		v.claimSubscription(at("source.subscription"), s.Subscription)
	}
	if s.TrackingSubscription != "" && checkName(c, at("source.tracking_subscription"), s.TrackingSubscription, "subscriptions") {
		if s.Subscription != "" && v.cfg.SubscriptionName(s.TrackingSubscription) == v.cfg.SubscriptionName(s.Subscription) {
			c.add(at("source.tracking_subscription"), "must differ from source.subscription: the tracker acks every message it reads")
		} else {
			v.claimSubscription(at("source.tracking_subscription"), s.TrackingSubscription)
		}
	}
	if s.IDTemplate != "" {
		if s.IDAttribute != "" {
			c.add(at("source.id_template"), "excludes source.id_attribute: set only one of them (each is the whole dedupe key)")
		}
		keyTemplate(c, at("source.id_template"), s.IDTemplate, "every message would have one dedupe key, and all but the first would be duplicates")
	}
	if s.TimestampTemplate != "" {
		if s.TimestampAttribute != "" {
			c.add(at("source.timestamp_template"), "excludes source.timestamp_attribute: set only one of them (each is the whole event time)")
		}
		keyTemplate(c, at("source.timestamp_template"), s.TimestampTemplate, "every message would have one event time")
	}
	oneOf(c, at("source.timestamp_format"), s.TimestampFormat, timestampFormats...)
	if s.Streams < 1 || s.Streams > maxStreams {
		c.add(at("source.streams"), "must be 1 to %d, not %d", maxStreams, s.Streams)
	}
	if s.MaxOutstandingMessages < 1 {
		c.add(at("source.max_outstanding_messages"), "must be at least 1, not %d", s.MaxOutstandingMessages)
	}
	if s.MaxOutstandingBytes < 0 {
		c.add(at("source.max_outstanding_bytes"), "must not be negative (0: derived from the memory limit)")
	}
	if s.StallTimeout != 0 && s.StallTimeout < minStallTimeout {
		c.add(at("source.stall_timeout"), "must be 0 (no watchdog) or at least %v, not %v", minStallTimeout, s.StallTimeout)
	}
	if r := s.TopicMessageRetention; r != 0 && (r < minTopicRetention || r > maxTopicRetention) {
		c.add(at("source.topic_message_retention"), "must be 0 (Pub/Sub's default: none) or %v to %v (Pub/Sub's bounds), not %v", minTopicRetention, maxTopicRetention, r)
	}

	// Dedupe and watermark.
	if p.ExactlyOnce() {
		v.requireState(at("mode") + " is exactly_once (dedupe records live in the state table)")
		if p.Dedupe.Window < minDedupeWindow {
			c.add(at("dedupe.window"), "must be at least %v in exactly_once mode, not %v", minDedupeWindow, p.Dedupe.Window)
		}
	} else if p.Dedupe.Window < 0 {
		c.add(at("dedupe.window"), "must not be negative, not %v", p.Dedupe.Window)
	}
	if s.TrackingSubscription != "" {
		v.requireState(at("source.tracking_subscription") + " is set (watermarks live in the state table)")
	}
	if p.Watermark.EstimationBand < 0 {
		c.add(at("watermark.estimation_band"), "must not be negative, not %v", p.Watermark.EstimationBand)
	}
	if p.Watermark.AllowedLateness < 0 {
		c.add(at("watermark.allowed_lateness"), "must not be negative, not %v", p.Watermark.AllowedLateness)
	}
	if oneOf(c, at("watermark.late_data"), p.Watermark.LateData, lateDataPolicies...) &&
		p.Watermark.LateData == LateDeadLetter && !p.DeadLetter.hasOutput() {
		c.add(at("watermark.late_data"), "dead_letter needs a dead_letter output (topic, bigtable_table or file)")
	}

	v.payload(at, p)
	v.sink(at, p)
	v.deadLetter(at, p)
}

// payload checks the format and the schema keys that go with it. The schema
// files are not read here (config reads no files): run compiles them.
func (v *validator) payload(at func(string) string, p *Pipeline) {
	c, pl := v.c, &p.Payload
	if oneOfNear(c, at("payload.format"), pl.Format, formatAliases, payloadFormats...) {
		switch ext := schemaExt[pl.Format]; {
		case ext == "":
			if pl.Schema != "" {
				c.add(at("payload.schema"), "only for avro and protobuf payloads: a %s payload is read without a schema", pl.Format)
			}
		case pl.Schema == "":
			c.add(at("payload.schema"), "must not be empty: write topic (the topic's Pub/Sub schema) or the path of a %s file", ext)
		case pl.TopicSchema(), strings.HasSuffix(pl.Schema, ext):
		case strings.EqualFold(pl.Schema, SchemaTopic):
			c.add(at("payload.schema"), "%q is neither topic nor the path of a %s file; did you mean topic?", pl.Schema, ext)
		case strings.HasSuffix(pl.Schema, schemaExt[FormatAvro]):
			c.add(at("payload.schema"), "%q is an avro schema, but payload.format is %s (write topic or the path of a %s file)", pl.Schema, pl.Format, ext)
		case strings.HasSuffix(pl.Schema, schemaExt[FormatProtobuf]):
			c.add(at("payload.schema"), "%q is a protobuf schema, but payload.format is %s (write topic or the path of a %s file)", pl.Schema, pl.Format, ext)
		default:
			c.add(at("payload.schema"), "%q is neither topic nor the path of a %s file", pl.Schema, ext)
		}
	}

	protoFile := strings.HasSuffix(pl.Schema, schemaExt[FormatProtobuf])
	switch {
	case protoFile && pl.Format == FormatProtobuf && pl.Message == "":
		c.add(at("payload.message"), "required with a .proto schema file: the full name of the payload's message type, such as pkg.Reading")
	case protoFile && pl.Message != "" && !protoMessageRE.MatchString(pl.Message):
		c.add(at("payload.message"), "%q is not the full name of a message type (such as pkg.Reading)", pl.Message)
	case !protoFile && pl.Message != "" && pl.Format == FormatProtobuf && pl.TopicSchema():
		c.add(at("payload.message"), "only with a .proto schema file: a topic's protobuf schema defines one top-level message type, the payload's")
	case !protoFile && pl.Message != "":
		c.add(at("payload.message"), "only with a .proto schema file (payload.format protobuf, payload.schema PATH.proto)")
	}

	switch {
	case pl.Encoding == "":
	case pl.TopicSchema():
		c.add(at("payload.encoding"), "only with a schema file: with a topic schema each message's googclient_schemaencoding attribute says its encoding")
	case pl.Schema == "":
		c.add(at("payload.encoding"), "only with a schema file (payload.schema): it is the encoding of the messages read with it")
	default:
		oneOfNear(c, at("payload.encoding"), pl.Encoding, nil, encodings...)
	}
}

// schemaExt is the extension of the schema file of each payload format; ""
// for the formats that take no schema.
var schemaExt = map[string]string{FormatAvro: ".avsc", FormatProtobuf: ".proto"}

// formatAliases are other names for payload formats that "did you mean"
// should know.
var formatAliases = map[string]string{"proto": FormatProtobuf, "text": FormatString, "bytes": FormatRaw, "binary": FormatRaw}

func (v *validator) deadLetter(at func(string) string, p *Pipeline) {
	c, d := v.c, &p.DeadLetter
	var outputs []string
	for _, o := range []struct{ key, value string }{{"topic", d.Topic}, {"bigtable_table", d.BigtableTable}, {"file", d.File}} {
		if o.value != "" {
			outputs = append(outputs, o.key)
		}
	}
	if len(outputs) > 1 {
		c.add(at("dead_letter"), "names %s: set only one of topic, bigtable_table, file", strings.Join(outputs, " and "))
	}
	if d.Topic != "" {
		if checkName(c, at("dead_letter.topic"), d.Topic, "topics") && p.Source.Topic != "" &&
			v.cfg.TopicName(d.Topic) == v.cfg.TopicName(p.Source.Topic) {
			c.add(at("dead_letter.topic"), "is source.topic: poison would come back to the pipeline forever")
		}
		if d.Subscription != "" && checkName(c, at("dead_letter.subscription"), d.Subscription, "subscriptions") {
			v.claimSubscription(at("dead_letter.subscription"), d.Subscription)
		}
	} else if d.Subscription != "" {
		c.add(at("dead_letter.subscription"), "needs dead_letter.topic")
	}
	if d.BigtableTable != "" {
		if !bigtableIDRE.MatchString(d.BigtableTable) {
			c.add(at("dead_letter.bigtable_table"), "%q is not a Bigtable table ID (letters, digits, _ . -)", d.BigtableTable)
		}
		v.requireState(at("dead_letter.bigtable_table") + " is set (that table is in state.instance)")
	}
}

// claimSubscription reports a subscription that another key already reads:
// Pub/Sub splits a subscription's messages between its readers, so each
// reader would see only part of the stream.
func (v *validator) claimSubscription(path, name string) {
	full := v.cfg.SubscriptionName(name)
	if first, dup := v.subs[full]; dup {
		v.c.add(path, "%s is already read by %s: readers of one subscription each get only part of its messages", full, first)
		return
	}
	v.subs[full] = path
}

func (v *validator) requireState(reason string) {
	if v.needState == "" {
		v.needState = reason
	}
}

// oneOf reports value if it is not one of allowed, and returns whether it is.
func oneOf(c *collector, path, value string, allowed ...string) bool {
	for _, a := range allowed {
		if value == a {
			return true
		}
	}
	c.add(path, "%q is not one of %s", value, strings.Join(allowed, ", "))
	return false
}

// oneOfNear is oneOf with "did you mean" for a value close to an allowed
// one: one of aliases, else nearValue's (the same but for case, a prefix
// of it, the nearest misspelling: Insert is insert, not upsert).
func oneOfNear(c *collector, path, value string, aliases map[string]string, allowed ...string) bool {
	for _, a := range allowed {
		if value == a {
			return true
		}
	}
	lower := strings.ToLower(strings.TrimSpace(value))
	near := aliases[lower]
	if near == "" {
		near = nearValue(lower, allowed)
	}
	if near == "" {
		return oneOf(c, path, value, allowed...)
	}
	c.add(path, "%q is not one of %s; did you mean %s?", value, strings.Join(allowed, ", "), near)
	return false
}

// nearValue is the value of allowed that lower, a lowercased value that is
// none of them, is probably a misspelling of: the same (but for case), else
// the first it is a prefix of (proto), else the nearest within an edit
// distance of a third of its length; "" if none.
func nearValue(lower string, allowed []string) string {
	if slices.Contains(allowed, lower) {
		return lower
	}
	if len(lower) >= 3 {
		for _, a := range allowed {
			if strings.HasPrefix(a, lower) {
				return a
			}
		}
	}
	best, bestD := "", 0
	for _, a := range allowed {
		if d := editDistance(lower, a); d <= min(3, max(1, len(a)/3)) && (best == "" || d < bestD) {
			best, bestD = a, d
		}
	}
	return best
}

// checkFileKeys checks what the file itself says of pipeline i (elem, its
// element of the tree; set, whether it sets a key), which the decoded,
// defaulted values no longer tell: keys set to "", and single-mapping keys
// set beside sink.mappings (a default row key must not count).
func checkFileKeys(c *collector, i int, elem map[string]any, set func(key string) bool) {
	at := func(key string) string { return fmt.Sprintf("pipelines[%d].%s", i, key) }
	// An empty expression is not "none" but a mistake, such as a ${VAR}
	// that expanded to nothing: leaving the key out is how to say none.
	empty := func(path string, m map[string]any, key string) {
		if v, ok := lookup(m, key); ok && v == "" {
			c.add(path, "must not be empty (%s)", emptyExpr[key[strings.LastIndexByte(key, '.')+1:]])
		}
	}
	for _, key := range []string{"filter", "sink.when", "sink.each", "sink.op"} {
		empty(at(key), elem, key)
	}
	// delete_columns: left out, the mapping's columns; set, some.
	noColumns := func(path string, m map[string]any) {
		if l, ok := lookup(m, "delete_columns"); ok {
			if list, _ := l.([]any); len(list) == 0 { // checkValue made it a list
				c.add(path, "must name at least one column (leave it out for all the mapping's columns)")
			}
		}
	}
	sink, _ := lookup(elem, "sink")
	sinkMap, _ := sink.(map[string]any)
	noColumns(at("sink.delete_columns"), sinkMap)
	ms, ok := lookup(elem, "sink.mappings")
	if !ok {
		return
	}
	list, _ := ms.([]any) // checkValue made it a list
	if len(list) == 0 {
		c.add(at("sink.mappings"), "must list at least one mapping (leave it out for the single mapping of sink.row_key and sink.columns)")
	}
	var single []string
	for _, key := range singleMappingKeys {
		if set(key) {
			single = append(single, key)
		}
	}
	if len(single) > 0 {
		c.add(at("sink.mappings"), "excludes %s: set either the mappings or the sink's single mapping (%s), not both",
			strings.Join(single, " and "), strings.Join(singleMappingKeys, ", "))
	}
	for j, e := range list {
		m, _ := e.(map[string]any)
		for _, key := range []string{"when", "each", "op"} {
			empty(at(fmt.Sprintf("sink.mappings[%d].%s", j, key)), m, key)
		}
		noColumns(at(fmt.Sprintf("sink.mappings[%d].delete_columns", j)), m)
	}
}

// singleMappingKeys are the keys of the sink that only its single mapping
// has: sink.mappings excludes them. (Its table, column family, timestamp,
// write mode and missing-value policy are the mappings' defaults.)
var singleMappingKeys = []string{"sink.row_key", "sink.columns", "sink.when", "sink.each", "sink.op", "sink.on_missing_columns", "sink.delete_columns"}

// emptyExpr says, for each expression key, how to write "none".
var emptyExpr = map[string]string{
	"filter": "leave it out to keep every message",
	"when":   "leave it out to make the rows of every message",
	"each":   "leave it out for one row per message",
	"op":     "leave it out for a plain mapping, or write set",
}

// checkAppProfile reports a profile that is not a Bigtable app profile ID;
// "" (the instance's default profile) is fine.
func checkAppProfile(c *collector, path, profile string) {
	if profile != "" && !bigtableIDRE.MatchString(profile) {
		c.add(path, "%q is not a Bigtable app profile ID (letters, digits, _ . -; empty for the instance's default profile)", profile)
	}
}

// checkName reports name unless it is a valid Pub/Sub ID or a full name
// projects/P/<collection>/ID, and returns whether it is valid.
func checkName(c *collector, path, name, collection string) bool {
	id := name
	if strings.Contains(name, "/") {
		parts := strings.Split(name, "/")
		if len(parts) != 4 || parts[0] != "projects" || parts[1] == "" || parts[2] != collection {
			c.add(path, "%q is neither a short name nor projects/PROJECT/%s/NAME", name, collection)
			return false
		}
		id = parts[3]
	}
	if !pubsubIDRE.MatchString(id) || strings.HasPrefix(id, "goog") {
		c.add(path, "%q is not a valid Pub/Sub name: its ID must be 3 to 255 letters, digits or - _ . ~ + %%, starting with a letter, not with goog", name)
		return false
	}
	return true
}

func (d *DeadLetter) hasOutput() bool { return d.Topic != "" || d.BigtableTable != "" || d.File != "" }
