package jsontree

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// jsonTreeCases are texts Decode accepts, and their trees.
var jsonTreeCases = []struct {
	name, in string
	want     any
}{
	{"object", `{"a":"b","n":1,"t":true,"f":false,"z":null}`, map[string]any{"a": "b", "n": 1.0, "t": true, "f": false, "z": nil}},
	{"empty object", `{}`, map[string]any{}},
	{"empty array", `[]`, []any{}},
	{"nested", `{"a":[{"b":[[]]},{}],"c":{"d":{}}}`, map[string]any{"a": []any{map[string]any{"b": []any{[]any{}}}, map[string]any{}}, "c": map[string]any{"d": map[string]any{}}}},
	{"scalar string", `"x"`, "x"},
	{"scalar null", `null`, nil},
	{"white space", " \t\r\n{ \"a\" :\n[ 1 ,\t2 ] , \"b\" : { } } \r\n\t", map[string]any{"a": []any{1.0, 2.0}, "b": map[string]any{}}},
	{"empty string", `""`, ""},
	{"escapes", `"\"\\\/\b\f\n\r\t\u0041\u00e9\u20AC\u0000"`, "\"\\/\b\f\n\r\tAé€\x00"},
	{"escape in a key", `{"\u0061\n":1}`, map[string]any{"a\n": 1.0}},
	{"utf-8", `"héllo €😀 ` + "\x7f" + `"`, "héllo €😀 \x7f"},
	{"U+FFFD as text", "\"\xef\xbf\xbd\"", "\ufffd"},
	{"surrogate pair", `"\ud83d\ude00"`, "😀"},
	{"surrogate pair upper case", `"\uD83D\uDE00!"`, "😀!"},
	{"lone high surrogate", `"\ud83d"`, "\ufffd"},
	{"lone high surrogate then text", `"\ud83dx"`, "\ufffdx"},
	{"lone low surrogate", `"\ude00x"`, "\ufffdx"},
	{"high surrogate then a letter", `"\ud83d\u0041"`, "\ufffdA"},
	{"high surrogate twice", `"\ud83d\ud83d\ude00"`, "\ufffd😀"},
	{"low then high", `"\ude00\ud83d"`, "\ufffd\ufffd"},
	{"high surrogate then an escape", `"\ud83d\n"`, "\ufffd\n"},
	{"invalid utf-8", "\"a\xffb\"", "a\ufffdb"},
	{"cut utf-8", "\"\xe2\x82\"", "\ufffd\ufffd"},
	{"utf-8 surrogate", "\"\xed\xa0\x80\"", "\ufffd\ufffd\ufffd"},
	{"invalid utf-8 and an escape", "\"\xc0\\n\"", "\ufffd\n"},
	{"invalid utf-8 in a key", "{\"k\xff\":1}", map[string]any{"k\ufffd": 1.0}},
	{"zero", `0`, 0.0},
	{"minus zero", `-0`, math.Copysign(0, -1)},
	{"minus zero float", `-0.0`, math.Copysign(0, -1)},
	{"fraction", `-1.25`, -1.25},
	{"exponent", `1e3`, 1000.0},
	{"exponent plus", `1E+3`, 1000.0},
	{"exponent minus", `25e-2`, 0.25},
	{"exponent zero padded", `1e007`, 1e7},
	{"15 digits", `999999999999999`, 999999999999999.0},
	{"16 digits, rounded", `9007199254740993`, 9007199254740992.0},
	{"big int", `12345678901234567890`, 12345678901234567890.0},
	{"max int64", `-9223372036854775808`, -9223372036854775808.0},
	{"max double", `1.7976931348623157e308`, math.MaxFloat64},
	{"underflow", `1e-400`, 0.0},
	{"smallest denormal", `5e-324`, math.SmallestNonzeroFloat64},
	{"long fraction", `0.1000000000000000055511151231257827`, 0.1},
	{"repeated key", `{"a":1,"a":2}`, map[string]any{"a": 2.0}},
	{"repeated key of other types", `{"a":{"b":1},"b":0,"a":[1]}`, map[string]any{"a": []any{1.0}, "b": 0.0}},
	{"repeated key by an escape", `{"a":1,"\u0061":2}`, map[string]any{"a": 2.0}},
	{"repeated key, null last", `{"a":1,"a":null}`, map[string]any{"a": nil}},
}

