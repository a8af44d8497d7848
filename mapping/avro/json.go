package avro

// The Avro-JSON decoder: jsonDecoder reads a datum in Avro's JSON
// encoding into the value model, directed by the compiled schema
// (compile.go), on internal/jsontext's tokenizer, with its own errors;
// Decode (binary.go) calls it for Decode(data, true).
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
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/pubsink/pubsink/internal/jsontext"
	"github.com/pubsink/pubsink/mapping/value"
)

// jsonDecoder reads Avro's JSON encoding, directed by the schema: every
// value it makes consumes input bytes, and it nests no deeper than the
// decoded tree (value.MaxDepth). Its tokens are internal/jsontext's, and so
// exactly as strict as encoding/json's; it words its own errors.
type jsonDecoder struct {
	jsontext.Scanner
	str string // Data as a string, made at the first string without escapes
}

func (d *jsonDecoder) errAt(format string, args ...any) error {
	return fmt.Errorf(format+" (at byte %d)", append(args, d.Pos)...)
}

// unexpected is the error of a token that is not what the syntax needs.
func (d *jsonDecoder) unexpected(what string) error {
	if d.Pos >= len(d.Data) {
		return errEOF
	}
	return d.errAt("%s", what)
}

func (d *jsonDecoder) expect(c byte) error {
	if d.Next() != c {
		return d.unexpected(fmt.Sprintf("expected %q", c))
	}
	d.Pos++
	return nil
}

func (d *jsonDecoder) literal(word string) error {
	if d.Literal(word) != jsontext.OK {
		return d.unexpected("invalid JSON literal")
	}
	return nil
}

// stringToken reads a JSON string. Without escapes its text is Data[a:b]
// and unesc is nil; otherwise unesc holds it, its escapes resolved and its
// other bytes as they are (invalid UTF-8 too).
func (d *jsonDecoder) stringToken() (a, b int, unesc []byte, err error) {
	if d.Next() != '"' {
		return 0, 0, nil, d.unexpected("expected a string")
	}
	a = d.Pos + 1
	if d.PlainString() {
		return a, d.Pos - 1, nil, nil
	}
	flags, err := d.scanString()
	if err != nil {
		return 0, 0, nil, err
	}
	b = d.Pos - 1
	if flags&jsontext.Escaped != 0 {
		unesc = jsontext.AppendUnescaped(make([]byte, 0, b-a), d.Data[a:b])
	}
	return a, b, unesc, nil
}

// scanString scans the string token at Pos that PlainString did not, with
// the decoder's errors: an invalid escape is reported after its \x or \u.
func (d *jsonDecoder) scanString() (jsontext.Flags, error) {
	flags, p := d.String()
	switch p {
	case jsontext.OK:
		return flags, nil
	case jsontext.ControlChar:
		return 0, d.errAt("control character in a string")
	case jsontext.InvalidEscape:
		d.Pos += 2
		return 0, d.errAt("invalid escape")
	case jsontext.InvalidHexEscape:
		d.Pos += 2
		return 0, d.errAt("invalid \\u escape")
	}
	return 0, errEOF // the data ends inside the string
}

// skipString reads a string token and drops it.
func (d *jsonDecoder) skipString() error {
	if d.Next() != '"' {
		return d.unexpected("expected a string")
	}
	if d.PlainString() {
		return nil
	}
	_, err := d.scanString()
	return err
}

// text is a string token as a Go string: a substring of the input's one
// copy when it has no escapes.
func (d *jsonDecoder) text(a, b int, unesc []byte) string {
	if unesc != nil {
		return string(unesc)
	}
	if d.str == "" {
		d.str = string(d.Data)
	}
	return d.str[a:b]
}

// number reads a JSON number and returns its text, and whether it is an
// integer (no fraction, no exponent). Its errors are at the number's start.
func (d *jsonDecoder) number() ([]byte, bool, error) {
	d.SkipSpace()
	a := d.Pos
	if d.Number() != jsontext.OK {
		at := d.Pos
		d.Pos = a
		if at == a || at == a+1 && d.Data[a] == '-' { // no digit at all
			return nil, false, d.unexpected("expected a number")
		}
		return nil, false, d.errAt("invalid number")
	}
	lit := d.Data[a:d.Pos]
	for _, c := range lit {
		if c == '.' || c == 'e' || c == 'E' {
			return lit, false, nil
		}
	}
	return lit, true, nil
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
		s = d.Data[a:b]
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
	c := d.Next()
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
		if n.kind == avroFloat {
			if f, err = strconv.ParseFloat(string(lit), 32); err != nil {
				return nil, d.errAt("number out of range for type %s", n.describe())
			}
			return widenFloat32(float32(f)), nil
		}
		f, ok := jsontext.Float64(lit) // strconv.ParseFloat's value, mostly without its cost
		if !ok {
			return nil, d.errAt("number out of range for type %s", n.describe())
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
			sym = d.Data[a:b]
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
		if d.Next() == ']' {
			d.Pos++
			return l, nil
		}
		for {
			v, err := d.value(n.elem, depth+1)
			if err != nil {
				return nil, at(err, strconv.Itoa(len(l)))
			}
			l = append(l, v)
			more, p := d.More(']')
			if p != jsontext.OK {
				return nil, d.unexpected("expected , or ] in an array")
			}
			if !more {
				return l, nil
			}
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
	if d.Next() == '}' {
		d.Pos++
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
					name = d.Data[a:b]
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
					more, p := d.More('}')
					if p != jsontext.OK {
						return nil, d.unexpected("expected , or } in an object")
					}
					if more {
						continue
					}
					break
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
			more, p := d.More('}')
			if p != jsontext.OK {
				return nil, d.unexpected("expected , or } in an object")
			}
			if !more {
				break
			}
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
	switch c := d.Next(); {
	case c == '"':
		return d.skipString()
	case c == '{' || c == '[':
		d.Pos++
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		if d.Next() == end {
			d.Pos++
			return nil
		}
		for {
			if c == '{' {
				if err := d.skipString(); err != nil {
					return err
				}
				if err := d.expect(':'); err != nil {
					return err
				}
			}
			if err := d.skipValue(depth + 1); err != nil {
				return err
			}
			more, p := d.More(end)
			if p != jsontext.OK {
				return d.unexpected("expected , or the end of a list or object")
			}
			if !more {
				return nil
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
	start := d.Pos
	d.Pos++ // {
	if d.Next() == '}' {
		d.Pos = start
		return d.plain(n, jsonObject, depth)
	}
	a, b, unesc, err := d.stringToken()
	if err != nil {
		return nil, err
	}
	name := unesc
	if name == nil {
		name = d.Data[a:b]
	}
	// An object whose first member is named after a branch is the
	// wrapper, even when a record or map branch could hold it as it is:
	// deciding by its other members would mean reading the value twice,
	// at each level of a recursive schema.
	i, wrapper := n.byName[string(name)]
	if !wrapper {
		if n.plain[jsonObject] != -1 { // a plain object, or an ambiguous one
			d.Pos = start
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
	if d.Next() != '}' {
		return nil, d.unexpected(fmt.Sprintf("a union's {\"TYPE\": value} has one member (an object whose first member is named after a branch, %q, is read as one)", quote(name)))
	}
	d.Pos++
	return v, nil
}
