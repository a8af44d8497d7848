package protobuf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// The test files are mapping's: its tests of the whole Mapper and app's
// read them too.
const readingFile = "../testdata/proto/reading.proto"

func testCodec(t testing.TB, message string) *Codec {
	t.Helper()
	c, err := CompileFile(readingFile, message)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fromJSON builds a message of c's type with dynamicpb from its JSON
// form, and returns it and its wire format.
func fromJSON(t testing.TB, c *Codec, js string) (*dynamicpb.Message, []byte) {
	t.Helper()
	m := dynamicpb.NewMessage(c.desc)
	if err := (protojson.UnmarshalOptions{Resolver: c.types}).Unmarshal([]byte(js), m); err != nil {
		t.Fatalf("test message: %v", err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, b
}

// parsePath parses "a.b.0" as a template does.
func parsePath(s string) []template.Segment {
	if s == "" {
		return nil
	}
	tm, err := template.Compile("{data." + s + "}")
	if err != nil {
		panic(err)
	}
	return tm.Paths()[0].Path
}

func render(t testing.TB, v any, path string) (string, error) {
	t.Helper()
	b, err := value.Tree{V: v}.AppendPath(nil, parsePath(path))
	return string(b), err
}

const fullReading = `{
	"sensor": "t-1",
	"i32": -42, "i64": "-9007199254740993", "s32": -7, "s64": "-8", "sf32": -9, "sf64": "-10",
	"u32": 42, "u64": "18446744073709551615", "f32": 4294967295, "f64": "12",
	"fl": 0.1, "db": 2.5, "ok": true, "raw": "AAEC/w==",
	"status": "OK",
	"location": {"site": "roof", "lat": 1.5, "lng": -0.25},
	"counts": {"a": "1", "b": "-2"},
	"samples": [1.5, 2, 1e21, 1e-7],
	"path": [{"site": "a"}, {"site": "b", "parent": {"site": "c"}}],
	"text": "hello",
	"battery": 0,
	"byId": {"7": {"site": "x"}, "-1": {"site": "y"}},
	"flags": {"true": "yes"},
	"history": ["OK", "FAILED"],
	"deviceIdentifier": "dev-9",
	"device": {"id": "d1", "model": "m", "unit": "KELVIN"},
	"unit": "CELSIUS",
	"takenAt": "2024-05-01T12:30:00.123456789Z",
	"elapsed": "1.500s",
	"count": "7", "label": "", "flag": false, "ratio": 0.5, "small": 3, "blob": "aGk=", "gain": 0.1,
	"attrs": {"a": [1, "x", null, true], "b": {"c": 2.5}},
	"dyn": "v",
	"list": [1, "two"],
	"nothing": {},
	"extra": {"@type": "type.googleapis.com/pubsink.test.Reading.Location", "site": "any"},
	"mask": "a.b,c"
}`

// TestProtoRender is the table of the package's comment (doc.go): what {data.PATH}
// renders for each type, from the wire format and from JSON alike.
func TestProtoRender(t *testing.T) {
	c := testCodec(t, "pubsink.test.Reading")
	_, bin := fromJSON(t, c, fullReading)
	fromBin, err := c.Decode(bin, false)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := c.Decode([]byte(fullReading), true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromBin, fromJSON) {
		t.Errorf("the wire format and JSON decode differently:\n%#v\n%#v", fromBin, fromJSON)
	}
	for _, tc := range []struct{ path, want string }{
		{"sensor", "t-1"},
		{"i32", "-42"},
		{"i64", "-9007199254740993"},
		{"s32", "-7"},
		{"s64", "-8"},
		{"sf32", "-9"},
		{"sf64", "-10"},
		{"u32", "42"},
		{"u64", "18446744073709551615"},
		{"f32", "4294967295"},
		{"f64", "12"},
		{"fl", "0.1"},
		{"db", "2.5"},
		{"ok", "true"},
		{"raw", "\x00\x01\x02\xff"},
		{"status", "OK"},
		{"location", `{"lat":1.5,"lng":-0.25,"site":"roof"}`},
		{"location.site", "roof"},
		{"counts", `{"a":1,"b":-2}`},
		{"counts.b", "-2"},
		{"samples", `[1.5,2,1e+21,1e-7]`},
		{"samples.2", "1e+21"},
		{"path.1.parent.site", "c"},
		{"path.0", `{"lat":0,"lng":0,"site":"a"}`},
		{"text", "hello"},
		{"battery", "0"},
		{"by_id.7.site", "x"},
		{"by_id.-1.site", "y"},
		{"flags.true", "yes"},
		{"history", `["OK","FAILED"]`},
		{"history.1", "FAILED"},
		{"device_id", "dev-9"},
		{"device.unit", "KELVIN"},
		{"device", `{"id":"d1","model":"m","unit":"KELVIN"}`},
		{"unit", "CELSIUS"},
		{"taken_at", "2024-05-01T12:30:00.123Z"},
		{"elapsed", "1.5s"},
		{"count", "7"},
		{"label", ""},
		{"flag", "false"},
		{"ratio", "0.5"},
		{"small", "3"},
		{"blob", "hi"},
		{"gain", "0.1"},
		{"attrs", `{"a":[1,"x",null,true],"b":{"c":2.5}}`},
		{"attrs.a.1", "x"},
		{"attrs.b.c", "2.5"},
		{"dyn", "v"},
		{"list", `[1,"two"]`},
		{"list.1", "two"},
		{"nothing", "{}"},
		{"extra", `{"@type":"type.googleapis.com/pubsink.test.Reading.Location","lat":0,"lng":0,"site":"any"}`},
		{"extra.site", "any"},
		{"mask", "a.b,c"},
	} {
		got, err := render(t, fromBin, tc.path)
		if err != nil || got != tc.want {
			t.Errorf("{data.%s} = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	// What the tree has and has not.
	m := fromBin.(map[string]any)
	for _, absent := range []string{"number", "place", "deviceIdentifier"} {
		if _, ok := m[absent]; ok {
			t.Errorf("%s is in the tree", absent)
		}
	}
	for key, want := range map[string]any{
		"i32": int64(-42), "u32": uint64(42), "fl": 0.1, "ok": true, "raw": []byte{0, 1, 2, 0xff},
		"taken_at": time.Date(2024, 5, 1, 12, 30, 0, 123456789, time.UTC), "elapsed": 1500 * time.Millisecond,
		"count": int64(7), "small": uint64(3), "gain": 0.1, "list": []any{1.0, "two"},
	} {
		if got := m[key]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v; want %#v", key, got, want)
		}
	}
	// {data} of a whole message is its JSON; the attrs' null is in it.
	if got, err := render(t, fromBin, "attrs.a.2"); !errors.Is(err, template.ErrMissingField) {
		t.Errorf("{data.attrs.a.2} (null) = %q, %v; want missing field", got, err)
	}
}

// TestProtoPresence: an unset message field, oneof member, optional field
// or wrapper is absent; any other field is there with its zero value.
func TestProtoPresence(t *testing.T) {
	c := testCodec(t, "pubsink.test.Reading")
	v, err := c.Decode(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"sensor", ""}, {"i32", "0"}, {"u64", "0"}, {"db", "0"}, {"fl", "0"}, {"ok", "false"}, {"raw", ""},
		{"status", "STATUS_UNSPECIFIED"}, {"unit", "UNIT_UNSPECIFIED"},
		{"counts", "{}"}, {"samples", "[]"}, {"path", "[]"}, {"by_id", "{}"}, {"history", "[]"}, {"device_id", ""},
	} {
		if got, err := render(t, v, tc.path); err != nil || got != tc.want {
			t.Errorf("{data.%s} = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	for _, path := range []string{"location", "location.site", "text", "number", "place", "battery", "taken_at",
		"elapsed", "count", "label", "attrs", "dyn", "nothing", "extra", "mask", "device", "samples.0"} {
		if got, err := render(t, v, path); !errors.Is(err, template.ErrMissingField) {
			t.Errorf("{data.%s} = %q, %v; want missing field", path, got, err)
		}
	}
	// The same from JSON: "{}", and nulls.
	j, err := c.Decode([]byte(`{"location": null, "count": null, "battery": null}`), true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, j) {
		t.Errorf("JSON's empty message differs:\n%#v\n%#v", v, j)
	}
}

// TestProtoValues: oneof, unknown enum numbers, floats, Any of every kind.
func TestProtoValues(t *testing.T) {
	c := testCodec(t, "pubsink.test.Reading")
	m := dynamicpb.NewMessage(c.desc)
	fields := c.desc.Fields()
	set := func(name string, v protoreflect.Value) { m.Set(fields.ByName(protoreflect.Name(name)), v) }
	set("text", protoreflect.ValueOfString("first"))
	set("number", protoreflect.ValueOfInt64(5)) // the oneof's last member set wins
	set("status", protoreflect.ValueOfEnum(7))  // a number the enum lacks
	set("fl", protoreflect.ValueOfFloat32(3.4028235e38))
	set("db", protoreflect.ValueOfFloat64(-0.000001))
	hist := m.Mutable(fields.ByName("history")).List()
	hist.Append(protoreflect.ValueOfEnum(2))
	hist.Append(protoreflect.ValueOfEnum(9))
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Decode(b, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"number", "5"}, {"status", "7"}, {"history", `["FAILED","9"]`}, {"fl", "3.4028235e+38"},
		{"db", "-0.000001"},
	} {
		if got, err := render(t, v, tc.path); err != nil || got != tc.want {
			t.Errorf("{data.%s} = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	if _, err := render(t, v, "text"); !errors.Is(err, template.ErrMissingField) {
		t.Errorf("the oneof's other member is there: %v", err)
	}

	// Any: a message of the schema, a well-known type, a type not in it.
	for _, tc := range []struct{ js, want string }{
		{`{"extra": {"@type": "type.googleapis.com/pubsink.common.Device", "id": "d"}}`,
			`{"@type":"type.googleapis.com/pubsink.common.Device","id":"d","model":"","unit":"UNIT_UNSPECIFIED"}`},
		{`{"extra": {"@type": "type.googleapis.com/google.protobuf.Timestamp", "value": "2024-01-02T03:04:05Z"}}`,
			`{"@type":"type.googleapis.com/google.protobuf.Timestamp","value":"2024-01-02T03:04:05.000Z"}`},
		{`{"extra": {"@type": "type.googleapis.com/google.protobuf.Struct", "value": {"a": 1}}}`,
			`{"@type":"type.googleapis.com/google.protobuf.Struct","value":{"a":1}}`},
		{`{"extra": {"@type": "type.googleapis.com/pubsink.test.Reading", "extra": {"@type": "type.googleapis.com/google.protobuf.Empty", "value": {}}}}`,
			`{"@type":"type.googleapis.com/google.protobuf.Empty","value":{}}`},
		{`{"extra": {}}`, `{}`},
	} {
		_, bin := fromJSON(t, c, tc.js)
		path := "extra"
		if strings.Count(tc.js, "@type") == 2 {
			path = "extra.extra"
		}
		for _, json := range []bool{false, true} {
			data := bin
			if json {
				data = []byte(tc.js)
			}
			v, err := c.Decode(data, json)
			if err != nil {
				t.Errorf("%s (json %v): %v", tc.js, json, err)
				continue
			}
			if got, err := render(t, v, path); err != nil || got != tc.want {
				t.Errorf("%s (json %v): {data.%s} = %s, %v; want %s", tc.js, json, path, got, err, tc.want)
			}
		}
	}
	// An Any of a type the files do not define: its bytes.
	anyMsg := dynamicpb.NewMessage(fields.ByName("extra").Message())
	anyFields := anyMsg.Descriptor().Fields()
	anyMsg.Set(anyFields.ByName("type_url"), protoreflect.ValueOfString("type.googleapis.com/other.Thing"))
	anyMsg.Set(anyFields.ByName("value"), protoreflect.ValueOfBytes([]byte("xyz")))
	m = dynamicpb.NewMessage(c.desc)
	m.Set(fields.ByName("extra"), protoreflect.ValueOfMessage(anyMsg))
	if b, err = proto.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if v, err = c.Decode(b, false); err != nil {
		t.Fatal(err)
	}
	if got, err := render(t, v, "extra"); err != nil || got != `{"@type":"type.googleapis.com/other.Thing","value":"eHl6"}` {
		t.Errorf("{data.extra} = %s, %v", got, err)
	}
}

// TestProtoInvalid: bad payloads are invalid_payload, naming the problem.
func TestProtoInvalid(t *testing.T) {
	c := testCodec(t, "pubsink.test.Reading")
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	ts := func(secs int64, nanos int32) []byte {
		var inner []byte
		inner = protowire.AppendVarint(append(inner, tag(1, protowire.VarintType)...), uint64(secs))
		inner = protowire.AppendVarint(append(inner, tag(2, protowire.VarintType)...), uint64(int64(nanos)))
		return protowire.AppendBytes(tag(31, protowire.BytesType), inner)
	}
	for _, tc := range []struct {
		name string
		data string
		json bool
		want string
	}{
		{"truncated", "\x0a\x05ab", false, "protobuf"},
		{"bad varint", "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", false, "malformed"},
		{"bad UTF-8", "\x0a\x01\xff", false, "UTF-8"},
		{"stray end group", "\x0c", false, "end group"},
		{"unterminated group", "\xfb\x06\x08\x01", false, "EOF"},
		{"timestamp before year 1", string(ts(-62135596801, 0)), false, "Timestamp out of range"},
		{"timestamp nanos", string(ts(0, 1e9)), false, "Timestamp out of range"},
		{"map key of two wire types", "\x92\x01\x05\x0a\x010\x080", false, "map key of the wrong wire type"}, // found by FuzzProtoDecode: proto.Unmarshal panics
		{"JSON syntax", `{"sensor": }`, true, "protobuf"},
		{"JSON type", `{"sensor": 1}`, true, "protobuf"},
		{"JSON any unresolved", `{"extra": {"@type": "x/y.Z"}}`, true, "protobuf"},
	} {
		_, err := c.Decode([]byte(tc.data), tc.json)
		if !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want invalid payload naming %q", tc.name, err, tc.want)
		}
	}
	// A duration longer than time.Duration holds.
	m := dynamicpb.NewMessage(c.desc)
	d := dynamicpb.NewMessage(c.desc.Fields().ByName("elapsed").Message())
	d.Set(d.Descriptor().Fields().ByNumber(1), protoreflect.ValueOfInt64(300*365*86400))
	m.Set(c.desc.Fields().ByName("elapsed"), protoreflect.ValueOfMessage(d))
	b, _ := proto.Marshal(m)
	if _, err := c.Decode(b, false); !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), "292 years") {
		t.Errorf("a 300-year duration: %v", err)
	}
	// Unknown fields are ignored, in both encodings.
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1)
	unknown = append(unknown, protowire.AppendTag(nil, 1000, protowire.StartGroupType)...)
	unknown = append(unknown, protowire.AppendTag(nil, 1000, protowire.EndGroupType)...)
	unknown = append(unknown, "\x0a\x01x"...)
	for _, tc := range []struct {
		data string
		json bool
	}{{string(unknown), false}, {`{"sensor": "x", "zzz": [1, {"a": 2}]}`, true}} {
		v, err := c.Decode([]byte(tc.data), tc.json)
		if err != nil {
			t.Errorf("unknown fields: %v", err)
			continue
		}
		if got, _ := render(t, v, "sensor"); got != "x" {
			t.Errorf("unknown fields: sensor = %q", got)
		}
	}
}

// nodeChain is the wire format of a chain of Nodes, each the child of the
// one before, `levels` deep below the root.
func nodeChain(levels int) []byte {
	var b []byte
	for range levels {
		b = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), b)
	}
	return b
}

func nodeChainJSON(levels int) string {
	return strings.Repeat(`{"child":`, levels) + "{}" + strings.Repeat("}", levels)
}

// TestProtoDepth: a tree may nest value.MaxDepth levels of maps and lists, as a
// JSON payload may; a Node at depth 126 has its (empty) list of children
// at 127.
func TestProtoDepth(t *testing.T) {
	c := testCodec(t, "pubsink.test.Node")
	for _, json := range []bool{false, true} {
		ok := nodeChain(126)
		deep := nodeChain(127)
		if json {
			ok, deep = []byte(nodeChainJSON(126)), []byte(nodeChainJSON(127))
		}
		v, err := c.Decode(ok, json)
		if err != nil {
			t.Fatalf("json %v: 126 levels: %v", json, err)
		}
		if _, err := value.Append(nil, v); err != nil {
			t.Errorf("json %v: rendering 126 levels: %v", json, err)
		}
		if _, err := c.Decode(deep, json); !errors.Is(err, template.ErrInvalidPayload) {
			t.Errorf("json %v: 127 levels: %v; want invalid payload", json, err)
		}
	}
	// Far deeper, in known and unknown fields: refused at once, the stack
	// small.
	for name, data := range map[string][]byte{
		"chain":          nodeChain(3000),
		"unknown groups": bytes.Repeat(protowire.AppendTag(nil, 99, protowire.StartGroupType), 1<<20),
		"children":       bytes.Repeat([]byte{0x12, 0x80, 0x80, 0x40}, 1<<18),
	} {
		if _, err := c.Decode(data, false); !errors.Is(err, value.ErrTooDeep) && !errors.Is(err, template.ErrInvalidPayload) {
			t.Errorf("%s: %v; want invalid payload", name, err)
		}
	}
}

// TestProtoFlood: 10 MB of empty sub-messages is refused before a message
// is made, in either encoding; an honest 10 MB payload decodes.
func TestProtoFlood(t *testing.T) {
	c := testCodec(t, "pubsink.test.Node")
	const size = 10 << 20
	empties := bytes.Repeat([]byte{0x12, 0x00}, size/2) // children: {}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	_, err := c.Decode(empties, false)
	runtime.ReadMemStats(&ms)
	if !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("10 MB of empty messages: %v", err)
	}
	if alloc := ms.TotalAlloc - before; alloc > 1<<20 {
		t.Errorf("refusing 10 MB of empty messages allocated %d bytes", alloc)
	}
	t.Log(err)
	js := `{"children":[` + strings.Repeat("{},", size/3) + "{}]}"
	if _, err := c.Decode([]byte(js), true); !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("10 MB of empty JSON messages: %v", err)
	}
	// Empty messages in map values, in Struct, in an Any.
	r := testCodec(t, "pubsink.test.Reading")
	structs := protowire.AppendBytes(protowire.AppendTag(nil, 42, protowire.BytesType), bytes.Repeat([]byte{0x0a, 0x00}, size/2))
	for name, data := range map[string][]byte{
		"list values":  structs,
		"any of nodes": anyOf(t, r, "pubsink.test.Node", empties),
	} {
		if _, err := r.Decode(data, false); !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), "more than") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// In JSON: a ListValue of zeros (a Value message each), and nesting.
	zeros := `{"list": [` + strings.Repeat("0,", size/2) + "0]}"
	if _, err := r.Decode([]byte(zeros), true); !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("10 MB of JSON Values: %v", err)
	}
	deep := `{"attrs": {"a": ` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + "}}"
	if _, err := r.Decode([]byte(deep), true); !errors.Is(err, value.ErrTooDeep) {
		t.Errorf("JSON arrays 200 deep: %v", err)
	}
}

