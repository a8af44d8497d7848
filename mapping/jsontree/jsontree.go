package jsontree

import (
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"

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

// decoder decodes one payload.
type decoder struct {
	data  []byte
	text  string // data as a string, once a string was met
	pos   int
	depth int

	members []member // of the objects being read, innermost last
	elems   []any    // of the arrays being read, innermost last

	// why is what failed, at byte pos ("" and depth > value.MaxDepth: too deep).
	why string
}

// Decode decodes the JSON text data into the value model (see the
// comment at the top of the file). Its errors wrap
// template.ErrInvalidPayload; they say where the text went wrong, by
// offset, and never quote it.
func Decode(data []byte) (any, error) {
	d := decoders.Get().(*decoder)
	d.data = data
	v, ok := d.value()
	if ok {
		d.skipSpace()
		if d.pos < len(d.data) {
			ok = d.fail("data after the value")
		}
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
	if d.depth > value.MaxDepth {
		return fmt.Errorf("%w (at byte %d)", value.ErrTooDeep, d.pos)
	}
	return fmt.Errorf("%w: not JSON: %s at byte %d", template.ErrInvalidPayload, d.why, d.pos)
}

// fail records why the decoding fails at d.pos, and returns false.
func (d *decoder) fail(why string) bool {
	d.why = why
	return false
}

// failAt fails at the end of the data, or at an unexpected byte.
//
//go:noinline
func (d *decoder) failAt(expected string) bool {
	if d.pos >= len(d.data) {
		return d.fail("unexpected end of data: " + expected + " expected")
	}
	return d.fail("unexpected byte: " + expected + " expected")
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// value decodes one value, after white space.
func (d *decoder) value() (any, bool) {
	d.skipSpace()
	if d.pos >= len(d.data) {
		return nil, d.failAt("a value")
	}
	switch c := d.data[d.pos]; c {
	case '{':
		return d.object()
	case '[':
		return d.array()
	case '"':
		s, ok := d.str()
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
			f, ok := d.number()
			if !ok {
				return nil, false
			}
			return f, true
		}
	}
	return nil, d.failAt("a value")
}

// enter counts one more level of nesting, and fails past value.MaxDepth (with
// d.pos at the { or [ too many).
func (d *decoder) enter() bool {
	d.depth++
	return d.depth <= value.MaxDepth
}

func (d *decoder) object() (any, bool) {
	if !d.enter() {
		return nil, false
	}
	d.pos++ // {
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		d.depth--
		return map[string]any{}, true
	}
	base := len(d.members)
	for {
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.failAt("a string (a member's name)")
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.failAt("a colon")
		}
		d.pos++
		v, ok := d.value()
		if !ok {
			return nil, false
		}
		d.members = append(d.members, member{k, v})
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.failAt("a comma or }")
		}
		if c := d.data[d.pos]; c == ',' {
			d.pos++
			continue
		} else if c != '}' {
			return nil, d.failAt("a comma or }")
		}
		d.pos++
		break
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
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		d.depth--
		return []any{}, true
	}
	base := len(d.elems)
	for {
		v, ok := d.value()
		if !ok {
			return nil, false
		}
		d.elems = append(d.elems, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.failAt("a comma or ]")
		}
		if c := d.data[d.pos]; c == ',' {
			d.pos++
			continue
		} else if c != ']' {
			return nil, d.failAt("a comma or ]")
		}
		d.pos++
		break
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
	if len(d.data)-d.pos < len(word) || string(d.data[d.pos:d.pos+len(word)]) != word {
		return d.fail("unexpected byte: a value expected")
	}
	d.pos += len(word)
	return true
}

// number decodes -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? as
// strconv.ParseFloat reads it.
func (d *decoder) number() (float64, bool) {
	data, start := d.data, d.pos
	i := start
	if data[i] == '-' {
		i++
	}
	digits := i
	switch {
	case i >= len(data):
		d.pos = i
		return 0, d.failAt("a digit")
	case data[i] == '0':
		i++
	case data[i] >= '1' && data[i] <= '9':
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
	default:
		d.pos = i
		return 0, d.failAt("a digit")
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			d.pos = i
			return 0, d.failAt("a digit")
		}
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			d.pos = i
			return 0, d.failAt("a digit")
		}
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
	}
	d.pos = i
	if f, ok := exactDecimal(data[digits:i]); ok {
		if digits > start {
			f = -f // -0 too
		}
		return f, true
	}
	f, err := strconv.ParseFloat(string(data[start:i]), 64)
	if err != nil { // only ErrRange: the syntax is a subset of ParseFloat's
		d.pos = start
		return 0, d.fail("a number out of the range of a double")
	}
	return f, true
}

