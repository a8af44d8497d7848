package mapping

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/template"
)

// typedConfig is a pipeline whose payload has the schema file schema
// (format avro or protobuf), with m as its single mapping and filter.
func typedConfig(format, schema, message, filter string, m config.Mapping) config.Pipeline {
	cfg := single(m)
	cfg.Payload = config.Payload{Format: format, Schema: schema, Message: message}
	cfg.Filter = filter
	return cfg
}

// TestTypedExpressionMistakes: with a schema file, each mistake of a
// newcomer's first hour is refused at New (validate and start) with its key,
// its place in the expression, the types involved and a did-you-mean; over
// dyn data each passed and dead-lettered every message.
func TestTypedExpressionMistakes(t *testing.T) {
	const avsc, proto = "testdata/avro/typed.avsc", "testdata/proto/reading.proto"
	const noConvert = " (CEL does not convert numbers: write 9.0 for a double, or convert with double(…) or int(…))"
	cols := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name, format, filter string
		m                    config.Mapping
		path, want           string
	}{
		{"double times int", "avro", "", config.Mapping{Columns: cols("temp_f", "{= data.temperature_c * 9 / 5 + 32}")},
			"sink.columns.temp_f", "expression at offset 0: 1:20: found no matching overload for '_*_' applied to '(double, int)'" + noConvert},
		{"unknown field in the filter", "avro", "data.knd != 'HEARTBEAT'", config.Mapping{},
			"filter", `1:5: no field "knd" in record Reading; did you mean "kind"?`},
		{"a string as a filter", "avro", "data.kind", config.Mapping{},
			"filter", "the expression is of type string, want bool"},
		{"a string as each's list", "avro", "", config.Mapping{Each: "data.site"},
			"sink.each", "the expression is of type string, want a list"},
		{"unknown field of each's element, placeholder", "avro", "", config.Mapping{Each: "data.readings", RowKey: "{item.sensr}"},
			"sink.row_key", `{item.sensr}: no field "sensr" in record SubReading; did you mean "sensor"?`},
		{"unknown field of each's element, expression", "avro", "", config.Mapping{Each: "data.readings", Columns: cols("v", "{= item.valu * 2.0}")},
			"sink.columns.v", `expression at offset 0: 1:5: no field "valu" in record SubReading; did you mean "value"?`},
		{"a field of a scalar element", "avro", "", config.Mapping{Each: "data.readings", Columns: cols("v", "{item.value.x}")},
			"sink.columns.v", `{item.value.x}: item.value is of type double: it has no field "x"`},
		{"a nested record's field", "avro", "", config.Mapping{Columns: cols("v", "{= data.readings[0].next.sensr}")},
			"sink.columns.v", `expression at offset 0: 1:22: no field "sensr" in record SubReading; did you mean "sensor"?`},
		{"no near name", "avro", "", config.Mapping{Each: "data.readings", Columns: cols("v", "{= item.zzzzzz}")},
			"sink.columns.v", `expression at offset 0: 1:5: no field "zzzzzz" in record SubReading`},
		{"null compared", "avro", "data.note == null", config.Mapping{},
			"filter", "1:11: found no matching overload for '_==_' applied to '(string, null)' (a field that is null is absent from the payload: test it with has(…), or read it with .?field.orValue(…))"},
		{"an op of the wrong type", "avro", "", config.Mapping{Op: "data.count", WriteMode: config.WriteUpsert},
			"sink.op", "the expression is of type int; want string (one of set, delete, delete_family, delete_columns)"},
		{"a when over a timestamp", "avro", "", config.Mapping{When: "data.ts > 5"},
			"sink.when", "1:9: found no matching overload for '_>_' applied to '(timestamp, int)'"},
		{"proto: unknown field", "protobuf", "data.sensr == 'a'", config.Mapping{},
			"filter", `1:5: no field "sensr" in message pubsink.test.Reading; did you mean "sensor"?`},
		{"proto: uint plus int", "protobuf", "", config.Mapping{Columns: cols("v", "{= data.u64 + 1}")},
			"sink.columns.v", "expression at offset 0: 1:10: found no matching overload for '_+_' applied to '(uint, int)'" + noConvert},
		{"proto: a message's field", "protobuf", "data.location.sit == 'x'", config.Mapping{},
			"filter", `1:14: no field "sit" in message pubsink.test.Reading.Location; did you mean "site"?`},
		{"proto: an enum is a string", "protobuf", "data.status == 1", config.Mapping{},
			"filter", "1:13: found no matching overload for '_==_' applied to '(string, int)'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := c.m
			if m.RowKey == "" {
				m.RowKey = "k"
			}
			if m.Columns == nil {
				m.Columns = cols("v", "x")
			}
			schema, message := avsc, ""
			if c.format == "protobuf" {
				schema, message = proto, "pubsink.test.Reading"
			}
			_, err := New(typedConfig(c.format, schema, message, c.filter, m), nil, sinks.Limits{})
			var ps config.Problems
			if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Path != c.path || ps[0].Message != c.want {
				t.Errorf("got  %v\nwant %s: %s", err, c.path, c.want)
			}
			// Over JSON, data is dyn: the same mapping passes (and fails
			// per message), except where the mistake is not data's.
			if c.format == "avro" {
				json := typedConfig(config.FormatJSON, "", "", c.filter, m)
				if _, err := New(json, nil, sinks.Limits{}); err != nil && !strings.Contains(err.Error(), "want string") {
					t.Errorf("over JSON: %v", err)
				}
			}
		})
	}
}

