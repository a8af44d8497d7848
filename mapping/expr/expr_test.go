package expr

// Compiling and evaluating expressions: errors and their texts, types,
// rendering, functions, times, missing values, the cost limit, the
// activation.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

func mustEnv(tb testing.TB, opts Options) *Env {
	tb.Helper()
	env, err := NewEnv(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

func mustCompile(tb testing.TB, env *Env, src string, want *cel.Type) *Expr {
	tb.Helper()
	e, err := env.Compile(src, want)
	if err != nil {
		tb.Fatalf("compile %q: %v", src, err)
	}
	return e
}

func jsonData(tb testing.TB, s string) any {
	tb.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		tb.Fatal(err)
	}
	return v
}

var testPublish = time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)

// testActivation is an activation for a message with data v.
func testActivation(attrs map[string]string, v any) *Activation {
	a := newActivation("m-1", testPublish, attrs, nil)
	a.SetData(v)
	return a
}

func render(t *testing.T, e *Expr, act *Activation) (string, error) {
	t.Helper()
	dst := []byte("prefix:")
	out, err := e.AppendTo(dst, act)
	if err != nil {
		if string(out) != "prefix:" {
			t.Errorf("%s: on error AppendTo returned %q, want dst unchanged", e.src, out)
		}
		return "", err
	}
	return strings.TrimPrefix(string(out), "prefix:"), nil
}

func TestExprCompileErrors(t *testing.T) {
	full := mustEnv(t, Options{Item: true, EventTime: true})
	plain := mustEnv(t, Options{})
	for _, tc := range []struct {
		env  *Env
		src  string
		want string // the whole error text
	}{
		{full, `dta.kind == 'a'`, `1:1: undeclared reference to 'dta' (did you mean 'data'?)`},
		{full, `data.x == 1 && atributes.type == 'a'`, `1:16: undeclared reference to 'atributes' (did you mean 'attributes'?)`},
		{full, `message_idd`, `1:1: undeclared reference to 'message_idd' (did you mean 'message_id'?)`},
		{full, `publishtime`, `1:1: undeclared reference to 'publishtime' (did you mean 'publish_time'?)`},
		{full, `itme.x`, `1:1: undeclared reference to 'itme' (did you mean 'item'?)`},
		{full, `zzz`, `1:1: undeclared reference to 'zzz'`},
		{plain, `event_time`, `1:1: undeclared reference to 'event_time'`},
		{plain, `item.x`, `1:1: undeclared reference to 'item'`},
		{full, "data.a == 1 &&\n  attributes.x == 2", `2:16: found no matching overload for '_==_' applied to '(string, int)'`},
		{full, `data.a ==`, `1:10: Syntax error: mismatched input '<EOF>' expecting`},
		{full, `'a'.upperAsci()`, `1:14: undeclared reference to 'upperAsci'`},
	} {
		_, err := tc.env.Compile(tc.src, nil)
		if err == nil {
			t.Errorf("%q compiled", tc.src)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error\n%s\nwant\n%s", tc.src, err, tc.want)
		}
		if strings.Contains(err.Error(), "in container") || strings.Contains(err.Error(), "<input>") {
			t.Errorf("%q: error %q has CEL's decorations", tc.src, err)
		}
	}
}

