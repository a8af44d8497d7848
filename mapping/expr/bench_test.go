package expr

// What filtering, rendering and the cost limit cost per evaluation.

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

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
	env := mustEnv(b, Options{})
	e := mustCompile(b, env, `attributes.type == 'reading'`, nil)
	attrs := benchAttrs(64)
	publish := time.Now()
	var act Activation
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.Reset("id", publish, attrs[i%len(attrs)], nil)
		ok, err := e.Bool(&act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// The same filter on a new activation per message (what newActivation
// costs: the activation and one boxed value).
func BenchmarkExprFilterAttributeNewActivation(b *testing.B) {
	env := mustEnv(b, Options{})
	e := mustCompile(b, env, `attributes.type == 'reading'`, nil)
	attrs := benchAttrs(64)
	publish := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act := &Activation{}
		act.Reset("id", publish, attrs[i%len(attrs)], nil)
		ok, err := e.Bool(act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// benchPayload is a 200-byte JSON payload: the one of mapping's
// BenchmarkExprFilterData, which adds its decoding (mapping's jsontree.go).
var benchPayload = []byte(`{"kind":"reading","device":"sensor-0042","site":"plant-3/line-2","ts":"2026-01-02T03:04:05.678Z","temperature":21.75,"humidity":0.43,"ok":true,"tags":["a","b"],"seq":123456789,"note":"checked ok"}`)

// The evaluation alone, on a payload decoded once.
func BenchmarkExprFilterDataEvalOnly(b *testing.B) {
	env := mustEnv(b, Options{})
	e := mustCompile(b, env, `data.kind == 'reading'`, nil)
	var v any
	if err := json.Unmarshal(benchPayload, &v); err != nil {
		b.Fatal(err)
	}
	publish := time.Now()
	var act Activation
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.Reset("id", publish, nil, nil)
		act.SetData(v)
		ok, err := e.Bool(&act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// A row key prefix that spreads keys: a rendered {= EXPR}.
func BenchmarkExprRenderHashPrefix(b *testing.B) {
	env := mustEnv(b, Options{})
	e := mustCompile(b, env, `hex(sha256(data.device)).substring(0, 8)`, nil)
	var v any
	if err := json.Unmarshal(benchPayload, &v); err != nil {
		b.Fatal(err)
	}
	var act Activation
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.Reset("id", time.Time{}, nil, nil)
		act.SetData(v)
		out, err := e.AppendTo(buf[:0], &act) // its vars: the activation, as template.Input.Vars holds it
		if err != nil || len(out) != 8 {
			b.Fatal(string(out), err)
		}
	}
}

// What an evaluation stopped by the cost limit costs: the bound of CPU a
// hostile payload can take per expression, in either way of counting.
func BenchmarkExprCostLimit(b *testing.B) {
	env := mustEnv(b, Options{})
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
			var act Activation
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				act.Reset("id", time.Time{}, nil, nil)
				act.SetData(list)
				if _, err := e.Bool(&act); !errors.Is(err, template.ErrExpression) {
					b.Fatal(err)
				}
			}
		})
	}
}

// A legitimate comprehension: a map over 1,000 elements (costSteps).
func BenchmarkExprMap1000(b *testing.B) {
	env := mustEnv(b, Options{})
	e := mustCompile(b, env, `data.readings.map(r, r.v * 2.0)`, nil)
	list := make([]any, 1000)
	for i := range list {
		list[i] = map[string]any{"v": float64(i)}
	}
	data := map[string]any{"readings": list}
	var act Activation
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		act.Reset("id", time.Time{}, nil, nil)
		act.SetData(data)
		if l, err := e.List(&act, 1000); err != nil || len(l) != 1000 {
			b.Fatal(err)
		}
	}
}
