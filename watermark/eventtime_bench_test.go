package watermark

import (
	"testing"
	"time"
)

// BenchmarkEventTimeOf is event-time parsing, once per message on the
// pipeline's path and once more on the tracking subscription's: each
// timestamp_format with a typical value, and no attribute (the publish
// time).
func BenchmarkEventTimeOf(b *testing.B) {
	publish := time.Date(2026, 3, 4, 5, 6, 8, 0, time.UTC)
	for _, c := range []struct{ name, attribute, format, value string }{
		{"publish_time", "", "auto", ""},
		{"auto/millis", "ts", "auto", "1772600767890"},
		{"auto/rfc3339", "ts", "auto", "2026-03-04T05:06:07.89Z"},
		{"unix_ms", "ts", "unix_ms", "1772600767890"},
		{"unix_us", "ts", "unix_us", "1772600767890123"},
		{"rfc3339", "ts", "rfc3339", "2026-03-04T05:06:07.890123Z"},
	} {
		b.Run(c.name, func(b *testing.B) {
			et, err := NewEventTime(c.attribute, c.format)
			if err != nil {
				b.Fatal(err)
			}
			attrs := map[string]string{"id": "o-123", "ts": c.value, "customer_id": "c-42"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := et.Of(attrs, publish); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
