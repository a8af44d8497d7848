package maptest

// Reading a tests file: the types it decodes into (their yaml tags are the
// file's keys; docs/pubsink-test.schema.json restates them, and a test
// keeps the two in sync), the strict decoder that reports every problem
// with its key path and line, and the checks of each case.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/sinks"
)

// Defaults of a case's message, fixed so that a case's rows do not change
// from run to run (a row key or a cell timestamp may name them).
const (
	DefaultMessageID   = "test-message"
	DefaultPublishTime = "2026-01-01T00:00:00Z"
)

// File is a tests file, parsed and checked.
type File struct {
	Cases []Case `yaml:"cases"`
}

// Case is one mapping test: a message given to one pipeline, and the
// outcome expected of it.
type Case struct {
	Name     string  `yaml:"name"`
	Pipeline string  `yaml:"pipeline"`
	Message  Message `yaml:"message"`
	Expect   Expect  `yaml:"expect"`

	path string // cases[i], for problems found when the pipeline is compiled
}

// Message is a case's message. Exactly one of Data, JSON and DataBase64
// gives the payload (none: an empty payload); Payload holds it decoded.
type Message struct {
	Data        *string           `yaml:"data"`
	JSON        any               `yaml:"json"`
	DataBase64  *string           `yaml:"data_base64"`
	Attributes  map[string]string `yaml:"attributes"`
	PublishTime string            `yaml:"publish_time"`
	MessageID   string            `yaml:"message_id"`
	Schema      *Revision         `yaml:"schema"`

	Payload   []byte    `yaml:"-"`
	published time.Time // PublishTime parsed
}

// Revision is the topic schema revision a message of a payload.schema:
// topic pipeline was published with, given by a file: the case then sets
// the googclient_schema* attributes Pub/Sub would, and the mapping fetches
// the revision from the tests file instead of the Schema API.
type Revision struct {
	File     string `yaml:"file"`     // .avsc (Avro) or .proto, relative to the tests file
	Revision string `yaml:"revision"` // the revision ID
	Name     string `yaml:"name"`     // projects/P/schemas/S; default projects/test/schemas/<file's base name>
	Encoding string `yaml:"encoding"` // json (default) or binary

	kind       string // avro or protobuf, from File's extension
	definition string
}

// Expect is what a case expects: exactly one of Rows, Filtered and
// DeadLetter, and optionally the event time and the dedupe key.
type Expect struct {
	Rows       []Row       `yaml:"rows"`
	NoRows     bool        `yaml:"no_rows"`
	Filtered   bool        `yaml:"filtered"`
	DeadLetter *DeadLetter `yaml:"dead_letter"`
	EventTime  string      `yaml:"event_time"`
	DedupeKey  *string     `yaml:"dedupe_key"`

	eventTime time.Time
}

// Row is one expected row.
type Row struct {
	Table     string            `yaml:"table"`  // default: the sink's table
	Family    string            `yaml:"family"` // compared when given
	Key       *string           `yaml:"key"`
	Columns   map[string]string `yaml:"columns"`
	Only      *bool             `yaml:"only"`      // default true: these columns and no others
	Timestamp string            `yaml:"timestamp"` // compared when given
	Op        string            `yaml:"op"`        // default set
	Delete    []string          `yaml:"delete"`    // the columns the row deletes
	Mode      string            `yaml:"mode"`      // compared when given

	timestamp time.Time
	op        sinks.Op
	mode      sinks.Mode
}

// DeadLetter is an expected dead-letter: its reason, and optionally a
// substring of its pubsink_error.
type DeadLetter struct {
	Reason string  `yaml:"reason"`
	Error  *string `yaml:"error"`
}

// Parse reads the tests file data; dir is its directory, against which
// schema files are resolved. Its error is config.Problems, every problem
// with its key path and line, when the file is not a valid tests file.
// Parse does not know the configuration: Run checks the pipelines named.
func Parse(data []byte, dir string) (*File, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, config.Problems{{Message: "not YAML: " + err.Error()}}
	}
	d := &decoder{}
	f := &File{}
	if len(doc.Content) == 0 {
		d.add("", 0, "the file is empty: write cases: [...]")
		return nil, d.problems
	}
	d.decode(doc.Content[0], "", reflect.ValueOf(f).Elem())
	if len(d.problems) > 0 {
		return nil, d.problems
	}
	lines := map[string]int{}
	keyLines(doc.Content[0], "", lines)
	d.check(f, dir, lines)
	if len(d.problems) > 0 {
		return nil, d.problems
	}
	return f, nil
}

// decoder decodes YAML nodes into the file's types, strictly, collecting
// problems.
type decoder struct {
	problems config.Problems
}