func TestExprTypeCheck(t *testing.T) {
	env := mustEnv(t, Options{Item: true, EventTime: true})
	for _, tc := range []struct {
		src  string
		want *cel.Type
		err  string // "" compiles
	}{
		{`attributes.type == 'reading'`, cel.BoolType, ""},
		{`data.x`, cel.BoolType, ""}, // dyn: checked when evaluated
		{`has(data.x) && data.x > 1`, cel.BoolType, ""},
		{`data.?x.orValue(false)`, cel.BoolType, ""},
		{`'a'`, cel.BoolType, "the expression is of type string, want bool"},
		{`data.?x`, cel.BoolType, "optional"},
		{`message_id.size()`, cel.BoolType, "of type int, want bool"},
		{`[1, 2]`, cel.ListType(cel.DynType), ""},
		{`data.readings`, cel.ListType(cel.DynType), ""},
		{`'a,b'.split(',')`, cel.ListType(cel.DynType), ""},
		{`data.readings.map(r, r.v)`, cel.ListType(cel.DynType), ""},
		{`1`, cel.ListType(cel.DynType), "of type int, want a list"},
		{`{'a': 1}`, cel.ListType(cel.DynType), "want a list"},
		{`{'a': 1}`, nil, ""},
		{`publish_time`, nil, ""},
	} {
		_, err := env.Compile(tc.src, tc.want)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.src, err)
		case tc.err != "" && err == nil:
			t.Errorf("%q compiled, want an error with %q", tc.src, tc.err)
		case tc.err != "" && !strings.Contains(err.Error(), tc.err):
			t.Errorf("%q: error %q, want %q in it", tc.src, err, tc.err)
		}
	}

	// A dyn result that is not a bool fails when evaluated.
	e := mustCompile(t, env, `data.x`, cel.BoolType)
	ok, err := e.Bool(testActivation(nil, jsonData(t, `{"x": true}`)))
	if err != nil || !ok {
		t.Errorf("bool on true: %v, %v", ok, err)
	}
	_, err = e.Bool(testActivation(nil, jsonData(t, `{"x": "yes"}`)))
	if !errors.Is(err, template.ErrExpression) || !strings.Contains(err.Error(), "the result is of type string, want bool") {
		t.Errorf("bool on a string: %v", err)
	}
	_, err = mustCompile(t, env, `data.x`, nil).List(testActivation(nil, jsonData(t, `{"x": 1}`)), 10)
	if !errors.Is(err, template.ErrExpression) || !strings.Contains(err.Error(), "want a list") {
		t.Errorf("list on a number: %v", err)
	}
}

