package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// Tests of issue 19's keys: payload formats, filter, source templates,
// sink mappings, when, each and max_rows. Their templates use {= EXPR} and
// {item…}, which need the template package of issue 19.

// TestMappingsGoodConfig parses testdata/mappings.good.yaml, which uses
// every new key, into the structs it means: qualifiers keep their case in
// every mapping, and only the sink's single-mapping keys are left unset.
func TestMappingsGoodConfig(t *testing.T) {
	cleanEnv(t)
	data, err := os.ReadFile("testdata/mappings.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if ws := Warnings(cfg, data); len(ws) > 0 {
		t.Errorf("warnings: %v", ws)
	}
	r := cfg.Pipelines[0]
	if want := (Source{
		Subscription: "readings-sub", IDTemplate: "{data.device}#{data.seq}", TimestampTemplate: "{= timestamp(data.taken_at)}",
		TimestampFormat: TimestampAuto, Streams: 4, MaxOutstandingMessages: 1000, StallTimeout: r.Source.StallTimeout,
	}); !reflect.DeepEqual(r.Source, want) {
		t.Errorf("source:\n got %+v\nwant %+v", r.Source, want)
	}
	if want := (Payload{Format: FormatProtobuf, Schema: "schemas/reading.proto", Message: "acme.telemetry.Batch", Encoding: EncodingBinary}); r.Payload != want {
		t.Errorf("payload = %+v, want %+v", r.Payload, want)
	}
	if r.Filter != "data.device != '' && size(data.readings) > 0" {
		t.Errorf("filter = %q", r.Filter)
	}
	s := r.Sink
	if s.RowKey != "" || s.Columns != nil || s.When != "" || s.Each != "" {
		t.Errorf("with mappings the sink's own row_key and columns got defaults: %q, %v", s.RowKey, s.Columns)
	}
	if s.Table != "devices" || s.ColumnFamily != "d" || s.Timestamp != CellTimePublish || s.MaxRows != 200 {
		t.Errorf("sink = %+v", s)
	}
	wantMappings := []Mapping{
		{RowKey: "{data.device}", Columns: map[string]string{"LastSeen": "{publish_time}", "firmwareVersion": "{data.firmware}"}},
		{
			Table: "readings", ColumnFamily: "r", RowKey: "{data.device}#{= string(item.at)}", Each: "data.readings",
			When:      "data.kind == 'sensor'",
			Columns:   map[string]string{"Value": "{item.value}", "UNIT": "{= item.unit == '' ? 'none' : item.unit}"},
			Timestamp: "{item.at}",
		},
		{
			Table: "alerts", RowKey: "{data.device}#{item}", Each: "data.readings.filter(r, r.value > 100).map(r, r.id)",
			Columns: map[string]string{"id": "{item}"},
		},
	}
	if !reflect.DeepEqual(s.Mappings, wantMappings) {
		t.Errorf("mappings:\n got %+v\nwant %+v", s.Mappings, wantMappings)
	}
	// AllMappings fills table, family and timestamp from the sink.
	all := s.AllMappings()
	if all[0].Table != "devices" || all[0].ColumnFamily != "d" || all[0].Timestamp != CellTimePublish ||
		all[1].Table != "readings" || all[1].ColumnFamily != "r" || all[1].Timestamp != "{item.at}" ||
		all[2].Table != "alerts" || all[2].ColumnFamily != "d" {
		t.Errorf("AllMappings = %+v", all)
	}

	topic, file, lines := cfg.Pipelines[1], cfg.Pipelines[2], cfg.Pipelines[3]
	if want := (Payload{Format: FormatAvro, Schema: SchemaTopic}); topic.Payload != want {
		t.Errorf("avro without a schema: payload = %+v, want %+v", topic.Payload, want)
	}
	if topic.Sink.RowKey != "{attributes.event_id}" || !reflect.DeepEqual(topic.Sink.Columns, map[string]string{"Payload": "{data}"}) {
		t.Errorf("avro-topic sink = %+v", topic.Sink)
	}
	if want := (Payload{Format: FormatAvro, Schema: "./schemas/event.avsc", Encoding: EncodingJSON}); file.Payload != want {
		t.Errorf("avro file: payload = %+v, want %+v", file.Payload, want)
	}
	if file.Sink.Timestamp != "{data.created}" {
		t.Errorf("a template timestamp = %q", file.Sink.Timestamp)
	}
	if lines.Payload != (Payload{Format: FormatString}) || lines.Sink.Each != "data.split(',')" || lines.Sink.RowKey != "{= item}#{message_id}" {
		t.Errorf("lines = %+v", lines)
	}
	if got := lines.Sink.AllMappings(); len(got) != 1 || got[0].Each != "data.split(',')" || got[0].Columns["line"] != "{item}" {
		t.Errorf("the single mapping = %+v", got)
	}
}