func (d *decoder) add(path string, line int, format string, args ...any) {
	d.problems = append(d.problems, config.Problem{Path: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

// decode sets v from n, the value at path.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if v.Kind() == reflect.Pointer {
		if isNull(n) {
			return
		}
		p := reflect.New(v.Type().Elem())
		d.decode(n, path, p.Elem())
		v.Set(p)
		return
	}
	switch v.Kind() {
	case reflect.Interface: // json: any YAML value, made JSON's
		var x any
		if err := n.Decode(&x); err != nil {
			d.add(path, n.Line, "%v", err)
			return
		}
		if x == nil { // json: null is the payload null
			x = json.RawMessage("null")
		}
		v.Set(reflect.ValueOf(config.Normalize(x)))
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.add(path, n.Line, "must be a mapping of keys, not %s", describe(n))
			return
		}
		fields := map[string]int{}
		var names []string
		for i := 0; i < v.NumField(); i++ {
			if tag := yamlKey(v.Type().Field(i)); tag != "" {
				fields[tag] = i
				names = append(names, tag)
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			kp := joinPath(path, k.Value)
			fi, ok := fields[k.Value]
			if !ok {
				msg := "unknown key"
				if s := schema.Closest(k.Value, names); s != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", s)
				}
				d.add(kp, k.Line, "%s; the keys here are: %s", msg, strings.Join(names, ", "))
				continue
			}
			d.decode(val, kp, v.Field(fi))
		}
	case reflect.Slice:
		if isNull(n) {
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.add(path, n.Line, "must be a list, not %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, e := range n.Content {
			d.decode(e, fmt.Sprintf("%s[%d]", path, i), s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		if isNull(n) {
			return
		}
		if n.Kind != yaml.MappingNode {
			d.add(path, n.Line, "must be a mapping of names to text, not %s", describe(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			e := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, joinPath(path, k.Value), e)
			m.SetMapIndex(reflect.ValueOf(k.Value), e)
		}
		v.Set(m)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || isNull(n) {
			d.add(path, n.Line, "must be text, not %s", describe(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
			d.add(path, n.Line, "must be true or false, not %s", describe(n))
			return
		}
		v.SetBool(b)
	}
}

// yamlKey is the key of a struct field, "" for a field not in the file.
func yamlKey(f reflect.StructField) string {
	tag := f.Tag.Get("yaml")
	if tag == "" || tag == "-" {
		return ""
	}
	return tag
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// describe names the kind of n for a problem.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if isNull(n) {
		return "nothing"
	}
	return fmt.Sprintf("%q", n.Value)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// keyLines maps the key path of every key and list element under n to its
// line.
func keyLines(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			kp := joinPath(path, n.Content[i].Value)
			lines[kp] = n.Content[i].Line
			keyLines(n.Content[i+1], kp, lines)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			ep := fmt.Sprintf("%s[%d]", path, i)
			lines[ep] = e.Line
			keyLines(e, ep, lines)
		}
	}
}

// line is the line of path, or of the nearest key above it the file has.
func line(lines map[string]int, path string) int {
	for p := path; p != ""; {
		if n, ok := lines[p]; ok {
			return n
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// check checks what the types cannot say: every case has a name, a
// pipeline, one payload, one expectation, and values that parse.
func (d *decoder) check(f *File, dir string, lines map[string]int) {
	at := func(path, format string, args ...any) { d.add(path, line(lines, path), format, args...) }
	if len(f.Cases) == 0 {
		at("cases", "no case: write at least one")
	}
	names := map[string]string{}
	for i := range f.Cases {
		c := &f.Cases[i]
		c.path = fmt.Sprintf("cases[%d]", i)
		p := c.path
		switch first, dup := names[c.Name]; {
		case c.Name == "":
			at(p+".name", "a case needs a name")
		case dup:
			at(p+".name", "%q names %s too: each case needs a name of its own", c.Name, first)
		default:
			names[c.Name] = p
		}
		if c.Pipeline == "" {
			at(p+".pipeline", "a case needs the pipeline its message goes to")
		}
		d.checkMessage(&c.Message, p+".message", dir, at)
		d.checkExpect(&c.Expect, p+".expect", at)
	}
}

func (d *decoder) checkMessage(m *Message, p, dir string, at func(path, format string, args ...any)) {
	given := 0
	for _, set := range []bool{m.Data != nil, m.JSON != nil, m.DataBase64 != nil} {
		if set {
			given++
		}
	}
	if given > 1 {
		at(p, "give the payload once: data, json or data_base64")
	}
	switch {
	case m.Data != nil:
		m.Payload = []byte(*m.Data)
	case m.JSON != nil:
		b, err := json.Marshal(m.JSON)
		if err != nil {
			at(p+".json", "cannot be written as JSON: %v", err)
		}
		m.Payload = b
	case m.DataBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(*m.DataBase64))
		if err != nil {
			at(p+".data_base64", "not base64 (standard alphabet, with padding): %v", err)
		}
		m.Payload = b
	}
	if m.MessageID == "" {
		m.MessageID = DefaultMessageID
	}
	if m.PublishTime == "" {
		m.PublishTime = DefaultPublishTime
	}
	m.published = parseTime(p+".publish_time", m.PublishTime, at)
	for k := range m.Attributes {
		if strings.HasPrefix(k, "googclient_") && m.Schema != nil {
			at(p+".attributes."+k, "set by schema: leave it out")
		}
	}
	if r := m.Schema; r != nil {
		sp := p + ".schema"
		switch strings.ToLower(filepath.Ext(r.File)) {
		case ".avsc":
			r.kind = "avro"
		case ".proto":
			r.kind = "protobuf"
		case "":
			if r.File == "" {
				at(sp+".file", "the schema's file is needed (.avsc or .proto)")
			} else {
				at(sp+".file", "%s: the file must end in .avsc (Avro) or .proto (Protocol Buffers)", r.File)
			}
		default:
			at(sp+".file", "%s: the file must end in .avsc (Avro) or .proto (Protocol Buffers)", r.File)
		}
		if r.kind != "" {
			path := r.File
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				at(sp+".file", "%v (a relative path is relative to the tests file's directory)", err)
			}
			r.definition = string(b)
		}
		if r.Revision == "" {
			at(sp+".revision", "the revision ID is needed (any text: the case's message names it)")
		}
		if r.Name == "" {
			r.Name = "projects/test/schemas/" + strings.TrimSuffix(filepath.Base(r.File), filepath.Ext(r.File))
		}
		switch r.Encoding {
		case "":
			r.Encoding = "json"
		case "json", "binary":
		default:
			at(sp+".encoding", "must be json or binary, not %q", r.Encoding)
		}
	}
}

func (d *decoder) checkExpect(e *Expect, p string, at func(path, format string, args ...any)) {
	var kinds []string
	if e.Rows != nil {
		kinds = append(kinds, "rows")
	}
	if e.NoRows {
		kinds = append(kinds, "no_rows")
	}
	if e.Filtered {
		kinds = append(kinds, "filtered")
	}
	if e.DeadLetter != nil {
		kinds = append(kinds, "dead_letter")
	}
	switch {
	case len(kinds) == 0:
		at(p, "no expectation: give one of rows, no_rows: true, filtered: true or dead_letter")
	case len(kinds) > 1:
		at(p, "%s: give one outcome only", strings.Join(kinds, " and "))
	}
	if e.Rows != nil && len(e.Rows) == 0 {
		at(p+".rows", "an empty list: for a message that makes no row, write no_rows: true")
	}
	if e.EventTime != "" {
		e.eventTime = parseTime(p+".event_time", e.EventTime, at)
	}
	if dl := e.DeadLetter; dl != nil {
		if _, ok := deadletter.ParseReason(dl.Reason); !ok {
			at(p+".dead_letter.reason", "%q is not a dead-letter reason; the reasons are: %s", dl.Reason, reasonList())
		}
	}
	for i := range e.Rows {
		r := &e.Rows[i]
		rp := fmt.Sprintf("%s.rows[%d]", p, i)
		if r.Key == nil {
			at(rp+".key", "the row's key is needed")
		}
		if r.Timestamp != "" {
			r.timestamp = parseTime(rp+".timestamp", r.Timestamp, at)
		}
		op, ok := parseOp(r.Op)
		if !ok {
			at(rp+".op", "must be set, delete, delete_family or delete_columns, not %q", r.Op)
		}
		r.op = op
		if r.Mode != "" {
			m, ok := parseMode(r.Mode)
			if !ok {
				at(rp+".mode", "must be plain, upsert, insert or replace_if_newer, not %q", r.Mode)
			}
			r.mode = m
		}
		if op == sinks.OpDeleteColumns && len(r.Delete) == 0 {
			at(rp+".delete", "a delete_columns row deletes columns: name them")
		}
		if op != sinks.OpSet && op != sinks.OpDeleteColumns && len(r.Columns) > 0 {
			at(rp+".columns", "a %s row sets no column", r.Op)
		}
	}
}

// parseTime parses the RFC 3339 time s at path, reporting a problem when
// it is not one.
func parseTime(path, s string, at func(path, format string, args ...any)) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		at(path, "not an RFC 3339 time (2026-01-01T00:00:00Z): %q", s)
	}
	return t
}

func parseOp(s string) (sinks.Op, bool) {
	for _, op := range []sinks.Op{sinks.OpSet, sinks.OpDelete, sinks.OpDeleteFamily, sinks.OpDeleteColumns} {
		if s == op.String() || (s == "" && op == sinks.OpSet) {
			return op, true
		}
	}
	return 0, false
}

func parseMode(s string) (sinks.Mode, bool) {
	for _, m := range []sinks.Mode{sinks.ModePlain, sinks.ModeUpsert, sinks.ModeInsert, sinks.ModeReplaceIfNewer} {
		if s == m.String() {
			return m, true
		}
	}
	return 0, false
}

func reasonList() string {
	names := make([]string, len(deadletter.Reasons))
	for i, r := range deadletter.Reasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}
