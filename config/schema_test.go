package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.yaml.in/yaml/v3"

	"github.com/pubsink/pubsink/template"
)

const (
	schemaFile    = "../docs/pubsink.schema.json"
	referenceFile = "../docs/reference.md"
	regenerate    = "go test ./config -run TestSchemaFileIsUpToDate -update"
)

// TestSchemaFileIsUpToDate regenerates the JSON Schema from the code and the
// reference's key tables, and compares it with docs/pubsink.schema.json;
// -update rewrites the file.
func TestSchemaFileIsUpToDate(t *testing.T) {
	got, err := JSONSchema(referenceDescriptions(t))
	if err != nil {
		t.Fatalf("%v\n(each key of Config needs its row in docs/reference.md, and each row a key)", err)
	}
	if *update {
		if err := os.WriteFile(schemaFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatalf("%v; write it: %s", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(g) && i < len(w) && g[i] == w[i] {
			i++
		}
		line := func(ls []string) string {
			if i < len(ls) {
				return strings.TrimSpace(ls[i])
			}
			return "(end of file)"
		}
		t.Errorf("docs/pubsink.schema.json is not what the code and docs/reference.md make; from line %d:\n got %s\nfile %s\nRegenerate it: %s",
			i+1, line(g), line(w), regenerate)
	}
}

// TestSchemaDefaultsAreTheReferences checks each default of the schema,
// which comes from the code, against the reference's default column: the
// column starts with it. A column that is one literal alone is a default
// the schema must have, unless it names another key (sink.instance's
// state.instance).
func TestSchemaDefaultsAreTheReferences(t *testing.T) {
	keys := referenceKeys(t)
	defaults := schemaDefaults()
	for key, d := range defaults {
		row, ok := keys[key]
		if !ok {
			t.Errorf("%s: a default (%v), but no row in the reference", key, d)
			continue
		}
		if lit := "`" + fmt.Sprint(d) + "`"; !strings.HasPrefix(row.def, lit) {
			t.Errorf("%s: default %s in the code, but the reference says %q", key, lit, row.def)
		}
	}
	whole := regexp.MustCompile("^`([^`]+)`$")
	for key, row := range keys {
		m := whole.FindStringSubmatch(row.def)
		if m == nil || keys[m[1]] != (refRow{}) || keys["pipelines[i]."+m[1]] != (refRow{}) {
			continue
		}
		if _, ok := defaults[key]; !ok {
			t.Errorf("%s: the reference says the default is %s, but the schema has none", key, row.def)
		}
	}
}

// TestSchemaAcceptsTheShippedConfigurations validates every configuration
// that the repository ships (each of which Parse accepts, as other tests
// check) and the README's examples, its fragments of a pipeline merged into
// a minimal one; and checks the editor modeline of examples.yaml.
func TestSchemaAcceptsTheShippedConfigurations(t *testing.T) {
	sch := compileSchema(t)
	files := []string{"../examples.yaml", "../app/demo.yaml", "../deploy/gke/base/config.yaml", "../deploy/gke/overlays/example/config.yaml"}
	good, _ := filepath.Glob("testdata/*.good.yaml")
	for _, file := range append(files, good...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(file, func(t *testing.T) { expectValid(t, sch, mustYAML(t, data)) })
	}

	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```yaml\n(.*?)^```").FindAllSubmatch(readme, -1)
	if len(blocks) < 2 {
		t.Fatalf("README.md has %d yaml blocks; want the configuration and its fragments", len(blocks))
	}
	for i, b := range blocks {
		block := string(b[1])
		t.Run(fmt.Sprintf("README block %d", i+1), func(t *testing.T) {
			if strings.HasPrefix(block, "# yaml-language-server: $schema=docs/pubsink-test.schema.json\n") {
				return // a tests file of pubsink test: maptest's TestExamplesTestFileFollowsTheSchema checks it
			}
			checkModeline(t, block, "")
			if firstKeyIndent(block) == 0 { // a whole file
				expectValid(t, sch, mustYAML(t, []byte(block)))
				return
			}
			// A fragment of a pipeline: its keys replace those of a minimal one.
			doc := mustYAML(t, []byte("project: p\nstate: {instance: i}\npipelines:\n  - {name: readme, source: {subscription: readme-sub}, sink: {table: t}}\n"))
			fragment, ok := mustYAML(t, []byte(dedent(block))).(map[string]any)
			if !ok {
				t.Fatalf("not a mapping of pipeline keys:\n%s", block)
			}
			merge(doc.(map[string]any)["pipelines"].([]any)[0].(map[string]any), fragment)
			expectValid(t, sch, doc)
		})
	}

	examples, err := os.ReadFile("../examples.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !checkModeline(t, string(examples), "..") {
		t.Errorf("examples.yaml does not start with # yaml-language-server: $schema=docs/pubsink.schema.json")
	}
}

// beyondSchema lists each problem of testdata/*.bad.yaml, by fixture and
// path, that validate finds and the schema cannot, with the reason. A
// fixture whose every problem is here is beyond the schema as a whole.
var beyondSchema = map[fixtureKey]string{
	// The file is no YAML: the YAML parser (the editor's too) refuses it
	// before any schema applies.
	{"not_yaml", ""}:      notYAML,
	{"duplicate_key", ""}: notYAML,

	{"empty", "project"}:                            fromEnvironment,
	{"state", "state.instance"}:                     fromEnvironment,
	{"env", "project"}:                              fromEnvironment,
	{"env", "pipelines[0].sink.table"}:              fromEnvironment,
	{"bigtable_sink", "pipelines[0].sink.instance"}: fromEnvironment,
	{"bigtable_sink", "pipelines[2].sink.instance"}: fromEnvironment,

	{"names", "pipelines[1].name"}:                                 comparesValues,
	{"subscriptions", "pipelines[1].source.subscription"}:          comparesValues,
	{"subscriptions", "pipelines[2].source.tracking_subscription"}: comparesValues,
	{"subscriptions", "pipelines[3].source.tracking_subscription"}: comparesValues,
	{"dead_letter", "pipelines[2].dead_letter.subscription"}:       comparesValues,
	{"dead_letter", "pipelines[4].dead_letter.topic"}:              comparesValues,
	{"batch", "pipelines[0].sink.batch.max_messages"}:              comparesValues,
	{"batch", "pipelines[0].sink.batch.max_bytes"}:                 comparesValues,

	{"http_port", "http.addr"}:                      onThisMachine,
	{"ranges", "pipelines[0].dedupe.window"}:        magnitude,
	{"ranges", "pipelines[1].source.stall_timeout"}: magnitude,
	{"batch", "pipelines[1].sink.batch.max_bytes"}:  magnitude,

	{"changes", "pipelines[0].sink.op"}:                        expressions,
	{"changes", "pipelines[0].sink.on_missing_columns.Other"}:  comparesValues,
	{"changes", "pipelines[0].sink.on_missing_columns.amount"}: comparesValues,
	{"changes", "pipelines[0].sink.tombstone_retention"}:       magnitude,
	{"changes", "pipelines[2].sink.tombstone_family"}:          comparesValues,
	{"changes", "pipelines[3].sink.tombstone_family"}:          comparesValues,

	{"templates", "pipelines[0].sink.row_key"}:                     templates,
	{"templates", "pipelines[0].sink.columns.amount"}:              templates,
	{"templates", "pipelines[0].sink.columns.ok"}:                  templates,
	{"source_templates", "pipelines[2].source.id_template"}:        templates,
	{"source_templates", "pipelines[2].source.timestamp_template"}: templates,
	{"mappings", "pipelines[2].sink.mappings[1].columns.Amount"}:   templates,
	{"mappings", "pipelines[2].sink.mappings[2].timestamp"}:        templates,
	{"mappings", "pipelines[3].sink.row_key"}:                      templates,
	{"mappings", "pipelines[4].sink.mappings[0].row_key"}:          templates,
	{"expressions", "pipelines[0].source.id_template"}:             templates,
	{"expressions", "pipelines[0].source.timestamp_template"}:      templates,
	{"expressions", "pipelines[0].sink.mappings[0].row_key"}:       templates,
	{"expressions", "pipelines[0].sink.mappings[1].row_key"}:       templates,
	{"expressions", "pipelines[0].sink.mappings[1].timestamp"}:     templates,
	{"expressions", "pipelines[0].sink.mappings[2].columns.v"}:     templates,
}

const (
	notYAML         = "not YAML: refused by the YAML parser, before any schema"
	fromEnvironment = "needs the environment: ${VAR} values and PUBSINK_* overrides (PUBSINK_PROJECT, PUBSINK_STATE_INSTANCE, which sink.instance follows) are known only where pubsink runs"
	comparesValues  = "compares two values (unique names and subscriptions, a dead-letter topic against the source's, a batch against flow control, a policy's qualifier against the columns, the tombstone family against the mappings' families): JSON Schema compares a value with constants only"
	onThisMachine   = "needs the machine: a port's service name (localhost:http) is looked up in /etc/services where pubsink runs"
	magnitude       = "the magnitude of a duration or size written with a unit (1m, 1s, 90MiB, 1h): a pattern checks its syntax and sign, not its size"
	expressions     = "the expression language: an op that is no operation is an expression, and only a CEL parser knows that a bare word near an operation is none"
	templates       = "the template language (unknown or unclosed placeholders, empty names, a row key under each that does not read item): the schema checks only that a template has a placeholder"
)

type fixtureKey struct{ fixture, path string }

// TestSchemaRefusesBadConfigsWhereValidateDoes validates each
// testdata/NAME.bad.yaml with the schema and compares the keys it refuses
// with those of the problems Load reports (NAME.bad.expected): each problem
// is refused at its key (or a missing key at or above it), or listed in
// beyondSchema; the schema refuses no other key; and nothing listed there is
// caught after all.
func TestSchemaRefusesBadConfigsWhereValidateDoes(t *testing.T) {
	sch := compileSchema(t)
	for key := range beyondSchema {
		if _, err := os.Stat("testdata/" + key.fixture + ".bad.yaml"); err != nil {
			t.Errorf("beyondSchema lists %s of %s: %v", key.path, key.fixture, err)
		}
	}
	forEachBadConfig(t, func(t *testing.T, name, file string) {
		var problems Problems
		if _, err := Load(file); !errors.As(err, &problems) {
			t.Fatalf("Load error = %v, want Problems", err)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		refused := map[string]bool{}
		if err := yaml.Unmarshal(data, new(any)); err == nil {
			refused = schemaErrors(sch, mustYAML(t, data))
		} else if _, listed := beyondSchema[fixtureKey{name, ""}]; !listed {
			t.Fatalf("not YAML (%v), and not listed in beyondSchema", err)
		}

		reported := map[string]bool{}
		for _, p := range problems {
			reported[p.Path] = true
			caught := false
			for r, missing := range refused {
				caught = caught || covers(r, missing, p.Path)
			}
			switch why, listed := beyondSchema[fixtureKey{name, p.Path}]; {
			case caught && listed:
				t.Errorf("%s: the schema refuses it, but beyondSchema says %q: remove it there", p.Path, why)
			case !caught && !listed:
				t.Errorf("%s: the schema takes it, but validate says %q (refuse it in keyConstraints, or list it in beyondSchema with the reason)", p.Path, p.Message)
			}
		}
		for r, missing := range refused {
			if !slices.ContainsFunc(problems, func(p Problem) bool { return covers(r, missing, p.Path) }) {
				t.Errorf("%s: the schema refuses it, but validate has no problem there", r)
			}
		}
		for key := range beyondSchema {
			if key.fixture == name && !reported[key.path] {
				t.Errorf("beyondSchema lists %s, where validate has no problem", key.path)
			}
		}
	})
}

// covers reports whether the schema, refusing refused (missing: because
// the key is missing), refuses the key of a problem at path: the same key,
// or a missing key above it (a missing source, for source.subscription).
func covers(refused string, missing bool, path string) bool {
	return refused == path || missing && (strings.HasPrefix(path, refused+".") || strings.HasPrefix(path, refused+"["))
}

// TestSchemaPatternsReadAsGoDoes checks the schema's patterns against the
// Go code they stand for, on values at their edges.
func TestSchemaPatternsReadAsGoDoes(t *testing.T) {
	matches := func(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
	t.Run("durations are time.ParseDuration's", func(t *testing.T) {
		for _, s := range []string{"20s", "500ms", "1h30m", "0", "0s", "-0s", "+5s", "-1s", "-1m", "1.5h", ".5s", "1.s", "0.5s",
			"1us", "1µs", "1μs", "2m3s4ms", " 20s ", "5", "s", "", ".s", "10 minutes", "1e3s", "1.2.3s", "20S", "--1s", "-0.0s", "+0"} {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			for sg, ok := range map[sign]bool{anySign: err == nil, nonNegative: err == nil && d >= 0, positive: err == nil && d > 0} {
				alts := durationSchema(sg)["anyOf"].([]any)
				if got := matches(alts[0].(schema)["pattern"].(string), s); got != ok {
					t.Errorf("%q (sign %d): pattern says %v, Go %v", s, sg, got, ok)
				}
			}
		}
	})
	t.Run("sizes are ParseByteSize's", func(t *testing.T) {
		// A positive number of bytes under 1 truncates to 0: the pattern
		// takes it, validate refuses it.
		lenient := map[string]bool{"0.5B": true, "0.25": true}
		for _, s := range []string{"64MiB", "4MB", "1.5GiB", "512 KiB", "4mb", "1kib", "0", "0B", "0.5B", "0.0MiB", "12", " 8 ", "64XB", "4K", "-4MiB",
			"+4MiB", "1.MiB", ".5MiB", "64MiB B", "", "MiB", "1.5", "0.25", "10TB"} {
			n, err := ParseByteSize(s)
			for positive, ok := range map[bool]bool{false: err == nil, true: err == nil && n > 0} {
				alts := sizeSchema(positive, 0)["anyOf"].([]any)
				if got := matches(alts[1].(schema)["pattern"].(string), s); got != ok && !(got && positive && lenient[s]) {
					t.Errorf("%q (positive %v): pattern says %v, Go %v", s, positive, got, ok)
				}
			}
		}
	})
	t.Run("booleans written as strings are checkValue's", func(t *testing.T) {
		for _, s := range []string{"true", "false", "True", "FALSE", " true ", "tRUE", "yes", "on", "1", "t", "", "truefalse", "true false"} {
			_, ok := checkValue(s, "b", reflect.TypeFor[bool](), &collector{})
			if got := matches(boolText, s); got != ok {
				t.Errorf("%q: pattern says %v, Go %v", s, got, ok)
			}
		}
	})
	t.Run("addresses are net.SplitHostPort's", func(t *testing.T) {
		for _, s := range []string{":8080", "0.0.0.0:8080", "localhost:http", "[::1]:80", "127.0.0.1:0", "8080", "::1", "[::1]", "a:b:c", "[a]b:1", "", ":", "[::1]:8:0"} {
			_, _, err := net.SplitHostPort(s)
			if got := matches(`^(?:`+hostPort+`)$`, s); got != (err == nil) {
				t.Errorf("%q: pattern says %v, Go %v", s, got, err == nil)
			}
		}
	})
	t.Run("${VAR} references are expandEnv's", func(t *testing.T) {
		set := func(string) (string, bool) { return "x", true }
		for _, s := range []string{"plain", "${X}", "${X:-d}", "a${X}b${Y:-}c", "$${X}", "$$${X}", "$x", "a$", "$$", "100$ and more", "${X:-a:-b}",
			"${X", "${}", "${1BAD}", "${X-Y}", "${X}${Y", "x${", "${X:-}}"} {
			_, err := expandEnv(s, set)
			if got := matches(envText, s); got != (err == nil) {
				t.Errorf("%q: pattern says %v, Go %v", s, got, err == nil)
			}
		}
	})
	t.Run("a placeholder is what makes a template not Constant", func(t *testing.T) {
		for _, s := range []string{"{message_id}", "a#{data.id}", "{{x}}", "row#{{1}}", "fixed", "", "{= 1 + 1}", "{{{data.id}", "{{{{x}}}}", "x}}{{y}}{attributes.a}", "{event_time:reverse}"} {
			tmpl, err := template.Compile(s)
			if err != nil {
				t.Fatalf("%q: %v (pick templates that compile)", s, err)
			}
			if got := matches(placeholder, s); got == tmpl.Constant() {
				t.Errorf("%q: pattern says placeholder %v, template.Constant %v", s, got, tmpl.Constant())
			}
		}
	})
}

// compileSchema compiles docs/pubsink.schema.json, checking it against the
// draft-07 meta-schema.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatalf("%v; write it: %s", err, regenerate)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("pubsink.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("pubsink.schema.json")
	if err != nil {
		t.Fatalf("docs/pubsink.schema.json: %v", err)
	}
	return sch
}

func mustYAML(t *testing.T, data []byte) any {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc == nil {
		return map[string]any{} // an empty file, as readTree reads it
	}
	return Normalize(doc)
}

func expectValid(t *testing.T, sch *jsonschema.Schema, doc any) {
	t.Helper()
	if err := sch.Validate(doc); err != nil {
		t.Errorf("the schema refuses it: %v", err)
	}
}

// schemaErrors returns the paths, as Problems name them, where sch refuses
// doc; true for a key that is missing.
func schemaErrors(sch *jsonschema.Schema, doc any) map[string]bool {
	out := map[string]bool{}
	mark := func(path string, missing bool) { out[path] = out[path] || missing }
	var ve *jsonschema.ValidationError
	if err := sch.Validate(doc); !errors.As(err, &ve) {
		return out
	}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		at := problemPath(doc, e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				mark(joinPath(at, m), true)
			}
			return
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				mark(joinPath(at, p), false)
			}
			return
		}
		if len(e.Causes) == 0 {
			mark(at, false)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out
}

// problemPath writes an instance location as a Problem's path:
// pipelines[0].sink.columns.data.
func problemPath(doc any, loc []string) string {
	var b strings.Builder
	cur := doc
	for _, seg := range loc {
		switch v := cur.(type) {
		case []any:
			i, _ := strconv.Atoi(seg)
			fmt.Fprintf(&b, "[%d]", i)
			cur = v[i]
		case map[string]any:
			if seg == "" { // the empty column qualifier: a problem of the columns
				cur = v[seg]
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(seg)
			cur = v[seg]
		}
	}
	return b.String()
}

// refRow is one row of a key table of docs/reference.md.
type refRow struct{ def, meaning string }

// referenceKeys reads the key tables of docs/reference.md ("Top-level
// keys", and "Pipeline keys", whose keys are relative to pipelines[i]).
func referenceKeys(t *testing.T) map[string]refRow {
	t.Helper()
	data, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{"### Top-level keys": "", "### Pipeline keys": "pipelines[i]."}
	rows := map[string]refRow{}
	prefix, in := "", false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") {
			prefix, in = sections[line]
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := splitRow(line)
		if len(cells) != 4 {
			t.Fatalf("reference: a key row of %d cells, want key, type, default, meaning: %s", len(cells), line)
		}
		key := prefix + strings.Trim(cells[0], "`")
		if _, dup := rows[key]; dup {
			t.Fatalf("reference: %s has two rows", key)
		}
		rows[key] = refRow{def: cells[2], meaning: cells[3]}
	}
	if len(rows) == 0 {
		t.Fatal("reference: no key tables found")
	}
	return rows
}

// referenceDescriptions are the meanings of referenceKeys as plain text:
// links become their text, \| a |.
func referenceDescriptions(t *testing.T) map[string]string {
	link := regexp.MustCompile(`\[([^\]]+)\]\([^)]*\)`)
	out := map[string]string{}
	for key, row := range referenceKeys(t) {
		out[key] = link.ReplaceAllString(strings.ReplaceAll(row.meaning, `\|`, "|"), "$1")
	}
	return out
}

// splitRow splits a Markdown table row into its trimmed cells, at the |
// that are not escaped.
func splitRow(line string) []string {
	var cells []string
	var cur strings.Builder
	line = strings.TrimSpace(line)
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var modelineRE = regexp.MustCompile(`(?m)\A((?:#.*\n|\s*\n)*?)# yaml-language-server: \$schema=(\S+)`)

// checkModeline reports whether text opens with a yaml-language-server
// modeline; the schema it names must be pubsink.schema.json, and, with dir
// (the file's folder), that file.
func checkModeline(t *testing.T, text, dir string) bool {
	t.Helper()
	m := modelineRE.FindStringSubmatch(text)
	if m == nil {
		return false
	}
	if filepath.Base(m[2]) != filepath.Base(schemaFile) {
		t.Errorf("modeline names %s, not %s", m[2], filepath.Base(schemaFile))
	}
	if dir != "" && filepath.Clean(filepath.Join(dir, m[2])) != filepath.Clean(schemaFile) {
		t.Errorf("modeline names %s, which is not docs/pubsink.schema.json from here", m[2])
	}
	return true
}

// firstKeyIndent is the indent of the first line that is neither blank nor
// a comment.
func firstKeyIndent(text string) int {
	for _, l := range strings.Split(text, "\n") {
		if s := strings.TrimLeft(l, " "); s != "" && !strings.HasPrefix(s, "#") {
			return len(l) - len(s)
		}
	}
	return 0
}

// dedent removes the indent of the first key from every line.
func dedent(text string) string {
	n := firstKeyIndent(text)
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if len(l) >= n && strings.TrimSpace(l[:n]) == "" {
			lines[i] = l[n:]
		}
	}
	return strings.Join(lines, "\n")
}

// merge sets the keys of src in dst, merging mappings key by key.
func merge(dst, src map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(src)) {
		s, sm := src[k].(map[string]any)
		d, dm := dst[k].(map[string]any)
		if sm && dm {
			merge(d, s)
			continue
		}
		dst[k] = src[k]
	}
}
