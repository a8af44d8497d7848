package template

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Sentinel errors of AppendTo. Each is wrapped with the placeholder that
// failed, e.g. `{attributes.customer_id}: missing field: attribute not set`;
// test them with errors.Is, never by text.
var (
	// ErrMissingField: an attribute is not set, a JSON field is absent or
	// null, or an array index is out of range. Dead-letter reason
	// missing_field.
	ErrMissingField = errors.New("missing field")
	// ErrInvalidPayload: a {data.…} placeholder met a payload that is not
	// valid JSON or nests deeper than 128 levels, or a path that runs into a
	// value that is neither an object nor an array. Dead-letter reason
	// invalid_payload.
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrBadTime: a time placeholder got a time it cannot render in its
	// fixed-width form (zero, before 1970 or after year 9999). Dead-letter
	// reason bad_event_time.
	ErrBadTime = errors.New("time out of range")
	// ErrExpression: a {= EXPR} placeholder's expression failed on the
	// message (a missing field, a type error, its cost limit). Dead-letter
	// reason expression_failed. The Expr returns it, wrapped.
	ErrExpression = errors.New("expression failed")
)

// Value is a decoded payload, or one element of a list, that {data.…} and
// {item.…} read by path: AppendPath appends the value at path (all of it
// for an empty path) and returns an error wrapping ErrMissingField or
// ErrInvalidPayload when it cannot. Package mapping implements it for every
// format.
type Value interface {
	AppendPath(dst []byte, path []Segment) ([]byte, error)
}

// Expr is a compiled expression of a {= EXPR} placeholder: AppendTo appends
// its value, rendered, to dst, reading what it needs from vars (the
// Input's Vars), and returns dst unchanged with an error wrapping
// ErrExpression (or another sentinel of this package) when it fails. It
// gets Vars, not the Input, so that an Input on its caller's stack stays
// there.
type Expr interface {
	AppendTo(dst []byte, vars any) ([]byte, error)
}

// Options are what CompileWith needs beyond the text.
type Options struct {
	// Expr compiles the text of a {= EXPR} placeholder (without the braces
	// and the =, spaces trimmed). Nil: expressions are parsed for their
	// braces only, and rendering one fails (what config validation needs).
	Expr func(src string) (Expr, error)
}

// Input is one message's values. AppendTo reads it and does not retain it or
// anything it points to.
type Input struct {
	MessageID   string
	PublishTime time.Time
	EventTime   time.Time
	Attributes  map[string]string
	// Data is the raw payload. {data.…} placeholders read it as JSON without
	// unmarshalling it, unless Decoded is set.
	Data []byte
	// Decoded is the payload decoded by its schema (Avro, Protocol
	// Buffers): {data.…} reads it instead of Data. {data} is Data still.
	Decoded Value
	// Item is the element of the list a mapping makes one row per
	// element of: {item} and {item.…} read it. Nil: they fail with
	// ErrMissingField.
	Item Value
	// Vars is what the expressions of {= EXPR} placeholders read; the
	// template does not look at it.
	Vars any
}

// Template is a compiled row-key or column template. It is immutable and safe
// for concurrent use.
type Template struct {
	src      string
	parts    []part
	usesData bool
	usesItem bool
}

type kind uint8

const (
	kindLiteral kind = iota
	kindMessageID
	kindPublishTime
	kindEventTime
	kindEventTimeReverse
	kindAttribute
	kindData
	kindDataPath
	kindItem // {item} and {item.a.b}: path may be empty
	kindExpr
)

// part is one literal run or one placeholder.
type part struct {
	kind kind
	// text is the literal text (kindLiteral) or the attribute name
	// (kindAttribute); for other placeholders it is empty.
	text string
	// placeholder is the placeholder as written, e.g. "{data.amount}", so
	// that errors name it.
	placeholder string
	// path is the field path of kindDataPath and kindItem.
	path []Segment
	// expr is the compiled expression of kindExpr; nil when compiled
	// without Options.Expr. text holds its source.
	expr Expr
}

// Segment is one step of a {data.a.b} or {item.a.b} path. Key is the text
// as written; it names an object member, and when Index >= 0 (Key is all
// digits) it also indexes an array.
type Segment struct {
	Key   string
	Index int
}

// Compile parses s. It is meant to run once at start-up; the Template it
// returns renders without parsing again. The error names the offending
// placeholder or brace, e.g. `unknown placeholder "{atributes.x}"`.
func Compile(s string) (*Template, error) { return CompileWith(s, Options{}) }