// TestProtoBudget: where maxNodes refuses sparse records of many
// fields, as the package's comment (doc.go) says.
func TestProtoBudget(t *testing.T) {
	var def strings.Builder
	def.WriteString("syntax = \"proto3\";\nmessage Batch {\n  message Rec {\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&def, "    int32 f%d = %d;\n", i, i)
	}
	def.WriteString("  }\n  repeated Rec recs = 1;\n}\n")
	c, err := CompileDefinition(def.String())
	if err != nil {
		t.Fatal(err)
	}
	rec := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0x08, 1, 0x10, 2, 0x18, 3})
	for _, tc := range []struct {
		records int
		ok      bool
	}{{3276, true}, {3277, false}} {
		v, err := c.Decode(bytes.Repeat(rec, tc.records), false)
		if ok := err == nil; ok != tc.ok {
			t.Errorf("%d records of 8 bytes: %v", tc.records, err)
		}
		if err == nil {
			if got, _ := render(t, v, fmt.Sprintf("recs.%d.f3", tc.records-1)); got != "3" {
				t.Errorf("the last record's f3 = %q", got)
			}
		}
		// The same in JSON, far longer, is counted alike: the tree is the
		// same size.
		js := `{"recs": [` + strings.Repeat(`{"f1": 1, "f2": 2, "f3": 3}, `, tc.records-1) + `{"f1": 1, "f2": 2, "f3": 3}]}`
		if _, err := c.Decode([]byte(js), true); err != nil {
			t.Errorf("%d records in JSON: %v", tc.records, err)
		}
	}
}

