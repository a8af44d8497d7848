package mapping

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/mapping/jsontree"
	"github.com/pubsink/pubsink/template"
)

// benchAttrs are distinct maps with distinct strings, as each message
// brings its own: the activation must not depend on seeing the same map.
func benchAttrs(n int) []map[string]string {
	out := make([]map[string]string, n)
	for i := range out {
		out[i] = map[string]string{
			strings.Clone("type"):   strings.Clone("reading"),
			strings.Clone("source"): strings.Clone("sensor-7"),
		}
	}
	return out
}

// A filter on one attribute, on a reused activation: the target is at most
// 0.3 µs and no allocation per message.
func BenchmarkExprFilterAttribute(b *testing.B) {
	env := mustEnv(b, exprOptions{})
	e := mustCompile(b, env, `attributes.type == 'reading'`, nil)
	attrs := benchAttrs(64)
	publish := time.Now()
	var act activation
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.reset("id", publish, attrs[i%len(attrs)], nil)
		ok, err := e.bool(&act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// The same filter on a new activation per message (what newActivation
// costs: the activation and one boxed value).
func BenchmarkExprFilterAttributeNewActivation(b *testing.B) {
	env := mustEnv(b, exprOptions{})
	e := mustCompile(b, env, `attributes.type == 'reading'`, nil)
	attrs := benchAttrs(64)
	publish := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act := &activation{}
		act.reset("id", publish, attrs[i%len(attrs)], nil)
		ok, err := e.bool(act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// benchPayload is a 200-byte JSON payload.
var benchPayload = []byte(`{"kind":"reading","device":"sensor-0042","site":"plant-3/line-2","ts":"2026-01-02T03:04:05.678Z","temperature":21.75,"humidity":0.43,"ok":true,"tags":["a","b"],"seq":123456789,"note":"checked ok"}`)

// A filter on one payload field, including decoding the 200-byte JSON
// payload into the value model (encoding/json into any): the target is at
// most 1.5 µs.
func BenchmarkExprFilterData(b *testing.B) {
	if len(benchPayload) < 190 || len(benchPayload) > 210 {
		b.Fatalf("payload is %d bytes", len(benchPayload))
	}
	env := mustEnv(b, exprOptions{})
	e := mustCompile(b, env, `data.kind == 'reading'`, nil)
	attrs := benchAttrs(1)[0]
	publish := time.Now()
	var act activation
	decode := func() (any, error) { return jsontree.Decode(benchPayload) } // as the pipeline decodes it
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPayload)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.reset("id", publish, attrs, decode)
		ok, err := e.bool(&act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// The decoding alone, against encoding/json's, is BenchmarkJSONTree.

// The evaluation alone, on a payload decoded once.
func BenchmarkExprFilterDataEvalOnly(b *testing.B) {
	env := mustEnv(b, exprOptions{})
	e := mustCompile(b, env, `data.kind == 'reading'`, nil)
	var v any
	if err := json.Unmarshal(benchPayload, &v); err != nil {
		b.Fatal(err)
	}
	publish := time.Now()
	var act activation
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.reset("id", publish, nil, nil)
		act.setData(v)
		ok, err := e.bool(&act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// A row key prefix that spreads keys: a rendered {= EXPR}.
func BenchmarkExprRenderHashPrefix(b *testing.B) {
	env := mustEnv(b, exprOptions{})
	e := mustCompile(b, env, `hex(sha256(data.device)).substring(0, 8)`, nil)
	var v any
	if err := json.Unmarshal(benchPayload, &v); err != nil {
		b.Fatal(err)
	}
	var act activation
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.reset("id", time.Time{}, nil, nil)
		act.setData(v)
		out, err := e.AppendTo(buf[:0], &act) // its vars: the activation, as template.Input.Vars holds it
		if err != nil || len(out) != 8 {
			b.Fatal(string(out), err)
		}
	}
}

// What an evaluation stopped by the cost limit costs: the bound of CPU a
// hostile payload can take per expression, in either way of counting.
func BenchmarkExprCostLimit(b *testing.B) {
	env := mustEnv(b, exprOptions{})
	list := make([]any, 1000)
	for i := range list {
		list[i] = strconv.Itoa(i)
	}
	for _, tc := range []struct {
		name, src string
		mode      costMode
	}{
		{"steps", `data.all(x, data.all(y, true))`, costSteps},
		{"tracked", `data.all(x, data.all(y, !y.startsWith(x + 'z')))`, costTracked},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := mustCompile(b, env, tc.src, nil)
			if e.mode != tc.mode {
				b.Fatalf("mode %v", e.mode)
			}
			var act activation
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				act.reset("id", time.Time{}, nil, nil)
				act.setData(list)
				if _, err := e.bool(&act); !errors.Is(err, template.ErrExpression) {
					b.Fatal(err)
				}
			}
		})
	}
}

// A legitimate comprehension: a map over 1,000 elements (costSteps).
func BenchmarkExprMap1000(b *testing.B) {
	env := mustEnv(b, exprOptions{})
	e := mustCompile(b, env, `data.readings.map(r, r.v * 2.0)`, nil)
	list := make([]any, 1000)
	for i := range list {
		list[i] = map[string]any{"v": float64(i)}
	}
	data := map[string]any{"readings": list}
	var act activation
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		act.reset("id", time.Time{}, nil, nil)
		act.setData(data)
		if l, err := e.list(&act, 1000); err != nil || len(l) != 1000 {
			b.Fatal(err)
		}
	}
}
