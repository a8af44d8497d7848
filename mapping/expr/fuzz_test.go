package expr

// Fixed expressions evaluated over fuzzed payloads and attributes.

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pubsink/pubsink/template"
)

// fuzzExprs are evaluated on every fuzzed message: reads of every kind,
// conversions, the functions, and blowups that the cost limit must stop.
var fuzzExprs = []string{
	`data`,
	`data.kind == 'reading'`,
	`has(data.a) && data.a.b > 1`,
	`data.?a.?b.orValue(0)`,
	`data[attributes.k]`,
	`data.list[0]`,
	`item`,
	`item.v * 2`,
	`size(data)`,
	`string(data)`,
	`int(data.n)`,
	`double(data.n) / 0.0`,
	`timestamp(data.ts)`,
	`timestamp(int(data.n))`,
	`duration(data.d)`,
	`data.s + attributes.k`,
	`data.s.upperAscii().split(',')`,
	`data.s.replace(attributes.k, data.s)`,
	`data.s.substring(int(data.n))`,
	`data.s.matches(attributes.k)`,
	`'%s/%d'.format([data.s, data.n])`,
	`hex(sha256(data.s)).substring(0, 8)`,
	`hex(sha256(string(data)))`,
	`base64.decode(data.s)`,
	`math.round(data.n)`,
	`data.list.sort()`,
	`data.list.flatten()`,
	`data.list.distinct()`,
	`data.map(x, x)`,
	`data.filter(x, x != null)`,
	`data.all(x, data.all(y, true))`,
	`data.exists(x, data.exists(y, data.exists(z, x == y && y == z)))`,
	`data.map(x, data.map(y, [x, y]))`,
	`[data, data, data, data].map(x, [x, x, x, x])`,
	`data == data`,
	`data in [data, 1]`,
	`attributes.exists(k, attributes[k] == data.s)`,
	`lists.range(int(data.n)).size()`,
	`cel.bind(x, data.s + data.s, x + x + x + x)`,
	`{data.s: data.n, 'k': data}`,
	`publish_time + duration(data.d)`,
	`event_time.getHours() + int(data.n)`,
	`message_id + data.s`,
}

var (
	fuzzOnce     sync.Once
	fuzzCompiled []*Expr
	fuzzErr      error
)

func compileFuzzExprs() ([]*Expr, error) {
	fuzzOnce.Do(func() {
		env, err := NewEnv(Options{Item: true, EventTime: true})
		if err != nil {
			fuzzErr = err
			return
		}
		for _, src := range fuzzExprs {
			e, err := env.Compile(src, nil)
			if err != nil {
				fuzzErr = fmt.Errorf("%s: %w", src, err)
				return
			}
			fuzzCompiled = append(fuzzCompiled, e)
		}
	})
	return fuzzCompiled, fuzzErr
}

// FuzzExprEval evaluates fixed expressions over hostile data trees (fuzzed
// JSON) and attributes: no panic, every error is an expression error, the
// payload's decode error or one of the documented sentinels, and every
// evaluation ends quickly (the cost limit stops the blowups).
func FuzzExprEval(f *testing.F) {
	for _, seed := range []string{
		`{"kind": "reading", "a": {"b": 2}, "n": 3, "s": "a,b", "list": [3, 1, 2], "ts": "2026-01-02T03:04:05Z", "d": "1.5s"}`,
		`[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25]`,
		`{"s": "", "n": -1, "list": [[1, [2]], {"a": null}]}`,
		`{"n": 1e300, "s": "\u0000\uffff", "d": "-99999999999s"}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`null`,
		`"just a string"`,
		`{"kind": `,
	} {
		f.Add([]byte(seed), "k", "a", "kind")
	}
	exprs, err := compileFuzzExprs()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte, attrKey, attrVal, k string) {
		var data any
		decodeErr := json.Unmarshal(payload, &data)
		attrs := map[string]string{attrKey: attrVal, "k": k}
		var act Activation
		act.Reset("m-1", time.Unix(1767323045, 0), attrs, func() (any, error) {
			if decodeErr != nil {
				return nil, fmt.Errorf("%w: %v", template.ErrInvalidPayload, decodeErr)
			}
			return data, nil
		})
		act.SetEventTime(time.Unix(1767323046, 0))
		act.SetItem(data)
		in := &template.Input{Vars: &act}
		for _, e := range exprs {
			start := time.Now()
			check := func(what string, err error, also ...error) {
				if err == nil {
					return
				}
				if errors.Is(err, template.ErrExpression) || errors.Is(err, template.ErrInvalidPayload) {
					return
				}
				for _, s := range also {
					if errors.Is(err, s) {
						return
					}
				}
				t.Errorf("%s %s: unexpected error %v", what, e.src, err)
			}
			_, err := e.eval(&act)
			check("eval", err)
			_, err = e.Bool(&act)
			check("bool", err)
			_, err = e.List(&act, 1000)
			check("list", err, ErrTooManyElements)
			_, err = e.time(&act)
			check("time", err)
			dst := []byte("x")
			out, err := e.AppendTo(dst, in)
			check("AppendTo", err, template.ErrMissingField)
			if err != nil && string(out) != "x" {
				t.Errorf("AppendTo %s: dst changed on error", e.src)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s took %v for five evaluations", e.src, d)
			}
		}
	})
}
