package mapping

import (
	"testing"
	"time"

	"github.com/pubsink/pubsink/mapping/expr"
	"github.com/pubsink/pubsink/mapping/jsontree"
)

// The expressions' own benchmarks are mapping/expr's; this one adds the
// payload's decoding, as Map decodes a JSON payload for an expression.

// benchPayload is a 200-byte JSON payload.
var benchPayload = []byte(`{"kind":"reading","device":"sensor-0042","site":"plant-3/line-2","ts":"2026-01-02T03:04:05.678Z","temperature":21.75,"humidity":0.43,"ok":true,"tags":["a","b"],"seq":123456789,"note":"checked ok"}`)

// A filter on one payload field, including decoding the 200-byte JSON
// payload into the value model (jsontree.go, as Map decodes it): the target
// is at most 1.5 µs.
func BenchmarkExprFilterData(b *testing.B) {
	if len(benchPayload) < 190 || len(benchPayload) > 210 {
		b.Fatalf("payload is %d bytes", len(benchPayload))
	}
	env, err := expr.NewEnv(expr.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := env.Compile(`data.kind == 'reading'`, nil)
	if err != nil {
		b.Fatal(err)
	}
	attrs := map[string]string{"type": "reading", "source": "sensor-7"}
	publish := time.Now()
	var act expr.Activation
	decode := func() (any, error) { return jsontree.Decode(benchPayload) } // as the pipeline decodes it
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPayload)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.Reset("id", publish, attrs, decode)
		ok, err := e.Bool(&act)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// The decoding alone, against encoding/json's, is BenchmarkJSONTree.
