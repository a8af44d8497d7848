package value

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/pubsink/pubsink/template"
)

// A decoded payload is a tree of plain Go values, the same for every format
// (the decoders of mapping/avro and mapping/protobuf make it; for JSON,
// mapping/jsontree makes it only for expressions, templates read JSON text
// directly). Its nodes are:
//
//	nil                 null (an Avro null in a list or map, google.protobuf.NullValue)
//	bool
//	int64               Avro int and long, proto int32/int64/sint/sfixed
//	uint64              proto uint32/uint64/fixed32/fixed64
//	float64             Avro float and double, proto float and double, JSON numbers
//	string              strings, enums (by name), Avro uuid, Avro date ("2006-01-02"),
//	                    Avro time-millis/micros ("15:04:05.000" / ".000000")
//	[]byte              bytes and Avro fixed
//	time.Time           Avro timestamp-* and local-timestamp-*, google.protobuf.Timestamp
//	time.Duration       google.protobuf.Duration
//	Decimal             Avro decimal (bytes or fixed)
//	map[string]any      records, messages, maps (a proto map's keys in their decimal
//	                    or boolean text), google.protobuf.Struct
//	[]any               arrays, repeated fields, google.protobuf.ListValue
//
// An Avro union is its branch's value, and a record field whose value is
// null is absent from its map. A proto oneof is the field that is set (the
// others are absent); a message field, a oneof member or an optional field
// that is not set is absent; any other field is present with its zero value
// (proto3's scalars have no presence: their zero is a value).

// Decimal is an exact decimal number in its plain text, as "-12.340": the
// scale's digits are kept. Templates render it as it is; expressions see it
// as a string (double(d) converts it).
type Decimal string

// MaxDepth bounds the nesting of a decoded tree, as template's JSON reader
// bounds JSON's: a deeper payload is invalid_payload. Each level of
// rendering or decoding takes a stack frame; 128 levels keep a handler's
// stack small whatever the payload.
const MaxDepth = 128

// Errors of the decoders and of path reading. They wrap the template's
// sentinels, so that one mapping of error to dead-letter reason serves every
// format.
var (
	ErrTooDeep = fmt.Errorf("%w: nested more than %d levels deep", template.ErrInvalidPayload, MaxDepth)
)

// Tree is a decoded payload or element as a template.Value.
type Tree struct{ V any }

// AppendPath appends the value at path to dst (see appendValue).
func (t Tree) AppendPath(dst []byte, path []template.Segment) ([]byte, error) {
	v, err := Lookup(t.V, path)
	if err != nil {
		return dst, err
	}
	return Append(dst, v)
}

// Lookup follows path from v. A member that is absent or null, or an index
// out of range, is template.ErrMissingField; a step into a value that is
// neither a map nor a list is template.ErrInvalidPayload.
func Lookup(v any, path []template.Segment) (any, error) {
	for i, seg := range path {
		switch n := v.(type) {
		case map[string]any:
			e, ok := n[seg.Key]
			if !ok {
				return nil, fmt.Errorf("%w: %s is absent", template.ErrMissingField, PathText(path[:i+1]))
			}
			v = e
		case []any:
			if seg.Index < 0 {
				return nil, fmt.Errorf("%w: %s indexes a list by a name", template.ErrInvalidPayload, PathText(path[:i+1]))
			}
			if seg.Index >= len(n) {
				return nil, fmt.Errorf("%w: %s is out of range (%d elements)", template.ErrMissingField, PathText(path[:i+1]), len(n))
			}
			v = n[seg.Index]
		case nil:
			return nil, fmt.Errorf("%w: %s is null", template.ErrMissingField, PathText(path[:i]))
		default:
			return nil, fmt.Errorf("%w: %s is not a record, map or list", template.ErrInvalidPayload, PathText(path[:i]))
		}
	}
	if v == nil {
		return nil, fmt.Errorf("%w: %s is null", template.ErrMissingField, PathText(path))
	}
	return v, nil
}

// PathText is path as written after the root: "a.b.0".
func PathText(path []template.Segment) string {
	if len(path) == 0 {
		return "the value"
	}
	s := path[0].Key
	for _, p := range path[1:] {
		s += "." + p.Key
	}
	return s
}

// Append appends the bytes that a template renders for v:
//
//	string, Decimal     its text, as it is
//	[]byte              its bytes, as they are
//	bool                true | false
//	int64, uint64       decimal digits
//	float64             as JSON writes it (shortest text that reads back the same;
//	                    exponent form below 1e-6 and from 1e21); NaN, Infinity, -Infinity
//	time.Time           RFC 3339 UTC with exactly 3 fractional digits (truncated), like {event_time}
//	time.Duration       seconds with an s, as protobuf's JSON: 1.500s, 3s, -0.000001s
//	map, list           compact JSON (keys sorted; bytes as base64, times and durations
//	                    as strings in the forms above, decimals as numbers)
//	nil                 template.ErrMissingField
func Append(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return dst, fmt.Errorf("%w: the value is null", template.ErrMissingField)
	case string:
		return append(dst, x...), nil
	case Decimal:
		return append(dst, x...), nil
	case []byte:
		return append(dst, x...), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case float64:
		return appendFloat(dst, x), nil
	case time.Time:
		return appendTime(dst, x), nil
	case time.Duration:
		return appendDuration(dst, x), nil
	case map[string]any, []any:
		return AppendJSON(dst, v, 0)
	}
	return dst, fmt.Errorf("%w: a value of Go type %T", template.ErrInvalidPayload, v) // a decoder's bug; never a panic on a message
}

func appendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	// encoding/json's choice of format, so that a float renders as JSON
	// writes it.
	abs, format := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

func appendTime(dst []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(dst, "2006-01-02T15:04:05.000Z07:00")
}

func appendDuration(dst []byte, d time.Duration) []byte {
	return append(strconv.AppendFloat(dst, d.Seconds(), 'f', -1, 64), 's')
}

// AppendJSON appends v as compact JSON.
func AppendJSON(dst []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, ErrTooDeep
	}
	var err error
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendJSONString(dst, x), nil
	case Decimal:
		return append(dst, x...), nil
	case []byte:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, '"'), nil
	case bool, int64, uint64:
		return Append(dst, x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			dst = append(dst, '"')
			return append(appendFloat(dst, x), '"'), nil
		}
		return appendFloat(dst, x), nil
	case time.Time:
		dst = append(dst, '"')
		return append(appendTime(dst, x), '"'), nil
	case time.Duration:
		dst = append(dst, '"')
		return append(appendDuration(dst, x), '"'), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = AppendJSON(dst, e, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendJSONString(dst, k), ':')
			if dst, err = AppendJSON(dst, x[k], depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("%w: a value of Go type %T", template.ErrInvalidPayload, v)
}

// appendJSONString appends s as a JSON string, as encoding/json writes it
// without HTML escaping; invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, "\ufffd"...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// DecodeError wraps a decoder's complaint as invalid_payload, naming the
// format: "avro: ...". The complaint stays in the chain (errors.Is finds
// value.ErrTooDeep in it), its text unchanged.
func DecodeError(format string, err error) error {
	if errors.Is(err, template.ErrInvalidPayload) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", template.ErrInvalidPayload, format, err)
}
