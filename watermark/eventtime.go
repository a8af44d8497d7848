package watermark

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pubsink/pubsink/config"
)

// ErrBadEventTime wraps every failure to read an event time that is present;
// the pipeline dead-letters such messages with reason bad_event_time.
var ErrBadEventTime = errors.New("bad event time")

// EventTime reads the event time of a message: from the attribute named by
// source.timestamp_attribute in source.timestamp_format, or the publish time
// when no attribute is configured. A configured attribute that is missing,
// unparsable or before 1970 is an error wrapping ErrBadEventTime: silently
// falling back to the publish time would put the row at the wrong time.
type EventTime struct {
	attribute string
	parse     func(string) (time.Time, error)
}

// NewEventTime returns the event-time reader of one pipeline's source.
// format is one of the config.Timestamp* values ("" means auto).
func NewEventTime(attribute, format string) (*EventTime, error) {
	parse, ok := parsers[format]
	if !ok {
		return nil, fmt.Errorf("unknown timestamp_format %q", format)
	}
	return &EventTime{attribute: attribute, parse: parse}, nil
}

// Of returns the event time of a message with these attributes and publish
// time. It does not allocate on success.
func (e *EventTime) Of(attributes map[string]string, publishTime time.Time) (time.Time, error) {
	if e.attribute == "" {
		return publishTime, nil
	}
	v, ok := attributes[e.attribute]
	if !ok {
		return time.Time{}, fmt.Errorf("%w: attribute %q is missing", ErrBadEventTime, e.attribute)
	}
	t, err := e.parse(v)
	if err == nil && t.Before(epoch) {
		err = errBeforeEpoch
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: attribute %q: %w", ErrBadEventTime, e.attribute, err)
	}
	return t, nil
}

// Parse reads s in the configured format, as Of reads the attribute: for an
// event time that comes from elsewhere (a payload field, an expression's
// value). Its error wraps ErrBadEventTime and does not quote s.
func (e *EventTime) Parse(s string) (time.Time, error) {
	t, err := e.parse(s)
	if err == nil && t.Before(epoch) {
		err = errBeforeEpoch
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrBadEventTime, err)
	}
	return t, nil
}

// epoch is the earliest event time: a Bigtable cell timestamp cannot be
// negative, and {event_time} renders 1970..9999 only. Refusing an earlier
// time here makes it bad_event_time at decode, in every format, rather than
// a row the sink rejects later (sink_rejected), or a late message when the
// watermark happens to be known.
var epoch = time.Unix(0, 0)

var errBeforeEpoch = errors.New("before 1970-01-01T00:00:00Z")

var parsers = map[string]func(string) (time.Time, error){
	"":                      parseAuto,
	config.TimestampAuto:    parseAuto,
	config.TimestampRFC3339: parseRFC3339,
	config.TimestampUnixS:   func(s string) (time.Time, error) { return parseUnix(s, time.Second) },
	config.TimestampUnixMS:  func(s string) (time.Time, error) { return parseUnix(s, time.Millisecond) },
	config.TimestampUnixUS:  func(s string) (time.Time, error) { return parseUnix(s, time.Microsecond) },
	config.TimestampUnixNS:  func(s string) (time.Time, error) { return parseUnix(s, time.Nanosecond) },
}

// errNotATime is returned without formatting the value: the value may be a
// payload-sized attribute, and the error text ends up in dead-letter
// attributes and logs.
var errNotATime = errors.New("not milliseconds since the epoch nor RFC 3339")

// parseAuto accepts what Beam's PubsubIO accepts for a timestampAttribute:
// an integer number of milliseconds since the epoch, or RFC 3339.
func parseAuto(s string) (time.Time, error) {
	if s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') && !strings.ContainsAny(s, "T:") {
		return parseUnix(s, time.Millisecond)
	}
	t, err := parseRFC3339(s)
	if err != nil {
		return time.Time{}, errNotATime
	}
	return t, nil
}

func parseRFC3339(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errors.New("not RFC 3339")
	}
	return t.UTC(), nil
}

// maxUnixNanos bounds what a unit-scaled integer may be so that the result
// fits in time.Time's nanosecond arithmetic (years 1678..2262; Of refuses
// the years before 1970).
const maxUnixNanos = 1<<63 - 1

func parseUnix(s string, unit time.Duration) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("not an integer count of %s since the epoch", unitName(unit))
	}
	if n > maxUnixNanos/int64(unit) || n < -maxUnixNanos/int64(unit) {
		return time.Time{}, fmt.Errorf("out of range for %s since the epoch", unitName(unit))
	}
	return time.Unix(0, n*int64(unit)).UTC(), nil
}

func unitName(unit time.Duration) string {
	switch unit {
	case time.Second:
		return "seconds"
	case time.Millisecond:
		return "milliseconds"
	case time.Microsecond:
		return "microseconds"
	}
	return "nanoseconds"
}