// anyOf is a Reading whose extra is an Any of type name holding value.
func anyOf(t testing.TB, c *Codec, name string, value []byte) []byte {
	var a []byte
	a = protowire.AppendString(protowire.AppendTag(a, 1, protowire.BytesType), "type.googleapis.com/"+name)
	a = protowire.AppendBytes(protowire.AppendTag(a, 2, protowire.BytesType), value)
	return protowire.AppendBytes(protowire.AppendTag(nil, 44, protowire.BytesType), a)
}

// TestProtoMemory measures the heap of the trees of payloads that use
// their whole budget (or nearly): what the package's comment (doc.go) says a node and a
// payload byte cost at most.
func TestProtoMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates")
	}
	node := testCodec(t, "pubsink.test.Node")
	reading := testCodec(t, "pubsink.test.Reading")
	const size = 1 << 20
	big := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1<<20) // n: 3-byte value
	child := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), big)
	var packed []byte
	for len(packed) < size {
		packed = protowire.AppendVarint(packed, uint64(len(packed)%100))
	}
	loc := protowire.AppendBytes(protowire.AppendTag(nil, 20, protowire.BytesType), []byte{0x0a, 0x01, 'x'}) // path: {site: "x"}
	var byID, attrs []byte
	for i := 0; len(byID) < size; i++ {
		entry := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(i))
		byID = protowire.AppendBytes(protowire.AppendTag(byID, 25, protowire.BytesType), entry)
	}
	one := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 0))
	for i := 0; len(attrs) < size; i++ {
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), strconv.Itoa(i))
		entry = append(entry, one...)
		attrs = protowire.AppendBytes(protowire.AppendTag(attrs, 1, protowire.BytesType), entry)
	}
	for _, tc := range []struct {
		name string
		c    *Codec
		data []byte
	}{
		{"packed varints", node, protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), packed)},
		{"children {n: 1048576}", node, bytes.Repeat(child, size/len(child))},
		{"path [{site: x}]", reading, bytes.Repeat(loc, size/len(loc))},
		{"by_id {K: {}}", reading, byID},
		{"attrs {K: 1}", reading, protowire.AppendBytes(protowire.AppendTag(nil, 40, protowire.BytesType), attrs)},
	} {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		v, err := tc.c.Decode(tc.data, false)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		runtime.ReadMemStats(&m1)
		peak := m1.TotalAlloc - m0.TotalAlloc
		runtime.GC()
		runtime.ReadMemStats(&m1)
		live := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
		nodes := countNodes(v)
		budget := maxNodes(len(tc.data))
		t.Logf("%s: %d bytes, %d tree nodes (budget %d), %.0f B allocated and %.0f B live per payload byte",
			tc.name, len(tc.data), nodes, budget, float64(peak)/float64(len(tc.data)), float64(live)/float64(len(tc.data)))
		if n := float64(len(tc.data)); float64(peak) > 250*n+4<<20 || float64(live) > 100*n+4<<20 {
			t.Errorf("%s: %d bytes allocated, %d kept, for a %d-byte payload", tc.name, peak, live, len(tc.data))
		}
		runtime.KeepAlive(v)
	}
}

