package template

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// This file reads one field of a JSON payload without unmarshalling it: a
// single pass validates the whole document, exactly as strictly as
// encoding/json does but for nesting, which may not be deeper than
// maxDepth, and remembers where the field's value starts and ends. It
// allocates nothing on success. Its reading agrees with json.Unmarshal into
// an `any`: a repeated key takes its last value, string escapes and invalid
// UTF-8 decode the same way.

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
	data  []byte
	pos   int
	path  []Segment
	depth int
	// escaped is set by str when the string just scanned holds an escape or
	// a non-ASCII byte, so that comparing it needs decoding.
	escaped bool

	outcome    int
	start, end int
	// at is the path level where lookupNull or lookupNotIndex happened.
	at int
}

// appendField appends the value of p.path in data, or returns dst and an
// error wrapping ErrInvalidPayload or ErrMissingField.
func (p *part) appendField(dst []byte, data []byte) ([]byte, error) {
	f := finder{data: data, path: p.path}
	valid := f.document()
	if !valid || f.outcome != lookupFound {
		return dst, p.fieldError(&f, valid)
	}
	v := data[f.start:f.end]
	switch v[0] {
	case '"':
		return appendUnquoted(dst, v[1:len(v)-1]), nil
	case '{', '[':
		return appendCompact(dst, v), nil
	default: // number, true, false: their JSON text
		return append(dst, v...), nil
	}
}

