package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// Load reads the YAML file at path and returns its configuration, or an
// error. A file that cannot be read is a plain error; a file with anything
// wrong in it returns Problems listing every problem found. See Parse. The
// file paths in it are relative to its directory (ResolvePaths).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, err
	}
	cfg.ResolvePaths(filepath.Dir(path))
	return cfg, nil
}

// ResolvePaths joins dir, the directory of the configuration file, to each
// relative file path of the configuration: a schema file's payload.schema
// and dead_letter.file. A file written beside the configuration is then
// found from any working directory, as a user who writes `schema:
// reading.avsc` next to it means. Parse, which has no file, leaves them as
// written (relative to the working directory).
func (c *Config) ResolvePaths(dir string) {
	resolve := func(path *string) {
		if *path != "" && !filepath.IsAbs(*path) {
			*path = filepath.Join(dir, *path)
		}
	}
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		if !p.Payload.TopicSchema() {
			resolve(&p.Payload.Schema)
		}
		resolve(&p.DeadLetter.File)
	}
}

// Parse reads a configuration from YAML. In order, it:
//
//  1. parses the YAML, rejecting keys that are not in Config and values of
//     the wrong type, each reported with its key path;
//  2. replaces ${VAR} and ${VAR:-default} in string values from the
//     environment ($${ is a literal ${); an unset VAR without a default is a
//     problem;
//  3. decodes with viper: top-level defaults (defaults.go), then the file,
//     then PUBSINK_* environment variables, then $PORT for http.addr when
//     PUBSINK_HTTP_ADDR is not set;
//  4. applies the per-pipeline defaults to every pipeline;
//  5. validates the result.
//
// Any problem makes Parse return nil and Problems, with every problem found.
// Parse reads the environment and nothing else; it is safe for concurrent
// use, and the returned Config is not shared.
func Parse(data []byte) (*Config, error) {
	cfg, err := parse(data)
	var ps Problems
	if errors.As(err, &ps) {
		ps.locate(keyLines(data))
		return nil, ps
	}
	return cfg, err
}

// keyLines maps the key path of every key and list element of the YAML
// document in data to its line; nil if data is no YAML.
func keyLines(data []byte) map[string]int {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	lines := map[string]int{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				kp := joinPath(path, n.Content[i].Value)
				if _, seen := lines[kp]; !seen { // a repeated key: its first line
					lines[kp] = n.Content[i].Line
				}
				walk(n.Content[i+1], kp)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				ep := fmt.Sprintf("%s[%d]", path, i)
				lines[ep] = e.Line
				walk(e, ep)
			}
		}
		// An alias's keys are on the anchor's lines: the nearest key above
		// (the alias's own) locates them. Not walking into it also keeps a
		// document of nested aliases ("billion laughs") linear.
	}
	walk(doc.Content[0], "")
	return lines
}

func parse(data []byte) (*Config, error) {
	c := &collector{}
	tree := readTree(data, c)
	if tree == nil {
		return nil, c.list
	}
	expandTree(tree, "", c)
	checkValue(tree, "", configType, c)
	skipEnv := checkEnv(c)

	v := newViper(skipEnv)
	if err := v.MergeConfigMap(deepCopy(tree).(map[string]any)); err != nil {
		c.add("", "%v", err)
		return nil, c.list
	}
	var cfg Config
	hook := viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
		byteSizeHook(),
	))
	if err := v.Unmarshal(&cfg, hook); err != nil {
		// checkValue and checkEnv leave nothing that should fail here.
		c.add("", "decoding: %v", err)
		return nil, c.list
	}
	portOverride(&cfg, c)

	elems, _ := tree["pipelines"].([]any)
	for i := range cfg.Pipelines {
		var elem map[string]any
		if i < len(elems) {
			elem, _ = elems[i].(map[string]any)
		}
		p := &cfg.Pipelines[i]
		// viper lowercases every map key, but Bigtable qualifiers are
		// case-sensitive: take the columns, and the policies of columns,
		// from the file as written.
		if cols, ok := lookup(elem, "sink.columns"); ok {
			p.Sink.Columns = stringMap(cols)
		}
		if cols, ok := lookup(elem, "sink.on_missing_columns"); ok {
			p.Sink.OnMissingColumns = stringMap(cols)
		}
		// The same for each mapping: checkValue kept every element in
		// place (a broken one as an empty mapping), so they line up.
		mappings, _ := lookup(elem, "sink.mappings")
		ms, _ := mappings.([]any)
		for j := range p.Sink.Mappings {
			if j >= len(ms) {
				break
			}
			m, _ := ms[j].(map[string]any)
			if cols, ok := lookup(m, "columns"); ok {
				p.Sink.Mappings[j].Columns = stringMap(cols)
			}
			if cols, ok := lookup(m, "on_missing_columns"); ok {
				p.Sink.Mappings[j].OnMissingColumns = stringMap(cols)
			}
		}
		set := func(key string) bool {
			_, ok := lookup(elem, key)
			return ok
		}
		applyPipelineDefaults(p, set, cfg.State)
		checkFileKeys(c, i, elem, set)
	}

	validate(&cfg, c)
	if len(c.list) > 0 {
		return nil, c.list
	}
	return &cfg, nil
}