func TestPayloadDefaults(t *testing.T) {
	cleanEnv(t)
	for _, tc := range []struct {
		payload string
		want    Payload
	}{
		{"", Payload{Format: FormatJSON}},
		{"{format: json}", Payload{Format: FormatJSON}},
		{"{format: string}", Payload{Format: FormatString}},
		{"{format: raw}", Payload{Format: FormatRaw}},
		{"{format: avro}", Payload{Format: FormatAvro, Schema: SchemaTopic}},
		{"{format: protobuf}", Payload{Format: FormatProtobuf, Schema: SchemaTopic}},
		{"{format: avro, schema: a.avsc}", Payload{Format: FormatAvro, Schema: "a.avsc", Encoding: EncodingBinary}},
		{"{format: protobuf, schema: /s/a.proto, message: A, encoding: json}",
			Payload{Format: FormatProtobuf, Schema: "/s/a.proto", Message: "A", Encoding: EncodingJSON}},
	} {
		y := minimal
		if tc.payload != "" {
			y += "    payload: " + tc.payload + "\n"
		}
		if got := mustParse(t, y).Pipelines[0].Payload; got != tc.want {
			t.Errorf("payload %s = %+v, want %+v", tc.payload, got, tc.want)
		}
	}
}

func TestSinkDefaultsOfIssue19(t *testing.T) {
	cleanEnv(t)
	t.Run("max_rows defaults to 1000", func(t *testing.T) {
		if got := mustParse(t, minimal).Pipelines[0].Sink.MaxRows; got != 1000 {
			t.Errorf("max_rows = %d", got)
		}
		if got := mustParse(t, minimal+"      max_rows: 100000\n").Pipelines[0].Sink.MaxRows; got != 100000 {
			t.Errorf("max_rows = %d, want 100000 as set", got)
		}
	})
	t.Run("the row key defaults to the id template", func(t *testing.T) {
		cfg := mustParse(t, strings.Replace(minimal, "{subscription: orders-sub}", `{subscription: orders-sub, id_template: "{data.order_id}"}`, 1))
		if got := cfg.Pipelines[0].Sink.RowKey; got != "{data.order_id}" {
			t.Errorf("row_key = %q, want the id_template", got)
		}
	})
	t.Run("a bad id template is reported once, not again as the default row key", func(t *testing.T) {
		_, err := Parse([]byte(strings.Replace(minimal, "{subscription: orders-sub}", `{subscription: orders-sub, id_template: "{data.id"}`, 1)))
		want := `pipelines[0].source.id_template: unclosed placeholder "{data.id" at offset 0 (write {{ for a literal brace) (line 6)`
		if err == nil || err.Error() != want {
			t.Errorf("Parse error = %v, want %s", err, want)
		}
	})
	t.Run("with mappings the sink needs no table when each mapping has one", func(t *testing.T) {
		cfg := mustParse(t, strings.Replace(minimal, "      table: orders\n", "", 1)+
			"      mappings: [{table: a, row_key: \"{message_id}#a\", columns: {x: \"{data}\"}}]\n")
		if got := cfg.Pipelines[0].Sink.AllMappings()[0]; got.Table != "a" || got.ColumnFamily != "d" || got.Timestamp != CellTimeEvent {
			t.Errorf("mapping = %+v", got)
		}
	})
	t.Run("sink keys that are the mappings' defaults do not conflict with them", func(t *testing.T) {
		mustParse(t, minimal+"      column_family: f\n      timestamp: publish_time\n"+
			"      mappings: [{row_key: \"{message_id}#a\", columns: {x: \"{data}\"}}]\n")
	})
}