func TestExprRender(t *testing.T) {
	env := mustEnv(t, Options{})
	data := map[string]any{
		"s":       "text",
		"n":       float64(12.5),
		"i":       int64(-7),
		"u":       uint64(18446744073709551615),
		"amount":  value.Decimal("-12.340"),
		"raw":     []byte{0, 1, 'a'},
		"when":    time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC),
		"took":    1500 * time.Millisecond,
		"nothing": nil,
		"list":    []any{"a", float64(1), nil, true},
		"obj":     map[string]any{"b": float64(2), "a": "x"},
	}
	act := testActivation(map[string]string{"type": "reading"}, data)
	for _, tc := range []struct{ src, want string }{
		{`'abc'`, "abc"},
		{`42`, "42"},
		{`-42`, "-42"},
		{`42u`, "42"},
		{`1.5`, "1.5"},
		{`1e21`, "1e+21"},
		{`0.1 + 0.2`, "0.30000000000000004"},
		{`2.0`, "2"},
		{`true`, "true"},
		{`b'\x00\x01z'`, "\x00\x01z"},
		{`timestamp('2026-01-02T03:04:05.678901Z')`, "2026-01-02T03:04:05.678Z"},
		{`duration('1.5s')`, "1.5s"},
		{`duration('-3s')`, "-3s"},
		{`[1, 'a', null, 2.5, b'hi']`, `[1,"a",null,2.5,"aGk="]`},
		{`{'b': 1, 'a': [true]}`, `{"a":[true],"b":1}`},
		{`{1: 'x', 2: 'y'}`, `{"1":"x","2":"y"}`},
		{`{true: 1}`, `{"true":1}`},
		{`data.s`, "text"},
		{`data.n`, "12.5"},
		{`data.i`, "-7"},
		{`data.u`, "18446744073709551615"},
		{`data.amount`, "-12.340"},
		{`data.amount + '!'`, "-12.340!"}, // a decimal is a string to CEL
		{`double(data.amount) * 2.0`, "-24.68"},
		{`data.raw`, "\x00\x01a"},
		{`data.when`, "2026-05-06T07:08:09.123Z"},
		{`data.took`, "1.5s"},
		{`data.list`, `["a",1,null,true]`},
		{`data.obj`, `{"a":"x","b":2}`},
		{`data.list.filter(x, x != null)`, `["a",1,true]`},
		{`data.?s.orValue('none')`, "text"},
		{`data.?nope.orValue('none')`, "none"},
		{`data.?s`, "text"},
		{`attributes.type`, "reading"},
		{`attributes`, `{"type":"reading"}`},
		{`message_id`, "m-1"},
		{`publish_time`, "2026-01-02T03:04:05.678Z"},
		{`type(1)`, "int"},
		{`'%s-%d'.format(['a', 7])`, "a-7"},
		{`'Hello'.upperAscii() + '/' + 'Hello'.lowerAscii()`, "HELLO/hello"},
		{`'a,b,c'.split(',')`, `["a","b","c"]`},
		{`'  x '.trim()`, "x"},
		{`'abcdef'.substring(1, 3)`, "bc"},
		{`'a.b'.replace('.', '/')`, "a/b"},
		{`base64.encode(b'hi')`, "aGk="},
		{`string(base64.decode('aGk='))`, "hi"},
		{`math.round(2.5)`, "3"},
		{`math.floor(-1.5)`, "-2"},
		{`math.greatest(1, 5, 3)`, "5"},
		{`[3, 1, 2].sort()`, "[1,2,3]"},
		{`[1, [2, 3]].flatten()`, "[1,2,3]"},
		{`cel.bind(x, 'ab', x + x)`, "abab"},
		{`data.n > 12 ? 'big' : 'small'`, "big"},
		{`data.n == 12.5 && data.i == -7`, "true"},
	} {
		e := mustCompile(t, env, tc.src, nil)
		got, err := render(t, e, act)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s rendered %q, want %q", tc.src, got, tc.want)
		}
	}

	// What renders as missing_field.
	for _, src := range []string{`null`, `data.nothing`, `data.?nope`, `optional.none()`} {
		_, err := render(t, mustCompile(t, env, src, nil), act)
		if !errors.Is(err, template.ErrMissingField) {
			t.Errorf("%s: error %v, want missing field", src, err)
		}
	}

	// An expression in a template, through the template's hook.
	tmpl, err := template.CompileWith(`{= data.s.upperAscii()}#{= hex(sha256(message_id)).substring(0, 4)}#{message_id}`, template.Options{
		Expr: func(src string) (template.Expr, error) { return env.Compile(src, nil) },
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(&template.Input{MessageID: "m-1", Vars: act})
	if want := "TEXT#" + hexSHA256("m-1")[:4] + "#m-1"; err != nil || got != want {
		t.Errorf("template rendered %q, %v; want %q", got, err, want)
	}
	if _, err := tmpl.Render(&template.Input{MessageID: "m-1"}); !errors.Is(err, template.ErrExpression) {
		t.Errorf("template without an activation: %v", err)
	}
}

func TestExprSHA256Hex(t *testing.T) {
	env := mustEnv(t, Options{})
	act := testActivation(nil, map[string]any{"user": "alice", "raw": []byte("alice")})
	want := hexSHA256("alice")
	for _, tc := range []struct{ src, want string }{
		{`hex(sha256('alice'))`, want},
		{`hex(sha256(b'alice'))`, want},
		{`hex(sha256(data.user))`, want},
		{`hex(sha256(data.raw))`, want},
		{`hex(sha256(data.user)).substring(0, 8)`, want[:8]},
		{`hex(sha256(data.user)).substring(0, 8) + '#' + data.user`, want[:8] + "#alice"},
		{`size(sha256(''))`, "32"},
		{`hex(b'\x00\xff')`, "00ff"},
		{`hex(b'')`, ""},
	} {
		got, err := render(t, mustCompile(t, env, tc.src, nil), act)
		if err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
	if want != "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90" {
		t.Errorf("sha256(alice) = %s", want)
	}
	if _, err := env.Compile(`hex('text')`, nil); err == nil {
		t.Error("hex(string) compiled")
	}
	// A dyn argument of the wrong type fails when evaluated.
	_, err := render(t, mustCompile(t, env, `hex(sha256(data.n))`, nil), testActivation(nil, map[string]any{"n": float64(1)}))
	if !errors.Is(err, template.ErrExpression) {
		t.Errorf("sha256(double): %v", err)
	}
}

// hexSHA256 is the oracle of sha256 and hex: Go's own.
func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestExprTimes(t *testing.T) {
	env := mustEnv(t, Options{EventTime: true})
	act := testActivation(nil, map[string]any{"ts": "2026-03-04T05:06:07.5Z", "epoch": float64(1767323045)})
	for _, tc := range []struct{ src, want string }{
		{`publish_time`, "2026-01-02T03:04:05.678Z"},
		{`publish_time.getHours()`, "3"},
		{`publish_time.getFullYear()`, "2026"},
		{`publish_time + duration('1h')`, "2026-01-02T04:04:05.678Z"},
		{`timestamp(data.ts)`, "2026-03-04T05:06:07.500Z"},
		{`timestamp(int(data.epoch))`, "2026-01-02T03:04:05.000Z"},
		{`int(publish_time)`, "1767323045"},
		{`publish_time - timestamp('2026-01-02T03:04:05Z')`, "0.678901234s"},
	} {
		got, err := render(t, mustCompile(t, env, tc.src, nil), act)
		if err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}

	got, err := mustCompile(t, env, `publish_time`, nil).time(act)
	if err != nil || !got.Equal(testPublish) {
		t.Errorf("time(publish_time) = %v, %v", got, err)
	}
	got, err = mustCompile(t, env, `timestamp(data.ts)`, nil).time(act)
	if err != nil || !got.Equal(time.Date(2026, 3, 4, 5, 6, 7, 5e8, time.UTC)) {
		t.Errorf("time(timestamp(data.ts)) = %v, %v", got, err)
	}
	// No conversion: a string or an int is not a time.
	for _, src := range []string{`data.ts`, `int(data.epoch)`} {
		if _, err := mustCompile(t, env, src, nil).time(act); !errors.Is(err, template.ErrExpression) || !strings.Contains(err.Error(), "want timestamp") {
			t.Errorf("time(%s): %v", src, err)
		}
	}
	// timestamp, for a template's lone expression: ok false for a string.
	in := &template.Input{Vars: act}
	if ts, ok, err := mustCompile(t, env, `publish_time`, nil).Timestamp(in.Vars); !ok || err != nil || !ts.Equal(testPublish) {
		t.Errorf("timestamp(publish_time) = %v, %v, %v", ts, ok, err)
	}
	if _, ok, err := mustCompile(t, env, `data.ts`, nil).Timestamp(in.Vars); ok || err != nil {
		t.Errorf("timestamp(data.ts) = %v, %v", ok, err)
	}
	// A bad timestamp string is an expression error, without the string.
	bad := testActivation(nil, map[string]any{"ts": "secret-not-a-time"})
	_, err = mustCompile(t, env, `timestamp(data.ts)`, nil).time(bad)
	if !errors.Is(err, template.ErrExpression) || strings.Contains(err.Error(), "secret") {
		t.Errorf("timestamp(bad): %v", err)
	}

	// event_time: unset fails, set reads.
	e := mustCompile(t, env, `event_time.getMinutes()`, nil)
	if _, err := render(t, e, act); !errors.Is(err, template.ErrExpression) {
		t.Errorf("event_time unset: %v", err)
	}
	act.SetEventTime(time.Date(2026, 1, 1, 0, 42, 0, 0, time.UTC))
	if got, err := render(t, e, act); err != nil || got != "42" {
		t.Errorf("event_time.getMinutes() = %q, %v", got, err)
	}
}

func TestExprMissing(t *testing.T) {
	env := mustEnv(t, Options{Item: true})
	attrs := map[string]string{"type": "reading", "k": "secretkey"}
	act := testActivation(attrs, jsonData(t, `{"a": {"b": 1}, "s": "secretvalue", "list": [1]}`))
	for _, src := range []string{
		`data.nope`,
		`data.a.nope`,
		`data.a.b.c`,
		`data.list[3]`,
		`attributes['nope']`,
		`attributes.nope`,
		`data[attributes.k]`,
		`int(data.s)`,
		`data.s + 1`,
		`item`,
		`1 / 0`,
		`9223372036854775807 + 1`,
		`data.s.substring(50)`,
		`data.s.matches(attributes.k + '[')`,
	} {
		_, err := render(t, mustCompile(t, env, src, nil), act)
		if !errors.Is(err, template.ErrExpression) {
			t.Errorf("%s: %v, want an expression error", src, err)
			continue
		}
		if errors.Is(err, template.ErrMissingField) || errors.Is(err, template.ErrInvalidPayload) {
			t.Errorf("%s: %v wraps another sentinel", src, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %q quotes the message's values", src, err)
		}
	}
	// The key of a lookup written in the expression is named.
	_, err := render(t, mustCompile(t, env, `data.nope`, nil), act)
	if err == nil || !strings.Contains(err.Error(), "no such key: nope") {
		t.Errorf("data.nope: %v", err)
	}
}

// TestExpressionMissingValues: an expression that reads what the message
// does not have fails with ErrNoSuchValue beside template.ErrExpression,
// with the same text as before; other failures do not. This is what tells
// cel-go's resolution errors by their type (resolutionErrorType): a cel-go
// that changes them fails here.
func TestExpressionMissingValues(t *testing.T) {
	if resolutionErrorType() == nil {
		t.Fatal("cel-go's resolution error was not found")
	}
	env := mustEnv(t, Options{EventTime: true})
	act := testActivation(map[string]string{"a": "1"}, jsonData(t, `{"n": null, "obj": {}, "list": [1], "s": "x", "z": 0}`))
	for src, missing := range map[string]bool{
		"data.nope":                   true,
		"data.obj.nope":               true,
		"data.n.nope":                 true,
		"data.list[3]":                true,
		"data['nope']":                true,
		"attributes.nope":             true,
		"attributes['nope'] + 'x'":    true,
		"data.nope == 1 ? 'a' : 'b'":  true,
		"1 / int(data.z)":             false,
		"int(data.s)":                 false,
		"data.s + 1":                  false,
		"data.list.map(x, 1 / x - 1)": false,
		"[1, 2].map(x, 3 / (x - 1))":  false,
	} {
		e := mustCompile(t, env, src, nil)
		_, err := e.eval(act)
		if err == nil {
			t.Errorf("%s: no error", src)
			continue
		}
		if !errors.Is(err, template.ErrExpression) || errors.Is(err, ErrNoSuchValue) != missing {
			t.Errorf("%s: %v; missing %v, want %v", src, err, errors.Is(err, ErrNoSuchValue), missing)
		}
	}
	// The text is what it was: no trace of the marker.
	_, err := mustCompile(t, env, "data.nope", nil).eval(act)
	if err == nil || err.Error() != "expression failed: no such key: nope" {
		t.Errorf("text %v", err)
	}
}

func TestExprHasAndOptional(t *testing.T) {
	env := mustEnv(t, Options{})
	act := testActivation(map[string]string{"type": "reading"},
		jsonData(t, `{"a": {"b": null, "c": 0}, "list": [10, 20], "empty": ""}`))
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{`has(data.a)`, true},
		{`has(data.z)`, false},
		{`has(data.a.b)`, true}, // present, null
		{`has(data.a.z)`, false},
		{`has(attributes.type)`, true},
		{`has(attributes.source)`, false},
		{`'type' in attributes`, true},
		{`data.?a.?c.orValue(1) == 0`, true},
		{`data.?a.?z.orValue(1) == 1`, true},
		{`data.?z.?y.orValue('d') == 'd'`, true},
		{`data.?a.?c.hasValue()`, true},
		{`!data.?z.hasValue()`, true},
		{`data.list[?5].orValue(-1) == -1`, true},
		{`data.list[?1].orValue(-1) == 20`, true},
		{`attributes.?type.orValue('') == 'reading'`, true},
		{`attributes.?nope.orValue('x') == 'x'`, true},
		{`data.a.b == null`, true},
		{`data.empty == ''`, true},
		{`size(attributes) == 1`, true},
		{`attributes.exists(k, k == 'type')`, true},
		{`attributes == {'type': 'reading'}`, true},
		{`data.list.all(x, x >= 10)`, true},
		{`data.list.exists_one(x, x == 20)`, true},
	} {
		got, err := mustCompile(t, env, tc.src, cel.BoolType).Bool(act)
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
	// has() of a field of a missing field is an error.
	if _, err := mustCompile(t, env, `has(data.z.y)`, cel.BoolType).Bool(act); !errors.Is(err, template.ErrExpression) {
		t.Errorf("has(data.z.y): %v", err)
	}
}

func TestExprCostLimit(t *testing.T) {
	env := mustEnv(t, Options{Item: true})
	for src, want := range map[string]costMode{
		`attributes.type == 'reading' && message_id.startsWith('m-') && has(data.a) && data.a.b == 1`: costFree,
		`[1, 2, 3].map(x, x * 2)`:                 costFree,
		`hex(sha256(data.user)).substring(0, 8)`:  costTracked,
		`data.readings.map(r, r.v * 2.0)`:         costSteps,
		`data.readings.filter(r, r.kind == 'a')`:  costSteps,
		`data.xs.all(x, data.xs.all(y, true))`:    costSteps,
		`cel.bind(n, size(data.xs), n > 2)`:       costFree,
		`data.xs.exists(x, x.contains(data.s))`:   costTracked,
		`data.xs.exists(x, x > 2.0 && x < 5.0)`:   costSteps,
		`data.xs.exists(x, x.startsWith(data.s))`: costTracked,
	} {
		if got := mustCompile(t, env, src, nil).mode; got != want {
			t.Errorf("%s: cost mode %v, want %v", src, got, want)
		}
	}
	list := make([]any, 1000)
	for i := range list {
		list[i] = float64(i)
	}
	act := testActivation(nil, map[string]any{"xs": list, "s": strings.Repeat("x", 1<<20)})
	for _, tc := range []struct {
		src   string
		limit uint64
	}{
		{`data.xs.all(x, data.xs.all(y, true))`, exprCostLimit},
		{`data.xs.map(x, data.xs.map(y, x * y)).size() > 0`, exprCostLimit},
		{`data.xs.map(x, data.xs.map(y, x + y)).size() > 0`, trackedLoopLimit}, // + may concatenate
		{`data.xs.exists(x, data.xs.exists(y, x * y < 0.0))`, exprCostLimit},
		{`data.xs.exists(x, data.xs.exists_one(y, false))`, exprCostLimit},
		{`data.xs.exists(x, data.xs.exists(y, string(x).contains(data.s)))`, trackedLoopLimit},
		{`lists.range(10000).map(x, x * 2).size() > 0`, trackedLoopLimit}, // its range's size is known
		{`data.s.contains(data.s + 'y')`, exprCostLimit},
		{`hex(sha256(data.s + data.s + data.s + data.s)).size() > 0`, exprCostLimit},
	} {
		e := mustCompile(t, env, tc.src, nil)
		if e.mode == costFree || e.limit != tc.limit {
			t.Errorf("%s: mode %v, limit %d; want counted, limit %d", tc.src, e.mode, e.limit, tc.limit)
		}
		start := time.Now()
		_, err := e.eval(act)
		if !errors.Is(err, template.ErrExpression) || !strings.Contains(err.Error(), fmt.Sprintf("cost limit of %d exceeded", tc.limit)) {
			t.Errorf("%s: %v, want the cost limit", tc.src, err)
		}
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Errorf("%s took %v to stop", tc.src, d)
		}
	}
	// A map or a filter over 1,000 elements fits (max_rows is 1,000 by
	// default); 10,000 do not.
	for _, src := range []string{`data.xs.map(x, x * 2.0)`, `data.xs.filter(x, x >= 0.0)`} {
		e := mustCompile(t, env, src, nil)
		if got, err := e.List(act, 1000); err != nil || len(got) != 1000 {
			t.Errorf("%s: %d elements, %v", src, len(got), err)
		}
		long := testActivation(nil, map[string]any{"xs": make([]any, 10000)})
		if _, err := e.eval(long); !errors.Is(err, template.ErrExpression) || !strings.Contains(err.Error(), "comprehension steps") {
			t.Errorf("%s over 10,000: %v", src, err)
		}
	}
	// A comprehension the limit stops is an error even where || would
	// absorb it... unless the other side decides, as CEL's logic says.
	if ok, err := mustCompile(t, env, `true || data.xs.all(x, data.xs.all(y, true))`, nil).Bool(act); err != nil || !ok {
		t.Errorf("true || blowup: %v, %v", ok, err)
	}
	if _, err := mustCompile(t, env, `false || data.xs.all(x, data.xs.all(y, true))`, nil).Bool(act); !errors.Is(err, template.ErrExpression) {
		t.Errorf("false || blowup: %v", err)
	}
	// replace makes no string of the payload's square.
	for _, src := range []string{`data.s.replace('', data.s)`, `data.s.replace('x', data.s, 100)`} {
		start := time.Now()
		// The bound or the cost limit, whichever comes first.
		if _, err := mustCompile(t, env, src, nil).eval(act); !errors.Is(err, template.ErrExpression) {
			t.Errorf("%s: %v", src, err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("%s took %v", src, d)
		}
	}
	big := types.String(strings.Repeat("x", 1<<20))
	if v := boundedReplace([]ref.Val{big, types.String(""), big}, -1); !types.IsError(v) || !strings.Contains(fmt.Sprint(v), "larger than 16777216 bytes") {
		t.Errorf("boundedReplace(big, '', big) = %.40v", v)
	}
	if v := boundedReplace([]ref.Val{big, types.String("x"), types.String("yy")}, -1); types.IsError(v) || len(v.(types.String)) != 2<<20 {
		t.Errorf("boundedReplace(big, 'x', 'yy') = %.40v", v)
	}
	for src, want := range map[string]string{
		`'a.b.c'.replace('.', '/')`:    "a/b/c",
		`'a.b.c'.replace('.', '/', 1)`: "a/b.c",
		`'a.b.c'.replace('.', '', -1)`: "abc",
		`'abc'.replace('', '-')`:       "-a-b-c-",
		`'abc'.replace('b', 'b', 0)`:   "abc",
	} {
		got, err := render(t, mustCompile(t, env, src, nil), act)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
	// lists.range makes no list the limit would not let an expression use.
	if _, err := mustCompile(t, env, `lists.range(1000000).size()`, nil).eval(act); !errors.Is(err, template.ErrExpression) || !strings.Contains(err.Error(), "exceeds maximum allowed (100000)") {
		t.Errorf("lists.range(1000000): %v", err)
	}
	// Within the limit, a comprehension runs.
	small := testActivation(nil, map[string]any{"xs": list[:50]})
	ok, err := mustCompile(t, env, `data.xs.all(x, x < 1000)`, nil).Bool(small)
	if err != nil || !ok {
		t.Errorf("small all: %v, %v", ok, err)
	}
}

func TestExprDecodeError(t *testing.T) {
	env := mustEnv(t, Options{})
	calls := 0
	errBad := fmt.Errorf("%w: json: unexpected end", template.ErrInvalidPayload)
	act := newActivation("m", time.Time{}, map[string]string{"type": "reading"},
		func() (any, error) { calls++; return nil, errBad })
	for _, src := range []string{`data.kind == 'a'`, `has(data.kind) || true`, `attributes.type == 'reading' && data.x == 1`} {
		_, err := mustCompile(t, env, src, nil).Bool(act)
		if !errors.Is(err, template.ErrInvalidPayload) || errors.Is(err, template.ErrExpression) {
			t.Errorf("%s: %v, want the decode error", src, err)
		}
	}
	if calls != 1 {
		t.Errorf("decoded %d times, want once", calls)
	}
	// An expression that does not read data does not decode it.
	other := newActivation("m", time.Time{}, map[string]string{"type": "reading"},
		func() (any, error) { t.Error("decoded"); return nil, errBad })
	if ok, err := mustCompile(t, env, `attributes.type == 'reading'`, nil).Bool(other); err != nil || !ok {
		t.Errorf("attribute filter: %v, %v", ok, err)
	}
	// The decode func's own error is returned as it is (a transient one).
	errTransient := errors.New("schema not fetched yet")
	tr := newActivation("m", time.Time{}, nil, func() (any, error) { return nil, errTransient })
	if _, err := mustCompile(t, env, `data.x`, nil).eval(tr); err != errTransient {
		t.Errorf("transient: %v", err)
	}
	if v, err := tr.payload(); v != nil || err != errTransient {
		t.Errorf("payload() = %v, %v", v, err)
	}
}

func TestExprList(t *testing.T) {
	env := mustEnv(t, Options{Item: true, EventTime: true})
	data := jsonData(t, `{"readings": [{"v": 1}, {"v": 2}, {"v": 3}], "csv": "a,b"}`)
	act := testActivation(nil, data)
	readings := data.(map[string]any)["readings"].([]any)

	got, err := mustCompile(t, env, `data.readings`, cel.ListType(cel.DynType)).List(act, 3)
	if err != nil || len(got) != 3 || &got[0] != &readings[0] {
		t.Errorf("data.readings: %v, %v (want the payload's own slice)", got, err)
	}
	got, err = mustCompile(t, env, `data.readings.map(r, r.v * 2.0)`, nil).List(act, 10)
	if err != nil || fmt.Sprint(got) != "[2 4 6]" {
		t.Errorf("map: %v, %v", got, err)
	}
	got, err = mustCompile(t, env, `data.csv.split(',')`, nil).List(act, 10)
	if err != nil || fmt.Sprint(got) != "[a b]" {
		t.Errorf("split: %v, %v", got, err)
	}
	got, err = mustCompile(t, env, `[publish_time, 1u, b'x', {'k': [1]}]`, nil).List(act, 10)
	if err != nil || len(got) != 4 || got[0] != testPublish || got[1] != uint64(1) || !bytes.Equal(got[2].([]byte), []byte("x")) {
		t.Errorf("mixed: %#v, %v", got, err)
	}
	_, err = mustCompile(t, env, `data.readings`, nil).List(act, 2)
	if !errors.Is(err, ErrTooManyElements) || errors.Is(err, template.ErrExpression) {
		t.Errorf("3 elements, max 2: %v", err)
	}

	// item: one element at a time.
	e := mustCompile(t, env, `item.v * 10.0`, nil)
	var out []string
	for _, it := range readings {
		act.SetItem(it)
		s, err := render(t, e, act)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if strings.Join(out, ",") != "10,20,30" {
		t.Errorf("item.v * 10 = %v", out)
	}
	act.SetItem(nil)
	if _, err := render(t, mustCompile(t, env, `item`, nil), act); !errors.Is(err, template.ErrMissingField) {
		t.Errorf("null item: %v", err)
	}
	act.ClearItem()
	if _, err := render(t, mustCompile(t, env, `item`, nil), act); !errors.Is(err, template.ErrExpression) {
		t.Errorf("unset item: %v", err)
	}
}

func TestExprReadsData(t *testing.T) {
	env := mustEnv(t, Options{Item: true})
	for src, want := range map[string]bool{
		`data.x`:                           true,
		`has(data.x)`:                      true,
		`attributes.type == 'a' || data.x`: true,
		`[1].exists(data, data == 1)`:      false,
		`cel.bind(d, 'x', d)`:              false,
		`attributes.type == 'a'`:           false,
		`item.x`:                           false,
		`message_id`:                       false,
	} {
		if got := mustCompile(t, env, src, nil).ReadsData(); got != want {
			t.Errorf("readsData(%s) = %v", src, got)
		}
	}
}

func TestExprActivationReuse(t *testing.T) {
	env := mustEnv(t, Options{})
	e := mustCompile(t, env, `message_id + ':' + attributes.type + ':' + string(publish_time) + ':' + data.k`, nil)
	var act Activation
	for i := range 300 { // more distinct values than the boxed cache keeps
		id := fmt.Sprint("m", i)
		typ := fmt.Sprint("t", i%7)
		if i%2 == 0 {
			typ = fmt.Sprint("long-", strings.Repeat("x", 100), i)
		}
		pub := time.Unix(int64(i), 0).UTC()
		act.Reset(id, pub, map[string]string{"type": typ}, func() (any, error) {
			return map[string]any{"k": id}, nil
		})
		got, err := render(t, e, &act)
		want := id + ":" + typ + ":" + pub.Format(time.RFC3339) + ":" + id
		if err != nil || got != want {
			t.Fatalf("message %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if len(act.attrs.boxed) > maxBoxed {
		t.Errorf("%d boxed values kept", len(act.attrs.boxed))
	}
	a := AcquireActivation("x", time.Time{}, map[string]string{"type": "t"}, nil)
	if got, err := render(t, mustCompile(t, env, `message_id + attributes.type`, nil), a); err != nil || got != "xt" {
		t.Errorf("pooled: %q, %v", got, err)
	}
	a.Release()
	if a.attrs.m != nil || a.decode != nil || a.messageID != "" {
		t.Error("a released activation keeps its message")
	}
}

// A filter on an attribute allocates nothing on a reused activation.
func TestExprFilterAttributeAllocs(t *testing.T) {
	env := mustEnv(t, Options{})
	e := mustCompile(t, env, `attributes.type == 'reading'`, cel.BoolType)
	attrs := benchAttrs(8)
	var act Activation
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		act.Reset("id", testPublish, attrs[i%len(attrs)], nil)
		i++
		if ok, err := e.Bool(&act); err != nil || !ok {
			t.Fatal(ok, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per evaluation, want 0", allocs)
	}
}

func TestExprScrub(t *testing.T) {
	src := `int(data.s) + data['key']`
	for msg, want := range map[string]string{
		`no such key: key`:                             `no such key: key`,
		`no such key: secret`:                          `no such key`,
		`parsing "secret": bad`:                        `parsing "…": bad`,
		`type conversion error from 'string' to 'int'`: `type conversion error from 'string' to 'int'`,
		`no such overload: 'x' 'int'`:                  `no such overload: '…' 'int'`,
		`unterminated "quote`:                          `unterminated "quote`,
	} {
		if got := scrub(msg, src); got != want {
			t.Errorf("scrub(%q) = %q, want %q", msg, got, want)
		}
	}
	if got := scrub(strings.Repeat("a", 500), src); len(got) > 310 {
		t.Errorf("scrub kept %d bytes", len(got))
	}
}

// One compiled expression serves many goroutines, each with its own
// activation.
func TestExprConcurrent(t *testing.T) {
	env := mustEnv(t, Options{})
	e := mustCompile(t, env, `attributes.type + ':' + hex(sha256(data.s)).substring(0, 4) + ':' + string(data.xs.map(x, x * 2.0).size())`, nil)
	done := make(chan error)
	for g := range 4 {
		go func() {
			var act Activation
			for i := range 200 {
				s := fmt.Sprint("s", g, "-", i)
				act.Reset("m", testPublish, map[string]string{"type": fmt.Sprint("t", i%3)}, func() (any, error) {
					return map[string]any{"s": s, "xs": []any{float64(1), float64(2)}}, nil
				})
				out, err := e.AppendTo(nil, &act)
				if want := fmt.Sprint("t", i%3, ":", hexSHA256(s)[:4], ":2"); err != nil || string(out) != want {
					done <- fmt.Errorf("%q, %v; want %q", out, err, want)
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