// readTree parses data into maps with string keys, lists and scalars. A
// document that is not a mapping, or not YAML, is a problem.
func readTree(data []byte, c *collector) map[string]any {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) { // several problems, such as repeated keys
			for _, e := range te.Errors {
				c.add("", "invalid YAML: %s", e)
			}
			return nil
		}
		c.add("", "invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	if doc == nil {
		return map[string]any{} // an empty file: the validation says what is missing
	}
	tree, ok := Normalize(doc).(map[string]any)
	if !ok {
		c.add("", "the file must be a YAML mapping of keys to values, not %s", describe(doc))
		return nil
	}
	return tree
}

// Normalize turns every map of a decoded YAML value into map[string]any
// (YAML allows keys such as 1 or true; they become "1" and "true") and
// drops nothing: encoding/json can then write it. It changes v's maps and
// lists in place.
func Normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = Normalize(e)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = Normalize(e)
		}
		return m
	case []any:
		for i, e := range t {
			t[i] = Normalize(e)
		}
		return t
	}
	return v
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

// lookup finds a dotted key in a tree of maps. A null value counts as not
// set.
func lookup(m map[string]any, key string) (any, bool) {
	var cur any = m
	for _, k := range strings.Split(key, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[k]; !ok || cur == nil {
			return nil, false
		}
	}
	return cur, true
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, e := range m {
		out[k], _ = e.(string) // checkValue made every value a string
	}
	return out
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// expandTree replaces ${VAR} in every string value of v, in place.
func expandTree(v any, path string, c *collector) any {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(t) {
			t[k] = expandTree(t[k], joinPath(path, k), c)
		}
	case []any:
		for i := range t {
			t[i] = expandTree(t[i], fmt.Sprintf("%s[%d]", path, i), c)
		}
	case string:
		s, err := expandEnv(t, os.LookupEnv)
		if err != nil {
			c.addBroken(path, "%v", err)
			return nil
		}
		return s
	}
	return v
}

// expandEnv replaces ${VAR} and ${VAR:-default} in s. As in the shell, the
// default applies when VAR is unset or empty; ${VAR} with VAR set to "" is
// "". $${ stands for a literal ${. A $ not followed by { is kept as is, so
// values such as passwords need no escaping. Defaults cannot nest.
func expandEnv(s string, env func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q", s)
			}
			inner := s[i+2 : i+end]
			name, def, hasDef := strings.Cut(inner, ":-")
			if !isEnvName(name) {
				return "", fmt.Errorf("${%s}: %q is not an environment variable name", inner, name)
			}
			val, ok := env(name)
			switch {
			case hasDef && val == "":
				val = def
			case !ok:
				return "", fmt.Errorf("${%s} is not set (write ${%s:-default} for a default)", name, name)
			}
			b.WriteString(val)
			i += end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

func isEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return s != ""
}

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[time.Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
)

