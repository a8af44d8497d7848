package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/pubsink/pubsink/template"
)

// Warnings lists what in cfg works but is probably a mistake, in file
// order with their lines in data, the YAML cfg was parsed from (nil: no
// lines): `validate` prints them and exits 0, `run` logs them at start.
// Today there is one kind: a row key (the sink's, or a mapping's) that
// starts with a value that only grows.
//
// Bigtable keeps rows sorted by key and splits a table into tablets by key
// range. A row key that starts with a timestamp, the message ID (Pub/Sub's
// IDs increase) or a sequence sends every write to the tablet at the end of
// the range: one server takes the whole write load, however large the
// cluster (the classic hotspot).
func Warnings(cfg *Config, data []byte) Problems {
	var ws Problems
	for i, p := range cfg.Pipelines {
		if p.Sink.Type != SinkBigtable {
			continue
		}
		for j, m := range p.Sink.AllMappings() {
			path := fmt.Sprintf("pipelines[%d].sink.row_key", i)
			if len(p.Sink.Mappings) > 0 {
				path = fmt.Sprintf("pipelines[%d].sink.mappings[%d].row_key", i, j)
			}
			t, err := template.Compile(m.RowKey)
			if err != nil {
				continue // validation reported it
			}
			_, ph, ok := t.Leading()
			if !ok {
				continue
			}
			if why := growing(ph, p.Source); why != "" {
				ws = append(ws, Problem{Path: path, Message: fmt.Sprintf(
					"%q starts with %s, %s: every write goes to the tablet at the end of the table (a Bigtable hotspot). "+
						"Put a field that spreads the keys first ({attributes.customer_id}#%s), "+
						"reverse the time ({event_time:reverse}), or prefix a hash of the key",
					m.RowKey, ph, why, ph)})
			}
		}
	}
	ws.locate(keyLines(data))
	return ws
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
