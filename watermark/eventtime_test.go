package watermark

import (
	"errors"
	"testing"
	"time"
)

func TestEventTimeFormats(t *testing.T) {
	want := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	publish := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	epoch := time.Unix(0, 0).UTC()
	cases := []struct {
		name, format, value string
		want                time.Time
		bad                 bool
	}{
		{"auto reads milliseconds since the epoch", "auto", "1772600767890", want, false},
		{"auto reads RFC 3339", "auto", "2026-03-04T05:06:07.89Z", want, false},
		{"auto reads RFC 3339 with an offset", "auto", "2026-03-04T06:06:07.890+01:00", want, false},
		{"auto rejects seconds with a fraction", "auto", "1772600767.89", time.Time{}, true},
		{"auto rejects text", "auto", "yesterday", time.Time{}, true},
		{"auto rejects an empty value", "auto", "", time.Time{}, true},
		{"rfc3339 rejects milliseconds", "rfc3339", "1772600767890", time.Time{}, true},
		{"unix_s", "unix_s", "1772600767", want.Truncate(time.Second), false},
		{"unix_ms", "unix_ms", "1772600767890", want, false},
		{"unix_us", "unix_us", "1772600767890000", want, false},
		{"unix_ns", "unix_ns", "1772600767890000000", want, false},
		{"unix_s out of range", "unix_s", "99999999999999999", time.Time{}, true},
		{"unix_ms rejects RFC 3339", "unix_ms", "2026-03-04T05:06:07Z", time.Time{}, true},
		{"unix_ms reads the epoch", "unix_ms", "0", epoch, false},
		{"unix_ms reads minus zero as the epoch", "unix_ms", "-0", epoch, false},
		{"rfc3339 reads the epoch written with an offset", "rfc3339", "1969-12-31T23:00:00-01:00", epoch, false},
		{"auto rejects milliseconds before 1970", "auto", "-1000", time.Time{}, true},
		{"auto rejects RFC 3339 before 1970", "auto", "1969-07-20T20:17:40Z", time.Time{}, true},
		{"rfc3339 rejects a nanosecond before 1970", "rfc3339", "1969-12-31T23:59:59.999999999Z", time.Time{}, true},
		{"rfc3339 rejects an offset that puts the time before 1970", "rfc3339", "1970-01-01T00:30:00+01:00", time.Time{}, true},
		{"rfc3339 rejects year 1", "rfc3339", "0001-01-01T00:00:00Z", time.Time{}, true},
		{"unix_s rejects a second before 1970", "unix_s", "-1", time.Time{}, true},
		{"unix_us rejects a microsecond before 1970", "unix_us", "-1", time.Time{}, true},
		{"unix_ns rejects a nanosecond before 1970", "unix_ns", "-1", time.Time{}, true},
		{"unix_ns rejects its minimum", "unix_ns", "-9223372036854775808", time.Time{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := NewEventTime("ts", c.format)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Of(map[string]string{"ts": c.value}, publish)
			if c.bad {
				if !errors.Is(err, ErrBadEventTime) {
					t.Fatalf("Of(%q) = %v, %v; want ErrBadEventTime", c.value, got, err)
				}
				return
			}
			if err != nil || !got.Equal(c.want) {
				t.Fatalf("Of(%q) = %v, %v; want %v", c.value, got, err, c.want)
			}
		})
	}
}

func TestEventTimeBefore1970SaysSo(t *testing.T) {
	e, _ := NewEventTime("ts", "unix_ms")
	_, err := e.Of(map[string]string{"ts": "-1000"}, time.Now())
	if want := `bad event time: attribute "ts": before 1970-01-01T00:00:00Z`; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestEventTimeDefaultsToPublishTime(t *testing.T) {
	e, _ := NewEventTime("", "auto")
	publish := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	got, err := e.Of(map[string]string{"ts": "1"}, publish)
	if err != nil || !got.Equal(publish) {
		t.Fatalf("got %v, %v; want the publish time", got, err)
	}
}

func TestEventTimeMissingAttributeIsBad(t *testing.T) {
	e, _ := NewEventTime("ts", "auto")
	if _, err := e.Of(map[string]string{"other": "1"}, time.Now()); !errors.Is(err, ErrBadEventTime) {
		t.Fatalf("err = %v, want ErrBadEventTime", err)
	}
}

func TestNewEventTimeRejectsUnknownFormat(t *testing.T) {
	if _, err := NewEventTime("ts", "iso"); err == nil {
		t.Fatal("want an error for an unknown format")
	}
}

func BenchmarkEventTimeAutoMillis(b *testing.B) {
	e, _ := NewEventTime("ts", "auto")
	attrs := map[string]string{"ts": "1772600767890"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Of(attrs, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEventTimeAutoRFC3339(b *testing.B) {
	e, _ := NewEventTime("ts", "auto")
	attrs := map[string]string{"ts": "2026-03-04T05:06:07.89Z"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Of(attrs, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}
