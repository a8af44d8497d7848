package config

import (
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/pubsink/pubsink/template"
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
)

var (
	pipelineNameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)
	// Pub/Sub resource IDs: 3 to 255 characters, starting with a letter.
	pubsubIDRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._~+%-]{2,254}$`)
	// Bigtable table IDs, column family names and app profile IDs (all
	// [_a-zA-Z0-9][-_.a-zA-Z0-9]* in the API).
	bigtableIDRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

// validate checks the decoded, defaulted cfg and reports every problem.
func validate(cfg *Config, c *collector) {
	if cfg.Project == "" {
		c.add("project", "required")
	}
	oneOf(c, "log.level", cfg.Log.Level, "debug", "info", "warn", "error")
	oneOf(c, "log.format", cfg.Log.Format, "json", "console")
	if _, _, err := net.SplitHostPort(cfg.HTTP.Addr); err != nil {
		c.add("http.addr", "%q is not host:port (write :8080 for every interface)", cfg.HTTP.Addr)
	}
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
	oneOf(c, at("mode"), p.Mode, ModeExactlyOnce, ModeAtLeastOnce)

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
	oneOf(c, at("source.timestamp_format"), s.TimestampFormat,
		TimestampAuto, TimestampRFC3339, TimestampUnixS, TimestampUnixMS, TimestampUnixUS, TimestampUnixNS)
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

	// Dedupe and watermark.
	if p.ExactlyOnce() {
		v.requireState(at("mode") + " is exactly_once (dedupe records live in the state table)")
		if p.Dedupe.Window < minDedupeWindow {
			c.add(at("dedupe.window"), "must be at least %v in exactly_once mode, not %v", minDedupeWindow, p.Dedupe.Window)
		}
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
	if oneOf(c, at("watermark.late_data"), p.Watermark.LateData, LateAccept, LateDeadLetter, LateDrop) &&
		p.Watermark.LateData == LateDeadLetter && !p.DeadLetter.hasOutput() {
		c.add(at("watermark.late_data"), "dead_letter needs a dead_letter output (topic, bigtable_table or file)")
	}

	v.sink(at, p)
	v.deadLetter(at, p)
}

func (v *validator) sink(at func(string) string, p *Pipeline) {
	c, k := v.c, &p.Sink
	if oneOf(c, at("sink.type"), k.Type, SinkBigtable, SinkStdout) && k.Type == SinkBigtable {
		if k.Instance == "" {
			c.add(at("sink.instance"), "required for a bigtable sink (it defaults to state.instance)")
		}
		checkAppProfile(c, at("sink.app_profile"), k.AppProfile)
		if k.Table == "" {
			c.add(at("sink.table"), "required for a bigtable sink")
		} else if !bigtableIDRE.MatchString(k.Table) {
			c.add(at("sink.table"), "%q is not a Bigtable table ID (letters, digits, _ . -)", k.Table)
		}
		if k.ColumnFamily == "" {
			c.add(at("sink.column_family"), "required for a bigtable sink")
		} else if !bigtableIDRE.MatchString(k.ColumnFamily) {
			c.add(at("sink.column_family"), "%q is not a Bigtable column family name (letters, digits, _ . -)", k.ColumnFamily)
		}
	}

	if k.RowKey == "" {
		c.add(at("sink.row_key"), "must not be empty")
	} else if t, err := template.Compile(k.RowKey); err != nil {
		c.add(at("sink.row_key"), "%v", err)
	} else if t.Constant() {
		c.add(at("sink.row_key"), "%q has no placeholder: every message would overwrite one row", k.RowKey)
	}
	if len(k.Columns) == 0 {
		c.add(at("sink.columns"), "must name at least one column")
	}
	names := make([]string, 0, len(k.Columns))
	for name := range k.Columns {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" {
			c.add(at("sink.columns"), "a column qualifier must not be empty")
			continue
		}
		if _, err := template.Compile(k.Columns[name]); err != nil {
			c.add(at("sink.columns."+name), "%v", err)
		}
	}
	oneOf(c, at("sink.timestamp"), k.Timestamp, CellTimeEvent, CellTimePublish)

	b := &k.Batch
	switch {
	case b.MaxMessages < 1 || b.MaxMessages > maxBatchMessages:
		c.add(at("sink.batch.max_messages"), "must be 1 to %d, not %d", maxBatchMessages, b.MaxMessages)
	case p.Source.MaxOutstandingMessages >= 1 && b.MaxMessages > p.Source.MaxOutstandingMessages:
		c.add(at("sink.batch.max_messages"), "%d exceeds source.max_outstanding_messages (%d): a batch that can never fill would stall",
			b.MaxMessages, p.Source.MaxOutstandingMessages)
	}
	switch {
	case b.MaxBytes <= 0 || b.MaxBytes > maxBatchBytes:
		c.add(at("sink.batch.max_bytes"), "must be more than 0 and at most %v, not %v", maxBatchBytes, b.MaxBytes)
	case p.Source.MaxOutstandingBytes > 0 && b.MaxBytes > p.Source.MaxOutstandingBytes:
		c.add(at("sink.batch.max_bytes"), "%v exceeds source.max_outstanding_bytes (%v): a batch that can never fill would stall",
			b.MaxBytes, p.Source.MaxOutstandingBytes)
	}
	if b.MaxDelay <= 0 {
		c.add(at("sink.batch.max_delay"), "must be positive, not %v", b.MaxDelay)
	}
}

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
