package config

// Validation of a pipeline's sink: its mappings (row keys, columns, cell
// timestamps, each), change mappings and their tombstone family, with the
// "did you mean" of a misspelled column or operation.

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/pubsink/pubsink/template"
)

func (v *validator) sink(at func(string) string, p *Pipeline) {
	c, k := v.c, &p.Sink
	mappings := len(k.Mappings) > 0
	bigtable := oneOf(c, at("sink.type"), k.Type, sinkTypes...) && k.Type == SinkBigtable
	if bigtable {
		if k.Instance == "" {
			c.add(at("sink.instance"), "required for a bigtable sink (it defaults to state.instance)")
		}
		checkAppProfile(c, at("sink.app_profile"), k.AppProfile)
		// With mappings, sink.table and sink.column_family are only the
		// mappings' defaults: a mapping without one says so below.
		switch {
		case k.Table == "" && !mappings:
			c.add(at("sink.table"), "required for a bigtable sink")
		case k.Table != "" && !bigtableIDRE.MatchString(k.Table):
			c.add(at("sink.table"), "%q is not a Bigtable table ID (letters, digits, _ . -)", k.Table)
		}
		switch {
		case k.ColumnFamily == "" && !mappings:
			c.add(at("sink.column_family"), "required for a bigtable sink")
		case k.ColumnFamily != "" && !bigtableIDRE.MatchString(k.ColumnFamily):
			c.add(at("sink.column_family"), "%q is not a Bigtable column family name (letters, digits, _ . -)", k.ColumnFamily)
		}
	}
	// With mappings, the defaults of theirs: checked either way.
	oneOfNear(c, at("sink.write_mode"), k.WriteMode, nil, writeModes...)
	oneOfNear(c, at("sink.on_missing"), k.OnMissing, missingAliases, missingPolicies...)
	if !mappings {
		v.rowKey(at("sink.row_key"), k.RowKey, k.Each != "", p)
		columns(c, at("sink.columns"), k.Columns)
		changeKeys(c, func(key string) string { return at("sink." + key) }, "sink.columns", k.AllMappings()[0])
	}
	// With mappings, the default of their timestamps: checked either way.
	cellTimestamp(c, at("sink.timestamp"), k.Timestamp)
	for j, m := range k.Mappings {
		mp := func(key string) string { return at(fmt.Sprintf("sink.mappings[%d].%s", j, key)) }
		if bigtable {
			switch {
			case m.Table == "" && k.Table == "":
				c.add(mp("table"), "required for a bigtable sink (it defaults to sink.table, which is not set)")
			case m.Table != "" && !bigtableIDRE.MatchString(m.Table):
				c.add(mp("table"), "%q is not a Bigtable table ID (letters, digits, _ . -)", m.Table)
			}
			switch {
			case m.ColumnFamily == "" && k.ColumnFamily == "":
				c.add(mp("column_family"), "required for a bigtable sink (it defaults to sink.column_family, which is empty)")
			case m.ColumnFamily != "" && !bigtableIDRE.MatchString(m.ColumnFamily):
				c.add(mp("column_family"), "%q is not a Bigtable column family name (letters, digits, _ . -)", m.ColumnFamily)
			}
		}
		v.rowKey(mp("row_key"), m.RowKey, m.Each != "", p)
		columns(c, mp("columns"), m.Columns)
		if m.Timestamp != "" { // "": sink.timestamp, checked above
			cellTimestamp(c, mp("timestamp"), m.Timestamp)
		}
		if m.WriteMode != "" { // "": sink.write_mode, checked above
			oneOfNear(c, mp("write_mode"), m.WriteMode, nil, writeModes...)
		}
		if m.OnMissing != "" { // "": sink.on_missing, checked above
			oneOfNear(c, mp("on_missing"), m.OnMissing, missingAliases, missingPolicies...)
		}
		changeKeys(c, mp, "the mapping's columns", m)
	}
	if bigtable {
		v.tombstoneFamily(at, k)
	}
	if k.TombstoneRetention < minTombstoneRetention {
		c.add(at("sink.tombstone_retention"), "must be at least %s, not %s (a delete keeps older changes out only as long as its tombstone lives)",
			formatDuration(minTombstoneRetention), formatDuration(k.TombstoneRetention))
	}
	if k.MaxRows < 1 || k.MaxRows > maxRowsPerMessage {
		c.add(at("sink.max_rows"), "must be 1 to %d, not %d", maxRowsPerMessage, k.MaxRows)
	}

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

// missingAliases are other names for missing-value policies that "did you
// mean" should know.
var missingAliases = map[string]string{"dlq": MissingDeadLetter, "ignore": MissingSkip, "omit": MissingSkip, "blank": MissingEmpty}

// changeKeys checks the keys of change mapping m whose paths path gives
// (the sink's single mapping, or one of sink.mappings; cols names its
// columns): op, on_missing_columns and delete_columns. An op that is no
// operation is an expression, which mapping compiles: only a misspelled
// operation is reported here. An empty op and an empty delete_columns are
// checkFileKeys'.
func changeKeys(c *collector, path func(key string) string, cols string, m Mapping) {
	if m.Op != "" && !slices.Contains(operations, m.Op) {
		if near := nearOperation(m.Op); near != "" {
			c.add(path("op"), "%q is not one of %s (nor an expression: it reads no variable); did you mean %s?",
				m.Op, strings.Join(operations, ", "), near)
		}
	}
	for _, q := range slices.Sorted(maps.Keys(m.OnMissingColumns)) {
		if q == "" {
			c.add(path("on_missing_columns"), "a column qualifier must not be empty")
			continue
		}
		qp := path("on_missing_columns." + q)
		if _, ok := m.Columns[q]; !ok && len(m.Columns) > 0 { // none: columns says so
			names := slices.Sorted(maps.Keys(m.Columns))
			if near := nearColumn(q, names); near != "" {
				c.add(qp, "%q is not one of %s (%s); did you mean %s?", q, cols, strings.Join(names, ", "), near)
			} else {
				c.add(qp, "%q is not one of %s (%s)", q, cols, strings.Join(names, ", "))
			}
		}
		oneOfNear(c, qp, m.OnMissingColumns[q], missingAliases, missingPolicies...)
	}
	for i, q := range m.DeleteColumns {
		if q == "" {
			c.add(path(fmt.Sprintf("delete_columns[%d]", i)), "must not be empty: each is a column qualifier")
		}
	}
}

// nearColumn is the column of names that q is probably a misspelling of:
// the same but for case, or an edit distance of at most a third of its
// length; "" if none.
func nearColumn(q string, names []string) string {
	for _, n := range names {
		if strings.EqualFold(q, n) {
			return n
		}
	}
	for _, n := range names {
		if editDistance(q, n) <= min(3, max(1, len(n)/3)) {
			return n
		}
	}
	return ""
}

// nearOperation is the operation that op, which is none, is a misspelling
// of, or "" when it may be an expression. It names one only for a bare word
// (or words joined by -) that is close to an operation, as oneOfNear finds
// them, and that names none of the variables, types and literals of CEL:
// CEL reads such a word as an undeclared reference, so it is no expression
// that mapping could compile either, and refusing it here refuses nothing
// valid. Anything else is left to mapping, which compiles it.
func nearOperation(op string) string {
	word := strings.TrimSpace(op)
	if !bareWordRE.MatchString(word) {
		return ""
	}
	for _, part := range strings.Split(word, "-") {
		if celNames[part] {
			return ""
		}
	}
	return nearValue(strings.ToLower(word), operations)
}

// bareWordRE is an identifier, or identifiers joined by -.
var bareWordRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z_][A-Za-z0-9_]*)*$`)

// celNames are the identifiers that a CEL expression of a mapping may name
// alone: the variables that mapping declares (all of them, item and
// event_time included), CEL's types and its literals.
var celNames = map[string]bool{
	"attributes": true, "data": true, "message_id": true, "publish_time": true, "event_time": true, "item": true,
	"bool": true, "bytes": true, "double": true, "int": true, "uint": true, "string": true, "list": true, "map": true,
	"null_type": true, "type": true, "optional_type": true, "dyn": true,
	"true": true, "false": true, "null": true,
}

// tombstoneFamily checks the tombstone family of bigtable sink k: a column
// family name, and not the family of a mapping that writes a table that a
// change mapping writes (the tombstones would be among its cells, and the
// family's GC rule would delete them).
func (v *validator) tombstoneFamily(at func(string) string, k *Sink) {
	c, path := v.c, at("sink.tombstone_family")
	switch {
	case k.TombstoneFamily == "":
		c.add(path, "must not be empty (leave it out for %s)", defaultTombstoneFamily)
		return
	case !bigtableIDRE.MatchString(k.TombstoneFamily):
		c.add(path, "%q is not a Bigtable column family name (letters, digits, _ . -)", k.TombstoneFamily)
		return
	}
	tables := k.ChangeTables()
	for j, m := range k.AllMappings() {
		if m.ColumnFamily != k.TombstoneFamily || !slices.Contains(tables, m.Table) {
			continue
		}
		who := "the sink's mapping"
		if len(k.Mappings) > 0 {
			who = fmt.Sprintf("sink.mappings[%d]", j)
		}
		c.add(path, "%q is also the column family of %s in table %s, which a change mapping writes: the tombstones need a family of their own",
			k.TombstoneFamily, who, m.Table)
		return
	}
}

// rowKey checks a row key at path: a template that reads the message and,
// in a mapping with each, the element.
func (v *validator) rowKey(path, key string, each bool, p *Pipeline) {
	c := v.c
	if key == "" {
		c.add(path, "must not be empty")
		return
	}
	t, err := template.Compile(key)
	switch {
	case key == p.Source.IDTemplate:
		// The default row key with source.id_template (or a copy of it):
		// source.id_template's own check reports what is wrong with it.
	case err != nil:
		c.add(path, "%v", err)
		return
	case t.Constant():
		c.add(path, "%q has no placeholder: every message would overwrite one row", key)
		return
	}
	if err == nil && each && !readsItem(t) {
		c.add(path, "%q does not read item: every element would overwrite one row (use {item.FIELD}, or item in a {= } expression)", key)
	}
}

// keyTemplate checks a template at path that must read the message: why
// says what a constant one would do.
func keyTemplate(c *collector, path, text, why string) {
	if t, err := template.Compile(text); err != nil {
		c.add(path, "%v", err)
	} else if t.Constant() {
		c.add(path, "%q has no placeholder: %s", text, why)
	}
}

// columns checks the columns of a mapping at path: at least one, each with
// a qualifier and a template.
func columns(c *collector, path string, cols map[string]string) {
	if len(cols) == 0 {
		c.add(path, "must name at least one column")
	}
	names := make([]string, 0, len(cols))
	for name := range cols {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" {
			c.add(path, "a column qualifier must not be empty")
			continue
		}
		if _, err := template.Compile(cols[name]); err != nil {
			c.add(path+"."+name, "%v", err)
		}
	}
}

// cellTimestamp checks a cell timestamp at path: event_time, publish_time,
// or a template that reads the message.
func cellTimestamp(c *collector, path, value string) {
	if value == CellTimeEvent || value == CellTimePublish {
		return
	}
	if !strings.Contains(value, "{") { // a word: a misspelled source, most likely
		oneOf(c, path, value, cellTimes...)
		return
	}
	keyTemplate(c, path, value, "every cell would have one timestamp (write event_time, publish_time or a template that reads the message)")
}

// readsItem reports whether t reads the element of each: an {item…}
// placeholder, or item named in an expression.
func readsItem(t *template.Template) bool {
	if t.UsesItem() {
		return true
	}
	for _, e := range t.Expressions() {
		if mentionsItem(e) {
			return true
		}
	}
	return false
}

// mentionsItem reports whether the CEL expression src names the variable
// item: the identifier, outside string literals, not a field selected by a
// dot (x.item). A syntactic check only; run compiles the expression.
func mentionsItem(src string) bool {
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\'' || c == '"':
			quote := strings.Repeat(string(c), 3)
			if strings.HasPrefix(src[i:], quote) {
				end := strings.Index(src[i+3:], quote)
				if end < 0 {
					return false
				}
				i += 3 + end + 3
				continue
			}
			j := i + 1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			i = j + 1
		case isIdentByte(c):
			j := i
			for j < len(src) && isIdentByte(src[j]) {
				j++
			}
			if src[i:j] == "item" && !selected(src[:i]) {
				return true
			}
			i = j
		default:
			i++
		}
	}
	return false
}

// selected reports whether the identifier after before is selected by a
// dot (a field name, not a variable).
func selected(before string) bool {
	before = strings.TrimRight(before, " \t\r\n")
	return strings.HasSuffix(before, ".")
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