// TestNewKeysHaveLines: problems under the new keys, inside the list of
// mappings, carry the line of their key.
func TestNewKeysHaveLines(t *testing.T) {
	cleanEnv(t)
	data := []byte(`project: p
state: {instance: i}
pipelines:
  - name: orders
    source: {subscription: orders-sub}
    payload:
      format: avro
      schema: x.proto
    filter: ""
    sink:
      table: orders
      mappings:
        - row_key: "{message_id}"
          columns:
            Good: "{data}"
            Bad: "{data"
        - row_key: fixed
          colums: {}
`)
	lines := keyLines(data)
	for path, want := range map[string]int{
		"pipelines[0].payload.schema":               8,
		"pipelines[0].filter":                       9,
		"pipelines[0].sink.mappings[0]":             13,
		"pipelines[0].sink.mappings[0].columns.Bad": 16,
		"pipelines[0].sink.mappings[1].row_key":     17,
		"pipelines[0].sink.mappings[1].colums":      18,
	} {
		if lines[path] != want {
			t.Errorf("keyLines[%s] = %d, want %d", path, lines[path], want)
		}
	}
	_, err := Parse(data)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Parse error = %v", err)
	}
	want := []string{
		`pipelines[0].payload.schema: "x.proto" is a protobuf schema, but payload.format is avro (write topic or the path of a .avsc file) (line 8)`,
		`pipelines[0].filter: must not be empty (leave it out to keep every message) (line 9)`,
		`pipelines[0].sink.mappings[0].columns.Bad: unclosed placeholder "{data" at offset 0 (write {{ for a literal brace) (line 16)`,
		`pipelines[0].sink.mappings[1].row_key: "fixed" has no placeholder: every message would overwrite one row (line 17)`,
		`pipelines[0].sink.mappings[1].columns: must name at least one column (line 17)`, // missing: its mapping's line
		`pipelines[0].sink.mappings[1].colums: unknown key; did you mean columns? (line 18)`,
	}
	if got := strings.Split(ps.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMappingsRowKeysWarnOfHotspots(t *testing.T) {
	cleanEnv(t)
	data := []byte(minimal + `      mappings:
        - {row_key: "{data.device}", columns: {x: "{data}"}}
        - {row_key: "{data.created_at}#{data.device}", columns: {x: "{data}"}}
        - {row_key: "{= data.created_at}#{data.device}", columns: {x: "{data}"}}
`)
	cfg := mustParse(t, string(data))
	ws := Warnings(cfg, data)
	if len(ws) != 1 || ws[0].Path != "pipelines[0].sink.mappings[1].row_key" || ws[0].Line != 11 ||
		!strings.Contains(ws[0].Message, "a time or a sequence") {
		t.Errorf("warnings = %v; want one, for mappings[1] at line 11", ws)
	}
}

func TestMentionsItem(t *testing.T) {
	for src, want := range map[string]bool{
		"item":                          true,
		"item.id":                       true,
		"string(item)":                  true,
		"data.x + item[0]":              true,
		"{'k': item}['k']":              true,
		"data.item":                     false,
		"data . item":                   false,
		"items.size()":                  false,
		"my_item":                       false,
		"'item'":                        false,
		`"it's item"`:                   false,
		`'''item'''`:                    false,
		`"a\"item" + data.id`:           false,
		`"a\"" + item`:                  true,
		`r"x" + item.y`:                 true,
		"data.filter(x, x > 1).size()":  false,
		"data.exists(item2, item2 > 0)": false,
	} {
		if got := mentionsItem(src); got != want {
			t.Errorf("mentionsItem(%s) = %v, want %v", src, got, want)
		}
	}
}