// jsonTreeErrors are texts Decode refuses, and the byte it names.
var jsonTreeErrors = []struct {
	name, in string
	at       int
}{
	{"empty", ``, 0},
	{"white space", " \n\t", 3},
	{"form feed is not white space", "\f1", 0},
	{"no-break space", "\u00a01", 0},
	{"bom", "\ufeff{}", 0},
	{"two values", `1 2`, 2},
	{"trailing garbage", `{} x`, 3},
	{"trailing brace", `{}}`, 2},
	{"trailing bracket", `[]]`, 2},
	{"nullx", `nullx`, 4},
	{"truex", `truex`, 4},
	{"cut literal", `nul`, 0},
	{"capital literal", `True`, 0},
	{"NaN", `NaN`, 0},
	{"Infinity", `-Infinity`, 1},
	{"leading zero", `01`, 1},
	{"minus leading zero", `-01`, 2},
	{"minus alone", `-`, 1},
	{"plus", `+1`, 0},
	{"dot first", `.5`, 0},
	{"dot last", `1.`, 2},
	{"dot exponent", `1.e5`, 2},
	{"exponent alone", `1e`, 2},
	{"exponent sign alone", `1e+`, 3},
	{"hex", `0x10`, 1},
	{"out of range", `1e400`, 0},
	{"negative out of range", `[-1e400]`, 1},
	{"big out of range", `{"a":1` + strings.Repeat("0", 400) + `}`, 5},
	{"trailing comma in an array", `[1,]`, 3},
	{"trailing comma in an object", `{"a":1,}`, 7},
	{"comma first", `[,1]`, 1},
	{"missing comma", `[1 2]`, 3},
	{"missing colon", `{"a" 1}`, 5},
	{"bare key", `{a:1}`, 1},
	{"single quotes", `{'a':1}`, 1},
	{"number key", `{1:1}`, 1},
	{"missing member comma", `{"a":1 "b":2}`, 7},
	{"unclosed object", `{"a":1`, 6},
	{"unclosed array", `[1`, 2},
	{"unclosed string", `"abc`, 4},
	{"unclosed string after escape", `"abc\`, 5},
	{"unclosed string after non-ASCII", `"é`, 3},
	{"newline in a string", "\"a\nb\"", 2},
	{"tab in a string", "\"a\tb\"", 2},
	{"nul in a string", "\"a\x00b\"", 2},
	{"bad escape", `"\x"`, 1},
	{"quote escape", `"\'"`, 1},
	{"short u escape", `"\u12"`, 1},
	{"bad hex", `"\u12g4"`, 1},
	{"upper U", `"\U0041"`, 1},
	{"value missing", `{"a":}`, 5},
	{"mismatched close", `[1}`, 2},
	{"close alone", `]`, 0},
	{"object after error in string", `{"a":"b` + "\x01" + `"}`, 7},
}

func TestDecodeJSONTree(t *testing.T) {
	for _, c := range jsonTreeCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode([]byte(c.in))
			if err != nil {
				t.Fatalf("%q: %v", c.in, err)
			}
			if !reflect.DeepEqual(got, c.want) || !sameFloats(got, c.want) {
				t.Errorf("%q: got %#v, want %#v", c.in, got, c.want)
			}
			var std any
			if err := json.Unmarshal([]byte(c.in), &std); err != nil {
				t.Fatalf("%q: encoding/json: %v", c.in, err)
			}
			if !reflect.DeepEqual(got, std) || !sameFloats(got, std) {
				t.Errorf("%q: got %#v, encoding/json %#v", c.in, got, std)
			}
		})
	}
}

var jsonTreeErrorText = regexp.MustCompile(`^invalid payload: (not JSON: [^"]+ at byte \d+|nested more than 128 levels deep \(at byte \d+\))$`)

