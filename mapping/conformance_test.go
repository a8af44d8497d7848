package mapping

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping/protobuf"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// The conformance test: one reading, in every format and encoding, mapped by
// one configuration, makes the same rows. Every format passes it. It is the
// whole Mapper's (schema files, topic schemas and their revisions, the
// decoding budget); each format's package also runs schematest, the suite
// of its Codec alone, on the same reading.

const (
	avscFile  = "testdata/conformance/reading.avsc"
	protoFile = "testdata/conformance/reading.proto"
	protoMsg  = "pubsink.test.Reading"
)

var readingTime = time.Date(2026, 12, 1, 10, 0, 0, 123_000_000, time.UTC)

// reading is the one record every payload below encodes; site is optional.
type reading struct {
	kind string
	site string
}

func (r reading) json() string {
	site := ""
	if r.site != "" {
		site = fmt.Sprintf(`,"site":%q`, r.site)
	}
	return fmt.Sprintf(`{"id":"r1","kind":%q,"sensor":"s1","value":12.5,"ts":"2026-12-01T10:00:00.123Z"%s,"points":[{"n":1,"v":0.5},{"n":2,"v":1.5}]}`, r.kind, site)
}

func (r reading) avroJSON() string {
	site := "null"
	if r.site != "" {
		site = fmt.Sprintf(`{"string":%q}`, r.site)
	}
	return fmt.Sprintf(`{"id":"r1","kind":%q,"sensor":"s1","value":12.5,"ts":%d,"site":%s,"points":[{"n":1,"v":0.5},{"n":2,"v":1.5}]}`, r.kind, readingTime.UnixMilli(), site)
}

