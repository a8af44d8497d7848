package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/pubsink/pubsink/template"
)

// Warnings lists what in cfg works but is probably a mistake, in file
// order with their lines in data, the YAML cfg was parsed from (nil: no
// lines): `validate` prints them and exits 0, `run` logs them at start.
// There are three kinds:
//
//   - A row key (the sink's, or a mapping's) of a bigtable sink that starts
//     with a value that only grows. Bigtable keeps rows sorted by key and
//     splits a table into tablets by key range. A row key that starts with
//     a timestamp, the message ID (Pub/Sub's IDs increase) or a sequence
//     sends every write to the tablet at the end of the range: one server
//     takes the whole write load, however large the cluster (the classic
//     hotspot).
//   - A mapping's delete_columns beside an op that is an operation other
//     than delete_columns: nothing reads them.
//   - An insert mapping whose op is an expression (it may delete) on a
//     subscription without ordering: insert converges in any delivery
//     order only without deletes between a row's inserts.
//   - A topic that keeps messages longer than the tombstones of a bigtable
//     sink with a change mapping live: a reprocess from further back can
//     replay a change older than a delete whose tombstone is gone, and
//     bring back what the delete deleted.
func Warnings(cfg *Config, data []byte) Problems {
	var ws Problems
	for i, p := range cfg.Pipelines {
		at := func(key string) string { return fmt.Sprintf("pipelines[%d].%s", i, key) }
		for j, m := range p.Sink.AllMappings() {
			mp := func(key string) string { return at("sink." + key) }
			if len(p.Sink.Mappings) > 0 {
				mp = func(key string) string { return at(fmt.Sprintf("sink.mappings[%d].%s", j, key)) }
			}
			if p.Sink.Type == SinkBigtable {
				if w := hotspot(m, p.Source); w != "" {
					ws = append(ws, Problem{Path: mp("row_key"), Message: w})
				}
			}
			if m.WriteMode == WriteInsert && m.Op != "" && !slices.Contains(operations, m.Op) && !p.Source.Ordering {
				ws = append(ws, Problem{Path: mp("op"), Message: "write_mode insert with an op that may delete: an insert dropped because an earlier one " +
					"was in its row stays dropped, so a delete between the two that arrives after both leaves the row empty. " +
					"Deliver each row's changes in order (source.ordering), or use replace_if_newer (see Changes)"})
			}
			if len(m.DeleteColumns) > 0 && m.Op != OpDeleteColumns {
				switch {
				case m.Op == "":
					ws = append(ws, Problem{Path: mp("delete_columns"), Message: "op is not set: delete_columns is never used"})
				case slices.Contains(operations, m.Op):
					ws = append(ws, Problem{Path: mp("delete_columns"), Message: fmt.Sprintf("op is %s: delete_columns is never used", m.Op)})
				}
			}
		}
		if r, t := p.Source.TopicMessageRetention, p.Sink.TombstoneRetention; p.Sink.Type == SinkBigtable && r > t && len(p.Sink.ChangeTables()) > 0 {
			ws = append(ws, Problem{Path: at("source.topic_message_retention"), Message: fmt.Sprintf(
				"%s is longer than sink.tombstone_retention (%s): a reprocess from further back could replay a change older than a delete whose tombstone is gone, "+
					"and bring back what the delete deleted. Make sink.tombstone_retention at least %s",
				formatDuration(r), formatDuration(t), formatDuration(r))})
		}
	}
	ws.locate(keyLines(data))
	return ws
}

// hotspot is the warning about the row key of m, when it starts with a
// value that only grows; "" otherwise.
func hotspot(m Mapping, src Source) string {
	t, err := template.Compile(m.RowKey)
	if err != nil {
		return "" // validation reported it
	}
	_, ph, ok := t.Leading()
	if !ok {
		return ""
	}
	why := growing(ph, src)
	if why == "" {
		return ""
	}
	return fmt.Sprintf("%q starts with %s, %s: every write goes to the tablet at the end of the table (a Bigtable hotspot). "+
		"Put a field that spreads the keys first ({attributes.customer_id}#%s), "+
		"reverse the time ({event_time:reverse}), or prefix a hash of the key",
		m.RowKey, ph, why, ph)
}

// timeOrSequence matches the names of attributes and fields that usually
// hold a timestamp or a sequence number.
var timeOrSequence = regexp.MustCompile(`(?i)^(ts|time|timestamp|date|datetime|created|updated|seq|sequence|offset|counter)$|(_|^)(ts|time|timestamp|at|date|seq|sequence|offset)$`)

// growing says why the placeholder ph, leading a row key, takes values that
// only grow, or "" when it probably does not.
func growing(ph string, src Source) string {
	if strings.HasPrefix(ph, "{=") {
		return "" // an expression: what it computes is not known here
	}
	name := strings.TrimSuffix(strings.TrimPrefix(ph, "{"), "}")
	switch {
	case name == "message_id":
		return "the message ID, which Pub/Sub increases"
	case name == "publish_time", name == "event_time":
		return "a time"
	}
	field := name
	for _, prefix := range []string{"attributes.", "data.", "item."} {
		field = strings.TrimPrefix(field, prefix)
	}
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		field = field[i+1:]
	}
	switch {
	case src.TimestampAttribute != "" && name == "attributes."+src.TimestampAttribute:
		return "the event time (source.timestamp_attribute)"
	case ph == src.TimestampTemplate:
		return "the event time (source.timestamp_template)"
	case field != name && timeOrSequence.MatchString(field):
		return "a field whose name says it is a time or a sequence"
	}
	return ""
}
