package template

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var (
	testPublish = time.Date(2026, 1, 2, 3, 4, 5, 678_900_000, time.UTC)
	testEvent   = time.Date(2025, 12, 31, 23, 59, 59, 1_000_000, time.FixedZone("CET", 3600))
)

func testInput(data string) *Input {
	return &Input{
		MessageID:   "17",
		PublishTime: testPublish,
		EventTime:   testEvent,
		Attributes:  map[string]string{"customer_id": "c-42", "empty": "", "a.b": "dotted"},
		Data:        []byte(data),
	}
}

func TestCompileRejectsBadTemplates(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"an unknown placeholder is named", "{atributes.x}", `unknown placeholder "{atributes.x}"`},
		{"an attributes placeholder without a dot is unknown", "{attributes}", `unknown placeholder "{attributes}"`},
		{"a modifier other than reverse is unknown", "{event_time:forward}", `unknown placeholder "{event_time:forward}"`},
		{"publish_time has no reverse form", "{publish_time:reverse}", `unknown placeholder "{publish_time:reverse}"`},
		{"spaces are not trimmed", "{ message_id }", `unknown placeholder "{ message_id }"`},
		{"an empty placeholder is an error", "a{}b", `empty placeholder "{}"`},
		{"an empty attribute name is an error", "{attributes.}", `empty attribute name in "{attributes.}"`},
		{"an empty first field is an error", "{data.}", `empty field name in "{data.}"`},
		{"an empty middle field is an error", "{data.a..b}", `empty field name in "{data.a..b}"`},
		{"an empty last field is an error", "{data.a.}", `empty field name in "{data.a.}"`},
		{"an unclosed brace is an error", "x#{message_id", `unclosed placeholder "{message_id" at offset 2 (write {{ for a literal brace)`},
		{"a brace inside a placeholder is an error", "{data.{a}", `unexpected { inside placeholder "{data.{" at offset 6 (write {{ for a literal brace)`},
		{"a lone closing brace is an error", "a}b", `unmatched } at offset 1 (write }} for a literal brace)`},
		{"a closing brace after a placeholder is counted", "{message_id}}", `unmatched } at offset 12 (write }} for a literal brace)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Compile(tt.src)
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want error %q", tt.src, tmpl.parts, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Compile(%q) error = %q, want %q", tt.src, err, tt.want)
			}
		})
	}
}

func TestRenderFillsEveryPlaceholder(t *testing.T) {
	const payload = `{"amount": 12.50, "id": "o-1", "ok": true, "n": null, "esc": "a\"b\\c\u00e9\ud83d\ude00",
		"nested": {"x": [1, {"y": "deep"}], "k": { "a" : [ 1 , 2 ] } }, "0": "zero key", "list": ["a", "b"],
		"dup": 1, "dup": 2, "big": -1.5e+300, "empty": "", "emptyobj": {}, "emptyarr": []}`
	tests := []struct {
		name, src, data, want string
	}{
		{"a literal renders as is", "row#1", "", "row#1"},
		{"an empty template renders nothing", "", "", ""},
		{"doubled braces are literal braces", "{{x}}{{{message_id}}}", "", "{x}{17}"},
		{"message_id is the message ID", "{message_id}", "", "17"},
		{"publish_time is RFC 3339 UTC with milliseconds", "{publish_time}", "", "2026-01-02T03:04:05.678Z"},
		{"event_time is converted to UTC", "{event_time}", "", "2025-12-31T22:59:59.001Z"},
		{"event_time:reverse is MaxInt64 minus Unix ms, 19 digits", "{event_time:reverse}", "", "9223370269632776806"},
		{"an attribute renders its value", "{attributes.customer_id}", "", "c-42"},
		{"an empty attribute is allowed", "<{attributes.empty}>", "", "<>"},
		{"an attribute name may contain dots", "{attributes.a.b}", "", "dotted"},
		{"data is the raw payload", "{data}", "not json at all", "not json at all"},
		{"data may be empty", "<{data}>", "", "<>"},
		{"a number keeps its JSON text", "{data.amount}", payload, "12.50"},
		{"a huge number keeps its JSON text", "{data.big}", payload, "-1.5e+300"},
		{"a string is unquoted", "{data.id}", payload, "o-1"},
		{"a string is unescaped", "{data.esc}", payload, "a\"b\\c\u00e9\U0001F600"},
		{"an empty string field is allowed", "<{data.empty}>", payload, "<>"},
		{"a boolean keeps its JSON text", "{data.ok}", payload, "true"},
		{"an object is compact JSON", "{data.nested.k}", payload, `{"a":[1,2]}`},
		{"an empty object is compact JSON", "{data.emptyobj}", payload, `{}`},
		{"an empty array is compact JSON", "{data.emptyarr}", payload, `[]`},
		{"an array is compact JSON", "{data.list}", payload, `["a","b"]`},
		{"a numeric segment indexes an array", "{data.nested.x.1.y}", payload, "deep"},
		{"a numeric segment names an object member", "{data.0}", payload, "zero key"},
		{"the last of repeated keys wins", "{data.dup}", payload, "2"},
		{"a top-level array can be indexed", "{data.1}", `[10, 20]`, "20"},
		{"nesting of 128 levels is read", "{data.0}", string(nestedArrays(128)), string(nestedArrays(127))},
		{"escaped keys match their decoded name", "{data.id}", `{"\u0069d": "yes"}`, "yes"},
		{"a key in a non-matching branch is ignored", "{data.a.b}", `{"x": {"b": 1}, "a": {"b": 2}}`, "2"},
		{"placeholders and literals combine", "{attributes.customer_id}#{data.id}#{message_id}", payload, "c-42#o-1#17"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Compile(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.AppendTo([]byte("prefix:"), testInput(tt.data))
			if err != nil {
				t.Fatalf("AppendTo: %v", err)
			}
			if want := "prefix:" + tt.want; string(got) != want {
				t.Errorf("AppendTo = %q, want %q", got, want)
			}
		})
	}
}

func TestRenderErrorsNameThePlaceholderAndKeepDst(t *testing.T) {
	tests := []struct {
		name, src, data string
		in              func(*Input)
		want            error
		text            string
	}{
		{"a missing attribute", "{attributes.nope}", "", nil, ErrMissingField,
			"{attributes.nope}: missing field: attribute not set"},
		{"a missing attribute with nil attributes", "{attributes.customer_id}", "", func(in *Input) { in.Attributes = nil }, ErrMissingField,
			"{attributes.customer_id}: missing field: attribute not set"},
		{"a missing JSON member", "{data.nope}", `{"a": 1}`, nil, ErrMissingField,
			"{data.nope}: missing field: no such field"},
		{"a JSON null", "{data.a}", `{"a": null}`, nil, ErrMissingField,
			"{data.a}: missing field: data.a is null"},
		{"a null on the way", "{data.a.b}", `{"a": null}`, nil, ErrMissingField,
			"{data.a.b}: missing field: data.a is null"},
		{"an index out of range", "{data.a.2}", `{"a": [1, 2]}`, nil, ErrMissingField,
			"{data.a.2}: missing field: no such field"},
		{"a huge index is out of range", "{data.a.99999999999999999999999}", `{"a": [1]}`, nil, ErrMissingField,
			"{data.a.99999999999999999999999}: missing field: no such field"},
		{"a later repeated key hides an earlier match", "{data.a.b}", `{"a": {"b": 1}, "a": {"c": 2}}`, nil, ErrMissingField,
			"{data.a.b}: missing field: no such field"},
		{"a payload that is not JSON", "{data.a}", `{"a": 1,}`, nil, ErrInvalidPayload,
			"{data.a}: invalid payload: not valid JSON (at byte 8)"},
		{"an empty payload", "{data.a}", ``, nil, ErrInvalidPayload,
			"{data.a}: invalid payload: not valid JSON (at byte 0)"},
		{"trailing garbage after the field", "{data.a}", `{"a": 1} x`, nil, ErrInvalidPayload,
			"{data.a}: invalid payload: not valid JSON (at byte 9)"},
		{"two documents", "{data.a}", `{"a": 1} {"a": 2}`, nil, ErrInvalidPayload,
			"{data.a}: invalid payload: not valid JSON (at byte 9)"},
		{"invalid JSON after the field", "{data.a}", `{"a": 1, "b": tru}`, nil, ErrInvalidPayload,
			"{data.a}: invalid payload: not valid JSON (at byte 14)"},
		{"a payload that is a scalar", "{data.a}", `"a"`, nil, ErrInvalidPayload,
			"{data.a}: invalid payload: payload is not a JSON object or array"},
		{"a payload that is null", "{data.a}", `null`, nil, ErrInvalidPayload,
			"{data.a}: invalid payload: payload is not a JSON object or array"},
		{"a name into a top-level array", "{data.a}", `[1, 2]`, nil, ErrInvalidPayload,
			`{data.a}: invalid payload: data cannot be indexed by "a"`},
		{"a path into a scalar", "{data.a.b}", `{"a": 5}`, nil, ErrInvalidPayload,
			`{data.a.b}: invalid payload: data.a cannot be indexed by "b"`},
		{"a name into an array", "{data.a.b}", `{"a": [5]}`, nil, ErrInvalidPayload,
			`{data.a.b}: invalid payload: data.a cannot be indexed by "b"`},
		{"nesting deeper than 128 levels", "{data.0}", string(nestedArrays(129)), nil, ErrInvalidPayload,
			"{data.0}: invalid payload: nested deeper than 128 levels (at byte 128)"},
		{"nesting too deep beside the field", "{data.a}", `{"a": 1, "b": ` + strings.Repeat(`{"c": [`, 64) + strings.Repeat(`]}`, 64) + "}", nil, ErrInvalidPayload,
			"{data.a}: invalid payload: nested deeper than 128 levels (at byte 461)"},
		{"a zero event time", "{event_time}", "", func(in *Input) { in.EventTime = time.Time{} }, ErrBadTime,
			"{event_time}: time out of range: outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"},
		{"an event time before 1970 reversed", "{event_time:reverse}", "", func(in *Input) { in.EventTime = time.Unix(-1, 0) }, ErrBadTime,
			"{event_time:reverse}: time out of range: outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"},
		{"a publish time after year 9999", "{publish_time}", "", func(in *Input) { in.PublishTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, ErrBadTime,
			"{publish_time}: time out of range: outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"},
		{"a failure after a rendered part", "{message_id}#{attributes.nope}", "", nil, ErrMissingField,
			"{attributes.nope}: missing field: attribute not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" fails", func(t *testing.T) {
			tmpl, err := Compile(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			in := testInput(tt.data)
			if tt.in != nil {
				tt.in(in)
			}
			dst := make([]byte, 3, 64)
			copy(dst, "abc")
			got, err := tmpl.AppendTo(dst, in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("AppendTo error = %v, want %v", err, tt.want)
			}
			if err.Error() != tt.text {
				t.Errorf("AppendTo error text = %q, want %q", err, tt.text)
			}
			if string(got) != "abc" || len(got) != 3 {
				t.Errorf("AppendTo returned %q, want dst unchanged", got)
			}
		})
	}
}

func TestTimeRangeEdgesRender(t *testing.T) {
	tmpl, err := Compile("{event_time}|{event_time:reverse}")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{minTime, "1970-01-01T00:00:00.000Z|9223372036854775807"},
		{maxTime, "9999-12-31T23:59:59.999Z|9223118634553975808"},
	} {
		got, err := tmpl.AppendTo(nil, &Input{EventTime: tc.at})
		if err != nil {
			t.Fatalf("AppendTo(%v): %v", tc.at, err)
		}
		if string(got) != tc.want {
			t.Errorf("AppendTo(%v) = %q, want %q", tc.at, got, tc.want)
		}
	}
}

func TestTimeFormatMatchesTheStandardLibrary(t *testing.T) {
	p := part{kind: kindEventTime}
	for _, at := range []time.Time{
		time.Unix(0, 999_999),
		time.Unix(1e9, 123_456_789),
		time.Date(2024, 2, 29, 23, 59, 59, 999_999_999, time.UTC),
		time.Now(),
	} {
		got, err := p.appendTo(nil, &Input{EventTime: at})
		if err != nil {
			t.Fatal(err)
		}
		want := at.UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
		if string(got) != want {
			t.Errorf("render(%v) = %q, want %q", at, got, want)
		}
	}
}

func TestStringAndUsesDataDescribeTheTemplate(t *testing.T) {
	for _, tc := range []struct {
		src               string
		usesData, constnt bool
	}{
		{"{attributes.customer_id}#{event_time:reverse}", false, false},
		{"{data}", true, false},
		{"x{data.a}", true, false},
		{"{{data}}", false, true},
		{"", false, true},
	} {
		tmpl, err := Compile(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if tmpl.String() != tc.src {
			t.Errorf("String() = %q, want %q", tmpl.String(), tc.src)
		}
		if tmpl.UsesData() != tc.usesData {
			t.Errorf("%q: UsesData() = %v, want %v", tc.src, tmpl.UsesData(), tc.usesData)
		}
		if tmpl.Constant() != tc.constnt {
			t.Errorf("%q: Constant() = %v, want %v", tc.src, tmpl.Constant(), tc.constnt)
		}
	}
}

func TestRenderDoesNotAllocate(t *testing.T) {
	tmpl, err := Compile(`{attributes.customer_id}#{event_time:reverse}#{publish_time}#{data.nested.k}#{data.esc}#{message_id}`)
	if err != nil {
		t.Fatal(err)
	}
	in := testInput(`{"nested": {"k": { "a" : [ 1 , 2 ] } }, "esc": "\u00e9\ud83d\ude00"}`)
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := tmpl.AppendTo(buf[:0], in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendTo allocates %v times per run, want 0", allocs)
	}
}

func TestLeading(t *testing.T) {
	for src, want := range map[string][2]string{
		"{message_id}":                 {"", "{message_id}"},
		"orders#{event_time}#{data.a}": {"orders#", "{event_time}"},
		"{{x}}{attributes.ts}":         {"{x}", "{attributes.ts}"},
	} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		prefix, ph, ok := tmpl.Leading()
		if !ok || prefix != want[0] || ph != want[1] {
			t.Errorf("Leading(%q) = %q, %q, %v; want %q, %q", src, prefix, ph, ok, want[0], want[1])
		}
	}
	tmpl, _ := Compile("constant")
	if _, _, ok := tmpl.Leading(); ok {
		t.Error("a template without placeholders has a leading placeholder")
	}
}