func (r reading) avroBinary(t *testing.T) []byte {
	t.Helper()
	def, err := os.ReadFile(avscFile)
	if err != nil {
		t.Fatal(err)
	}
	schema := avro.MustParse(string(def))
	var site any
	if r.site != "" {
		site = r.site
	}
	b, err := avro.Marshal(schema, map[string]any{
		"id": "r1", "kind": r.kind, "sensor": "s1", "value": 12.5, "ts": readingTime, "site": site,
		"points": []any{map[string]any{"n": int64(1), "v": 0.5}, map[string]any{"n": int64(2), "v": 1.5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r reading) protoJSON() string { return r.json() } // protobuf's JSON mapping reads the same text

func (r reading) protoBinary(t *testing.T) []byte {
	t.Helper()
	c, err := protobuf.CompileFile(protoFile, protoMsg)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(c.Descriptor())
	if err := protojson.Unmarshal([]byte(r.json()), m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeSchemas serves one revision of a topic schema per name.
type fakeSchemas struct {
	defs  map[string]source.Schema // by name@revision
	calls int
	err   error
}

func (f *fakeSchemas) Get(_ context.Context, name, revision string) (source.Schema, error) {
	f.calls++
	if f.err != nil {
		return source.Schema{}, f.err
	}
	s, ok := f.defs[name+"@"+revision]
	if !ok {
		return source.Schema{}, fmt.Errorf("%s@%s: %w", name, revision, source.ErrSchemaGone)
	}
	return s, nil
}

func topicSchemas(t *testing.T) *fakeSchemas {
	avsc, err := os.ReadFile(avscFile)
	if err != nil {
		t.Fatal(err)
	}
	pdef, err := os.ReadFile(protoFile)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeSchemas{defs: map[string]source.Schema{
		"projects/p/schemas/avro@r1":  {Name: "projects/p/schemas/avro", Revision: "r1", Type: "avro", Definition: string(avsc)},
		"projects/p/schemas/proto@r1": {Name: "projects/p/schemas/proto", Revision: "r1", Type: "protobuf", Definition: string(pdef)},
	}}
}

func conformanceConfig(p config.Payload) config.Pipeline {
	return config.Pipeline{
		Name:    "conformance",
		Payload: p,
		Filter:  "data.kind != 'heartbeat'",
		Source: config.Source{
			IDTemplate:        "{data.id}",
			TimestampTemplate: "{data.ts}",
			TimestampFormat:   config.TimestampAuto,
		},
		Sink: config.Sink{
			Table: "readings", ColumnFamily: "d", Timestamp: config.CellTimeEvent, MaxRows: 10,
			Mappings: []config.Mapping{
				{RowKey: "{data.sensor}#{data.id}", Columns: map[string]string{
					"value": "{data.value}",
					"cents": "{= int(math.round(data.value * 100.0))}",
					"up":    "{= data.sensor.upperAscii()}",
				}},
				{Each: "data.points", RowKey: "{data.id}#{item.n}", Columns: map[string]string{
					"v": "{item.v}", "n2": "{= int(item.n) * 2}",
				}},
				{Table: "by_site", When: "has(data.site)", RowKey: "{data.site}#{data.id}", Columns: map[string]string{"id": "{data.id}"}},
			},
		},
	}
}

type format struct {
	name    string
	payload config.Payload
	data    func(r reading, t *testing.T) []byte
	attrs   map[string]string
}

func formats() []format {
	topic := func(name, enc string) map[string]string {
		return map[string]string{source.SchemaNameAttribute: "projects/p/schemas/" + name, source.SchemaRevisionAttribute: "r1", source.SchemaEncodingAttribute: enc}
	}
	return []format{
		{"json", config.Payload{Format: config.FormatJSON}, func(r reading, _ *testing.T) []byte { return []byte(r.json()) }, nil},
		{"avro binary, schema file", config.Payload{Format: config.FormatAvro, Schema: avscFile, Encoding: config.EncodingBinary}, reading.avroBinary, nil},
		{"avro json, schema file", config.Payload{Format: config.FormatAvro, Schema: avscFile, Encoding: config.EncodingJSON}, func(r reading, _ *testing.T) []byte { return []byte(r.avroJSON()) }, nil},
		{"avro binary, topic schema", config.Payload{Format: config.FormatAvro, Schema: config.SchemaTopic}, reading.avroBinary, topic("avro", "BINARY")},
		{"avro json, topic schema", config.Payload{Format: config.FormatAvro, Schema: config.SchemaTopic}, func(r reading, _ *testing.T) []byte { return []byte(r.avroJSON()) }, topic("avro", "JSON")},
		{"protobuf binary, schema file", config.Payload{Format: config.FormatProtobuf, Schema: protoFile, Message: protoMsg, Encoding: config.EncodingBinary}, reading.protoBinary, nil},
		{"protobuf json, schema file", config.Payload{Format: config.FormatProtobuf, Schema: protoFile, Message: protoMsg, Encoding: config.EncodingJSON}, func(r reading, _ *testing.T) []byte { return []byte(r.protoJSON()) }, nil},
		{"protobuf binary, topic schema", config.Payload{Format: config.FormatProtobuf, Schema: config.SchemaTopic}, reading.protoBinary, topic("proto", "BINARY")},
		{"protobuf json, topic schema", config.Payload{Format: config.FormatProtobuf, Schema: config.SchemaTopic}, func(r reading, _ *testing.T) []byte { return []byte(r.protoJSON()) }, topic("proto", "JSON")},
	}
}

func cells(kv ...string) []sinks.Cell {
	var out []sinks.Cell
	for i := 0; i < len(kv); i += 2 {
		out = append(out, sinks.Cell{Column: kv[i], Value: []byte(kv[i+1])})
	}
	return out
}

func TestEveryFormatMapsTheSameReadingToTheSameRows(t *testing.T) {
	want := []sinks.Row{
		{Table: "readings", Family: "d", Key: "s1#r1", Timestamp: readingTime, Cells: cells("cents", "1250", "up", "S1", "value", "12.5")},
		{Table: "readings", Family: "d", Key: "r1#1", Timestamp: readingTime, Cells: cells("n2", "2", "v", "0.5")},
		{Table: "readings", Family: "d", Key: "r1#2", Timestamp: readingTime, Cells: cells("n2", "4", "v", "1.5")},
		{Table: "by_site", Family: "d", Key: "berlin#r1", Timestamp: readingTime, Cells: cells("id", "r1")},
	}
	for _, f := range formats() {
		t.Run(f.name, func(t *testing.T) {
			m, err := New(conformanceConfig(f.payload), topicSchemas(t), sinks.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			msg := &source.Message{ID: "m1", Data: f.data(reading{kind: "reading", site: "berlin"}, t), Attributes: f.attrs, PublishTime: readingTime.Add(time.Second)}
			var r Result
			if err := m.Map(context.Background(), msg, &r); err != nil {
				t.Fatal(err)
			}
			if r.Key != "r1" || !r.EventTime.Equal(readingTime) || r.Filtered {
				t.Errorf("key %q, event time %v, filtered %v", r.Key, r.EventTime, r.Filtered)
			}
			if !reflect.DeepEqual(r.Rows, want) {
				t.Errorf("rows\n%v\nwant\n%v", rowsText(r.Rows), rowsText(want))
			}

			// Without the optional site: no index row.
			msg.Data = f.data(reading{kind: "reading"}, t)
			if err := m.Map(context.Background(), msg, &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Rows) != 3 {
				t.Errorf("without a site: %s", rowsText(r.Rows))
			}

			// A heartbeat is filtered.
			msg.Data = f.data(reading{kind: "heartbeat"}, t)
			if err := m.Map(context.Background(), msg, &r); err != nil || !r.Filtered || len(r.Rows) != 0 {
				t.Errorf("heartbeat: filtered %v, %d rows, %v", r.Filtered, len(r.Rows), err)
			}

			// A payload that does not decode is invalid_payload.
			msg.Data = []byte("\x00\xffnot a reading")
			var bad *BadInput
			if err := m.Map(context.Background(), msg, &r); !errors.As(err, &bad) || bad.Reason != deadletter.InvalidPayload {
				t.Errorf("garbage: %v, want invalid_payload", err)
			}
		})
	}
}

func rowsText(rows []sinks.Row) string {
	s := ""
	for _, r := range rows {
		s += fmt.Sprintf("  %s/%s %s @%s:", r.Table, r.Family, r.Key, r.Timestamp.Format(time.RFC3339Nano))
		for _, c := range r.Cells {
			s += fmt.Sprintf(" %s=%q", c.Column, c.Value)
		}
		s += "\n"
	}
	return s
}

func TestTopicSchemaRevisionsAreFetchedOnceAndGoneOnesDeadLettered(t *testing.T) {
	schemas := topicSchemas(t)
	m, err := New(conformanceConfig(config.Payload{Format: config.FormatAvro, Schema: config.SchemaTopic}), schemas, sinks.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]string{source.SchemaNameAttribute: "projects/p/schemas/avro", source.SchemaRevisionAttribute: "r1", source.SchemaEncodingAttribute: "BINARY"}
	msg := &source.Message{ID: "m1", Data: reading{kind: "reading"}.avroBinary(t), Attributes: attrs, PublishTime: readingTime}
	var r Result
	for range 3 {
		if err := m.Map(context.Background(), msg, &r); err != nil {
			t.Fatal(err)
		}
	}
	if schemas.calls != 1 {
		t.Errorf("%d fetches of one revision, want 1", schemas.calls)
	}
	st := m.Stats()
	if len(st.Revisions) != 1 || st.Revisions[0].Messages != 3 || st.Revisions[0].Type != "avro" {
		t.Errorf("stats %+v", st)
	}

	cases := []struct {
		name  string
		attrs map[string]string
	}{
		{"a deleted revision", map[string]string{source.SchemaNameAttribute: "projects/p/schemas/avro", source.SchemaRevisionAttribute: source.DeletedRevision}},
		{"a deleted schema", map[string]string{source.SchemaNameAttribute: source.DeletedSchema, source.SchemaRevisionAttribute: source.DeletedRevision}},
		{"a revision the API does not know", map[string]string{source.SchemaNameAttribute: "projects/p/schemas/avro", source.SchemaRevisionAttribute: "gone"}},
		{"no schema attributes", nil},
	}
	for _, c := range cases {
		msg := &source.Message{ID: "m2", Data: msg.Data, Attributes: c.attrs, PublishTime: readingTime}
		var bad *BadInput
		if err := m.Map(context.Background(), msg, &r); !errors.As(err, &bad) || bad.Reason != deadletter.SchemaUnavailable {
			t.Errorf("%s: %v, want schema_unavailable", c.name, err)
		}
	}

	// A fetch that fails for now is transient: not a BadInput, and tried
	// again by the next message.
	schemas.err = errors.New("unavailable")
	attrs2 := map[string]string{source.SchemaNameAttribute: "projects/p/schemas/avro", source.SchemaRevisionAttribute: "r2", source.SchemaEncodingAttribute: "BINARY"}
	msg2 := &source.Message{ID: "m3", Data: msg.Data, Attributes: attrs2, PublishTime: readingTime}
	var bad *BadInput
	if err := m.Map(context.Background(), msg2, &r); err == nil || errors.As(err, &bad) {
		t.Fatalf("a failed fetch gave %v, want a transient error", err)
	}
	schemas.err = nil
	schemas.defs["projects/p/schemas/avro@r2"] = schemas.defs["projects/p/schemas/avro@r1"]
	if err := m.Map(context.Background(), msg2, &r); err != nil {
		t.Fatalf("after the fetch recovered: %v", err)
	}
}

// TestDecodingWaitsForItsShareOfTheBudget: decoded trees are held within
// BoundDecoding's budget: a message waits while the budget is taken (its
// error is then ctx's, transient), and decodes once it is free.
func TestDecodingWaitsForItsShareOfTheBudget(t *testing.T) {
	m, err := New(conformanceConfig(config.Payload{Format: config.FormatJSON}), nil, sinks.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m.BoundDecoding(64 << 20)
	if m.budget != 1<<20 {
		t.Fatalf("budget %d, want 1 MiB (64 MiB / 64)", m.budget)
	}
	if err := m.decoding.Acquire(context.Background(), m.budget); err != nil {
		t.Fatal(err)
	}
	msg := &source.Message{ID: "m1", Data: []byte(reading{kind: "reading"}.json()), PublishTime: readingTime}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var r Result
	var bad *BadInput
	if err := m.Map(ctx, msg, &r); !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &bad) {
		t.Fatalf("with the budget taken: %v, want ctx's deadline", err)
	}
	m.decoding.Release(m.budget)
	if err := m.Map(context.Background(), msg, &r); err != nil || len(r.Rows) != 3 {
		t.Fatalf("with the budget free: %v, %d rows", err, len(r.Rows))
	}
}