func TestDecodeJSONTreeErrors(t *testing.T) {
	for _, c := range jsonTreeErrors {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode([]byte(c.in))
			if err == nil {
				t.Fatalf("%q: got %#v, want an error", c.in, got)
			}
			if got != nil {
				t.Errorf("%q: got %#v with the error", c.in, got)
			}
			if !errors.Is(err, template.ErrInvalidPayload) || !jsonTreeErrorText.MatchString(err.Error()) {
				t.Errorf("%q: error %q", c.in, err)
			}
			if want := " at byte " + strconv.Itoa(c.at); !strings.HasSuffix(err.Error(), want) {
				t.Errorf("%q: error %q, want it%s", c.in, err, want)
			}
			var std any
			if json.Unmarshal([]byte(c.in), &std) == nil {
				t.Errorf("%q: encoding/json accepts it", c.in)
			}
		})
	}
}

// An error says where, never what: the payload is not quoted.
func TestDecodeJSONTreeErrorQuotesNothing(t *testing.T) {
	for _, in := range []string{
		`{"secret": tru}`, `{"secret": "x` + "\x01" + `"}`, `{"secret": 1e999}`, `{"secret": 1} secret`,
		`{"secret` + "\n" + `": 1}`, `{"s": "\secret"}`, `{secret: 1}`,
	} {
		_, err := Decode([]byte(in))
		if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "ecret") {
			t.Errorf("%q: error %v", in, err)
		}
	}
}

func TestDecodeJSONTreeDepth(t *testing.T) {
	nest := func(n int, open, close, inner string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	for _, c := range []struct {
		name string
		in   string
		ok   bool
		at   int
	}{
		{"arrays 128", nest(value.MaxDepth, "[", "]", "1"), true, 0},
		{"arrays 129", nest(value.MaxDepth+1, "[", "]", "1"), false, value.MaxDepth},
		{"empty arrays 129", nest(value.MaxDepth+1, "[", "]", ""), false, value.MaxDepth},
		{"objects 128", nest(value.MaxDepth-1, `{"a":`, "}", "{}"), true, 0},
		{"objects 129", nest(value.MaxDepth, `{"a":`, "}", "{}"), false, 5 * value.MaxDepth},
		{"mixed 128", nest(value.MaxDepth/2, `{"a":[`, "]}", "null"), true, 0},
		{"mixed 129", nest(value.MaxDepth/2, `{"a":[`, "]}", "[]"), false, 6 * value.MaxDepth / 2},
		{"129 after a 128", `[` + nest(value.MaxDepth-1, "[", "]", "") + `,` + nest(value.MaxDepth, "[", "]", "") + `]`, false, 1 + 2*(value.MaxDepth-1) + 1 + value.MaxDepth - 1},
		{"wide, shallow", `[` + strings.Repeat(`[1],`, 10000) + `[]]`, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := Decode([]byte(c.in))
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				var std any
				if err := json.Unmarshal([]byte(c.in), &std); err != nil || !reflect.DeepEqual(v, std) {
					t.Fatalf("differs from encoding/json (%v)", err)
				}
				return
			}
			if !errors.Is(err, value.ErrTooDeep) || !errors.Is(err, template.ErrInvalidPayload) {
				t.Fatalf("error %v, want errTooDeep", err)
			}
			if want := "(at byte " + strconv.Itoa(c.at) + ")"; !strings.HasSuffix(err.Error(), want) {
				t.Errorf("error %q, want it %s", err, want)
			}
		})
	}
}

// The tree is the decoder's own: changing the payload afterwards changes
// nothing in it, and a decoder reused after a failure starts clean.
func TestDecodeJSONTreeOwnsItsStrings(t *testing.T) {
	data := []byte(`{"key":"value","list":["a","b\n"]}`)
	v, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'x'
	}
	want := map[string]any{"key": "value", "list": []any{"a", "b\n"}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v", v)
	}
	if _, err := Decode([]byte(`{"a":[{"b":[1,2,{"c":`)); err == nil {
		t.Fatal("no error")
	}
	v, err = Decode([]byte(`[{"x":[]}]`))
	if err != nil || !reflect.DeepEqual(v, []any{map[string]any{"x": []any{}}}) {
		t.Fatalf("got %#v, %v", v, err)
	}
}

