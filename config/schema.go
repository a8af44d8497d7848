package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
)

// JSONSchema returns the JSON Schema of the configuration file, as indented
// JSON: docs/pubsink.schema.json is its output (TestSchemaFileIsUpToDate
// keeps the two equal). It is draft-07, which every release of the YAML
// language server (VS Code, Neovim, Helix, ...) validates; most do not know
// the later drafts.
//
// It restates as little as it can. The keys and their types are Config's
// fields, by the mapstructure tags that Parse reads; the values a key takes
// are the lists, patterns and limits that validate checks (validate.go,
// bytesize.go); each default is the one that topDefaults or
// applyPipelineDefaults sets, when it is the same whatever the rest of the
// file says. describe gives each key its description, keyed by its path
// with [i] for a list element (log.level, pipelines[i].sink.mappings[i].row_key):
// the test reads them from docs/reference.md's key tables, where they are
// written. Every key that holds a value, or a list, must have one, and every
// description must name a key: JSONSchema returns an error naming each that
// does not.
//
// The schema refuses what validate refuses when the file alone tells:
// unknown keys, types, the values of a list, names and IDs, ranges, the
// syntax of durations, sizes and ${VAR} references, templates without a
// placeholder, and the rules between keys of one pipeline that need no
// comparison of two values (one dead-letter output, sink.mappings without
// the single mapping, payload schemas and formats, ...). It leaves to
// validate what depends on the environment (${VAR} values, PUBSINK_*
// overrides: so project and state.instance are not required here), what
// compares two values (unique names and subscriptions, batch against flow
// control), the magnitude of a duration or size written with a unit
// (dedupe.window, stall_timeout, 91MiB), and the template and expression
// languages beyond "has a placeholder".
//
// It accepts what Parse accepts, but for two spellings that it refuses so
// that an editor offers only what a key means: a string key written as a
// YAML number or boolean (project: 12345, which Parse reads as "12345"),
// and a key with no value (key:, which Parse reads as not set).
func JSONSchema(describe map[string]string) ([]byte, error) {
	g := &schemaGen{
		describe:    describe,
		used:        map[string]bool{},
		defaults:    schemaDefaults(),
		constraints: keyConstraints(),
		applied:     map[string]bool{},
	}
	root := g.walk(configType, "")
	root["$schema"] = "http://json-schema.org/draft-07/schema#"
	root["title"] = "pubsink configuration"
	root["description"] = "The configuration file of pubsink: every key, its type, default and meaning are in docs/reference.md, Configuration. `pubsink validate` checks what this schema cannot (the environment, values compared with each other, templates and expressions)."

	var errs []error
	errs = append(errs, g.errs...)
	for _, key := range slices.Sorted(maps.Keys(describe)) {
		if !g.used[key] {
			errs = append(errs, fmt.Errorf("%s: described, but no such key", key))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(g.constraints)) {
		if !g.applied[key] {
			errs = append(errs, fmt.Errorf("%s: constrained, but no such key", key))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("config: JSON Schema: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // descriptions hold <, > and &: keep them readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("config: JSON Schema: %w", err)
	}
	return buf.Bytes(), nil
}

// schema is one JSON Schema object; encoding/json writes its keys sorted,
// so the output is stable.
type schema = map[string]any

// schemaGen walks Config and builds the schema of each key.
type schemaGen struct {
	describe    map[string]string
	used        map[string]bool
	defaults    map[string]any
	constraints map[string]schema
	applied     map[string]bool
	errs        []error
}

// walk returns the schema of the value of Go type t at path: the base of its
// type, then its constraints (keyConstraints: a scalar's replace the base, a
// container's are added to it), its description and its default.
func (g *schemaGen) walk(t reflect.Type, path string) schema {
	var s schema
	container := true
	switch {
	case t == durationType:
		s, container = durationSchema(anySign), false
	case t == byteSizeType:
		s, container = sizeSchema(false, 0), false
	case t.Kind() == reflect.Struct:
		props := schema{}
		fields := fieldsByKey(t) // the keys that checkValue knows
		for _, name := range slices.Sorted(maps.Keys(fields)) {
			props[name] = g.walk(fields[name].Type, joinPath(path, name))
		}
		s = schema{"type": "object", "properties": props, "additionalProperties": false}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		// delete_columns: qualifiers, each not empty (its element is no
		// key of its own, with no description).
		item := textSchema()
		item["minLength"] = 1
		s = schema{"type": "array", "items": item}
	case t.Kind() == reflect.Slice:
		s = schema{"type": "array", "items": g.walk(t.Elem(), path+"[i]")}
	case t.Kind() == reflect.Map: // columns: qualifier -> template; on_missing_columns -> policy
		s = schema{
			"type": "object",
			// No empty qualifier. (Not propertyNames: the validator of the
			// tests reports its errors at a wrong location.)
			"allOf": []any{withMessage(key("", false), "a column qualifier must not be empty")},
			// Any text: a column's value may be constant.
			"additionalProperties": textSchema(),
		}
	case t.Kind() == reflect.String:
		s, container = textSchema(), false
	case t.Kind() == reflect.Int:
		s, container = intSchema(nil, nil), false
	case t.Kind() == reflect.Bool:
		s, container = boolSchema(), false
	default:
		panic("config: JSONSchema does not know " + t.String()) // a new field type needs a case here
	}

	if c, ok := g.constraints[path]; ok {
		g.applied[path] = true
		if !container {
			s = schema{}
		}
		for k, v := range c {
			if k == "allOf" {
				if prev, ok := s[k].([]any); ok {
					v = append(prev, v.([]any)...)
				}
			}
			s[k] = v
		}
	}
	if d, ok := g.describe[path]; ok {
		g.used[path] = true
		s["description"] = d
	} else if path != "" && t.Kind() != reflect.Struct {
		// Groups of keys (log, source, sink.batch, a list's element) may go
		// without: the reference describes their keys.
		g.errs = append(g.errs, fmt.Errorf("%s: no description", path))
	}
	if d, ok := g.defaults[path]; ok {
		s["default"] = d
	}
	return s
}

// Regular expressions of the schema. They are written in the syntax that Go's
// regexp and ECMA-262 (the editors') read alike: no lookaround, no flags.
const (
	// envRef is a well-formed ${VAR} or ${VAR:-default} (expandEnv). A value
	// with one is checked by validate after expansion, so wherever a key's
	// syntax is checked here, such a value passes.
	envRef = `\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}`
	// envText is a string each of whose ${ is a well-formed reference, or
	// follows another $ ($${ is a literal ${): expandEnv takes it.
	envText = `^(?:[^$]|\$+(?:[^{$]|$)|\$*\$\$\{|` + envRef + `)*$`
	// placeholder is a template with a placeholder: a { that is not {{,
	// after any text and literal braces (template.Compile, Constant).
	placeholder = `^(?:[^{]|\{\{)*\{[^{]`
	// intText is a whole number written as a string (checkValue: Atoi).
	intText = `^\s*[+-]?[0-9]+\s*$`
	// boolText is a boolean written as a string, as YAML spells one
	// (checkValue).
	boolText = `^\s*(?:true|True|TRUE|false|False|FALSE)\s*$`
	// hostPort is what net.SplitHostPort splits: host:port, [host]:port, :port.
	hostPort = `(?:\[[^\[\]]*\]|[^\[\]:]*):[^\[\]:]*`
)

// Durations in Go syntax (time.ParseDuration, after checkValue's TrimSpace).
const (
	durUnit = `(?:ns|us|µs|μs|ms|s|m|h)`
	durNum  = `(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)`
	// A number with a digit other than 0, and one without.
	durNonZero = `(?:[0-9]*[1-9][0-9]*(?:\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)`
	durZero    = `(?:0+(?:\.0*)?|\.0+)`
)

// The signs a duration key allows.
type sign int

const (
	anySign sign = iota
	nonNegative
	positive
)

func durationSchema(sg sign) schema {
	var re string
	switch sg {
	case anySign:
		re = `^\s*[-+]?(?:0|(?:` + durNum + durUnit + `)+)\s*$`
	case nonNegative: // -0s is zero
		re = `^\s*(?:\+?(?:0|(?:` + durNum + durUnit + `)+)|-(?:0|(?:` + durZero + durUnit + `)+))\s*$`
	case positive:
		re = `^\s*\+?(?:` + durNum + durUnit + `)*` + durNonZero + durUnit + `(?:` + durNum + durUnit + `)*\s*$`
	}
	msg := map[sign]string{
		anySign:     "a duration with a unit, like 20s, 500ms or 10m",
		nonNegative: "a duration, not negative, with a unit, like 20s, 500ms or 10m",
		positive:    "a positive duration with a unit, like 20s, 500ms or 10m",
	}[sg]
	alts := []any{schema{"type": "string", "pattern": re + "|" + envRef, "patternErrorMessage": msg}}
	if sg != positive {
		alts = append(alts, schema{"const": 0}) // a bare 0 is 0s (checkValue)
	}
	return schema{"anyOf": alts}
}

// sizeSchema is a ByteSize: a whole number of bytes, or a string that
// ParseByteSize reads. positive refuses 0; max > 0 bounds a number of bytes
// (a size written with a unit is only checked by validate).
func sizeSchema(positive bool, max ByteSize) schema {
	var units []string
	for _, u := range byteUnits { // case-insensitive, as ParseByteSize
		var b strings.Builder
		for _, r := range u.suffix {
			fmt.Fprintf(&b, "[%c%c]", unicode.ToUpper(r), unicode.ToLower(r))
		}
		units = append(units, b.String())
	}
	num := `[0-9]+(?:\.[0-9]+)?`
	if positive {
		num = `(?:[0-9]*[1-9][0-9]*(?:\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)`
	}
	re := `^\s*` + num + `\s*(?:` + strings.Join(units, "|") + `)?\s*$`
	n := schema{"type": "integer", "minimum": 0}
	if positive {
		n = schema{"type": "integer", "exclusiveMinimum": 0}
	}
	if max > 0 {
		n["maximum"] = int64(max)
	}
	msg := "a size: a whole number of bytes, or one like 64MiB, 4MB or 1.5GiB"
	return schema{"anyOf": []any{n, schema{"type": "string", "pattern": re + "|" + envRef, "patternErrorMessage": msg}}}
}

// intSchema is a whole number between min and max (nil: no bound), or a
// string of one (checkValue), whose range only validate checks.
func intSchema(min, max *int) schema {
	n := schema{"type": "integer"}
	if min != nil {
		n["minimum"] = *min
	}
	if max != nil {
		n["maximum"] = *max
	}
	return schema{"anyOf": []any{n, schema{"type": "string", "pattern": intText + "|" + envRef,
		"patternErrorMessage": "a whole number"}}}
}

func bound(n int) *int { return &n }

// boolSchema is a boolean, or a string of one (checkValue).
func boolSchema() schema {
	return schema{"anyOf": []any{schema{"type": "boolean"}, schema{"type": "string", "pattern": boolText + "|" + envRef,
		"patternErrorMessage": "true or false"}}}
}

// textSchema is any string whose ${VAR} references are well formed.
func textSchema() schema {
	return schema{"type": "string", "pattern": envText,
		"patternErrorMessage": "${VAR} and ${VAR:-default} take a variable name and a closing }; write $${ for a literal ${"}
}

// oneOfSchema is one of values (or a ${VAR} reference).
func oneOfSchema(values []string) schema {
	return schema{"anyOf": []any{schema{"enum": values}, envRefSchema()}}
}

func envRefSchema() schema { return schema{"type": "string", "pattern": envRef} }

// matching is a string that re matches whole (or that holds a ${VAR}
// reference); empty, when allowEmpty, means not set.
func matching(re, msg string, allowEmpty bool) schema {
	p := `^(?:` + re + `)$`
	if allowEmpty {
		p = `^(?:` + re + `)?$`
	}
	return schema{"type": "string", "pattern": p + "|" + envRef, "patternErrorMessage": msg}
}

// unanchored is the body of a regexp of validate.go, for matching.
func unanchored(re *regexp.Regexp) string {
	return strings.TrimSuffix(strings.TrimPrefix(re.String(), "^"), "$")
}

// pubsubName is a topic or subscription: a short name, or
// projects/P/<collection>/ID, whose ID is valid and does not start with goog
// (checkName).
func pubsubName(collection string, allowEmpty bool) schema {
	full := `(?:projects/[^/]+/` + collection + `/)?`
	s := matching(full+unanchored(pubsubIDRE), fmt.Sprintf("a short name or projects/PROJECT/%s/NAME, whose ID is 3 to 255 letters, digits or - _ . ~ + %%, starting with a letter", collection), allowEmpty)
	s["allOf"] = []any{withMessage(not(schema{"type": "string", "pattern": "^" + full + "goog"}), "a Pub/Sub ID must not start with goog")}
	return s
}

func bigtableID(what string, allowEmpty bool) schema {
	return matching(unanchored(bigtableIDRE), "a Bigtable "+what+" (letters, digits, _ . -)", allowEmpty)
}

// templateSchema is a template with a placeholder (keyTemplate, rowKey).
func templateSchema(what string) schema {
	return schema{"type": "string", "pattern": placeholder,
		"patternErrorMessage": "a template with a placeholder, such as {attributes.id} or {data.id}: " + what}
}

// cellTimeSchema is event_time, publish_time or a template with a
// placeholder (cellTimestamp); "" too for a mapping (the sink's).
func cellTimeSchema(allowEmpty bool) schema {
	alts := []any{schema{"enum": cellTimes}, templateSchema("every cell would have one timestamp")}
	if allowEmpty {
		alts = append(alts, schema{"type": "string", "maxLength": 0})
	}
	return schema{"anyOf": alts}
}

func exprSchema() schema { // filter, when, each: not empty when set (checkFileKeys)
	s := textSchema()
	s["minLength"] = 1
	return s
}

// opSchema is an operation, which the editor offers, or an expression that
// names one: any text but "" (checkFileKeys). A misspelled operation is
// validate's (nearOperation): it may be an expression, as far as the
// schema knows.
func opSchema() schema {
	return schema{"anyOf": []any{schema{"enum": operations}, exprSchema()}}
}

// The rules between keys are "if the file says this, then that key must
// (not) be so", written with these. A rule that refuses a key refuses it
// where validate reports it, with validate's words where the editor shows
// them (errorMessage, patternErrorMessage: the YAML language server's).

func required(keys ...string) schema { return schema{"required": keys} }

// nonEmpty holds when each of keys is set to something other than "".
func nonEmpty(keys ...string) schema {
	props := schema{}
	for _, k := range keys {
		props[k] = schema{"minLength": 1}
	}
	return schema{"required": keys, "properties": props}
}

// is holds when key is set to one of values.
func is(key string, values ...string) schema {
	return schema{"required": []string{key}, "properties": schema{key: schema{"enum": values}}}
}

func not(s schema) schema       { return schema{"not": s} }
func allOf(ss ...schema) schema { return schema{"allOf": toAny(ss)} }
func anyOf(ss ...schema) schema { return schema{"anyOf": toAny(ss)} }

// key is a condition or rule on the value of one key.
func key(name string, s any) schema { return schema{"properties": schema{name: s}} }

// rules are the "if cond then rule" pairs of an object, as its allOf.
func rules(pairs ...[2]schema) []any {
	out := make([]any, len(pairs))
	for i, p := range pairs {
		out[i] = schema{"if": p[0], "then": p[1]}
	}
	return out
}

// refuse is a rule that refuses the key, with message. (A message is on a
// schema of its own: the language server shows a schema's errorMessage for
// each of its errors, wrong types and unknown keys too.)
func refuse(name, message string) schema {
	return withMessage(key(name, false), message)
}

func withMessage(s schema, message string) schema {
	s["errorMessage"] = message
	return s
}

func toAny(ss []schema) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// keyConstraints are what each key takes beyond its type, by path: the
// whole schema of a scalar, what a list or a group of keys adds to its own
// (the rules between its keys).
func keyConstraints() map[string]schema {
	c := map[string]schema{
		// Not project, nor state.instance: PUBSINK_* variables may set them.
		"":                  required("pipelines"),
		"log.level":         oneOfSchema(logLevels),
		"log.format":        oneOfSchema(logFormats),
		"http.addr":         matching(hostPort, "host:port (write :8080 for every interface)", false),
		"shutdown_timeout":  durationSchema(positive),
		"state.table":       bigtableID("table ID", false),
		"state.app_profile": bigtableID("app profile ID, or empty for the instance's default profile", true),
		"pipelines":         {"minItems": 1},
	}
	// Those of a pipeline are by their path in it ("": the pipeline).
	for _, part := range []map[string]schema{pipelineConstraints(), sourceConstraints(), payloadConstraints(), sinkConstraints(), deadLetterConstraints()} {
		for k, v := range part {
			c[strings.TrimSuffix("pipelines[i]."+k, ".")] = v
		}
	}
	return c
}

func pipelineConstraints() map[string]schema {
	hasOutput := required("dead_letter")
	hasOutput["properties"] = schema{"dead_letter": anyOf(nonEmpty("topic"), nonEmpty("bigtable_table"), nonEmpty("file"))}
	notDeadLetter := slices.DeleteFunc(slices.Clone(lateDataPolicies), func(v string) bool { return v == LateDeadLetter })
	return map[string]schema{
		"": {
			"required": []string{"name", "source", "sink"}, // a sink needs a table, or its type
			"allOf": rules([2]schema{not(hasOutput), key("watermark", key("late_data", schema{"anyOf": []any{
				withMessage(schema{"enum": notDeadLetter}, "dead_letter needs a dead_letter output (topic, bigtable_table or file)"),
				envRefSchema(),
			}}))}),
		},
		"name":                       matching(unanchored(pipelineNameRE), "[a-z0-9_-]+ (it names metrics and state rows)", false),
		"mode":                       oneOfSchema(modes),
		"watermark.estimation_band":  durationSchema(nonNegative),
		"watermark.allowed_lateness": durationSchema(nonNegative),
		"watermark.late_data":        oneOfSchema(lateDataPolicies),
		"filter":                     exprSchema(),
	}
}

func sourceConstraints() map[string]schema {
	return map[string]schema{
		"source": {"required": []string{"subscription"}, "allOf": rules(
			[2]schema{nonEmpty("id_attribute", "id_template"), refuse("id_template", "excludes source.id_attribute: set only one of them")},
			[2]schema{nonEmpty("timestamp_attribute", "timestamp_template"), refuse("timestamp_template", "excludes source.timestamp_attribute: set only one of them")},
		)},
		"source.topic":                    pubsubName("topics", true),
		"source.subscription":             pubsubName("subscriptions", false),
		"source.tracking_subscription":    pubsubName("subscriptions", true),
		"source.id_template":              templateSchema("every message would have one dedupe key"),
		"source.timestamp_template":       templateSchema("every message would have one event time"),
		"source.timestamp_format":         oneOfSchema(timestampFormats),
		"source.streams":                  intSchema(bound(1), bound(maxStreams)),
		"source.max_outstanding_messages": intSchema(bound(1), nil),
		"source.stall_timeout":            durationSchema(nonNegative),
		"source.topic_message_retention":  durationSchema(nonNegative),
		"dedupe.window":                   durationSchema(nonNegative), // its minimum of 1m is exactly_once's
	}
}

func payloadConstraints() map[string]schema {
	noSchema := slices.DeleteFunc(slices.Clone(payloadFormats), func(f string) bool { return schemaExt[f] != "" })
	schemaOf := func(format string) schema { // topic, or a file of the format's
		ext := schemaExt[format]
		return key("schema", matching(SchemaTopic+`|.*\`+ext, "topic, or the path of a "+ext+" file", false))
	}
	// payload.schema is a .proto file (or, lenient, a ${VAR} that may be one).
	protoFile := func(lenient bool) schema {
		re := `\` + schemaExt[FormatProtobuf] + `$`
		if lenient {
			re += "|" + envRef
		}
		return allOf(required("schema"), key("schema", schema{"pattern": re}))
	}
	// payload.schema names a file: set, and neither topic nor empty.
	schemaFile := allOf(required("schema"), key("schema", not(schema{"enum": []string{SchemaTopic, ""}})))
	return map[string]schema{
		"payload": {"allOf": rules(
			[2]schema{allOf(anyOf(not(required("format")), is("format", noSchema...)), nonEmpty("schema")),
				refuse("schema", "only for avro and protobuf payloads: a "+strings.Join(noSchema, ", ")+" payload is read without a schema")},
			[2]schema{is("format", FormatAvro), schemaOf(FormatAvro)},
			[2]schema{is("format", FormatProtobuf), schemaOf(FormatProtobuf)},
			// message: the type of a .proto schema file; only with one, and
			// then required.
			[2]schema{protoFile(true), key("message", matching(unanchored(protoMessageRE), "the full name of a message type, such as pkg.Reading", true))},
			[2]schema{allOf(not(protoFile(true)), nonEmpty("message")), refuse("message", "only with a .proto schema file (payload.format protobuf, payload.schema PATH.proto)")},
			[2]schema{allOf(is("format", FormatProtobuf), protoFile(false)), nonEmpty("message")},
			// encoding: of the messages read with a schema file; only then.
			[2]schema{schemaFile, key("encoding", schema{"anyOf": []any{schema{"enum": encodings}, schema{"maxLength": 0}, envRefSchema()}})},
			[2]schema{allOf(not(schemaFile), nonEmpty("encoding")), refuse("encoding", "only with a schema file (payload.schema PATH): a topic schema's messages name their encoding")},
		)},
		"payload.format": oneOfSchema(payloadFormats),
	}
}

func sinkConstraints() map[string]schema {
	// A bigtable sink: its type is bigtable, or left to the default.
	bigtable := anyOf(not(required("type")), is("type", SinkBigtable))
	eachMapping := func(s schema) schema { return key("mappings", schema{"items": s}) }
	var single []schema // the single mapping's keys are set
	for _, k := range singleMappingKeys {
		single = append(single, required(strings.TrimPrefix(k, "sink.")))
	}
	// A mapping's write_mode and on_missing: "" is the sink's.
	orEmpty := func(values []string) schema {
		s := oneOfSchema(values)
		s["anyOf"] = append(s["anyOf"].([]any), schema{"type": "string", "maxLength": 0})
		return s
	}
	const m = "sink.mappings[i]."
	return map[string]schema{
		"sink": {"allOf": rules(
			// The single mapping or the mappings, not both.
			[2]schema{anyOf(single...),
				refuse("mappings", "excludes "+strings.Join(singleMappingKeys, ", ")+": set either the mappings or the sink's single mapping")},
			// A bigtable sink's IDs; its table and family, the sink's or
			// else each mapping's ("" is not set).
			[2]schema{bigtable, schema{"properties": schema{
				"app_profile":   bigtableID("app profile ID, or empty for the instance's default profile", true),
				"table":         bigtableID("table ID", true),
				"column_family": bigtableID("column family name", true),
				// validate says what else it may not be: a mapping's family.
				"tombstone_family": bigtableID("column family name", false),
				"mappings": schema{"items": schema{"properties": schema{
					"table":         bigtableID("table ID", true),
					"column_family": bigtableID("column family name", true),
				}}},
			}}},
			[2]schema{allOf(bigtable, not(required("mappings"))), allOf(required("table"),
				key("table", schema{"minLength": 1}), key("column_family", schema{"minLength": 1}))},
			[2]schema{allOf(bigtable, not(nonEmpty("table"))), eachMapping(nonEmpty("table"))},
			[2]schema{allOf(bigtable, required("column_family"), key("column_family", schema{"maxLength": 0})), eachMapping(nonEmpty("column_family"))},
		)},
		"sink.type":                oneOfSchema(sinkTypes),
		"sink.row_key":             templateSchema("every message would overwrite one row"),
		"sink.columns":             {"minProperties": 1},
		"sink.timestamp":           cellTimeSchema(false),
		"sink.when":                exprSchema(),
		"sink.each":                exprSchema(),
		"sink.op":                  opSchema(),
		"sink.write_mode":          oneOfSchema(writeModes),
		"sink.on_missing":          oneOfSchema(missingPolicies),
		"sink.on_missing_columns":  {"additionalProperties": oneOfSchema(missingPolicies)},
		"sink.delete_columns":      {"minItems": 1},
		"sink.tombstone_retention": durationSchema(positive), // at least 1h: validate
		"sink.mappings":            {"minItems": 1},
		m[:len(m)-1]:               required("row_key", "columns"),
		m + "row_key":              templateSchema("every message would overwrite one row"),
		m + "columns":              {"minProperties": 1},
		m + "timestamp":            cellTimeSchema(true),
		m + "when":                 exprSchema(),
		m + "each":                 exprSchema(),
		m + "op":                   opSchema(),
		m + "write_mode":           orEmpty(writeModes),
		m + "on_missing":           orEmpty(missingPolicies),
		m + "on_missing_columns":   {"additionalProperties": oneOfSchema(missingPolicies)},
		m + "delete_columns":       {"minItems": 1},
		"sink.max_rows":            intSchema(bound(1), bound(maxRowsPerMessage)),
		"sink.batch.max_messages":  intSchema(bound(1), bound(maxBatchMessages)),
		"sink.batch.max_bytes":     sizeSchema(true, maxBatchBytes),
		"sink.batch.max_delay":     durationSchema(positive),
	}
}

func deadLetterConstraints() map[string]schema {
	return map[string]schema{
		"dead_letter": {"allOf": append(
			[]any{withMessage(not(anyOf(nonEmpty("topic", "bigtable_table"), nonEmpty("topic", "file"), nonEmpty("bigtable_table", "file"))),
				"set only one of topic, bigtable_table, file")},
			rules([2]schema{allOf(nonEmpty("subscription"), not(nonEmpty("topic"))), refuse("subscription", "needs dead_letter.topic")})...)},
		"dead_letter.topic":          pubsubName("topics", true),
		"dead_letter.subscription":   pubsubName("subscriptions", true),
		"dead_letter.bigtable_table": bigtableID("table ID", true),
	}
}

// schemaDefaults returns the JSON default of each key, by path, that has
// one whatever the rest of the file says: the top-level defaults, and each
// per-pipeline default that applyPipelineDefaults sets alike in pipelines
// whose other keys differ (not sink.row_key, which follows the dedupe key,
// nor sink.instance, which follows state.instance). A default of "" is none.
func schemaDefaults() map[string]any {
	out := map[string]any{}
	for _, d := range topDefaults {
		if v, ok := jsonDefault(d.value); ok {
			out[d.key] = v
		}
	}
	var asked []string
	var plain, other Pipeline
	applyPipelineDefaults(&plain, func(key string) bool { asked = append(asked, key); return false }, State{})
	other.Source.IDAttribute = "id"
	other.Sink.Mappings = []Mapping{{}}
	other.DeadLetter.Topic = "dlq"
	applyPipelineDefaults(&other, func(string) bool { return false }, State{Instance: "instance"})
	for _, key := range asked {
		a, b := valueAt(reflect.ValueOf(plain), key), valueAt(reflect.ValueOf(other), key)
		if !reflect.DeepEqual(a, b) {
			continue
		}
		if v, ok := jsonDefault(a); ok {
			out["pipelines[i]."+key] = v
		}
	}
	return out
}

// valueAt is the value of the field at a dotted key of struct v.
func valueAt(v reflect.Value, key string) any {
	for _, k := range strings.Split(key, ".") {
		v = v.FieldByIndex(fieldsByKey(v.Type())[k].Index)
	}
	return v.Interface()
}

// jsonDefault is v as the file would write it: a duration as 20s or 10m, a
// size as 4MiB (0 as 0); false for "" and what has no such form.
func jsonDefault(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		return x, x != ""
	case int, bool:
		return x, true
	case time.Duration:
		return formatDuration(x), true
	case ByteSize:
		if x == 0 {
			return 0, true
		}
		return x.String(), true
	}
	return nil, false
}

// formatDuration writes d as the reference does: 10m, not 10m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
