package avro

// The Avro-JSON decoder: jsonDecoder reads a datum in Avro's JSON
// encoding into the value model, directed by the compiled schema
// (compile.go); Decode (binary.go) calls it for Decode(data, true).
//
// JSON encoding. Decode(data, true) reads Avro's JSON encoding, as the
// specification defines it:
//   - a record is an object with a member per field, in any order; a member
//     that names no field is skipped (as Pub/Sub's validation skips it, so
//     that a message it accepted under a revision decodes under it); a
//     missing member takes the field's default, and without a default is an
//     error;
//   - a map is an object; an array is an array; an enum is its symbol as a
//     string;
//   - int and long are JSON numbers with an integral value (5, 5.0 and 5e0
//     alike; a long beyond 2^53 must be written as an integer to be exact);
//   - float and double are JSON numbers, or the strings "NaN", "Infinity",
//     "-Infinity";
//   - bytes and fixed are strings whose code points U+0000..U+00FF are the
//     bytes (a fixed's string has exactly its size in code points);
//   - a logical type is written as its base type (a timestamp-millis is a
//     number of milliseconds, a decimal a bytes string of its two's complement
//     unscaled value);
//   - a union's value is null for its null branch, and otherwise an object of
//     one member {"TYPE": value}, TYPE being the branch's name: "int",
//     "string", "array", "map", ... for an unnamed type (a logical type goes
//     by its base type: "long", "bytes"), the full name ("com.example.Reading")
//     for a record, enum or fixed, whose short name ("Reading") is accepted
//     too when no other branch has it.
//
// Beyond the specification, a union also accepts a plain JSON value when one
// branch alone can hold that kind of JSON value: null (the null branch); true
// or false (boolean); a number (int, long, float, double); a string (string,
// bytes, fixed, enum); an array (array); an object (record, map). So
// ["null","string"] takes "x" and null, ["null","Reading"] takes the record's
// object, but ["int","long"] or a union of two records needs the wrapper. An
// object whose first member is named after a branch is always read as the
// wrapper, even when a record or map branch could hold it as it is (so the
// map {"string": "x", "a": "b"} in ["null", {"type": "map", ...}] must be
// wrapped): deciding by the members that follow would read the value twice
// at every level of a recursive schema. The
// strings "NaN" and "Infinity" count as strings there: a float branch takes
// them only inside the wrapper, or outside a union.

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/pubsink/pubsink/mapping/value"
)

// jsonDecoder reads Avro's JSON encoding, directed by the schema: every
// value it makes consumes input bytes, and it nests no deeper than the
// decoded tree (value.MaxDepth).
type jsonDecoder struct {
	s   []byte
	pos int
	str string // s as a string, made at the first string without escapes
}

