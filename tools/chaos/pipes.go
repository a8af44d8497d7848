package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/pubsink/pubsink/deadletter"
)

// The modes and late-data policies of the pipelines under test, as the
// configuration spells them.
const (
	modeExactlyOnce = "exactly_once"
	modeAtLeastOnce = "at_least_once"
	lateDeadLetter  = "dead_letter"
	lateAccept      = "accept"
	lateDrop        = "drop"
)

// PipeSpec is one pipeline under test: its resources and what its mode,
// late-data policy and dead-letter output promise, which decide the
// invariants Check holds it to. Every pipeline of a campaign reads the one
// topic through subscriptions of its own, so each sees the whole workload.
type PipeSpec struct {
	Name string
	Mode string // modeExactlyOnce or modeAtLeastOnce
	Late string // lateDeadLetter, lateAccept or lateDrop
	// Output is the kind of dead-letter output: deadletter.KindTopic,
	// KindTable or KindFile; the field of that kind names it.
	Output               string
	Sub, Tracking, Table string
	DLTopic, DLSub       string // KindTopic
	DLTable              string // KindTable, in the state instance
	DLFile               string // KindFile, a path in the run directory
	Streams              int
	// Changes marks the change pipeline (changePipe): it reads Topic, the
	// change workload's own, applies its changes with the change mappings
	// of changeMappings (Table is the first's) and has no tracking
	// subscription; CheckChanges holds it to the model.
	Changes bool
	// Ordered gives the change pipeline's subscription message ordering.
	Ordered bool
	Topic   string
	// Format marks a format pipeline (formatPipes): fmtAvroBinary,
	// fmtAvroJSON or fmtProto. It reads Topic, the format workload's own,
	// and writes Tables (Table the first); CheckFormats holds it to its
	// payloads.
	Format string
	Tables []string
}

// ExactlyOnce reports whether the pipeline dedupes.
func (p PipeSpec) ExactlyOnce() bool { return p.Mode == modeExactlyOnce }

// String is how the report describes the pipeline.
func (p PipeSpec) String() string {
	out := p.DLTopic
	switch p.Output {
	case deadletter.KindTable:
		out = p.DLTable
	case deadletter.KindFile:
		out = filepath.Base(p.DLFile)
	}
	if p.Format != "" {
		return fmt.Sprintf("%s (%s, %s on %s, tables %s; no watermark; dead-letter %s %s)", p.Name, p.Mode, p.Format, p.Topic, strings.Join(p.Tables, ", "), p.Output, out)
	}
	if p.Changes {
		var ms []string
		for _, m := range changeMappings {
			ms = append(ms, m.Mode+" "+m.Table)
		}
		return fmt.Sprintf("%s (%s, change mappings: %s; no watermark; dead-letter %s %s)", p.Name, p.Mode, strings.Join(ms, ", "), p.Output, out)
	}
	return fmt.Sprintf("%s (%s, late_data: %s, dead-letter %s %s)", p.Name, p.Mode, p.Late, p.Output, out)
}

// defaultPipe is the pipeline of the default campaign: exactly_once,
// late_data: dead_letter, a dead-letter topic with its replay subscription
// (the production default). late_data: dead_letter makes a wrong lateness
// verdict visible in the data: a record that should be a row shows up as
// a late copy.
var defaultPipe = PipeSpec{
	Name: pipelineName, Mode: modeExactlyOnce, Late: lateDeadLetter, Output: deadletter.KindTopic,
	Sub: mainSub, Tracking: trackingSub, Table: rowsTable, DLTopic: dlTopic, DLSub: dlSub, Streams: 4,
}

// mixPipes are the two pipelines of a -mix campaign, run by every process:
// one exactly_once with a dead-letter table and late_data: accept, one
// at_least_once with a dead-letter file and late_data: drop. The first is
// the one whose catalog gates the duplicates and replays (watchCatalog).
// Each reads the topic with 2 streams (the default campaign's pipeline
// with 4), so that two pipelines in each of three processes stay within
// what the Pub/Sub emulator serves on a small machine.
func mixPipes(dir string) []PipeSpec {
	return []PipeSpec{
		{Name: "eo_table", Mode: modeExactlyOnce, Late: lateAccept, Output: deadletter.KindTable,
			Sub: "chaos-eo-main", Tracking: "chaos-eo-tracking", Table: "chaos_eo_rows", DLTable: "chaos_eo_dlq", Streams: 2},
		{Name: "alo_file", Mode: modeAtLeastOnce, Late: lateDrop, Output: deadletter.KindFile,
			Sub: "chaos-alo-main", Tracking: "chaos-alo-tracking", Table: "chaos_alo_rows", DLFile: filepath.Join(dir, "alo-dlq.jsonl"), Streams: 2},
	}
}