// fieldError is why f found no field; valid is what f.document returned.
// It is a function of its own, never inlined, so that the frame its
// formatting needs is not below the scan's recursion on every stack.
//
//go:noinline
func (p *part) fieldError(f *finder, valid bool) error {
	switch {
	case !valid && f.tooDeep():
		return fmt.Errorf("%s: %w: nested deeper than %d levels (at byte %d)", p.placeholder, ErrInvalidPayload, maxDepth, f.pos)
	case !valid:
		return fmt.Errorf("%s: %w: not valid JSON (at byte %d)", p.placeholder, ErrInvalidPayload, f.pos)
	case f.outcome == lookupNull:
		return fmt.Errorf("%s: %w: %s is null", p.placeholder, ErrMissingField, p.pathText(f.at))
	case f.outcome == lookupNotIndex && f.at == 0 && !startsContainer(f.data):
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

// document scans the whole of f.data as one JSON value. It returns false,
// with f.pos at the offending byte, when the data is not valid JSON.
func (f *finder) document() bool {
	f.outcome = lookupMissing
	if !f.value(0, true) {
		return false
	}
	f.skipSpace()
	return f.pos == len(f.data)
}

// value scans one value at path level. match says the value sits at
// f.path[:level]; then it is the field itself (level == len(path)), or the
// container to look into next.
func (f *finder) value(level int, match bool) bool {
	f.skipSpace()
	if f.pos >= len(f.data) {
		return false
	}
	start := f.pos
	c := f.data[f.pos]
	inner := match && level < len(f.path)
	var ok bool
	switch {
	case c == '{':
		ok = f.object(level, inner)
	case c == '[':
		ok = f.array(level, inner)
	case c == '"':
		ok = f.str()
	case c == 't':
		ok = f.literal("true")
	case c == 'f':
		ok = f.literal("false")
	case c == 'n':
		ok = f.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		ok = f.number()
	}
	if !ok || !match {
		return ok
	}
	switch {
	case c == 'n' && (level > 0 || !inner):
		// A null field is a missing one; so is a null on the way to it,
		// like a JSON optional object that is absent.
		f.outcome, f.at = lookupNull, level
	case !inner:
		f.outcome, f.start, f.end = lookupFound, start, f.pos
	case c != '{' && c != '[':
		f.outcome, f.at = lookupNotIndex, level
	}
	return true
}

// enter counts one more level of nesting, and fails past maxDepth.
func (f *finder) enter() bool {
	f.depth++
	return f.depth <= maxDepth
}

// tooDeep reports whether a failed scan failed for its depth: a failing
// scan returns at once, leaving depth as it was where it failed.
func (f *finder) tooDeep() bool { return f.depth > maxDepth }

func (f *finder) object(level int, match bool) bool {
	if !f.enter() {
		return false // f.pos at the { too many
	}
	f.pos++ // {
	f.skipSpace()
	if f.pos < len(f.data) && f.data[f.pos] == '}' {
		f.pos++
		f.depth--
		return true
	}
	for {
		f.skipSpace()
		if f.pos >= len(f.data) || f.data[f.pos] != '"' {
			return false
		}
		keyStart := f.pos + 1
		if !f.str() {
			return false
		}
		child := match && keyEquals(f.data[keyStart:f.pos-1], f.escaped, f.path[level].Key)
		f.skipSpace()
		if f.pos >= len(f.data) || f.data[f.pos] != ':' {
			return false
		}
		f.pos++
		if child {
			// The last of repeated keys wins, as in encoding/json: forget
			// what an earlier one found.
			f.outcome = lookupMissing
		}
		if !f.value(level+1, child) {
			return false
		}
		f.skipSpace()
		if f.pos >= len(f.data) {
			return false
		}
		switch f.data[f.pos] {
		case ',':
			f.pos++
		case '}':
			f.pos++
			f.depth--
			return true
		default:
			return false
		}
	}
}

func (f *finder) array(level int, match bool) bool {
	if !f.enter() {
		return false // f.pos at the [ too many
	}
	f.pos++ // [
	want := -1
	if match {
		want = f.path[level].Index
		if want < 0 {
			f.outcome, f.at = lookupNotIndex, level
		}
	}
	f.skipSpace()
	if f.pos < len(f.data) && f.data[f.pos] == ']' {
		f.pos++
		f.depth--
		return true
	}
	for i := 0; ; i++ {
		if !f.value(level+1, i == want) {
			return false
		}
		f.skipSpace()
		if f.pos >= len(f.data) {
			return false
		}
		switch f.data[f.pos] {
		case ',':
			f.pos++
		case ']':
			f.pos++
			f.depth--
			return true
		default:
			return false
		}
	}
}

// str scans a string starting at its opening quote and leaves f.pos after
// the closing one.
func (f *finder) str() bool {
	f.pos++ // "
	f.escaped = false
	for f.pos < len(f.data) {
		// Skip plain ASCII in a tight loop: most of a payload is string text.
		for f.pos < len(f.data) && plainASCII[f.data[f.pos]] {
			f.pos++
		}
		if f.pos >= len(f.data) {
			break
		}
		c := f.data[f.pos]
		switch {
		case c == '"':
			f.pos++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			f.escaped = true
			if f.pos+1 >= len(f.data) {
				return false
			}
			switch f.data[f.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				f.pos += 2
			case 'u':
				if f.pos+6 > len(f.data) || hex4(f.data[f.pos+2:]) < 0 {
					return false
				}
				f.pos += 6
			default:
				return false
			}
		case c >= utf8.RuneSelf:
			f.escaped = true
			f.pos++
		default:
			f.pos++
		}
	}
	return false
}

func (f *finder) literal(word string) bool {
	if len(f.data)-f.pos < len(word) || string(f.data[f.pos:f.pos+len(word)]) != word {
		return false
	}
	f.pos += len(word)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (f *finder) number() bool {
	if f.data[f.pos] == '-' {
		f.pos++
	}
	switch {
	case f.pos >= len(f.data):
		return false
	case f.data[f.pos] == '0':
		f.pos++
	case isDigit(f.data[f.pos]):
		f.digits()
	default:
		return false
	}
	if f.pos < len(f.data) && f.data[f.pos] == '.' {
		f.pos++
		if f.pos >= len(f.data) || !isDigit(f.data[f.pos]) {
			return false
		}
		f.digits()
	}
	if f.pos < len(f.data) && (f.data[f.pos] == 'e' || f.data[f.pos] == 'E') {
		f.pos++
		if f.pos < len(f.data) && (f.data[f.pos] == '+' || f.data[f.pos] == '-') {
			f.pos++
		}
		if f.pos >= len(f.data) || !isDigit(f.data[f.pos]) {
			return false
		}
		f.digits()
	}
	return true
}

func (f *finder) digits() {
	for f.pos < len(f.data) && isDigit(f.data[f.pos]) {
		f.pos++
	}
}

func (f *finder) skipSpace() {
	for f.pos < len(f.data) {
		switch f.data[f.pos] {
		case ' ', '\t', '\n', '\r':
			f.pos++
		default:
			return
		}
	}
}

// plainASCII marks the bytes a string holds as themselves: printable ASCII
// other than the quote and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// hex4 is the value of the four hex digits at the start of b, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// nextRune decodes the character at the start of s, the inside of a string
// that str accepted, the way encoding/json does: escapes are resolved, a
// surrogate pair joins, and a lone surrogate or an invalid UTF-8 byte
// becomes U+FFFD. It returns the rune and the number of bytes it used.
func nextRune(s []byte) (rune, int) {
	c := s[0]
	if c < utf8.RuneSelf && c != '\\' {
		return rune(c), 1
	}
	if c != '\\' {
		return utf8.DecodeRune(s) // RuneError, 1 for an invalid byte
	}
	switch s[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r := hex4(s[2:])
		if r < 0xD800 || r > 0xDFFF {
			return r, 6
		}
		if r < 0xDC00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if r2 := hex4(s[8:]); r2 >= 0xDC00 && r2 <= 0xDFFF {
				return (r-0xD800)<<10 | (r2 - 0xDC00) + 0x10000, 12
			}
		}
		return utf8.RuneError, 6
	default: // " \ /
		return rune(s[1]), 2
	}
}

// AppendJSONUnquoted appends the decoded inside of a JSON string (between
// its quotes) that a JSON reader has validated: escapes resolved, a
// surrogate pair joined, a lone surrogate and an invalid UTF-8 byte U+FFFD,
// as encoding/json decodes it. For package mapping's JSON decoder, so that
// the two readers of JSON text decode strings the same way.
func AppendJSONUnquoted(dst []byte, s []byte) []byte { return appendUnquoted(dst, s) }

// appendUnquoted appends the decoded inside of a string str accepted.
func appendUnquoted(dst []byte, s []byte) []byte {
	for len(s) > 0 {
		// Copy runs that need no decoding in one go.
		i := 0
		for i < len(s) && s[i] < utf8.RuneSelf && s[i] != '\\' {
			i++
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) == 0 {
			break
		}
		r, n := nextRune(s)
		dst = utf8.AppendRune(dst, r)
		s = s[n:]
	}
	return dst
}

// keyEquals reports whether the inside of a string str accepted decodes to
// exactly the bytes of want. escaped is str's flag for raw.
func keyEquals(raw []byte, escaped bool, want string) bool {
	if !escaped {
		return string(raw) == want
	}
	var buf [utf8.UTFMax]byte
	for len(raw) > 0 {
		r, n := nextRune(raw)
		raw = raw[n:]
		w := utf8.EncodeRune(buf[:], r)
		if len(want) < w || string(buf[:w]) != want[:w] {
			return false
		}
		want = want[w:]
	}
	return want == ""
}

// appendCompact appends an object or array that the finder accepted with
// the whitespace between tokens removed, as json.Compact does.
func appendCompact(dst []byte, v []byte) []byte {
	for i := 0; i < len(v); {
		switch c := v[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j := i + 1
			for v[j] != '"' {
				if v[j] == '\\' {
					j++
				}
				j++
			}
			dst = append(dst, v[i:j+1]...)
			i = j + 1
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}
