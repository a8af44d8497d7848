package watermark

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
)

// fuzzFormats are the timestamp formats FuzzEventTime picks from.
var fuzzFormats = []string{
	config.TimestampAuto, config.TimestampRFC3339,
	config.TimestampUnixS, config.TimestampUnixMS, config.TimestampUnixUS, config.TimestampUnixNS,
}

// maxErrorText bounds the error of a bad event time: it is copied into
// pubsink_error and logs, so it must not carry the attribute's value, which
// may be as large as an attribute can be.
const maxErrorText = 160

// FuzzEventTime reads an arbitrary ts attribute in every format. It checks
// that reading never panics; that a failure wraps ErrBadEventTime, returns
// the zero time and has a short error that does not repeat the value; that
// a success is in UTC, not before 1970, and reads back the same from its
// canonical form (the integer count of the format's unit, or RFC 3339);
// that auto agrees with
// unix_ms on integers and with rfc3339 otherwise. Seeds:
// testdata/fuzz/FuzzEventTime. Run: go test -fuzz=FuzzEventTime ./watermark
func FuzzEventTime(f *testing.F) {
	f.Add(uint8(0), "1772600767890")
	f.Add(uint8(0), "2026-03-04T06:06:07.890+01:00")
	f.Add(uint8(1), "2026-03-04T05:06:07.123456789Z")
	f.Add(uint8(2), "-62135596800")
	f.Add(uint8(5), "9223372036854775807")
	f.Add(uint8(0), "-1000")
	f.Add(uint8(1), "1969-12-31T23:00:00-01:00")
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		format := fuzzFormats[int(which)%len(fuzzFormats)]
		e, err := NewEventTime("ts", format)
		if err != nil {
			t.Fatal(err)
		}
		publish := time.Unix(1767225600, 0)
		got, err := e.Of(map[string]string{"ts": value}, publish)
		if err != nil {
			if !errors.Is(err, ErrBadEventTime) || !got.IsZero() {
				t.Fatalf("%s %q: %v, %v; want the zero time and ErrBadEventTime", format, value, got, err)
			}
			if len(err.Error()) > maxErrorText || (len(value) > maxErrorText && strings.Contains(err.Error(), value)) {
				t.Fatalf("%s %q: error of %d bytes repeats the value: %v", format, value, len(err.Error()), err)
			}
			return
		}
		if got.Location() != time.UTC {
			t.Fatalf("%s %q = %v, not in UTC", format, value, got)
		}
		if got.Before(time.Unix(0, 0)) {
			t.Fatalf("%s %q = %v, before 1970", format, value, got)
		}
		// RFC 3339 has four-digit years; an offset can carry a time just
		// past them, which has no canonical form to read back.
		inRange := got.Year() <= 9999
		again, err := e.Of(map[string]string{"ts": canonical(format, value, got)}, publish)
		if inRange && (err != nil || !again.Equal(got)) {
			t.Fatalf("%s %q = %v; its canonical form %q reads %v, %v", format, value, got, canonical(format, value, got), again, err)
		}
		if format == config.TimestampAuto {
			other := config.TimestampRFC3339
			if _, err := strconv.ParseInt(value, 10, 64); err == nil {
				other = config.TimestampUnixMS
			}
			o, _ := NewEventTime("ts", other)
			want, err := o.Of(map[string]string{"ts": value}, publish)
			if err != nil || !want.Equal(got) {
				t.Fatalf("auto %q = %v, but %s reads %v, %v", value, got, other, want, err)
			}
		}
	})
}

// canonical writes t back in format: the integer count of its unit, or
// RFC 3339 with nanoseconds (auto: whichever value was).
func canonical(format, value string, t time.Time) string {
	unit := map[string]time.Duration{
		config.TimestampUnixS: time.Second, config.TimestampUnixMS: time.Millisecond,
		config.TimestampUnixUS: time.Microsecond, config.TimestampUnixNS: time.Nanosecond,
	}
	if format == config.TimestampAuto {
		if _, err := strconv.ParseInt(value, 10, 64); err == nil {
			format = config.TimestampUnixMS
		}
	}
	if u, ok := unit[format]; ok {
		return strconv.FormatInt(t.UnixNano()/int64(u), 10)
	}
	return t.Format(time.RFC3339Nano)
}