func (d *jsonDecoder) ws() {
	for d.pos < len(d.s) {
		switch d.s[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, 0 at the end.
func (d *jsonDecoder) next() byte {
	d.ws()
	if d.pos < len(d.s) {
		return d.s[d.pos]
	}
	return 0
}

func (d *jsonDecoder) errAt(format string, args ...any) error {
	return fmt.Errorf(format+" (at byte %d)", append(args, d.pos)...)
}

// unexpected is the error of a token that is not what the syntax needs.
func (d *jsonDecoder) unexpected(what string) error {
	if d.pos >= len(d.s) {
		return errEOF
	}
	return d.errAt("%s", what)
}

func (d *jsonDecoder) expect(c byte) error {
	if d.next() != c {
		return d.unexpected(fmt.Sprintf("expected %q", c))
	}
	d.pos++
	return nil
}

func (d *jsonDecoder) literal(word string) error {
	if !bytes.HasPrefix(d.s[d.pos:], []byte(word)) {
		return d.unexpected("invalid JSON literal")
	}
	d.pos += len(word)
	return nil
}

// stringToken reads a JSON string. Without escapes its text is s[a:b] and
// unesc is nil; otherwise unesc holds it.
func (d *jsonDecoder) stringToken() (a, b int, unesc []byte, err error) {
	if d.next() != '"' {
		return 0, 0, nil, d.unexpected("expected a string")
	}
	d.pos++
	a = d.pos
	for d.pos < len(d.s) {
		c := d.s[d.pos]
		switch {
		case c == '"':
			d.pos++
			return a, d.pos - 1, unesc, nil
		case c < 0x20:
			return 0, 0, nil, d.errAt("control character in a string")
		case c == '\\':
			if unesc == nil {
				unesc = append(make([]byte, 0, d.pos-a+16), d.s[a:d.pos]...)
			}
			if d.pos+1 >= len(d.s) {
				return 0, 0, nil, errEOF
			}
			d.pos += 2
			switch e := d.s[d.pos-1]; e {
			case '"', '\\', '/':
				unesc = append(unesc, e)
			case 'b':
				unesc = append(unesc, '\b')
			case 'f':
				unesc = append(unesc, '\f')
			case 'n':
				unesc = append(unesc, '\n')
			case 'r':
				unesc = append(unesc, '\r')
			case 't':
				unesc = append(unesc, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return 0, 0, nil, d.errAt("invalid \\u escape")
				}
				if 0xd800 <= r && r < 0xe000 { // a surrogate: a pair makes one rune, a lone one U+FFFD
					save := d.pos
					if r < 0xdc00 && d.pos+1 < len(d.s) && d.s[d.pos] == '\\' && d.s[d.pos+1] == 'u' {
						d.pos += 2
						if r2, ok := d.hex4(); ok && 0xdc00 <= r2 && r2 < 0xe000 {
							r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
						}
					}
					if r < 0x10000 {
						d.pos, r = save, utf8.RuneError
					}
				}
				unesc = utf8.AppendRune(unesc, r)
			default:
				return 0, 0, nil, d.errAt("invalid escape")
			}
		default:
			if unesc != nil {
				unesc = append(unesc, c)
			}
			d.pos++
		}
	}
	return 0, 0, nil, errEOF
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if len(d.s)-d.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.s[d.pos : d.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.pos += 4
	return r, true
}

// text is a string token as a Go string: a substring of the input's one
// copy when it has no escapes.
func (d *jsonDecoder) text(a, b int, unesc []byte) string {
	if unesc != nil {
		return string(unesc)
	}
	if d.str == "" {
		d.str = string(d.s)
	}
	return d.str[a:b]
}

// number reads a JSON number and returns its text, and whether it is an
// integer (no fraction, no exponent).
func (d *jsonDecoder) number() ([]byte, bool, error) {
	d.ws()
	a, i, s := d.pos, d.pos, d.s
	digits := func() int {
		n := 0
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return nil, false, d.unexpected("expected a number")
	}
	integer := true
	if i < len(s) && s[i] == '.' {
		i++
		integer = false
		if digits() == 0 {
			return nil, false, d.errAt("invalid number")
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		integer = false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return nil, false, d.errAt("invalid number")
		}
	}
	d.pos = i
	return s[a:i], integer, nil
}

// integer reads a JSON number of integral value within [lo, hi]. Errors do
// not quote the number: they never quote a payload's values.
func (d *jsonDecoder) integer(lo, hi int64) (int64, error) {
	lit, isInt, err := d.number()
	if err != nil {
		return 0, err
	}
	if isInt {
		neg := lit[0] == '-'
		digits := lit
		if neg {
			digits = lit[1:]
		}
		var u uint64
		for _, c := range digits {
			if u > (math.MaxUint64-9)/10 {
				return 0, d.errAt("integer out of range")
			}
			u = u*10 + uint64(c-'0')
		}
		switch {
		case !neg && u <= uint64(hi):
			return int64(u), nil
		case neg && u <= uint64(-(lo+1))+1:
			return -int64(u-1) - 1, nil
		}
		return 0, d.errAt("integer out of range")
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 || f < float64(lo) || f > float64(hi) {
		return 0, d.errAt("number is not an integer in range")
	}
	return int64(f), nil
}

// codePoints reads a bytes or fixed string.
func (d *jsonDecoder) codePoints() ([]byte, error) {
	a, b, unesc, err := d.stringToken()
	if err != nil {
		return nil, err
	}
	s := unesc
	if s == nil {
		s = d.s[a:b]
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			out = append(out, s[i])
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r > 0xff || r == utf8.RuneError && size == 1 {
			return nil, d.errAt("bytes string has a code point beyond U+00FF")
		}
		out = append(out, byte(r))
		i += size
	}
	return out, nil
}

func (d *jsonDecoder) value(n *node, depth int) (any, error) {
	if depth > value.MaxDepth {
		return nil, errDeep
	}
	c := d.next()
	if c == 0 {
		return nil, errEOF
	}
	if c == 'n' && n.kind != avroNull && n.kind != avroUnion {
		return nil, d.errAt("null for type %s", n.describe())
	}
	switch n.kind {
	case avroNull:
		return nil, d.literal("null")
	case avroBoolean:
		switch c {
		case 't':
			return true, d.literal("true")
		case 'f':
			return false, d.literal("false")
		}
		return nil, d.unexpected("expected a boolean")
	case avroInt:
		v, err := d.integer(math.MinInt32, math.MaxInt32)
		if err != nil {
			return nil, err
		}
		return n.fromLong(v)
	case avroLong:
		v, err := d.integer(math.MinInt64, math.MaxInt64)
		if err != nil {
			return nil, err
		}
		return n.fromLong(v)
	case avroFloat, avroDouble:
		var f float64
		if c == '"' {
			a, b, unesc, err := d.stringToken()
			if err != nil {
				return nil, err
			}
			switch d.text(a, b, unesc) {
			case "NaN":
				f = math.NaN()
			case "Infinity":
				f = math.Inf(1)
			case "-Infinity":
				f = math.Inf(-1)
			default:
				return nil, d.errAt("a string for type %s (only \"NaN\", \"Infinity\" and \"-Infinity\")", n.describe())
			}
			return f, nil
		}
		lit, _, err := d.number()
		if err != nil {
			return nil, err
		}
		bits := 64
		if n.kind == avroFloat {
			bits = 32
		}
		if f, err = strconv.ParseFloat(string(lit), bits); err != nil {
			return nil, d.errAt("number out of range for type %s", n.describe())
		}
		if n.kind == avroFloat {
			return widenFloat32(float32(f)), nil
		}
		return f, nil
	case avroString:
		a, b, unesc, err := d.stringToken()
		if err != nil {
			return nil, err
		}
		return d.text(a, b, unesc), nil
	case avroBytes, avroFixed:
		b, err := d.codePoints()
		if err != nil {
			return nil, err
		}
		if n.kind == avroFixed && len(b) != n.size {
			return nil, d.errAt("fixed %s of %d bytes given %d", n.name, n.size, len(b))
		}
		return n.fromBytes(b)
	case avroEnum:
		a, b, unesc, err := d.stringToken()
		if err != nil {
			return nil, err
		}
		sym := unesc
		if sym == nil {
			sym = d.s[a:b]
		}
		i, ok := n.index[string(sym)]
		if !ok {
			return nil, d.errAt("enum %s has no such symbol", n.name)
		}
		return n.symbols[i], nil
	case avroArray:
		if err := d.expect('['); err != nil {
			return nil, err
		}
		l := []any{}
		if d.next() == ']' {
			d.pos++
			return l, nil
		}
		for {
			v, err := d.value(n.elem, depth+1)
			if err != nil {
				return nil, at(err, strconv.Itoa(len(l)))
			}
			l = append(l, v)
			switch d.next() {
			case ',':
				d.pos++
				continue
			case ']':
				d.pos++
				return l, nil
			}
			return nil, d.unexpected("expected , or ] in an array")
		}
	case avroMap, avroRecord:
		return d.object(n, depth)
	case avroUnion:
		return d.union(n, c, depth)
	}
	return nil, fmt.Errorf("unknown type %s", n.describe())
}

// object reads a record or a map.
func (d *jsonDecoder) object(n *node, depth int) (any, error) {
	if err := d.expect('{'); err != nil {
		return nil, err
	}
	size := 0
	if n.kind == avroRecord {
		size = len(n.fields)
	}
	m := make(map[string]any, size)
	var (
		seen     uint64 // the record's fields present, the first 64 of them
		seenMore []bool // and all of them, past 64 fields
		present  int
	)
	if size > 64 {
		seenMore = make([]bool, size)
	}
	if d.next() == '}' {
		d.pos++
	} else {
		for {
			a, b, unesc, err := d.stringToken()
			if err != nil {
				return nil, err
			}
			var (
				key  string
				elem = n.elem
			)
			if n.kind == avroRecord {
				name := unesc
				if name == nil {
					name = d.s[a:b]
				}
				i, ok := n.index[string(name)]
				if !ok {
					// A member the revision does not name is skipped, as
					// Pub/Sub's validation skips it: a message it accepted
					// under this revision decodes under it.
					if err := d.expect(':'); err != nil {
						return nil, err
					}
					if err := d.skipValue(depth + 1); err != nil {
						return nil, err
					}
					if c := d.next(); c == ',' {
						d.pos++
						continue
					} else if c == '}' {
						d.pos++
						break
					}
					return nil, d.unexpected("expected , or } in an object")
				}
				key, elem = n.fields[i].name, n.fields[i].node
				switch {
				case seenMore != nil:
					if !seenMore[i] {
						seenMore[i] = true
						present++
					}
				case seen&(1<<i) == 0:
					seen |= 1 << i
					present++
				}
			} else {
				key = d.text(a, b, unesc)
			}
			if err := d.expect(':'); err != nil {
				return nil, err
			}
			v, err := d.value(elem, depth+1)
			if err != nil {
				if n.kind == avroMap {
					key = "*"
				}
				return nil, at(err, key)
			}
			if v != nil || n.kind == avroMap { // a record's null field is absent (doc.go's (3))
				m[key] = v
			} else {
				delete(m, key) // a field given twice
			}
			if c := d.next(); c == ',' {
				d.pos++
				continue
			} else if c == '}' {
				d.pos++
				break
			}
			return nil, d.unexpected("expected , or } in an object")
		}
	}
	if n.kind == avroRecord && present < len(n.fields) {
		for i, f := range n.fields {
			if seenMore != nil && seenMore[i] || seenMore == nil && seen&(1<<i) != 0 {
				continue
			}
			if !f.hasDef {
				return nil, d.errAt("record %s lacks field %q, which has no default", n.name, f.name)
			}
			if f.def != nil {
				m[f.name] = clone(f.def)
			}
		}
	}
	return m, nil
}

// skipValue reads one JSON value of any shape and drops it: an object
// member that the record does not name. It nests at most value.MaxDepth levels.
func (d *jsonDecoder) skipValue(depth int) error {
	if depth > value.MaxDepth {
		return value.ErrTooDeep
	}
	switch c := d.next(); {
	case c == '"':
		_, _, _, err := d.stringToken()
		return err
	case c == '{' || c == '[':
		d.pos++
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		if d.next() == end {
			d.pos++
			return nil
		}
		for {
			if c == '{' {
				if _, _, _, err := d.stringToken(); err != nil {
					return err
				}
				if err := d.expect(':'); err != nil {
					return err
				}
			}
			if err := d.skipValue(depth + 1); err != nil {
				return err
			}
			switch d.next() {
			case ',':
				d.pos++
			case end:
				d.pos++
				return nil
			default:
				return d.unexpected("expected , or the end of a list or object")
			}
		}
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	}
	_, _, err := d.number()
	return err
}

// quote is a field name as an error quotes it: at most 64 bytes (it is
// payload text, but a name the schema lacks is what the reader needs).
func quote(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// union reads a union's value: null, the wrapper {"TYPE": value}, or a plain
// value that one branch alone can hold (see the file's comment).
func (d *jsonDecoder) union(n *node, c byte, depth int) (any, error) {
	var kind jsonKind
	switch c {
	case 'n':
		kind = jsonNull
	case 't', 'f':
		kind = jsonBool
	case '"':
		kind = jsonString
	case '[':
		kind = jsonArray
	case '{':
		return d.unionObject(n, depth)
	default:
		kind = jsonNumber
	}
	return d.plain(n, kind, depth)
}

func (d *jsonDecoder) plain(n *node, kind jsonKind, depth int) (any, error) {
	switch i := n.plain[kind]; i {
	case -1:
		return nil, d.errAt("%s cannot hold a JSON %s", n.describe(), jsonKindNames[kind])
	case -2:
		return nil, d.errAt("%s has several branches for a JSON %s: wrap the value as {\"TYPE\": value}", n.describe(), jsonKindNames[kind])
	default:
		return d.value(n.branches[i], depth)
	}
}

func (d *jsonDecoder) unionObject(n *node, depth int) (any, error) {
	start := d.pos
	d.pos++ // {
	if d.next() == '}' {
		d.pos = start
		return d.plain(n, jsonObject, depth)
	}
	a, b, unesc, err := d.stringToken()
	if err != nil {
		return nil, err
	}
	name := unesc
	if name == nil {
		name = d.s[a:b]
	}
	// An object whose first member is named after a branch is the
	// wrapper, even when a record or map branch could hold it as it is:
	// deciding by its other members would mean reading the value twice,
	// at each level of a recursive schema.
	i, wrapper := n.byName[string(name)]
	if !wrapper {
		if n.plain[jsonObject] != -1 { // a plain object, or an ambiguous one
			d.pos = start
			return d.plain(n, jsonObject, depth)
		}
		return nil, d.errAt("%s has no branch %q", n.describe(), quote(name))
	}
	if err := d.expect(':'); err != nil {
		return nil, err
	}
	v, err := d.value(n.branches[i], depth)
	if err != nil {
		return nil, err
	}
	if d.next() != '}' {
		return nil, d.unexpected(fmt.Sprintf("a union's {\"TYPE\": value} has one member (an object whose first member is named after a branch, %q, is read as one)", quote(name)))
	}
	d.pos++
	return v, nil
}