// CompileWith is Compile with expressions compiled by opts.Expr: its error,
// for a {= EXPR} placeholder, is prefixed with the placeholder's offset.
func CompileWith(s string, opts Options) (*Template, error) {
	t := &Template{src: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, part{kind: kindLiteral, text: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case '{':
			if i+1 < len(s) && s[i+1] == '{' {
				lit.WriteByte('{')
				i += 2
				continue
			}
			if i+1 < len(s) && s[i+1] == '=' {
				end, err := exprEnd(s, i)
				if err != nil {
					return nil, err
				}
				p, err := compileExpr(s[i:end+1], i, opts)
				if err != nil {
					return nil, err
				}
				flush()
				t.parts = append(t.parts, p)
				i = end + 1
				continue
			}
			n := strings.IndexAny(s[i+1:], "{}")
			if n < 0 {
				return nil, fmt.Errorf("unclosed placeholder %q at offset %d (write {{ for a literal brace)", s[i:], i)
			}
			end := i + 1 + n
			if s[end] == '{' {
				return nil, fmt.Errorf("unexpected { inside placeholder %q at offset %d (write {{ for a literal brace)", s[i:end+1], end)
			}
			p, err := compilePlaceholder(s[i : end+1])
			if err != nil {
				return nil, err
			}
			flush()
			t.parts = append(t.parts, p)
			t.usesData = t.usesData || p.kind == kindData || p.kind == kindDataPath
			t.usesItem = t.usesItem || p.kind == kindItem
			i = end + 1
		case '}':
			if i+1 < len(s) && s[i+1] == '}' {
				lit.WriteByte('}')
				i += 2
				continue
			}
			return nil, fmt.Errorf("unmatched } at offset %d (write }} for a literal brace)", i)
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	flush()
	return t, nil
}

// compilePlaceholder parses ph, which includes its braces.
func compilePlaceholder(ph string) (part, error) {
	name := ph[1 : len(ph)-1]
	p := part{placeholder: ph}
	switch {
	case name == "":
		return p, fmt.Errorf("empty placeholder %q", ph)
	case name == "message_id":
		p.kind = kindMessageID
	case name == "publish_time":
		p.kind = kindPublishTime
	case name == "event_time":
		p.kind = kindEventTime
	case name == "event_time:reverse":
		p.kind = kindEventTimeReverse
	case name == "data":
		p.kind = kindData
	case strings.HasPrefix(name, "attributes."):
		p.kind = kindAttribute
		p.text = name[len("attributes."):]
		if p.text == "" {
			return p, fmt.Errorf("empty attribute name in %q", ph)
		}
	case strings.HasPrefix(name, "data."):
		p.kind = kindDataPath
		return p, p.parsePath(name[len("data."):])
	case name == "item":
		p.kind = kindItem
	case strings.HasPrefix(name, "item."):
		p.kind = kindItem
		return p, p.parsePath(name[len("item."):])
	default:
		return p, fmt.Errorf("unknown placeholder %q", ph)
	}
	return p, nil
}

// parsePath sets p.path from the dotted path after data. or item.
func (p *part) parsePath(path string) error {
	for _, key := range strings.Split(path, ".") {
		if key == "" {
			return fmt.Errorf("empty field name in %q", p.placeholder)
		}
		p.path = append(p.path, Segment{Key: key, Index: arrayIndex(key)})
	}
	return nil
}

// exprEnd returns the index of the } that closes the {= placeholder at
// s[start]: braces nest, and braces inside CEL's string literals ('…',
// "…", ””…””, """…""", with backslash escapes) do not count.
func exprEnd(s string, start int) (int, error) {
	depth := 0
	for i := start; i < len(s); i++ {
		switch c := s[i]; c {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i, nil
			}
		case '\'', '"':
			triple := strings.Repeat(string(c), 3)
			if strings.HasPrefix(s[i:], triple) {
				end := strings.Index(s[i+3:], triple)
				if end < 0 {
					return 0, fmt.Errorf("unterminated string in expression at offset %d", i)
				}
				i += 3 + end + 2
				continue
			}
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return 0, fmt.Errorf("unterminated string in expression at offset %d", i)
			}
			i = j
		}
	}
	return 0, fmt.Errorf("unclosed expression %q at offset %d (an expression ends at its matching })", s[start:], start)
}

// compileExpr compiles the {= EXPR} placeholder ph found at offset off.
func compileExpr(ph string, off int, opts Options) (part, error) {
	p := part{kind: kindExpr, placeholder: ph, text: strings.TrimSpace(ph[2 : len(ph)-1])}
	if p.text == "" {
		return p, fmt.Errorf("empty expression %q at offset %d", ph, off)
	}
	if opts.Expr == nil {
		return p, nil
	}
	e, err := opts.Expr(p.text)
	if err != nil {
		return p, fmt.Errorf("expression at offset %d: %w", off, err)
	}
	p.expr = e
	return p, nil
}