// countNodes counts the nodes of a tree.
func countNodes(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := 1
		for _, e := range x {
			n += countNodes(e)
		}
		return n
	case []any:
		n := 1
		for _, e := range x {
			n += countNodes(e)
		}
		return n
	}
	return 1
}

func TestProtoCompileFile(t *testing.T) {
	c := testCodec(t, ".pubsink.test.Reading.Location")
	if c.desc.FullName() != "pubsink.test.Reading.Location" {
		t.Errorf("compiled %s", c.desc.FullName())
	}
	if _, err := CompileFile(readingFile, "pubsink.common.Device"); err != nil {
		t.Errorf("a message of an imported file: %v", err)
	}
	for _, tc := range []struct{ path, message, want string }{
		{readingFile, "pubsink.test.Readin", `no message "pubsink.test.Readin" in ../testdata/proto/reading.proto; did you mean "pubsink.test.Reading"? (its messages: pubsink.test.Reading, pubsink.test.Reading.Location, pubsink.test.Node)`},
		{readingFile, "Node", `did you mean "pubsink.test.Node"?`},
		{readingFile, "pubsink.test.Reading.CountsEntry", `no message`},
		{readingFile, "pubsink.test.Reading.sensor", `no message`},
		{readingFile, "", `no message named`},
		{"../testdata/proto/none.proto", "x.Y", "none.proto"},
	} {
		_, err := CompileFile(tc.path, tc.message)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v; want %q", tc.path, tc.message, err, tc.want)
		}
	}
	// A wrong message is payload.message's problem, not the file's.
	var noMessage *MessageError
	if _, err := CompileFile(readingFile, "pubsink.test.Readin"); !errors.As(err, &noMessage) {
		t.Errorf("a wrong message: %T %v, want a *MessageError", err, err)
	}
	// A syntax error, in the file or in one it imports, and an import that
	// is not there are located once, at PATH:LINE:COL of the file at fault,
	// with its path as given (an imported one's from the importer's folder).
	dir := t.TempDir()
	for name, src := range map[string]string{
		"imports_bad.proto": "syntax = \"proto3\";\nimport \"bad.proto\";\nmessage A {}\n",
		"bad.proto":         "syntax = \"proto3\";\nmessage A { string a = 1 }\n",
		"missing.proto":     "syntax = \"proto3\";\nimport \"other.proto\";\nmessage A {}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"../testdata/proto/syntax_error.proto", "../testdata/proto/syntax_error.proto:8:3: syntax error: expecting ';'"},
		{filepath.Join(dir, "bad.proto"), filepath.Join(dir, "bad.proto") + ":2:26: syntax error: expecting ';'"},
		{filepath.Join(dir, "imports_bad.proto"), filepath.Join(dir, "bad.proto") + ":2:26: syntax error: expecting ';'"},
		{filepath.Join(dir, "missing.proto"), filepath.Join(dir, "missing.proto") + ":2:8: open " + filepath.Join(dir, "other.proto") + ": no such file or directory"},
	} {
		_, err := CompileFile(tc.path, "A")
		var located *LocatedError
		if err == nil || err.Error() != tc.want || !errors.As(err, &located) {
			t.Errorf("%s: %T %v\nwant a *LocatedError %s", tc.path, err, err, tc.want)
		}
	}
}

