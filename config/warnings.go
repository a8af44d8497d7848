package config

import (
	"fmt"
	"maps"
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
//   - A plain mapping that writes a table a change mapping writes (of any
//     pipeline of the file, in the same instance), where the change
//     mapping can delete or replace what the plain one writes (the row,
//     the family, or the columns): the plain mapping's writes do not check
//     the tombstones, so a row the change mapping deleted can come back
//     with the plain mapping's cells. Not an error: the two may write
//     different rows, which the file does not tell.
func Warnings(cfg *Config, data []byte) Problems {
	var ws Problems
	changes := changeMappings(cfg)
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
				if c := clobbering(changes, tableOf(cfg, p.Sink, m), m); c != "" {
					ws = append(ws, Problem{Path: mp("table"), Message: fmt.Sprintf("a plain mapping writes table %s, where %s deletes or replaces what it writes: "+
						"the plain mapping's writes do not check the tombstones, so what the change mapping deleted comes back with the plain mapping's cells. "+
						"Make this mapping a change mapping (write_mode: replace_if_newer), write another table or column family, or make sure the two never write one row (see Changes)",
						m.Table, c)})
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

// table names a Bigtable table of the file: its instance and its name.
type table struct{ instance, name string }

func tableOf(cfg *Config, k Sink, m Mapping) table {
	inst := k.Instance
	if inst == "" {
		inst = cfg.State.Instance
	}
	return table{inst, m.Table}
}

// changeMapping is a change mapping of the file and where it is.
type changeMapping struct {
	m    Mapping
	path string
}

// changeMappings returns the change mappings of cfg's bigtable sinks by
// the table they write.
func changeMappings(cfg *Config) map[table][]changeMapping {
	out := map[table][]changeMapping{}
	for i, p := range cfg.Pipelines {
		if p.Sink.Type != SinkBigtable {
			continue
		}
		for j, m := range p.Sink.AllMappings() {
			if !m.IsChange() {
				continue
			}
			path := fmt.Sprintf("the change mapping of pipelines[%d].sink", i)
			if len(p.Sink.Mappings) > 0 {
				path = fmt.Sprintf("the change mapping pipelines[%d].sink.mappings[%d]", i, j)
			}
			t := tableOf(cfg, p.Sink, m)
			out[t] = append(out[t], changeMapping{m, path})
		}
	}
	return out
}

// clobbering names the first change mapping of t that can delete or
// replace what plain mapping p writes there; "" if none (or p is a change
// mapping).
func clobbering(changes map[table][]changeMapping, t table, p Mapping) string {
	if p.IsChange() {
		return ""
	}
	for _, c := range changes[t] {
		if clobbers(c.m, p) {
			return c.path
		}
	}
	return ""
}

// clobbers reports whether change mapping c can delete or replace cells
// that plain mapping p writes in their table: a row delete (or an op
// expression, which may be one) reaches every family; delete_family,
// insert and replace_if_newer the mapping's family ("the row" of a write
// mode); delete_columns and a missing-value policy delete their columns.
func clobbers(c, p Mapping) bool {
	if c.Op == OpDelete || (c.Op != "" && !slices.Contains(operations, c.Op)) {
		return true
	}
	if c.ColumnFamily != p.ColumnFamily {
		return false
	}
	if c.Op == OpDeleteFamily || c.WriteMode == WriteInsert || c.WriteMode == WriteReplaceIfNewer {
		return true
	}
	var deleted []string
	if c.Op == OpDeleteColumns {
		deleted = c.DeleteColumns
		if len(deleted) == 0 {
			deleted = slices.Collect(maps.Keys(c.Columns))
		}
	}
	for col := range c.Columns {
		if c.MissingPolicy(col) == MissingDelete {
			deleted = append(deleted, col)
		}
	}
	for _, col := range deleted {
		if _, ok := p.Columns[col]; ok {
			return true
		}
	}
	return false
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
