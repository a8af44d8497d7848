package template

import (
	"bytes"
	"fmt"

	"github.com/pubsink/pubsink/internal/jsontext"
)

// This file reads one field of a JSON payload without unmarshalling it: a
// single pass validates the whole document, exactly as strictly as
// encoding/json does but for nesting, which may not be deeper than
// maxDepth, and remembers where the field's value starts and ends. It
// allocates nothing on success. Its reading agrees with json.Unmarshal into
// an `any`: a repeated key takes its last value, string escapes and invalid
// UTF-8 decode the same way. The tokens are internal/jsontext's; this file
// walks the path, and leaves the values off it to jsontext's SkipValue.

// maxDepth is how deeply objects and arrays may nest. The scan recurses,
// about a hundred bytes of stack a level, in the handler of every message
// in flight: at encoding/json's 10,000 levels a 20 KB payload grew a
// handler's stack to 2 MiB, and a flow-control window of 1,000 to 2 GiB.
// At 128 a handler's stack stays at 16 KiB (depth_test.go measures it).
// Event payloads nest a few levels, and 128 is the limit of other decoders
// too (Rust's serde_json), so no payload written on purpose should meet it.
const maxDepth = 128

// Outcomes of a field lookup.
const (
	lookupMissing  = iota // no such member, or the index is out of range
	lookupFound           // start:end is the value
	lookupNull            // the value, or a value on the way, is null
	lookupNotIndex        // a path segment met a scalar, or a non-numeric segment met an array
)

// finder scans data for path. It lives on the caller's stack.
type finder struct {
	jsontext.Scanner
	path  []Segment
	depth int // the objects and arrays on the path that enclose Pos

	outcome    int
	start, end int
	// at is the path level where lookupNull or lookupNotIndex happened.
	at int
}

// appendField appends the value of p.path in data, or returns dst and an
// error wrapping ErrInvalidPayload or ErrMissingField.
func (p *part) appendField(dst []byte, data []byte) ([]byte, error) {
	f := finder{Scanner: jsontext.Scanner{Data: data}, path: p.path}
	problem := f.document()
	if problem != jsontext.OK || f.outcome != lookupFound {
		return dst, p.fieldError(&f, problem)
	}
	v := data[f.start:f.end]
	switch v[0] {
	case '"':
		return jsontext.AppendUnquoted(dst, v[1:len(v)-1]), nil
	case '{', '[':
		return jsontext.AppendCompact(dst, v), nil
	default: // number, true, false: their JSON text
		return append(dst, v...), nil
	}
}

// fieldError is why f found no field; problem is what f.document returned.
// It is a function of its own, never inlined, so that the frame its
// formatting needs is not below the scan's recursion on every stack.
//
//go:noinline
func (p *part) fieldError(f *finder, problem jsontext.Problem) error {
	switch {
	case problem == jsontext.TooDeep:
		return fmt.Errorf("%s: %w: nested deeper than %d levels (at byte %d)", p.placeholder, ErrInvalidPayload, maxDepth, f.Pos)
	case problem != jsontext.OK:
		return fmt.Errorf("%s: %w: not valid JSON (at byte %d)", p.placeholder, ErrInvalidPayload, f.Pos)
	case f.outcome == lookupNull:
		return fmt.Errorf("%s: %w: %s is null", p.placeholder, ErrMissingField, p.pathText(f.at))
	case f.outcome == lookupNotIndex && f.at == 0 && !startsContainer(f.Data):
		return fmt.Errorf("%s: %w: payload is not a JSON object or array", p.placeholder, ErrInvalidPayload)
	case f.outcome == lookupNotIndex:
		return fmt.Errorf("%s: %w: %s cannot be indexed by %q", p.placeholder, ErrInvalidPayload, p.pathText(f.at), p.path[f.at].Key)
	}
	return fmt.Errorf("%s: %w: no such field", p.placeholder, ErrMissingField)
}

// startsContainer reports whether the JSON text data is an object or an
// array (its first byte after white space).
func startsContainer(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// pathText is the path up to level, for error messages: "data.a.b".
func (p *part) pathText(level int) string {
	s := "data"
	for _, seg := range p.path[:level] {
		s += "." + seg.Key
	}
	return s
}

// document scans the whole of f.Data as one JSON value. When the data is
// not valid JSON, it returns the problem, with f.Pos at the offending byte.
func (f *finder) document() jsontext.Problem {
	f.outcome = lookupMissing
	if problem := f.value(0); problem != jsontext.OK {
		return problem
	}
	if !f.AtEnd() {
		return jsontext.Trailing
	}
	return jsontext.OK
}

// value scans the value at f.path[:level]: the field itself when level is
// len(f.path), or else the container to look into next. Values off the
// path are the scanner's to skip.
func (f *finder) value(level int) jsontext.Problem {
	c := f.Next()
	start := f.Pos
	inner := level < len(f.path)
	switch {
	case inner && c == '{':
		return f.object(level)
	case inner && c == '[':
		return f.array(level)
	}
	if problem := f.SkipValue(f.depth, maxDepth); problem != jsontext.OK {
		return problem
	}
	switch {
	case c == 'n' && (level > 0 || !inner):
		// A null field is a missing one; so is a null on the way to it,
		// like a JSON optional object that is absent.
		f.outcome, f.at = lookupNull, level
	case !inner:
		f.outcome, f.start, f.end = lookupFound, start, f.Pos
	default: // a scalar on the way
		f.outcome, f.at = lookupNotIndex, level
	}
	return jsontext.OK
}

// object scans the object on the path at level, and looks into its member
// named by the path's next segment.
func (f *finder) object(level int) jsontext.Problem {
	if f.depth++; f.depth > maxDepth {
		return jsontext.TooDeep // f.Pos at the { too many
	}
	f.Pos++ // {
	if f.Next() == '}' {
		f.Pos++
		f.depth--
		return jsontext.OK
	}
	for more := true; more; {
		if f.Next() != '"' {
			return jsontext.ExpectedName
		}
		keyStart := f.Pos + 1
		flags, problem := f.String()
		if problem != jsontext.OK {
			return problem
		}
		child := jsontext.Equal(f.Data[keyStart:f.Pos-1], flags, f.path[level].Key)
		if f.Next() != ':' {
			return jsontext.ExpectedColon
		}
		f.Pos++
		if child {
			// The last of repeated keys wins, as in encoding/json: forget
			// what an earlier one found.
			f.outcome = lookupMissing
			problem = f.value(level + 1)
		} else {
			problem = f.SkipValue(f.depth, maxDepth)
		}
		if problem != jsontext.OK {
			return problem
		}
		if more, problem = f.More('}'); problem != jsontext.OK {
			return problem
		}
	}
	f.depth--
	return jsontext.OK
}

// array scans the array on the path at level, and looks into its element
// indexed by the path's next segment.
func (f *finder) array(level int) jsontext.Problem {
	if f.depth++; f.depth > maxDepth {
		return jsontext.TooDeep // f.Pos at the [ too many
	}
	f.Pos++ // [
	want := f.path[level].Index
	if want < 0 {
		f.outcome, f.at = lookupNotIndex, level
	}
	if f.Next() == ']' {
		f.Pos++
		f.depth--
		return jsontext.OK
	}
	for i, more := 0, true; more; i++ {
		var problem jsontext.Problem
		if i == want {
			problem = f.value(level + 1)
		} else {
			problem = f.SkipValue(f.depth, maxDepth)
		}
		if problem != jsontext.OK {
			return problem
		}
		if more, problem = f.More(']'); problem != jsontext.OK {
			return problem
		}
	}
	f.depth--
	return jsontext.OK
}