// TestTypedExpressionsThatWork: what is right over the schema passes the
// typed check, including what CEL's checker refuses and evaluation accepts
// (1 == 1.0, a record indexed by a name, an optional's null default).
func TestTypedExpressionsThatWork(t *testing.T) {
	for _, c := range []struct {
		format, filter string
		m              config.Mapping
	}{
		{"avro", "data.kind != 'HEARTBEAT' && data.temperature_c > 5 && data.temperature_c == 3 && data['site'] == 'a' && has(data.note)", config.Mapping{
			Columns: map[string]string{
				"f":    "{= data.temperature_c * 9.0 / 5.0 + 32.0}",
				"ts":   "{= data.ts + duration('1h')}",
				"n":    "{= data.readings.size() + data.count}",
				"s":    "{= data.readings.filter(s, s.value > 1.0).map(s, s.sensor).join(',')}",
				"note": "{= data.?note.orValue('none')}",
				"null": "{= data.?note.orValue(null)}",
				"tag":  "{= data.tags['a'].upperAscii()}",
				"day":  "{= data.day.substring(0, 4) + data.amount}",
				"raw":  "{= base64.encode(data.raw)}",
				"any":  "{= string(data.either)}",
				"deep": "{= data.readings[0].next.next.sensor}",
				"path": "{data.readings.0.sensor}",
			}}},
		{"avro", "", config.Mapping{Each: "data.readings.filter(r, r.value > 0.0)", When: "data.kind == 'READING'", RowKey: "{item.sensor}#{= item.next.sensor}",
			Columns: map[string]string{"v": "{item.value}", "w": "{= item.value * 2.0}"}}},
		{"protobuf", "data.status == 'OK' && data.location.site.size() > 0 && data.taken_at > timestamp('2020-01-01T00:00:00Z') && data.elapsed > duration('1s')", config.Mapping{
			Columns: map[string]string{
				"count":  "{= data.count + 1}",
				"label":  "{= data.label.upperAscii()}",
				"attrs":  "{= string(data.attrs.x)}",
				"dyn":    "{= string(data.dyn.anything)}",
				"counts": "{= data.counts['a'] + data.i32}",
				"u":      "{= data.u64 + 1u}",
				"unit":   "{= data.unit + data.device.id}",
				"path":   "{= data.path.map(p, p.site).join(',')}",
				"mask":   "{= data.mask.size()}",
			}}},
	} {
		m := c.m
		if m.RowKey == "" {
			m.RowKey = "k"
		}
		schema, message := "testdata/avro/typed.avsc", ""
		if c.format == "protobuf" {
			schema, message = "testdata/proto/reading.proto", "pubsink.test.Reading"
		}
		if _, err := New(typedConfig(c.format, schema, message, c.filter, m), nil, sinks.Limits{}); err != nil {
			t.Errorf("%s %q %+v: %v", c.format, c.filter, m, err)
		}
	}
}