// arrayIndex is the array index a path segment names: its value when it is
// all ASCII digits, -1 otherwise. An index too large for an int saturates to
// math.MaxInt, which no array reaches, so it reads as out of range.
func arrayIndex(key string) int {
	n := 0
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < '0' || c > '9' {
			return -1
		}
		if n > (math.MaxInt-9)/10 {
			n = math.MaxInt
			continue
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// String returns the source text the template was compiled from.
func (t *Template) String() string { return t.src }

// UsesData reports whether any placeholder reads the payload ({data} or
// {data.…}), so that callers can skip payload work when none does.
func (t *Template) UsesData() bool { return t.usesData }

// UsesItem reports whether a placeholder reads the element of a list
// ({item} or {item.…}); expressions are not looked into (see Expressions).
func (t *Template) UsesItem() bool { return t.usesItem }

// Expressions returns the source of every {= EXPR} placeholder, in order.
func (t *Template) Expressions() []string {
	var out []string
	for _, p := range t.parts {
		if p.kind == kindExpr {
			out = append(out, p.text)
		}
	}
	return out
}

// Paths returns the field path of every {data.…} placeholder (root "data")
// and {item.…} placeholder (root "item"), in order, so that a caller with a
// schema can check them.
func (t *Template) Paths() []FieldPath {
	var out []FieldPath
	for _, p := range t.parts {
		switch p.kind {
		case kindDataPath:
			out = append(out, FieldPath{Root: "data", Path: p.path, Placeholder: p.placeholder})
		case kindItem:
			out = append(out, FieldPath{Root: "item", Path: p.path, Placeholder: p.placeholder})
		}
	}
	return out
}

// FieldPath is a placeholder's path into the payload or an element.
type FieldPath struct {
	Root        string // "data" or "item"
	Path        []Segment
	Placeholder string // as written: "{data.a.b}"
}

// Lone returns the expression of a template that is one {= EXPR}
// placeholder and nothing else, so that a caller can use its typed value
// (a timestamp) instead of its rendering; nil otherwise.
func (t *Template) Lone() Expr {
	if len(t.parts) == 1 && t.parts[0].kind == kindExpr {
		return t.parts[0].expr
	}
	return nil
}

// Constant reports whether the template has no placeholder at all, so that
// it renders the same text for every message.
func (t *Template) Constant() bool {
	for i := range t.parts {
		if t.parts[i].kind != kindLiteral {
			return false
		}
	}
	return true
}

// AppendTo appends the rendered template to dst and returns the extended
// slice. On error it returns dst unchanged (same length, same contents), so a
// partially rendered key never escapes; bytes past len(dst) may have been
// overwritten. The error wraps ErrMissingField, ErrInvalidPayload or
// ErrBadTime and names the placeholder; it never quotes payload or attribute
// values. AppendTo does not allocate unless it must grow dst or it fails. It
// is safe for concurrent use and does not retain in.
func (t *Template) AppendTo(dst []byte, in *Input) ([]byte, error) {
	out := dst
	for i := range t.parts {
		var err error
		out, err = t.parts[i].appendTo(out, in)
		if err != nil {
			return dst, err
		}
	}
	return out, nil
}

// Render returns the rendered template as a string, with the errors of
// AppendTo. A template that is a lone {message_id} or {attributes.NAME}
// returns the input's own string: no copy, no allocation (a string cannot
// change, so the result may be kept as long as the caller likes). Any other
// template is rendered into a buffer on the stack (on the heap past 128
// bytes) and copied once into the new string. It is safe for concurrent use
// and does not retain in.
func (t *Template) Render(in *Input) (string, error) {
	if len(t.parts) == 1 {
		switch p := &t.parts[0]; p.kind {
		case kindMessageID:
			return in.MessageID, nil
		case kindAttribute:
			v, ok := in.Attributes[p.text]
			if !ok {
				return "", p.attributeNotSet()
			}
			return v, nil
		}
	}
	return t.render(in)
}

// render is Render but for its lone placeholders, apart so that their path
// does not carry its buffer on the stack.
func (t *Template) render(in *Input) (string, error) {
	var buf [128]byte
	b, err := t.AppendTo(buf[:0], in)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Payload reports whether the template is a lone {data}: it renders the
// payload unchanged, so a caller may use Input.Data itself instead of a
// copy (and must then treat it as Input.Data: not modify it, not keep it
// longer than the payload may be kept).
func (t *Template) Payload() bool {
	return len(t.parts) == 1 && t.parts[0].kind == kindData
}

// Time placeholders render within [minTime, maxTime]: outside it the
// fixed-width forms (4-digit year, 19-digit reverse) would not hold and keys
// would stop sorting by time.
var (
	minTime = time.Unix(0, 0)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

func (p *part) appendTo(dst []byte, in *Input) ([]byte, error) {
	switch p.kind {
	case kindLiteral:
		return append(dst, p.text...), nil
	case kindMessageID:
		return append(dst, in.MessageID...), nil
	case kindPublishTime:
		if err := p.checkTime(in.PublishTime); err != nil {
			return dst, err
		}
		return appendTime(dst, in.PublishTime), nil
	case kindEventTime:
		if err := p.checkTime(in.EventTime); err != nil {
			return dst, err
		}
		return appendTime(dst, in.EventTime), nil
	case kindEventTimeReverse:
		if err := p.checkTime(in.EventTime); err != nil {
			return dst, err
		}
		return appendPadded(dst, math.MaxInt64-in.EventTime.UnixMilli(), 19), nil
	case kindAttribute:
		v, ok := in.Attributes[p.text]
		if !ok {
			return dst, p.attributeNotSet()
		}
		return append(dst, v...), nil
	case kindData:
		return append(dst, in.Data...), nil
	case kindDataPath:
		if in.Decoded != nil {
			return p.appendDecoded(dst, in.Decoded)
		}
		return p.appendField(dst, in.Data)
	case kindItem:
		return p.appendItem(dst, in.Item)
	case kindExpr:
		return p.appendExpr(dst, in.Vars)
	}
	panic("template: unknown part kind") // unreachable: Compile sets every kind
}

// appendItem and appendExpr are appendTo's cases for {item…} and {= EXPR},
// in functions of their own (never inlined) so that their error formatting
// is not in appendTo's frame: appendTo is on the path of every message, on
// a callback goroutine whose stack starts small.
//
//go:noinline
func (p *part) appendItem(dst []byte, item Value) ([]byte, error) {
	if item == nil {
		return dst, fmt.Errorf("%s: %w: no list element here (item is only set in a mapping with each)", p.placeholder, ErrMissingField)
	}
	return p.appendDecoded(dst, item)
}

//go:noinline
func (p *part) appendExpr(dst []byte, vars any) ([]byte, error) {
	if p.expr == nil {
		return dst, fmt.Errorf("%s: %w: not compiled", p.placeholder, ErrExpression)
	}
	out, err := p.expr.AppendTo(dst, vars)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", p.placeholder, err)
	}
	return out, nil
}

// appendDecoded appends the value at p's path in v.
//
//go:noinline
func (p *part) appendDecoded(dst []byte, v Value) ([]byte, error) {
	out, err := v.AppendPath(dst, p.path)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", p.placeholder, err)
	}
	return out, nil
}

func (p *part) attributeNotSet() error {
	return fmt.Errorf("%s: %w: attribute not set", p.placeholder, ErrMissingField)
}

func (p *part) checkTime(t time.Time) error {
	if t.Before(minTime) || t.After(maxTime) {
		return fmt.Errorf("%s: %w: outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z", p.placeholder, ErrBadTime)
	}
	return nil
}

// appendTime appends t in UTC as RFC 3339 with exactly three fractional
// digits, truncated (not rounded) like the cell timestamps:
// 2026-01-02T03:04:05.678Z. t must be within [minTime, maxTime].
func appendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	dst = appendPadded(dst, int64(year), 4)
	dst = append(dst, '-')
	dst = appendPadded(dst, int64(month), 2)
	dst = append(dst, '-')
	dst = appendPadded(dst, int64(day), 2)
	dst = append(dst, 'T')
	dst = appendPadded(dst, int64(hour), 2)
	dst = append(dst, ':')
	dst = appendPadded(dst, int64(minute), 2)
	dst = append(dst, ':')
	dst = appendPadded(dst, int64(sec), 2)
	dst = append(dst, '.')
	dst = appendPadded(dst, int64(t.Nanosecond()/1e6), 3)
	return append(dst, 'Z')
}

// appendPadded appends the decimal digits of v >= 0, zero-padded to width.
func appendPadded(dst []byte, v int64, width int) []byte {
	var buf [20]byte
	i := len(buf)
	for v >= 10 || width > 1 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		width--
	}
	i--
	buf[i] = byte('0' + v)
	return append(dst, buf[i:]...)
}

// Leading returns the first placeholder of t as written ("{message_id}",
// "{attributes.ts}"), and the literal text before it, which is the same in
// every rendering: what decides where in a sorted key space (a Bigtable
// table) the rendered values of t fall. ok is false for a template without
// placeholders.
func (t *Template) Leading() (prefix, placeholder string, ok bool) {
	for _, p := range t.parts {
		if p.kind == kindLiteral {
			prefix += p.text
			continue
		}
		return prefix, p.placeholder, true
	}
	return prefix, "", false
}