func TestDecodeIsJSONUnmarshal(t *testing.T) {
	v, err := Decode(benchPayload)
	if err != nil {
		t.Fatal(err)
	}
	var std any
	if err := json.Unmarshal(benchPayload, &std); err != nil || !reflect.DeepEqual(v, std) {
		t.Fatalf("got %#v", v)
	}
	if _, err := Decode([]byte(`{"a":1}x`)); !errors.Is(err, template.ErrInvalidPayload) {
		t.Fatalf("error %v", err)
	}
}

// The 200-byte payload's decoding takes few allocations: the copy of the
// text, a box per string or number, the map and the list.
func TestDecodeJSONTreeAllocs(t *testing.T) {
	n := testing.AllocsPerRun(100, func() {
		if _, err := Decode(benchPayload); err != nil {
			t.Fatal(err)
		}
	})
	if n > 20 {
		t.Errorf("%v allocations", n)
	}
}

// Numbers decode to strconv.ParseFloat's double, to the bit, whether by
// the exact fast path or by ParseFloat.
func TestDecodeJSONTreeNumbers(t *testing.T) {
	nums := []string{
		"0.043", "0.1", "0.3", "15e21", "123456789012345e22", "1e22", "1e23", "1e-22", "1e-23",
		"123.456e-20", "1234567890123456e-5", "100000000000000000000000e-2", "0e99999", "-0e-5",
		"0.000000000000000000000000000001", "7e-10", "8.5e+3", "999999999999999e-22",
		"9007199254740993", "4.35", "-21.75", "1E1000", "1e-1000", "2.2250738585072011e-308",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		var b strings.Builder
		if r.IntN(2) == 0 {
			b.WriteByte('-')
		}
		b.WriteString(strconv.FormatUint(r.Uint64N(1<<uint(r.IntN(64))), 10))
		if r.IntN(2) == 0 {
			b.WriteString("." + strings.Repeat("0", r.IntN(4)) + strconv.FormatUint(r.Uint64N(1<<uint(r.IntN(50))), 10))
		}
		if r.IntN(2) == 0 {
			b.WriteString("e" + []string{"", "+", "-"}[r.IntN(3)] + strconv.Itoa(r.IntN(40)))
		}
		nums = append(nums, b.String())
	}
	for _, n := range nums {
		want, werr := strconv.ParseFloat(n, 64)
		got, err := Decode([]byte(n))
		if werr != nil {
			if err == nil {
				t.Errorf("%s: got %v, want an error", n, got)
			}
			continue
		}
		if f, ok := got.(float64); err != nil || !ok || math.Float64bits(f) != math.Float64bits(want) {
			t.Errorf("%s: got %v (%v), want %v", n, got, err, want)
		}
	}
}

// sameFloats reports whether a and b, deeply equal, hold numbers of the
// same bits (reflect.DeepEqual takes -0 for 0).
func sameFloats(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameFloats(x[i], y[i]) {
				return false
			}
		}
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			if !sameFloats(e, y[k]) {
				return false
			}
		}
	}
	return true
}

// BenchmarkJSONTree decodes the 200-byte payloads of mapping's expression
// and mapping benchmarks, by Decode and by json.Unmarshal.
func BenchmarkJSONTree(b *testing.B) {
	for _, p := range []struct {
		name string
		data []byte
	}{{"expr", benchPayload}, {"map", benchMapPayload}} {
		b.Run(p.name+"/jsontree", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(p.data)))
			for b.Loop() {
				if _, err := Decode(p.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.name+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(p.data)))
			for b.Loop() {
				var v any
				if err := json.Unmarshal(p.data, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchPayload and benchMapPayload are the payloads of mapping's
// expression and mapping benchmarks (expr_bench_test.go, map_bench_test.go
// there), so that this benchmark's rows compare with theirs.
var (
	benchPayload    = []byte(`{"kind":"reading","device":"sensor-0042","site":"plant-3/line-2","ts":"2026-01-02T03:04:05.678Z","temperature":21.75,"humidity":0.43,"ok":true,"tags":["a","b"],"seq":123456789,"note":"checked ok"}`)
	benchMapPayload = []byte(`{"id":"m000000042","seq":42,"customer":"c-00042","amount":42.42,"currency":"EUR","items":1,` +
		`"note":"qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"}`)
)
