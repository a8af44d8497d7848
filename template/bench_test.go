package template

import (
	"encoding/json"
	"testing"
	"time"
)

// benchInput is a typical order message: a handful of attributes and a
// ~300-byte JSON payload.
var benchInput = &Input{
	MessageID:   "12345678901234567",
	PublishTime: time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC),
	EventTime:   time.Date(2026, 1, 2, 3, 4, 4, 0, time.UTC),
	Attributes: map[string]string{
		"customer_id": "c-000042",
		"order_id":    "o-20260102-000123",
		"event_ts":    "1767323044000",
		"source":      "checkout",
	},
	Data: []byte(`{"order_id": "o-20260102-000123", "customer": {"id": "c-000042", "country": "DE"},
		"items": [{"sku": "sku-1", "qty": 2, "price": 4.25}, {"sku": "sku-2", "qty": 1, "price": 4.00}],
		"amount": 12.50, "currency": "EUR", "paid": true, "note": "leave at the door \u00e9"}`),
}

func benchmarkRender(b *testing.B, src string) {
	tmpl, err := Compile(src)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 256)
	if tmpl.UsesData() {
		b.SetBytes(int64(len(benchInput.Data)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if buf, err = tmpl.AppendTo(buf[:0], benchInput); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRowKeyAttributeReverse(b *testing.B) {
	benchmarkRender(b, "{attributes.customer_id}#{event_time:reverse}")
}

func BenchmarkColumnDataAmount(b *testing.B) { benchmarkRender(b, "{data.amount}") }

func BenchmarkColumnDataNestedString(b *testing.B) { benchmarkRender(b, "{data.items.1.sku}") }

func BenchmarkColumnDataObject(b *testing.B) { benchmarkRender(b, "{data.customer}") }

func BenchmarkColumnData(b *testing.B) { benchmarkRender(b, "{data}") }

func BenchmarkRowKeyPublishTime(b *testing.B) { benchmarkRender(b, "{message_id}#{publish_time}") }

// BenchmarkColumnDataAmountEncodingJSON is the baseline {data.amount}
// replaces: unmarshalling the payload with encoding/json.
func BenchmarkColumnDataAmountEncodingJSON(b *testing.B) {
	b.SetBytes(int64(len(benchInput.Data)))
	b.ReportAllocs()
	for b.Loop() {
		var v map[string]any
		if err := json.Unmarshal(benchInput.Data, &v); err != nil {
			b.Fatal(err)
		}
		_ = v["amount"]
	}
}