func TestProtoDefinition(t *testing.T) {
	def := `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  message Line { string sku = 1; int32 qty = 2; }
  enum State { NEW = 0; PAID = 1; }
  string id = 1;
  repeated Line lines = 2;
  State state = 3;
  google.protobuf.Timestamp at = 4;
}`
	c, err := CompileDefinition(def)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Decode([]byte(`{"id": "o1", "lines": [{"sku": "a", "qty": 2}], "state": "PAID", "at": "2024-01-01T00:00:00Z"}`), true)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"id": "o1", "lines.0.qty": "2", "state": "PAID", "at": "2024-01-01T00:00:00.000Z"} {
		if got, err := render(t, v, path); err != nil || got != want {
			t.Errorf("{data.%s} = %q, %v; want %q", path, got, err, want)
		}
	}
	for _, tc := range []struct{ def, want string }{
		{`syntax = "proto3"; message A {} message B {}`, "2 top-level messages (A, B)"},
		{`syntax = "proto3"; enum E { X = 0; }`, "defines no message"},
		{`syntax = "proto3"; message A { int32 a = 1 }`, "schema.proto:1"},
		{`syntax = "proto3"; import "other.proto"; message A {}`, "other.proto"},
	} {
		_, err := CompileDefinition(tc.def)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.def, err, tc.want)
		}
	}
}

