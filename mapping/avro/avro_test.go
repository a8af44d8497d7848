package avro

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	hamba "github.com/hamba/avro/v2"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// testdataFile reads a file of testdata.
func testdataFile(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func mustCompile(tb testing.TB, definition string) *Codec {
	tb.Helper()
	c, err := Compile(definition)
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return c
}

// marshal encodes v in Avro's binary encoding with hamba/avro.
func marshal(tb testing.TB, definition string, v any) []byte {
	tb.Helper()
	s, err := hamba.ParseWithCache(definition, "", &hamba.SchemaCache{})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := hamba.Marshal(s, v)
	if err != nil {
		tb.Fatalf("avro.Marshal: %v", err)
	}
	return b
}

// segments is a dotted path as the template parses it.
func segments(path string) []template.Segment {
	if path == "" {
		return nil
	}
	var out []template.Segment
	for _, k := range strings.Split(path, ".") {
		i := -1
		if k != "" && strings.Trim(k, "0123456789") == "" {
			i = 0
			for _, c := range k {
				i = i*10 + int(c-'0')
			}
		}
		out = append(out, template.Segment{Key: k, Index: i})
	}
	return out
}

// allTypesValue is the value of all_types.avsc that all_types.json holds,
// as hamba/avro encodes it.
func allTypesValue() map[string]any {
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	var fid [16]byte
	for i := range fid {
		fid[i] = byte(i * 0x11)
	}
	return map[string]any{
		"sensor":   "s-1",
		"count":    -7,
		"total":    int64(1234567890123),
		"ratio":    float32(0.1),
		"value":    21.5,
		"ok":       true,
		"nothing":  nil,
		"raw":      []byte{0, 0xff, 'a', 'b'},
		"hash":     [4]byte{0xde, 0xad, 0xbe, 0xef},
		"status":   "WARN",
		"location": map[string]any{"lat": 52.5, "lon": 13.4},
		"tags":     map[string]any{"a": "x", "b": "y"},
		"samples":  []any{1.0, 2.5},
		"note":     map[string]any{"string": "hello"},
		"missing":  map[string]any(nil),
		"shape":    map[string]any{"com.example.Square": map[string]any{"side": int64(2)}},
		"ts_ms":    at,
		"ts_us":    at,
		"ts_ns":    at.UnixNano(),
		"lts_ms":   at,
		"lts_us":   at,
		"day":      time.Date(2024, 5, 6, 0, 0, 0, 0, time.UTC),
		"t_ms":     7*time.Hour + 8*time.Minute + 9123*time.Millisecond,
		"t_us":     7*time.Hour + 8*time.Minute + 9123456*time.Microsecond,
		"price":    big.NewRat(-1234, 100),
		"amount":   big.NewRat(-5, 100),
		"id":       "123e4567-e89b-12d3-a456-426614174000",
		"fid":      fid,
		"level":    3,
	}
}

// renderings is what a template renders for each path of all_types;
// the package's doc (doc.go) has the same table. An error is the sentinel it wraps.
var renderings = []struct {
	path string
	want string
	err  error
}{
	{path: "sensor", want: "s-1"},
	{path: "count", want: "-7"},
	{path: "total", want: "1234567890123"},
	{path: "ratio", want: "0.1"},
	{path: "value", want: "21.5"},
	{path: "ok", want: "true"},
	{path: "nothing", err: template.ErrMissingField},
	{path: "raw", want: "\x00\xffab"},
	{path: "hash", want: "\xde\xad\xbe\xef"},
	{path: "status", want: "WARN"},
	{path: "location", want: `{"lat":52.5,"lon":13.4}`},
	{path: "location.lat", want: "52.5"},
	{path: "location.alt", err: template.ErrMissingField},
	{path: "tags", want: `{"a":"x","b":"y"}`},
	{path: "tags.b", want: "y"},
	{path: "samples", want: "[1,2.5]"},
	{path: "samples.1", want: "2.5"},
	{path: "samples.2", err: template.ErrMissingField},
	{path: "note", want: "hello"},
	{path: "missing", err: template.ErrMissingField},
	{path: "shape", want: `{"side":2}`},
	{path: "shape.side", want: "2"},
	{path: "ts_ms", want: "2024-05-06T07:08:09.123Z"},
	{path: "ts_us", want: "2024-05-06T07:08:09.123Z"},
	{path: "ts_ns", want: "2024-05-06T07:08:09.123Z"},
	{path: "lts_ms", want: "2024-05-06T07:08:09.123Z"},
	{path: "lts_us", want: "2024-05-06T07:08:09.123Z"},
	{path: "day", want: "2024-05-06"},
	{path: "t_ms", want: "07:08:09.123"},
	{path: "t_us", want: "07:08:09.123456"},
	{path: "price", want: "-12.34"},
	{path: "amount", want: "-0.05"},
	{path: "id", want: "123e4567-e89b-12d3-a456-426614174000"},
	{path: "fid", want: "00112233-4455-6677-8899-aabbccddeeff"},
	{path: "level", want: "3"},
	{path: "sensor.x", err: template.ErrInvalidPayload},
}

func TestAvroDecodeAllTypes(t *testing.T) {
	schema := testdataFile(t, "all_types.avsc")
	c := mustCompile(t, schema)
	bin, err := c.Decode(marshal(t, schema, allTypesValue()), false)
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	js, err := c.Decode([]byte(testdataFile(t, "all_types.json")), true)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	for _, enc := range []struct {
		name string
		v    any
	}{{"binary", bin}, {"JSON", js}} {
		for _, r := range renderings {
			got, err := value.Tree{V: enc.v}.AppendPath([]byte("<"), segments(r.path))
			switch {
			case r.err != nil && !errors.Is(err, r.err):
				t.Errorf("%s %s: error %v, want %v", enc.name, r.path, err, r.err)
			case r.err == nil && err != nil:
				t.Errorf("%s %s: %v", enc.name, r.path, err)
			case r.err == nil && string(got) != "<"+r.want:
				t.Errorf("%s %s = %q, want %q", enc.name, r.path, got[1:], r.want)
			}
		}
	}
	if !reflect.DeepEqual(bin, js) {
		t.Errorf("binary and JSON decode differently:\n%#v\n%#v", bin, js)
	}

	// The Go types of the value model (package value), exactly.
	m := bin.(map[string]any)
	types := map[string]any{
		"count": int64(0), "ratio": 0.0, "raw": []byte(nil), "hash": []byte(nil), "status": "",
		"location": map[string]any(nil), "samples": []any(nil), "ts_us": time.Time{}, "day": "",
		"t_ms": "", "price": value.Decimal(""), "amount": value.Decimal(""), "fid": "",
	}
	for k, want := range types {
		if reflect.TypeOf(m[k]) != reflect.TypeOf(want) {
			t.Errorf("%s is a %T, want %T", k, m[k], want)
		}
	}
	if got, want := m["ts_us"].(time.Time), time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("ts_us = %v, want %v in UTC", got, want)
	}
	if got := m["ts_ns"].(time.Time); got.Nanosecond() != 123456789 {
		t.Errorf("ts_ns = %v: nanoseconds lost", got)
	}

	// The whole record is compact JSON.
	whole, err := value.Tree{V: bin}.AppendPath(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(whole) {
		t.Fatalf("the record renders as invalid JSON: %s", whole)
	}
	for _, part := range []string{`"amount":-0.05`, `"raw":"AP9hYg=="`, `"ts_ms":"2024-05-06T07:08:09.123Z"`, `"shape":{"side":2}`} {
		if !bytes.Contains(whole, []byte(part)) {
			t.Errorf("the record's JSON lacks %s: %s", part, whole)
		}
	}
	// A record's null fields are absent, as an unset proto field is (so
	// that has(data.missing) is false).
	for _, k := range []string{"missing", "nothing"} {
		if _, ok := m[k]; ok {
			t.Errorf("null field %s is present", k)
		}
	}
}

func TestAvroDecimal(t *testing.T) {
	for _, tc := range []struct {
		unscaled string
		scale    int
		want     string
	}{
		{"0", 2, "0.00"},
		{"-1234", 2, "-12.34"},
		{"-12340", 3, "-12.340"},
		{"5", 2, "0.05"},
		{"-5", 2, "-0.05"},
		{"-5", 0, "-5"},
		{"100", 2, "1.00"},
		{"-9223372036854775808", 2, "-92233720368547758.08"},
		{"9223372036854775807", 0, "9223372036854775807"},
		{"-123456789012345678901234567890", 4, "-12345678901234567890123456.7890"},
		{"123456789012345678901234567890", 35, "0.00000123456789012345678901234567890"},
	} {
		v, _ := new(big.Int).SetString(tc.unscaled, 10)
		// two's complement, big-endian, with a redundant sign byte
		n := len(v.Bytes()) + 2
		b := make([]byte, n)
		if v.Sign() >= 0 {
			v.FillBytes(b)
		} else {
			new(big.Int).Add(v, new(big.Int).Lsh(big.NewInt(1), uint(8*n))).FillBytes(b)
		}
		got, err := decimal(b, tc.scale, 0)
		if err != nil || string(got) != tc.want {
			t.Errorf("decimal %s scale %d = %q, %v; want %q", tc.unscaled, tc.scale, got, err, tc.want)
		}
	}
	if got, err := decimal(nil, 2, 0); err != nil || got != "0.00" {
		t.Errorf("empty decimal = %q, %v", got, err)
	}
}

func TestAvroFloat(t *testing.T) {
	for _, f := range []float32{0.1, 21.5, -3.4028235e38, 1e-45, 16777217, 0} {
		got := widenFloat32(f)
		if float32(got) != f {
			t.Errorf("widenFloat32(%v) = %v: not the same float32", f, got)
		}
	}
	if got := widenFloat32(0.1); got != 0.1 {
		t.Errorf("widenFloat32(0.1) = %v", got)
	}
	if !math.IsNaN(widenFloat32(float32(math.NaN()))) || !math.IsInf(widenFloat32(float32(math.Inf(-1))), -1) {
		t.Error("NaN or -Inf not kept")
	}
}

func TestAvroJSON(t *testing.T) {
	schema := `{"type": "record", "name": "R", "namespace": "ns", "fields": [
		{"name": "opt", "type": ["null", "string"], "default": null},
		{"name": "num", "type": ["null", "int", "long"], "default": null},
		{"name": "dbl", "type": ["null", "double"], "default": null},
		{"name": "rec", "type": ["null", {"type": "record", "name": "Sub", "fields": [{"name": "string", "type": "string"}]}], "default": null},
		{"name": "two", "type": ["null", "Sub", {"type": "record", "name": "Other", "namespace": "other", "fields": [{"name": "x", "type": "int"}]}], "default": null},
		{"name": "m", "type": ["null", {"type": "map", "values": "string"}], "default": null},
		{"name": "e", "type": ["null", {"type": "enum", "name": "E", "symbols": ["A", "B"]}], "default": null},
		{"name": "arr", "type": ["null", {"type": "array", "items": "int"}], "default": null},
		{"name": "i", "type": "int", "default": 1},
		{"name": "f", "type": "float", "default": 0.5},
		{"name": "b", "type": "bytes", "default": "\u00ff"},
		{"name": "fx", "type": {"type": "fixed", "name": "F2", "size": 2}, "default": "ab"},
		{"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
		{"name": "sub", "type": "Sub", "default": {"string": "dflt"}},
		{"name": "list", "type": {"type": "array", "items": "E"}, "default": ["B"]},
		{"name": "s", "type": "string", "default": "é"}
	]}`
	c := mustCompile(t, schema)
	for _, tc := range []struct {
		name, json, path, want string
		err                    string // a part of the error's text
	}{
		{name: "defaults", json: `{}`, path: "", want: `{"b":"/w==","f":0.5,"fx":"YWI=","i":1,"list":["B"],"s":"é","sub":{"string":"dflt"},"ts":"1970-01-01T00:00:00.000Z"}`},
		{name: "plain string in [null,string]", json: `{"opt": "x"}`, path: "opt", want: "x"},
		{name: "a field given twice, then null", json: `{"opt": "x", "opt": null}`, path: "", want: `{"b":"/w==","f":0.5,"fx":"YWI=","i":1,"list":["B"],"s":"é","sub":{"string":"dflt"},"ts":"1970-01-01T00:00:00.000Z"}`},
		{name: "wrapped string", json: `{"opt": {"string": "x"}}`, path: "opt", want: "x"},
		{name: "null is absent", json: `{"opt": null}`, path: "", want: `{"b":"/w==","f":0.5,"fx":"YWI=","i":1,"list":["B"],"s":"é","sub":{"string":"dflt"},"ts":"1970-01-01T00:00:00.000Z"}`},
		{name: "number for [null,string]", json: `{"opt": 5}`, err: "cannot hold a JSON number"},
		{name: "no such branch", json: `{"opt": {"int": 5}}`, err: `has no branch "int"`},
		{name: "wrapper with two members", json: `{"opt": {"string": "x", "y": 1}}`, err: "has one member"},
		{name: "int or long needs the wrapper", json: `{"num": 5}`, err: "several branches for a JSON number"},
		{name: "wrapped long", json: `{"num": {"long": 5}}`, path: "num", want: "5"},
		{name: "NaN wrapped", json: `{"dbl": {"double": "NaN"}}`, path: "dbl", want: "NaN"},
		{name: "plain double", json: `{"dbl": -1.5e3}`, path: "dbl", want: "-1500"},
		{name: "plain record whose field is named like a branch", json: `{"rec": {"string": "x"}}`, path: "rec.string", want: "x"},
		{name: "record by short name", json: `{"rec": {"Sub": {"string": "y"}}}`, path: "rec.string", want: "y"},
		{name: "record by full name", json: `{"rec": {"ns.Sub": {"string": "y"}}}`, path: "rec.string", want: "y"},
		{name: "two records need the wrapper", json: `{"two": {"x": 1}}`, err: "several branches for a JSON object"},
		{name: "second record by full name", json: `{"two": {"other.Other": {"x": 1}}}`, path: "two.x", want: "1"},
		{name: "second record by short name", json: `{"two": {"Other": {"x": 2}}}`, path: "two.x", want: "2"},
		{name: "plain map", json: `{"m": {"a": "b"}}`, path: "m.a", want: "b"},
		{name: "wrapped map", json: `{"m": {"map": {"a": "b"}}}`, path: "m.a", want: "b"},
		{name: "map whose first key is a branch name", json: `{"m": {"map": {"a": "b"}, "b": "y"}}`, err: `an object whose first member is named after a branch, "map", is read as one`},
		{name: "map whose later key is a branch name", json: `{"m": {"b": "y", "map": "x"}}`, path: "m", want: `{"b":"y","map":"x"}`},
		{name: "wrapped map whose first key is a branch name", json: `{"m": {"map": {"map": "x", "b": "y"}}}`, path: "m", want: `{"b":"y","map":"x"}`},
		{name: "plain enum", json: `{"e": "B"}`, path: "e", want: "B"},
		{name: "unknown symbol", json: `{"e": "C"}`, err: "enum E has no such symbol"},
		{name: "plain array", json: `{"arr": [1, 2]}`, path: "arr.1", want: "2"},
		{name: "integral forms", json: `{"i": 5.0}`, path: "i", want: "5"},
		{name: "exponent integer", json: `{"i": 2e3}`, path: "i", want: "2000"},
		{name: "fraction for an int", json: `{"i": 5.5}`, err: "not an integer in range"},
		{name: "int out of range", json: `{"i": 2147483648}`, err: "out of range"},
		{name: "int min", json: `{"i": -2147483648}`, path: "i", want: "-2147483648"},
		{name: "float widened", json: `{"f": 0.1}`, path: "f", want: "0.1"},
		{name: "escapes", json: `{"s": "a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\ud800"}`, path: "s", want: "a\"\\/\b\f\n\r\té😀\ufffd"},
		{name: "bytes code points", json: `{"b": "\u0000\u00ff"}`, path: "b", want: "\x00\xff"},
		{name: "bytes beyond U+00FF", json: `{"b": "\u0100"}`, err: "beyond U+00FF"},
		{name: "fixed of the wrong size", json: `{"fx": "abc"}`, err: "fixed F2 of 2 bytes given 3"},
		{name: "unknown members are skipped, as Pub/Sub skips them", json: `{"nope": {"a": [1, "}", null, {"b": true}]}, "i": 7, "x": "y"}`, path: "i", want: "7"},
		{name: "an unknown member's value must be JSON", json: `{"nope": [1,}`, err: "expected"},
		{name: "null for an int", json: `{"i": null}`, err: "null for type int"},
		{name: "data after the value", json: `{} {}`, err: "data after the JSON value"},
		{name: "not JSON", json: `{"i": tru}`, err: "expected a number"},
		{name: "truncated", json: `{"i": 1`, err: "unexpected end"},
		{name: "control character", json: "{\"s\": \"a\x01\"}", err: "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := c.Decode([]byte(tc.json), true)
			if tc.err != "" {
				if err == nil || !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want invalid payload with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := value.Tree{V: v}.AppendPath(nil, segments(tc.path))
			if err != nil || string(got) != tc.want {
				t.Fatalf("%s = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}

	// Nulls in maps and arrays are kept.
	nm := mustCompile(t, `{"type": "map", "values": {"type": "array", "items": ["null", "long"]}}`)
	for _, in := range []struct {
		data   []byte
		isJSON bool
	}{
		{[]byte(`{"a": [null, 1]}`), true},
		{cat(varint(1), varint(1), []byte("a"), varint(2), varint(0), varint(1), varint(1), varint(0), varint(0)), false},
	} {
		v, err := nm.Decode(in.data, in.isJSON)
		got, _ := value.Tree{V: v}.AppendPath(nil, nil)
		if err != nil || string(got) != `{"a":[null,1]}` {
			t.Errorf("nulls in a map and an array (JSON %v): %s, %v", in.isJSON, got, err)
		}
	}

	// A record lacking a field without a default.
	c2 := mustCompile(t, testdataFile(t, "all_types.avsc"))
	var m map[string]any
	if err := json.Unmarshal([]byte(testdataFile(t, "all_types.json")), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "level")
	delete(m, "missing")
	b, _ := json.Marshal(m)
	v, err := c2.Decode(b, true)
	if err != nil {
		t.Fatalf("without the fields that have defaults: %v", err)
	}
	if got := v.(map[string]any); got["level"] != int64(3) {
		t.Errorf("defaults: level %v", got["level"])
	} else if _, ok := got["missing"]; ok {
		t.Errorf("defaults: missing (null) is present")
	}
	delete(m, "sensor")
	b, _ = json.Marshal(m)
	if _, err := c2.Decode(b, true); err == nil || !strings.Contains(err.Error(), `lacks field "sensor"`) {
		t.Errorf("without sensor: %v", err)
	}

	// A record of more than 64 fields.
	var fields, members []string
	for i := range 70 {
		f := fmt.Sprintf(`{"name": "f%d", "type": "int"}`, i)
		if i == 69 {
			f = `{"name": "f69", "type": "int", "default": 7}`
		}
		fields = append(fields, f)
		if i != 69 {
			members = append(members, fmt.Sprintf(`"f%d": %d`, i, i))
		}
	}
	wide := mustCompile(t, `{"type": "record", "name": "Wide", "fields": [`+strings.Join(fields, ",")+`]}`)
	if v, err := wide.Decode([]byte(`{"f0": 5, `+strings.Join(members, ", ")+`}`), true); err != nil || v.(map[string]any)["f69"] != int64(7) || v.(map[string]any)["f0"] != int64(0) {
		t.Errorf("70 fields: %v, %v", v, err)
	}
	if _, err := wide.Decode([]byte(`{`+strings.Join(members[1:], ", ")+`, "f1": 1}`), true); err == nil || !strings.Contains(err.Error(), `lacks field "f0"`) {
		t.Errorf("70 fields without f0: %v", err)
	}

	// Defaults are copied: changing one decoded tree leaves the next alone.
	v1, _ := c.Decode([]byte(`{}`), true)
	v1.(map[string]any)["sub"].(map[string]any)["string"] = "changed"
	v1.(map[string]any)["b"].([]byte)[0] = 0
	v2, _ := c.Decode([]byte(`{}`), true)
	if got := v2.(map[string]any); got["sub"].(map[string]any)["string"] != "dflt" || got["b"].([]byte)[0] != 0xff {
		t.Errorf("a default was shared between decodes: %v", got)
	}
}

func TestAvroCompileErrors(t *testing.T) {
	for _, tc := range []struct{ schema, err string }{
		{`{nope`, "not valid JSON"},
		{`{"type": "record", "name": "R", "fields": [{"name": "a", "type": "Missing"}]}`, "unknown type: Missing"},
		{`{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]}`, `duplicate field name "a"`},
		{`{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}`, "invalid default"},
		{`["int", "int"]`, "union type must be unique"},
	} {
		_, err := Compile(tc.schema)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Compile(%s) = %v, want an error with %q", tc.schema, err, tc.err)
		}
	}
	// Each compilation has its own names: a name defined by an earlier
	// schema is unknown to a later one.
	mustCompile(t, `{"type": "record", "name": "Leak", "fields": []}`)
	if _, err := Compile(`{"type": "array", "items": "Leak"}`); err == nil {
		t.Error("a name of an earlier schema leaked into a later one")
	}
	// Two revisions may define the same name differently.
	a := mustCompile(t, `{"type": "record", "name": "V", "fields": [{"name": "a", "type": "int"}]}`)
	b := mustCompile(t, `{"type": "record", "name": "V", "fields": [{"name": "b", "type": "string"}]}`)
	if a.CheckPath(segments("a")) != nil || b.CheckPath(segments("b")) != nil {
		t.Error("revisions of one name mixed up")
	}
}

// varint is n in Avro's zig-zag varint.
func varint(n int64) []byte {
	return binary.AppendUvarint(nil, uint64(n<<1^n>>63))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestAvroHostile(t *testing.T) {
	schemas := map[string]string{
		"nulls":   `{"type": "array", "items": "null"}`,
		"empties": `{"type": "array", "items": {"type": "record", "name": "E", "fields": [{"name": "n", "type": "null"}]}}`,
		"ints":    `{"type": "array", "items": "int"}`,
		"doubles": `{"type": "array", "items": "double"}`,
		"map":     `{"type": "map", "values": "null"}`,
		"string":  `"string"`,
		"bytes":   `"bytes"`,
		"int":     `"int"`,
		"bool":    `"boolean"`,
		"union":   `["null", "int"]`,
		"enum":    `{"type": "enum", "name": "S", "symbols": ["A"]}`,
		"fixed":   `{"type": "fixed", "name": "F", "size": 1000000}`,
		"time":    `{"type": "int", "logicalType": "time-millis"}`,
		"decimal": `{"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}`,
		"nested":  `{"type": "array", "items": {"type": "array", "items": "null"}}`,
	}
	codecs := map[string]*Codec{}
	for name, s := range schemas {
		codecs[name] = mustCompile(t, s)
	}
	// blocks of 8191 nulls (2 bytes each): a million items in 256 bytes
	var manyBlocks []byte
	for range 128 {
		manyBlocks = append(manyBlocks, varint(8191)...)
	}
	for _, tc := range []struct {
		name, schema string
		data         []byte
		err          string
	}{
		{"2^31 nulls", "nulls", cat(varint(1<<31), varint(0)), "items that take no bytes"},
		{"2^62 nulls", "nulls", cat(varint(1<<62), varint(0)), "items that take no bytes"},
		{"many blocks of nulls", "nulls", cat(manyBlocks, varint(0)), "items that take no bytes"},
		{"2^31 empty records", "empties", cat(varint(1<<31), varint(0)), "items that take no bytes"},
		{"2^31 arrays of nulls", "nested", cat(varint(1<<31), varint(0)), "bytes left"},
		{"2^31 ints", "ints", cat(varint(1<<31), varint(0)), "is more than the 1 bytes left"},
		{"negative block count with its size", "ints", cat(varint(-(1 << 40)), varint(8), varint(0)), "bytes left"},
		{"minimum block count", "ints", cat(varint(math.MinInt64), varint(0)), "invalid block count"},
		{"negative block size", "ints", cat(varint(-1), varint(-1), varint(5), varint(0)), "negative block size"},
		{"9 bytes for 2 doubles", "doubles", cat(varint(2), make([]byte, 9)), "bytes left"},
		{"2^31 map entries", "map", cat(varint(1<<31), varint(0)), "bytes left"},
		{"2^40-byte string", "string", varint(1 << 40), "string length 1099511627776 is more than the 0 bytes left"},
		{"negative string length", "string", varint(-1), "negative string length"},
		{"huge bytes", "bytes", cat(varint(1<<30), []byte("abc")), "more than the 3 bytes left"},
		{"varint overflow", "int", bytes.Repeat([]byte{0xff}, 11), "overflows"},
		{"long in an int", "int", varint(1 << 40), "int value out of range"},
		{"truncated varint", "int", []byte{0x80}, "unexpected end"},
		{"bool 2", "bool", []byte{2}, "invalid boolean"},
		{"union index 2", "union", varint(2), "has no branch 2"},
		{"union index -1", "union", varint(-1), "has no branch -1"},
		{"enum index 1", "enum", varint(1), "has no symbol 1"},
		{"short fixed", "fixed", make([]byte, 10), "unexpected end"},
		{"time of day past midnight", "time", varint(86400000), "not a time of day"},
		{"negative time of day", "time", varint(-1), "not a time of day"},
		{"decimal beyond its precision", "decimal", cat(varint(4), []byte{0x7f, 1, 2, 3}), "more than its precision allows"},
		{"empty", "int", nil, "unexpected end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			alloc := allocated(func() { _, err = codecs[tc.schema].Decode(tc.data, false) })
			if err == nil || !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want invalid payload with %q", err, tc.err)
			}
			if alloc > 64<<10 {
				t.Errorf("allocated %d bytes for a %d-byte payload", alloc, len(tc.data))
			}
		})
	}

	// Bytes after the datum are ignored, as Pub/Sub ignores them.
	if v, err := codecs["int"].Decode([]byte{2, 0}, false); err != nil || v != int64(1) {
		t.Errorf("an int and a stray byte: %v, %v; want 1", v, err)
	}
	// The budget of zero-byte items lets a payload's worth through.
	v, err := codecs["nulls"].Decode(cat(varint(1000), varint(0)), false)
	if err != nil || len(v.([]any)) != 1000 {
		t.Errorf("1000 nulls: %v", err)
	}
	// A decimal that fits its precision, with redundant sign bytes.
	if v, err := codecs["decimal"].Decode(cat(varint(5), []byte{0xff, 0xff, 0xff, 0xd8, 0xf1}), false); err != nil || v != value.Decimal("-99.99") {
		t.Errorf("decimal -99.99 = %v, %v", v, err)
	}
}

func TestAvroTruncated(t *testing.T) {
	schema := testdataFile(t, "all_types.avsc")
	c := mustCompile(t, schema)
	data := marshal(t, schema, allTypesValue())
	for i := range data {
		if _, err := c.Decode(data[:i], false); !errors.Is(err, template.ErrInvalidPayload) {
			t.Fatalf("the first %d of %d bytes: %v, want invalid payload", i, len(data), err)
		}
	}
	js := []byte(testdataFile(t, "all_types.json"))
	js = bytes.TrimSpace(js)
	for i := range js {
		if _, err := c.Decode(js[:i], true); !errors.Is(err, template.ErrInvalidPayload) {
			t.Fatalf("the first %d of %d JSON bytes: %v, want invalid payload", i, len(js), err)
		}
	}
}

// linkedList is a linked list of n nodes of recursive.avsc: binary, JSON.
func linkedList(n int) ([]byte, []byte) {
	var bin []byte
	var js strings.Builder
	for i := range n {
		bin = append(bin, varint(int64(i))...)
		js.WriteString(`{"value": ` + itoa(i) + `, "next": `)
		if i < n-1 {
			bin = append(bin, varint(1)...)
			js.WriteString(`{"Node": `)
		} else {
			bin = append(bin, varint(0)...)
			js.WriteString(`null`)
		}
	}
	for i := range n {
		js.WriteString("}")
		if i < n-1 {
			js.WriteString("}")
		}
	}
	return bin, []byte(js.String())
}

func itoa(i int) string { return big.NewInt(int64(i)).String() }

func TestAvroRecursive(t *testing.T) {
	c := mustCompile(t, testdataFile(t, "recursive.avsc"))
	for _, n := range []int{1, 100, value.MaxDepth, value.MaxDepth + 1, 200, 100000} {
		bin, js := linkedList(n)
		for _, enc := range []struct {
			name string
			data []byte
			json bool
		}{{"binary", bin, false}, {"JSON", js, true}} {
			v, err := c.Decode(enc.data, enc.json)
			if n > value.MaxDepth {
				if !errors.Is(err, template.ErrInvalidPayload) || !strings.Contains(err.Error(), "nested more than 128 levels") {
					t.Errorf("%s list of %d: %v, want invalid payload: too deep", enc.name, n, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s list of %d: %v", enc.name, n, err)
			}
			path := strings.Repeat("next.", n-1) + "value"
			got, err := value.Tree{V: v}.AppendPath(nil, segments(path))
			if err != nil || string(got) != itoa(n-1) {
				t.Errorf("%s list of %d: last value %q, %v", enc.name, n, got, err)
			}
			if _, err := value.AppendJSON(nil, v, 0); err != nil {
				t.Errorf("%s list of %d does not render: %v", enc.name, n, err)
			}
		}
	}

	// Recursion through arrays, and zero-byte items beside it.
	tr := mustCompile(t, testdataFile(t, "tree.avsc"))
	leaf := cat(varint(1), []byte("x"), varint(0), varint(3), varint(0), varint(1), varint(1), []byte("k"), varint(0))
	node := leaf
	for range 200 {
		node = cat(varint(1), []byte("n"), varint(1), node, varint(0), varint(0), varint(0))
	}
	if _, err := tr.Decode(leaf, false); err != nil {
		t.Errorf("tree leaf: %v", err)
	}
	if _, err := tr.Decode(node, false); !errors.Is(err, template.ErrInvalidPayload) {
		t.Errorf("tree 200 deep: %v", err)
	}
}

func TestAvroCheckPath(t *testing.T) {
	c := mustCompile(t, testdataFile(t, "all_types.avsc"))
	for _, path := range []string{
		"sensor", "location", "location.lat", "tags.anything", "tags.0", "samples.3", "note",
		"shape.radius", "shape.side", "ts_ms", "price", "hash",
	} {
		if err := c.CheckPath(segments(path)); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	for _, tc := range []struct{ path, err string }{
		// as package mapping reports it: the placeholder, then CheckPath's error
		{"sensr", `{data.sensr}: no field "sensr" in record Reading; did you mean "sensor"?`},
		{"Sensor", `{data.Sensor}: no field "Sensor" in record Reading; did you mean "sensor"?`},
		{"zzz", `{data.zzz}: no field "zzz" in record Reading`},
		{"location.lt", `{data.location.lt}: no field "lt" in record Location; did you mean "lat"?`},
		{"sensor.x", `{data.sensor.x}: data.sensor has type string, not a record, map or array: it has no "x"`},
		{"ts_ms.x", `{data.ts_ms.x}: data.ts_ms has type long (timestamp-millis), not a record, map or array: it has no "x"`},
		{"samples.first", `{data.samples.first}: data.samples is an array: index it by a number (data.samples.0), or make a row per element with each`},
		{"shape.sid", `{data.shape.sid}: no field "sid" in record Square; did you mean "side"?`},
		{"shape.zzz", `{data.shape.zzz}: no field "zzz" in record Circle`},
		{"note.x", `{data.note.x}: data.note has type string, not a record, map or array: it has no "x"`},
		{"nothing.x", `{data.nothing.x}: data.nothing is always null`},
		{"0", `{data.0}: no field "0" in record Reading`},
	} {
		err := c.CheckPath(segments(tc.path))
		if err == nil || "{data."+tc.path+"}: "+err.Error() != tc.err {
			t.Errorf("%s: %v\nwant %s", tc.path, err, tc.err)
		}
	}

	// each: the element of an array; the messages name it item.
	ev := mustCompile(t, `{"type": "record", "name": "Batch", "fields": [
		{"name": "device", "type": "string"},
		{"name": "readings", "type": {"type": "array", "items": {"type": "record", "name": "Reading", "fields": [
			{"name": "value", "type": "double"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}}}]}`)
	each := func(list, items string) []template.Segment {
		return append(append(segments(list), eachStep), segments(items)...)
	}
	for _, tc := range []struct{ list, items, err string }{
		{"readings", "value", ""},
		{"readings", "", ""},
		{"readings", "valu", `no field "valu" in record Reading; did you mean "value"?`},
		{"readings", "at.x", `item.at has type long (timestamp-millis), not a record, map or array: it has no "x"`},
		{"device", "x", `each needs an array: device has type string`},
	} {
		err := ev.CheckPath(each(tc.list, tc.items))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
			t.Errorf("each %s, item.%s: %v, want %q", tc.list, tc.items, err, tc.err)
		}
	}
}

// benchEvent is bench.avsc's message: about 200 bytes in Avro binary.
func benchEvent() map[string]any {
	return map[string]any{
		"device":      "sensor-0042",
		"site":        "plant-3/line-2",
		"at":          time.Date(2026, 1, 2, 3, 4, 5, 678000000, time.UTC),
		"temperature": 21.75,
		"humidity":    float32(0.43),
		"status":      "OK",
		"firmware":    map[string]any{"string": "v2.14.3-rc1+build.7781"},
		"location":    map[string]any{"lat": 48.1371, "lon": 11.5754},
		"labels":      map[string]any{"owner": "team-sensors", "rack": "r17", "zone": "cold-aisle-b"},
		"samples":     []any{int64(1201), int64(1199), int64(1207), int64(1215), int64(1190), int64(1188), int64(1203), int64(1209), int64(1211), int64(1196), int64(1202), int64(1204)},
		"batch":       "6f1c2a7e-3b4d-4e8f-9a0b-1c2d3e4f5a6b",
		"seq":         int64(123456789),
	}
}

// BenchmarkAvroDecode decodes a ~200-byte message and renders the 4 fields
// a mapping reads (device, at, temperature, labels.zone). hamba-generic is
// hamba/avro's Unmarshal into any, without the conversion to the value
// model, for comparison.
func BenchmarkAvroDecode(b *testing.B) {
	schema := testdataFile(b, "bench.avsc")
	c := mustCompile(b, schema)
	data := marshal(b, schema, benchEvent())
	paths := [][]template.Segment{segments("device"), segments("at"), segments("temperature"), segments("labels.zone")}
	jsonData := []byte(`{"device":"sensor-0042","site":"plant-3/line-2","at":1767323045678,"temperature":21.75,"humidity":0.43,"status":"OK","firmware":{"string":"v2.14.3-rc1+build.7781"},"location":{"lat":48.1371,"lon":11.5754},"labels":{"owner":"team-sensors","rack":"r17","zone":"cold-aisle-b"},"samples":[1201,1199,1207,1215,1190,1188,1203,1209,1211,1196,1202,1204],"batch":"6f1c2a7e-3b4d-4e8f-9a0b-1c2d3e4f5a6b","seq":123456789}`)
	run := func(b *testing.B, data []byte, isJSON bool) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		buf := make([]byte, 0, 256)
		for b.Loop() {
			v, err := c.Decode(data, isJSON)
			if err != nil {
				b.Fatal(err)
			}
			buf = buf[:0]
			for _, p := range paths {
				if buf, err = (value.Tree{V: v}).AppendPath(buf, p); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("binary", func(b *testing.B) {
		b.Logf("payload: %d bytes", len(data))
		run(b, data, false)
	})
	b.Run("json", func(b *testing.B) { run(b, jsonData, true) })
	b.Run("hamba-generic", func(b *testing.B) {
		s := hamba.MustParse(schema)
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var v any
			if err := hamba.Unmarshal(s, data, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