// TestRuntimeOverloadErrorNamesOperatorAndTypes: over dyn data (JSON), an
// operator applied to values it has no overload for fails naming the
// operator, the operands' types and the place, never their values.
func TestRuntimeOverloadErrorNamesOperatorAndTypes(t *testing.T) {
	for _, c := range []struct{ expr, payload, want string }{
		{"{= data.temperature_c * 9 / 5 + 32}", `{"temperature_c": 21.5}`, "no such overload: '*' applied to (double, int) at 1:20"},
		{"{= data.site + 1}", `{"site": "secret-site"}`, "no such overload: '+' applied to (string, int) at 1:11"},
		{"{= data.tags.upperAscii()}", `{"tags": {"a": "b"}}`, "no such overload: 'upperAscii' applied to (map) at 1:21"},
	} {
		m := mustNew(t, typedConfig(config.FormatJSON, "", "", "", config.Mapping{RowKey: "k", Columns: map[string]string{"v": c.expr}}))
		var r Result
		err := m.Map(context.Background(), &source.Message{ID: "m", Data: []byte(c.payload), PublishTime: changeTime}, &r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s over %s: %v, want %q in it", c.expr, c.payload, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the payload: %v", err)
		}
		var bad *BadInput
		if !errors.As(err, &bad) || !errors.Is(err, template.ErrExpression) {
			t.Errorf("%s: %v is not an expression's bad input", c.expr, err)
		}
	}
}

// TestCheckRevision: a topic-schema pipeline checked against one revision,
// Avro or Protocol Buffers, finds what it finds against the same schema as
// a file; a revision that does not compile is the error.
func TestCheckRevision(t *testing.T) {
	cfg := typedConfig(config.FormatAvro, config.SchemaTopic, "", "data.knd == 'x'", config.Mapping{RowKey: "{data.reading_id}", Columns: map[string]string{"t": "{data.temprature_c}"}})
	avsc, err := os.ReadFile("testdata/avro/typed.avsc")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := CheckRevision(cfg, source.Schema{Name: "projects/p/schemas/s", Revision: "r1", Type: "avro", Definition: string(avsc)})
	want := []string{
		`filter: 1:5: no field "knd" in record Reading; did you mean "kind"?`,
		`sink.columns.t: {data.temprature_c}: no field "temprature_c" in record Reading; did you mean "temperature_c"?`,
	}
	if err != nil || len(ps) != len(want) {
		t.Fatalf("CheckRevision = %v, %v; want %d problems", ps, err, len(want))
	}
	for i, p := range ps {
		if p.String() != want[i] {
			t.Errorf("problem %d: %q, want %q", i, p.String(), want[i])
		}
	}

	proto := `syntax = "proto3"; package acme; message Reading { string reading_id = 1; double temperature_c = 2; }`
	cfg.Payload.Format = config.FormatProtobuf
	cfg.Filter = "data.temperature_c * 2 > 1.0"
	cfg.Sink.Columns = map[string]string{"t": "{data.temperature_c}"}
	ps, err = CheckRevision(cfg, source.Schema{Name: "projects/p/schemas/s", Revision: "r1", Type: "protobuf", Definition: proto})
	if err != nil || len(ps) != 1 || !strings.HasPrefix(ps[0].String(), "filter: 1:20: found no matching overload for '_*_' applied to '(double, int)'") {
		t.Errorf("protobuf revision: %v, %v", ps, err)
	}
	cfg.Filter = ""
	if ps, err := CheckRevision(cfg, source.Schema{Type: "protobuf", Definition: proto}); err != nil || len(ps) != 0 {
		t.Errorf("a fitting mapping: %v, %v", ps, err)
	}
	if _, err := CheckRevision(cfg, source.Schema{Type: "avro", Definition: "{nope"}); err == nil {
		t.Error("a revision that does not compile: no error")
	}
}

// BenchmarkNewWithSchemaTypes compiles the same pipeline over an Avro
// schema file (expressions checked against its types: typed) and over
// JSON (dyn only), the start-up cost of the typed check. Evaluation is the
// same program either way.
func BenchmarkNewWithSchemaTypes(b *testing.B) {
	m := config.Mapping{RowKey: "{data.reading_id}", Columns: map[string]string{
		"f": "{= data.temperature_c * 9.0 / 5.0 + 32.0}",
		"s": "{= data.readings.filter(s, s.value > 1.0).map(s, s.sensor).join(',')}",
		"n": "{= data.?note.orValue('-')}",
	}}
	for _, c := range []struct{ name, format, schema string }{
		{"typed", config.FormatAvro, "testdata/avro/typed.avsc"},
		{"dyn", config.FormatJSON, ""},
	} {
		cfg := typedConfig(c.format, c.schema, "", "data.kind != 'HEARTBEAT'", m)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := New(cfg, nil, sinks.Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