func TestProtoCheckPath(t *testing.T) {
	c := testCodec(t, "pubsink.test.Reading")
	for _, ok := range []string{
		"", "sensor", "location.parent.parent.site", "counts.anything", "samples.3", "path.0.site", "by_id.-7.lat",
		"flags.true", "text", "place.site", "battery", "taken_at", "attrs.a.b.0.c", "dyn.x", "list.0.y", "extra.site",
		"extra.anything.at.all", "device.unit", "history.0",
	} {
		if err := c.CheckPath(parsePath(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"sensr", `no field "sensr" in message pubsink.test.Reading; did you mean "sensor"?`},
		{"deviceIdentifier", `no field "deviceIdentifier" in message pubsink.test.Reading; did you mean "device_id"?`},
		{"Sensor", `did you mean "sensor"?`},
		{"location.sit", `no field "sit" in message pubsink.test.Reading.Location; did you mean "site"?`},
		{"zzzzzz", `no field "zzzzzz" in message pubsink.test.Reading`},
		{"sensor.x", `sensor is a string, a single value: it has no field "x"`},
		{"status.x", `status is a enum pubsink.test.Reading.Status`},
		{"samples.x", `samples is a repeated field: its elements are numbered, "x" is not a number`},
		{"path.0.nope", `no field "nope" in message pubsink.test.Reading.Location`},
		{"by_id.x", `by_id is a map with int32 keys: "x" is not one`},
		{"by_id.99999999999", `by_id is a map with int32 keys`},
		{"flags.yes", `flags is a map with bool keys`},
		{"taken_at.seconds", `taken_at is a google.protobuf.Timestamp, a single value: it has no field "seconds"`},
		{"count.value", `count is a google.protobuf.Int64Value`},
		{"nothing.x", `no field "x" in message google.protobuf.Empty`},
		{"device.idd", `no field "idd" in message pubsink.common.Device; did you mean "id"?`},
	} {
		err := c.CheckPath(parsePath(tc.path))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.path, err, tc.want)
		}
	}
}