// exactDecimal is the value of a number that number validated, without
// its sign, when it is quick to get exactly: at most 15 significant
// digits, times a power of ten of at most 22. The digits and the power are
// then exact doubles, and one multiplication or division rounds the
// result correctly, as strconv.ParseFloat does (Clinger's fast path).
func exactDecimal(b []byte) (float64, bool) {
	var (
		m          uint64
		nd, frac   int // significant digits, digits after the point
		afterPoint bool
		i          int
	)
	for ; i < len(b) && b[i] != 'e' && b[i] != 'E'; i++ {
		c := b[i]
		if c == '.' {
			afterPoint = true
			continue
		}
		if afterPoint {
			frac++
		}
		if m == 0 && c == '0' {
			continue // a leading zero
		}
		if nd++; nd > 15 {
			return 0, false
		}
		m = m*10 + uint64(c-'0')
	}
	exp := 0
	if i < len(b) {
		i++ // e
		neg := b[i] == '-'
		if b[i] == '-' || b[i] == '+' {
			i++
		}
		for ; i < len(b); i++ {
			if exp = exp*10 + int(b[i]-'0'); exp > 1000 {
				return 0, false
			}
		}
		if neg {
			exp = -exp
		}
	}
	exp -= frac
	switch {
	case m == 0:
		return 0, true
	case exp == 0:
		return float64(m), true
	case exp > 0 && exp <= 22:
		return float64(m) * exactPow10[exp], true
	case exp < 0 && exp >= -22:
		return float64(m) / exactPow10[-exp], true
	}
	return 0, false
}

// exactPow10 are the powers of ten that are exact doubles.
var exactPow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// str decodes a string starting at its opening quote, and leaves d.pos
// after the closing one.
func (d *decoder) str() (string, bool) {
	data := d.data
	start := d.pos + 1
	i := start
	for i < len(data) && jsonPlain[data[i]] {
		i++
	}
	if i < len(data) && data[i] == '"' {
		d.pos = i + 1
		return d.slice(start, i), true
	}
	// Escapes, non-ASCII text, or an error: validate, and see whether the
	// text is its own value.
	decode := false
	for i < len(data) {
		c := data[i]
		switch {
		case jsonPlain[c]:
			i++
		case c == '"':
			d.pos = i + 1
			if !decode {
				return d.slice(start, i), true
			}
			return unquoteJSON(data[start:i]), true
		case c == '\\':
			decode = true
			if i+1 >= len(data) {
				d.pos = len(data)
				return "", d.failAt("an escape")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if !isHex4(data[i+2:]) {
					d.pos = i
					return "", d.fail("invalid \\u escape")
				}
				i += 6
			default:
				d.pos = i
				return "", d.fail("invalid escape")
			}
		case c < 0x20:
			d.pos = i
			return "", d.fail("a control character in a string")
		default: // non-ASCII
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n == 1 {
				decode = true // U+FFFD for the byte
			}
			i += n
		}
	}
	d.pos = len(data)
	return "", d.failAt("the end of a string")
}

// slice is the text of data[start:end], a slice of one copy of the
// payload.
func (d *decoder) slice(start, end int) string {
	if d.text == "" {
		d.text = string(d.data)
	}
	return d.text[start:end]
}

// unquoteJSON decodes the inside of a string that str validated, as
// encoding/json does (template's decoding, which FuzzRender holds to
// encoding/json's).
func unquoteJSON(s []byte) string {
	return string(template.AppendJSONUnquoted(make([]byte, 0, len(s)), s))
}

// isHex4 reports whether b starts with four hex digits.
func isHex4(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	for _, c := range b[:4] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// jsonPlain marks the bytes a string holds as themselves: printable ASCII
// other than the quote and the backslash.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
