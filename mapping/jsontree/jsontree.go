package jsontree

import (
	"fmt"
	"sync"

	"github.com/pubsink/pubsink/internal/jsontext"
	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// This file decodes a JSON payload into the value model (package value)
// for expressions in one pass, without encoding/json (which validates the
// text first, then decodes it through reflection: 2.7 µs and 40
// allocations for a 200-byte object). Its reading is json.Unmarshal's into an `any`: the same text is
// accepted (one value, white space around it, encoding/json's escapes), a
// number is the float64 strconv.ParseFloat reads (out of range is an
// error), invalid UTF-8 and lone surrogates become U+FFFD, a repeated key
// takes its last value, empty objects and arrays are empty, not nil. Unlike
// encoding/json it refuses more than value.MaxDepth levels of nesting.
//
// Allocations: the payload is copied into one string the first time a
// string is met, and a string without escapes or invalid UTF-8 is a slice
// of that copy (the tree's strings share it, and keep it alive while the
// tree is); an object's members and an array's elements are gathered on a
// scratch stack and then made into a map or slice of the exact size. What
// remains is a boxed string or float64 per value, and the maps and slices.

// member is a decoded member of an object not closed yet.
type member struct {
	key string
	val any
}

// decoder decodes one payload; jsontext scans its tokens.
type decoder struct {
	jsontext.Scanner
	text  string // Data as a string, once a string was met
	depth int

	members []member // of the objects being read, innermost last
	elems   []any    // of the arrays being read, innermost last

	// problem is what failed, at Pos.
	problem jsontext.Problem
}

// Decode decodes the JSON text data into the value model (see the
// comment at the top of the file). Its errors wrap
// template.ErrInvalidPayload; they say where the text went wrong, by
// offset, and never quote it.
func Decode(data []byte) (any, error) {
	d := decoders.Get().(*decoder)
	d.Data = data
	v, ok := d.value()
	if ok && !d.AtEnd() {
		ok = d.fail(jsontext.Trailing)
	}
	var err error
	if !ok {
		v, err = nil, d.err()
	}
	d.release()
	return v, err
}

// decoders keeps decoders for their scratch stacks, which would
// otherwise be allocated for each payload.
var decoders = sync.Pool{New: func() any { return new(decoder) }}

// maxJSONScratch bounds the scratch stack a pooled decoder keeps: one that
// a huge payload grew is dropped.
const maxJSONScratch = 1024

// release drops d's references to the payload and pools d.
func (d *decoder) release() {
	// A closed object or array clears what it used; a failed decoding
	// leaves the open ones' behind.
	clear(d.members)
	clear(d.elems)
	if cap(d.members) > maxJSONScratch || cap(d.elems) > maxJSONScratch {
		return
	}
	*d = decoder{members: d.members[:0], elems: d.elems[:0]}
	decoders.Put(d)
}

// err is the error of a failed decoding. It is a function of its own, never
// inlined, so that its formatting does not weigh on the recursion's frames.
//
//go:noinline
func (d *decoder) err() error {
	var why string
	switch d.problem {
	case jsontext.TooDeep:
		return fmt.Errorf("%w (at byte %d)", value.ErrTooDeep, d.Pos)
	case jsontext.Trailing:
		why = "data after the value"
	case jsontext.OutOfRange:
		why = "a number out of the range of a double"
	case jsontext.InvalidEscape:
		why = "invalid escape"
	case jsontext.InvalidHexEscape:
		why = "invalid \\u escape"
	case jsontext.ControlChar:
		why = "a control character in a string"
	default:
		if d.problem == jsontext.ExpectedEscape {
			d.Pos = len(d.Data) // the scanner's Pos is at the backslash
		}
		why = "unexpected byte: " + expected[d.problem] + " expected"
		if d.Pos >= len(d.Data) {
			why = "unexpected end of data: " + expected[d.problem] + " expected"
		}
	}
	return fmt.Errorf("%w: not JSON: %s at byte %d", template.ErrInvalidPayload, why, d.Pos)
}

// expected is what the scanner's Problem of a missing token expected, as
// the errors word it.
var expected = [...]string{
	jsontext.ExpectedValue:          "a value",
	jsontext.ExpectedDigit:          "a digit",
	jsontext.ExpectedStringEnd:      "the end of a string",
	jsontext.ExpectedEscape:         "an escape",
	jsontext.ExpectedName:           "a string (a member's name)",
	jsontext.ExpectedColon:          "a colon",
	jsontext.ExpectedCommaOrBrace:   "a comma or }",
	jsontext.ExpectedCommaOrBracket: "a comma or ]",
}

// fail records why the decoding fails at Pos, and returns false.
func (d *decoder) fail(problem jsontext.Problem) bool {
	d.problem = problem
	return false
}

// value decodes one value, after white space.
func (d *decoder) value() (any, bool) {
	switch c := d.Next(); c {
	case '{':
		return d.object()
	case '[':
		return d.array()
	case '"':
		// str's fast path, inlined: most values are plain strings.
		start := d.Pos + 1
		if d.PlainString() {
			return d.slice(start, d.Pos-1), true
		}
		s, ok := d.escapedStr(start)
		if !ok {
			return nil, false
		}
		return s, true
	case 't':
		return true, d.literal("true")
	case 'f':
		return false, d.literal("false")
	case 'n':
		return nil, d.literal("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			start := d.Pos
			if problem := d.Number(); problem != jsontext.OK {
				return nil, d.fail(problem)
			}
			f, ok := jsontext.Float64(d.Data[start:d.Pos])
			if !ok {
				d.Pos = start
				return nil, d.fail(jsontext.OutOfRange)
			}
			return f, true
		}
	}
	return nil, d.fail(jsontext.ExpectedValue)
}

// enter counts one more level of nesting, and fails past value.MaxDepth (with
// Pos at the { or [ too many).
func (d *decoder) enter() bool {
	if d.depth++; d.depth > value.MaxDepth {
		return d.fail(jsontext.TooDeep)
	}
	return true
}

func (d *decoder) object() (any, bool) {
	if !d.enter() {
		return nil, false
	}
	d.Pos++ // {
	if d.Next() == '}' {
		d.Pos++
		d.depth--
		return map[string]any{}, true
	}
	base := len(d.members)
	for more := true; more; {
		if d.Next() != '"' {
			return nil, d.fail(jsontext.ExpectedName)
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		if d.Next() != ':' {
			return nil, d.fail(jsontext.ExpectedColon)
		}
		d.Pos++
		v, ok := d.value()
		if !ok {
			return nil, false
		}
		d.members = append(d.members, member{k, v})
		var problem jsontext.Problem
		if more, problem = d.More('}'); problem != jsontext.OK {
			return nil, d.fail(problem)
		}
	}
	d.depth--
	return d.makeObject(base), true
}

// makeObject makes the map of the members from base on, and pops them. It
// is not inlined: its frame is not below every level of the recursion.
//
//go:noinline
func (d *decoder) makeObject(base int) map[string]any {
	ms := d.members[base:]
	m := make(map[string]any, len(ms))
	for _, e := range ms {
		m[e.key] = e.val // the last of repeated keys wins
	}
	clear(ms)
	d.members = d.members[:base]
	return m
}

func (d *decoder) array() (any, bool) {
	if !d.enter() {
		return nil, false
	}
	d.Pos++ // [
	if d.Next() == ']' {
		d.Pos++
		d.depth--
		return []any{}, true
	}
	base := len(d.elems)
	for more := true; more; {
		v, ok := d.value()
		if !ok {
			return nil, false
		}
		d.elems = append(d.elems, v)
		var problem jsontext.Problem
		if more, problem = d.More(']'); problem != jsontext.OK {
			return nil, d.fail(problem)
		}
	}
	d.depth--
	return d.makeArray(base), true
}

// makeArray makes the slice of the elements from base on, and pops them.
//
//go:noinline
func (d *decoder) makeArray(base int) []any {
	es := d.elems[base:]
	l := make([]any, len(es))
	copy(l, es)
	clear(es)
	d.elems = d.elems[:base]
	return l
}

func (d *decoder) literal(word string) bool {
	if problem := d.Literal(word); problem != jsontext.OK {
		return d.fail(problem)
	}
	return true
}

// str decodes a string starting at its opening quote, and leaves Pos
// after the closing one: a slice of the payload's one copy when the text
// is its own value.
func (d *decoder) str() (string, bool) {
	start := d.Pos + 1
	if d.PlainString() {
		return d.slice(start, d.Pos-1), true
	}
	return d.escapedStr(start)
}

// escapedStr is str for a string that is not plain ASCII without escapes
// (its inside starts at start).
func (d *decoder) escapedStr(start int) (string, bool) {
	flags, problem := d.String()
	if problem != jsontext.OK {
		return "", d.fail(problem)
	}
	end := d.Pos - 1
	if jsontext.Verbatim(d.Data[start:end], flags) {
		return d.slice(start, end), true
	}
	return jsontext.Unquote(d.Data[start:end]), true
}

// slice is the text of Data[start:end], a slice of one copy of the
// payload.
func (d *decoder) slice(start, end int) string {
	if d.text == "" {
		d.text = string(d.Data)
	}
	return d.text[start:end]
}