// checkValue checks v, found at path, against the Go type t that it will
// decode into: unknown keys, and values that cannot become t, are problems.
// It returns v normalized for decoding (a string "8" for an int becomes 8, a
// size string becomes its byte count) and false when v is unusable; callers
// then drop it, so that decoding sees it unset and later checks stay quiet
// about a path that is already reported.
func checkValue(v any, path string, t reflect.Type, c *collector) (any, bool) {
	switch {
	case t == durationType:
		switch x := v.(type) {
		case string:
			if _, err := time.ParseDuration(strings.TrimSpace(x)); err == nil {
				return strings.TrimSpace(x), true
			}
		case int:
			if x == 0 {
				return "0s", true
			}
		}
		c.addBroken(path, "%s is not a duration: write it with a unit, like 20s, 500ms or 10m", describe(v))
		return nil, false
	case t == byteSizeType:
		switch x := v.(type) {
		case int:
			return int64(x), true
		case string:
			n, err := ParseByteSize(x)
			if err == nil {
				return int64(n), true
			}
			c.addBroken(path, "%v", err)
			return nil, false
		}
		c.addBroken(path, "%s is not a size: write a number of bytes, or one like 64MiB", describe(v))
		return nil, false
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			c.addBroken(path, "must be a mapping of keys, not %s", describe(v))
			return nil, false
		}
		fields := fieldsByKey(t)
		for _, k := range sortedKeys(m) {
			kp := joinPath(path, k)
			f, known := fields[k]
			if !known {
				if near := nearestKey(k, fields); near != "" {
					c.addBroken(kp, "unknown key; did you mean %s?", near)
				} else {
					c.addBroken(kp, "unknown key")
				}
				delete(m, k)
				continue
			}
			if m[k] == nil {
				delete(m, k) // `key:` with no value: not set
				continue
			}
			nv, ok := checkValue(m[k], kp, f.Type, c)
			if !ok {
				delete(m, k)
				continue
			}
			m[k] = nv
		}
		return m, true
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			c.addBroken(path, "must be a list, not %s", describe(v))
			return nil, false
		}
		for i := range l {
			ep := fmt.Sprintf("%s[%d]", path, i)
			if nv, ok := checkValue(l[i], ep, t.Elem(), c); ok {
				l[i] = nv
			} else {
				// Keep the index of later elements; the broken path hides
				// the problems of this empty one (an empty mapping, or an
				// empty string in a list of strings).
				l[i] = reflect.Zero(t.Elem()).Interface()
				if t.Elem().Kind() == reflect.Struct {
					l[i] = map[string]any{}
				}
			}
		}
		return l, true
	case reflect.Map: // map[string]string: columns, on_missing_columns
		m, ok := v.(map[string]any)
		if !ok {
			c.addBroken(path, "must be a mapping of names to values, not %s", describe(v))
			return nil, false
		}
		for _, k := range sortedKeys(m) {
			e := m[k]
			s, ok := scalarString(e)
			if !ok {
				c.addBroken(joinPath(path, k), "must be a string, not %s", describe(e))
				delete(m, k)
				continue
			}
			m[k] = s
		}
		return m, true
	case reflect.String:
		if s, ok := scalarString(v); ok {
			return s, true
		}
		c.addBroken(path, "must be a string, not %s", describe(v))
		return nil, false
	case reflect.Bool:
		switch x := v.(type) {
		case bool:
			return x, true
		case string: // so that ${VAR} works: YAML's spellings of the two
			switch strings.TrimSpace(x) {
			case "true", "True", "TRUE":
				return true, true
			case "false", "False", "FALSE":
				return false, true
			}
		}
		c.addBroken(path, "%s is not a boolean: write true or false", describe(v))
		return nil, false
	case reflect.Int:
		switch x := v.(type) {
		case int:
			return x, true
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
				return int(x), true
			}
		case string:
			if n, err := strconv.Atoi(strings.TrimSpace(x)); err == nil {
				return n, true
			}
		}
		c.addBroken(path, "%s is not a whole number", describe(v))
		return nil, false
	}
	panic("config: checkValue does not know " + t.String()) // a new field type needs a case here
}

// nearestKey is the key of fields closest to k, if it is close enough to
// be a misspelling of it (an edit distance of at most a third of its
// length, and at most 3); "" otherwise.
func nearestKey(k string, fields map[string]reflect.StructField) string {
	best, bestD := "", 0
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		d := editDistance(strings.ToLower(k), key)
		if d <= min(3, max(1, len(key)/3)) && (best == "" || d < bestD) {
			best, bestD = key, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fieldsByKey maps the mapstructure keys of struct t to its fields.
func fieldsByKey(t reflect.Type) map[string]reflect.StructField {
	fields := make(map[string]reflect.StructField, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if key != "" && key != "-" && f.IsExported() {
			fields[key] = f
		}
	}
	return fields
}

// scalarString is the text of a YAML scalar: a string as is, a number or a
// boolean in its usual form (`project: 12345` is the string "12345").
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int, float64, bool, uint64, int64:
		return fmt.Sprint(x), true
	case nil:
		return "", true
	}
	return "", false
}

// describe names a YAML value for a problem message.
func describe(v any) string {
	switch x := v.(type) {
	case map[string]any, map[any]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(x)
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}

// checkEnv checks the PUBSINK_* variables that are set against the types of
// their keys, and returns the keys whose variable must be ignored because it
// was reported.
func checkEnv(c *collector) map[string]bool {
	skip := map[string]bool{}
	for _, d := range topDefaults {
		name := envName(d.key)
		val, ok := os.LookupEnv(name)
		if !ok || val == "" { // viper ignores an empty variable too
			continue
		}
		t := typeAt(configType, d.key)
		probe := &collector{}
		if _, ok := checkValue(val, d.key, t, probe); !ok {
			c.addBroken(d.key, "$%s: %s", name, probe.list[0].Message)
			skip[d.key] = true
		}
	}
	return skip
}

// typeAt is the type of the field at a dotted key of struct t.
func typeAt(t reflect.Type, key string) reflect.Type {
	for _, k := range strings.Split(key, ".") {
		t = fieldsByKey(t)[k].Type
	}
	return t
}

// portOverride applies $PORT, which Cloud Run sets to the port it sends
// traffic to, unless PUBSINK_HTTP_ADDR chose an address explicitly.
func portOverride(cfg *Config, c *collector) {
	if os.Getenv(envName("http.addr")) != "" {
		return
	}
	port := os.Getenv("PORT")
	if port == "" {
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		c.addBroken("http.addr", "$PORT=%q is not a port number", port)
		return
	}
	cfg.HTTP.Addr = ":" + port
}