// configYAML writes the configuration of the pipelines under test: each
// with id_attribute id, timestamp_attribute ts (auto: milliseconds or RFC
// 3339), a tracking subscription, the default 10s estimation band, rows
// keyed by the id attribute with columns data ({data}) and n ({data.n}).
func configYAML(addr string, pipes []PipeSpec) string { return configYAMLOf(addr, pipes, "", false) }

// configYAMLOf is configYAML with dir, the run directory (where a format
// pipeline's .proto file is), and, with reprocess, the reprocess's
// mapping of the reprocessed pipeline (formatPipeYAML).
func configYAMLOf(addr string, pipes []PipeSpec, dir string, reprocess bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by tools/chaos.
project: %s
log: {level: info, format: json}
http: {addr: "%s"}
shutdown_timeout: %s
state: {instance: %s, table: %s}
pipelines:
`, project, addr, shutdownTimeout, instance, stateTable)
	for _, p := range pipes {
		if p.Changes {
			b.WriteString(changePipeYAML(p))
			continue
		}
		if p.Format != "" {
			b.WriteString(formatPipeYAML(p, dir, reprocess))
			continue
		}
		fmt.Fprintf(&b, `  - name: %s
    mode: %s
    source:
      topic: %s
      subscription: %s
      tracking_subscription: %s
      id_attribute: id
      timestamp_attribute: ts
      timestamp_format: auto
      streams: %d
      max_outstanding_messages: 1000
      max_outstanding_bytes: 64MiB
`, p.Name, p.Mode, topicName, p.Sub, p.Tracking, p.Streams)
		if p.ExactlyOnce() {
			b.WriteString("    dedupe: {window: 10m}\n")
		}
		fmt.Fprintf(&b, `    watermark: {estimation_band: %s, allowed_lateness: 0s, late_data: %s}
    sink:
      type: bigtable
      table: %s
      column_family: d
      row_key: "{attributes.id}"
      columns: {data: "{data}", n: "{data.n}"}
      timestamp: event_time
      batch: {max_messages: 200, max_bytes: 4MiB, max_delay: 20ms}
`, band, p.Late, p.Table)
		switch p.Output {
		case deadletter.KindTopic:
			fmt.Fprintf(&b, "    dead_letter: {topic: %s, subscription: %s}\n", p.DLTopic, p.DLSub)
		case deadletter.KindTable:
			fmt.Fprintf(&b, "    dead_letter: {bigtable_table: %s}\n", p.DLTable)
		case deadletter.KindFile:
			fmt.Fprintf(&b, "    dead_letter: {file: %q}\n", p.DLFile)
		}
	}
	return b.String()
}

// replicaOffsets are the clock offsets of the replicas (PUBSINK_CLOCK_OFFSET
// of every process in each): spread evenly from +skew for the first to
// -skew for the last (+2s, 0, -2s for three replicas and a skew of 2s); a
// single process gets +skew, ahead of the emulators and the publisher.
// Nil when skew is 0.
func replicaOffsets(n int, skew time.Duration) []time.Duration {
	if skew == 0 {
		return nil
	}
	n = max(n, 1)
	out := make([]time.Duration, n)
	for i := range out {
		if n == 1 {
			out[i] = skew
			continue
		}
		out[i] = skew - 2*skew*time.Duration(i)/time.Duration(n-1)
	}
	return out
}

// offsetsText describes the offsets, for the report.
func offsetsText(offs []time.Duration) string {
	if len(offs) == 0 {
		return ""
	}
	parts := make([]string, len(offs))
	for i, o := range offs {
		parts[i] = signed(o)
		if len(offs) > 1 {
			parts[i] = fmt.Sprintf("replica %d %s", i+1, parts[i])
		}
	}
	return "clock offsets: " + strings.Join(parts, ", ")
}

// signed writes a duration with its sign, as PUBSINK_CLOCK_OFFSET takes it:
// "+2s", "-2s", "0s".
func signed(d time.Duration) string {
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}