// BenchmarkProtoDecode decodes a message of about 200 bytes and renders 4
// of its fields, from each encoding.
func BenchmarkProtoDecode(b *testing.B) {
	c := testCodec(b, "pubsink.test.Reading")
	js := `{"sensor": "thermo-livingroom-0042", "i64": "1714566600123", "status": "OK",
		"location": {"site": "building-7/floor-3/room-12", "lat": 52.520008, "lng": 13.404954},
		"counts": {"errors": "3", "retries": "12"}, "samples": [21.5, 21.7, 21.6, 21.9],
		"takenAt": "2024-05-01T12:30:00.123Z", "deviceIdentifier": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
		"device": {"id": "dev-42", "model": "TX-1000", "unit": "CELSIUS"}, "label": "north wing"}`
	_, bin := fromJSON(b, c, js)
	paths := [][]template.Segment{parsePath("sensor"), parsePath("taken_at"), parsePath("location.site"), parsePath("counts.errors")}
	for _, enc := range []struct {
		name string
		data []byte
		json bool
	}{{fmt.Sprintf("wire_%dB", len(bin)), bin, false}, {fmt.Sprintf("json_%dB", len(js)), []byte(js), true}} {
		b.Run(enc.name, func(b *testing.B) {
			var dst []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(enc.data)))
			for b.Loop() {
				v, err := c.Decode(enc.data, enc.json)
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range paths {
					if dst, err = (value.Tree{V: v}).AppendPath(dst[:0], p); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// TestProtoSyntaxes: proto2 (required, defaults, groups, closed enums,
// extensions) and editions (presence and encoding by features).
func TestProtoSyntaxes(t *testing.T) {
	p2, err := CompileDefinition(`syntax = "proto2";
package p2;
message M {
  required string id = 1;
  optional int32 n = 2 [default = 5];
  optional group G = 3 { optional int32 x = 4; }
  repeated int32 packed = 5 [packed = true];
  repeated int32 unpacked = 6;
  enum E { A = 1; B = 2; }
  optional E e = 7;
  extensions 100 to 200;
}
extend M { optional int32 ext = 100; }`)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), "x")
	b = protowire.AppendTag(b, 3, protowire.StartGroupType)
	b = protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.VarintType), 3)
	b = protowire.AppendTag(b, 3, protowire.EndGroupType)
	b = protowire.AppendBytes(protowire.AppendTag(b, 5, protowire.BytesType), []byte{1, 2})
	b = protowire.AppendVarint(protowire.AppendTag(b, 5, protowire.VarintType), 3) // unpacked into a packed field
	b = protowire.AppendBytes(protowire.AppendTag(b, 6, protowire.BytesType), []byte{4})
	b = protowire.AppendVarint(protowire.AppendTag(b, 7, protowire.VarintType), 9)   // not in the closed enum: its number, as in proto3
	b = protowire.AppendVarint(protowire.AppendTag(b, 100, protowire.VarintType), 1) // an extension: ignored
	v, err := p2.Decode(b, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := render(t, v, ""); err != nil || got != `{"e":"9","g":{"x":3},"id":"x","packed":[1,2,3],"unpacked":[4]}` {
		t.Errorf("proto2: %s, %v", got, err)
	}
	if _, err := p2.Decode(b[3:], false); !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), "required") {
		t.Errorf("proto2 without its required field: %v", err)
	}
	j, err := p2.Decode([]byte(`{"id": "x", "G": {"x": 3}, "packed": [1, 2, 3], "unpacked": [4], "n": 0}`), true)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := render(t, j, ""); err != nil || got != `{"g":{"x":3},"id":"x","n":0,"packed":[1,2,3],"unpacked":[4]}` {
		t.Errorf("proto2 from JSON: %s, %v", got, err)
	}

	ed, err := CompileDefinition(`edition = "2023";
message M {
  int32 a = 1;
  int32 b = 2 [features.field_presence = IMPLICIT];
  M child = 3 [features.message_encoding = DELIMITED];
}`)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(nil, 3, protowire.StartGroupType)
	b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 7)
	b = protowire.AppendTag(b, 3, protowire.EndGroupType)
	if v, err = ed.Decode(b, false); err != nil {
		t.Fatal(err)
	}
	if got, err := render(t, v, ""); err != nil || got != `{"b":0,"child":{"a":7,"b":0}}` {
		t.Errorf("edition 2023: %s, %v", got, err)
	}
}
