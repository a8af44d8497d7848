package avro

// Compiling an Avro schema: Compile parses a schema's JSON text (with
// hamba/avro) into a tree of node, the Codec; the values of logical types
// and of field defaults, which both decoders share, are here too. The
// decoders are binary.go and json.go, the check of placeholder paths is
// path.go, the schema's CEL types are types.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	hamba "github.com/hamba/avro/v2"
	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/mapping/value"
)

// Codec is a compiled Avro schema: the schema.Codec of package mapping. It
// is immutable and safe for concurrent use.
type Codec struct {
	root *node
}

var _ schema.Codec = (*Codec)(nil)

type kind uint8

const (
	avroNull kind = iota
	avroBoolean
	avroInt
	avroLong
	avroFloat
	avroDouble
	avroBytes
	avroString
	avroRecord
	avroEnum
	avroArray
	avroMap
	avroUnion
	avroFixed
)

var kindNames = [...]string{
	avroNull: "null", avroBoolean: "boolean", avroInt: "int", avroLong: "long",
	avroFloat: "float", avroDouble: "double", avroBytes: "bytes", avroString: "string",
	avroRecord: "record", avroEnum: "enum", avroArray: "array", avroMap: "map",
	avroUnion: "union", avroFixed: "fixed",
}

type logical uint8

const (
	logicalNone logical = iota
	logicalDecimal
	logicalUUID
	logicalDate
	logicalTimeMillis
	logicalTimeMicros
	logicalTimestampMillis
	logicalTimestampMicros
	logicalTimestampNanos
)

// jsonKind is the kind of a JSON value, as a union's plain value is chosen by.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
	jsonKinds
)

var jsonKindNames = [jsonKinds]string{"null", "boolean", "number", "string", "array", "object"}

// node is one type of a compiled schema. A recursive schema's nodes
// point back at their named ancestors.
type node struct {
	kind    kind
	logical logical
	// logicalName is the schema's logicalType, for messages ("" if none).
	logicalName string
	// name is a named type's short name (record, enum, fixed); full its full
	// name; both are the type's name ("string", "array") for the others.
	name, full string

	fields  []field        // record
	index   map[string]int // record: field by name; enum: symbol by name
	symbols []string       // enum
	elem    *node          // array items, map values
	size    int            // fixed
	scale   int            // decimal
	maxLen  int            // bytes decimal: the most bytes its precision needs

	branches []*node         // union
	byName   map[string]int  // union: branch by JSON wrapper name
	plain    [jsonKinds]int8 // union: the branch a plain JSON value of each kind goes to; -1 none, -2 several

	// minSize is the fewest bytes a value takes in the binary encoding
	// (a lower bound while a recursive record is being sized).
	minSize int
	sized   uint8 // 1 while sizing, 2 once sized
}

type field struct {
	name   string
	node   *node
	hasDef bool
	def    any // the default, decoded; copied before use when it is a map, list or bytes
}

// Compile parses an Avro schema (JSON text, as a Pub/Sub schema's
// definition or an .avsc file holds it). Each call parses into a fresh name
// cache: two revisions of a schema may define the same names differently.
func Compile(definition string) (*Codec, error) {
	if !json.Valid([]byte(definition)) {
		var v any
		err := json.Unmarshal([]byte(definition), &v)
		return nil, fmt.Errorf("avro schema is not valid JSON: %v", err)
	}
	s, err := hamba.ParseWithCache(definition, "", &hamba.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("avro schema: %s", strings.TrimPrefix(err.Error(), "avro: "))
	}
	c := &compiler{named: map[string]*node{}, seen: map[*node]bool{}}
	root, err := c.node(s)
	if err != nil {
		return nil, fmt.Errorf("avro schema: %v", err)
	}
	for _, n := range c.all {
		minSize(n)
	}
	for _, r := range c.records {
		for i := range r.fields {
			f := &r.fields[i]
			if !f.hasDef {
				continue
			}
			// A default that does not fit the model (hamba/avro checked it
			// against the type already) is as good as none.
			f.def, err = defaultValue(f.node, f.def, 0)
			f.hasDef = err == nil
		}
	}
	return &Codec{root: root}, nil
}

type compiler struct {
	named   map[string]*node
	records []*node
	all     []*node // every node, once
	seen    map[*node]bool
}

func (c *compiler) node(s hamba.Schema) (*node, error) {
	n, err := c.build(s)
	if err == nil && !c.seen[n] {
		c.seen[n] = true
		c.all = append(c.all, n)
	}
	return n, err
}

func (c *compiler) build(s hamba.Schema) (*node, error) {
	if ref, ok := s.(*hamba.RefSchema); ok {
		s = ref.Schema()
	}
	if ns, ok := s.(hamba.NamedSchema); ok {
		if n := c.named[ns.FullName()]; n != nil {
			return n, nil
		}
	}
	switch s := s.(type) {
	case *hamba.NullSchema:
		return &node{kind: avroNull, name: "null", full: "null"}, nil
	case *hamba.PrimitiveSchema:
		n := &node{}
		switch s.Type() {
		case hamba.Boolean:
			n.kind = avroBoolean
		case hamba.Int:
			n.kind = avroInt
		case hamba.Long:
			n.kind = avroLong
		case hamba.Float:
			n.kind = avroFloat
		case hamba.Double:
			n.kind = avroDouble
		case hamba.Bytes:
			n.kind = avroBytes
		case hamba.String:
			n.kind = avroString
		default:
			return nil, fmt.Errorf("unknown primitive type %q", s.Type())
		}
		n.name, n.full = kindNames[n.kind], kindNames[n.kind]
		c.logical(n, s.Logical(), s.Prop("logicalType"))
		return n, nil
	case *hamba.RecordSchema:
		n := &node{kind: avroRecord, name: s.Name(), full: s.FullName(), index: map[string]int{}}
		c.named[s.FullName()] = n
		c.records = append(c.records, n)
		for i, f := range s.Fields() {
			fn, err := c.node(f.Type())
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.Name(), f.Name(), err)
			}
			n.fields = append(n.fields, field{name: f.Name(), node: fn, hasDef: f.HasDefault(), def: f.Default()})
			n.index[f.Name()] = i
		}
		return n, nil
	case *hamba.EnumSchema:
		n := &node{kind: avroEnum, name: s.Name(), full: s.FullName(), symbols: s.Symbols(), index: map[string]int{}}
		for i, sym := range n.symbols {
			n.index[sym] = i
		}
		c.named[s.FullName()] = n
		return n, nil
	case *hamba.FixedSchema:
		if s.Size() < 0 {
			return nil, fmt.Errorf("fixed %s has a negative size", s.Name())
		}
		n := &node{kind: avroFixed, name: s.Name(), full: s.FullName(), size: s.Size()}
		c.named[s.FullName()] = n
		c.logical(n, s.Logical(), s.Prop("logicalType"))
		return n, nil
	case *hamba.ArraySchema:
		e, err := c.node(s.Items())
		if err != nil {
			return nil, err
		}
		return &node{kind: avroArray, name: "array", full: "array", elem: e}, nil
	case *hamba.MapSchema:
		e, err := c.node(s.Values())
		if err != nil {
			return nil, err
		}
		return &node{kind: avroMap, name: "map", full: "map", elem: e}, nil
	case *hamba.UnionSchema:
		n := &node{kind: avroUnion, name: "union", full: "union", byName: map[string]int{}}
		short := map[string]int{}
		for i, t := range s.Types() {
			b, err := c.node(t)
			if err != nil {
				return nil, err
			}
			n.branches = append(n.branches, b)
			n.byName[b.full] = i
			if b.name != b.full {
				short[b.name]++
			}
		}
		for i, b := range n.branches {
			if _, taken := n.byName[b.name]; !taken && short[b.name] == 1 {
				n.byName[b.name] = i
			}
		}
		for k := range n.plain {
			n.plain[k] = -1
		}
		for i, b := range n.branches {
			k := b.jsonKind()
			if n.plain[k] == -1 {
				n.plain[k] = int8(i)
			} else {
				n.plain[k] = -2
			}
		}
		return n, nil
	}
	return nil, fmt.Errorf("unsupported schema %s", s.Type())
}

// logical sets n's logical type from hamba/avro's, or from the logicalType
// property for the Avro 1.12 types it does not know.
func (c *compiler) logical(n *node, l hamba.LogicalSchema, prop any) {
	if l == nil {
		name, _ := prop.(string)
		switch {
		case n.kind == avroLong && (name == "timestamp-nanos" || name == "local-timestamp-nanos"):
			n.logical, n.logicalName = logicalTimestampNanos, name
		case n.kind == avroFixed && n.size == 16 && name == "uuid":
			n.logical, n.logicalName = logicalUUID, name
		}
		return
	}
	n.logicalName = string(l.Type())
	switch l.Type() {
	case hamba.Decimal:
		n.logical = logicalDecimal
		if d, ok := l.(*hamba.DecimalLogicalSchema); ok {
			n.scale = d.Scale()
			// p digits need ceil((p*log2(10)+1)/8) bytes, the sign bit included
			n.maxLen = int(math.Ceil((float64(d.Precision())*math.Log2(10) + 1) / 8))
		}
	case hamba.UUID:
		n.logical = logicalUUID
	case hamba.Date:
		n.logical = logicalDate
	case hamba.TimeMillis:
		n.logical = logicalTimeMillis
	case hamba.TimeMicros:
		n.logical = logicalTimeMicros
	case hamba.TimestampMillis, hamba.LocalTimestampMillis:
		n.logical = logicalTimestampMillis
	case hamba.TimestampMicros, hamba.LocalTimestampMicros:
		n.logical = logicalTimestampMicros
	default: // duration: its fixed bytes
		n.logicalName = ""
	}
}

// jsonKind is the kind of JSON value that holds a value of n.
func (n *node) jsonKind() jsonKind {
	switch n.kind {
	case avroNull:
		return jsonNull
	case avroBoolean:
		return jsonBool
	case avroInt, avroLong, avroFloat, avroDouble:
		return jsonNumber
	case avroArray:
		return jsonArray
	case avroRecord, avroMap:
		return jsonObject
	}
	return jsonString // string, bytes, fixed, enum
}

// minSize sets n.minSize and returns it: the fewest bytes a value of n
// takes. Within a recursion a record still being sized counts as 0, so the
// result is a lower bound; every cycle passes through a union, array or map,
// which take a byte at least.
func minSize(n *node) int {
	if n.sized != 0 {
		return n.minSize
	}
	n.sized = 1
	n.minSize = sizeOf(n)
	n.sized = 2
	return n.minSize
}

func sizeOf(n *node) int {
	switch n.kind {
	case avroNull:
		return 0
	case avroBoolean, avroInt, avroLong, avroBytes, avroString, avroEnum, avroArray, avroMap:
		return 1
	case avroFloat:
		return 4
	case avroDouble:
		return 8
	case avroFixed:
		return n.size
	case avroUnion:
		least := math.MaxInt32
		for _, b := range n.branches {
			least = min(least, minSize(b))
		}
		return 1 + least
	case avroRecord:
		total := 0
		for _, f := range n.fields {
			total = min(total+minSize(f.node), math.MaxInt32)
		}
		return total
	}
	return 0
}

// describe names n's type for messages: "record Reading", "long
// (timestamp-millis)", "union [null, string]".
func (n *node) describe() string {
	switch n.kind {
	case avroRecord, avroEnum, avroFixed:
		s := kindNames[n.kind] + " " + n.name
		if n.logicalName != "" {
			s += " (" + n.logicalName + ")"
		}
		return s
	case avroUnion:
		names := make([]string, len(n.branches))
		for i, b := range n.branches {
			names[i] = b.name
		}
		return "union [" + strings.Join(names, ", ") + "]"
	}
	if n.logicalName != "" {
		return kindNames[n.kind] + " (" + n.logicalName + ")"
	}
	return kindNames[n.kind]
}

// ---- values of logical types, shared by both encodings and the defaults ----

// fromLong is the value of an int or long v of n's logical type.
func (n *node) fromLong(v int64) (any, error) {
	switch n.logical {
	case logicalTimestampMillis:
		return time.UnixMilli(v).UTC(), nil
	case logicalTimestampMicros:
		return time.UnixMicro(v).UTC(), nil
	case logicalTimestampNanos:
		return time.Unix(0, v).UTC(), nil
	case logicalDate:
		var b [16]byte
		return string(time.Unix(v*86400, 0).UTC().AppendFormat(b[:0], "2006-01-02")), nil
	case logicalTimeMillis:
		if v < 0 || v >= 86400e3 {
			return nil, errors.New("time-millis value is not a time of day (0 to 86399999)")
		}
		return timeOfDay(v/1e3, v%1e3, 3), nil
	case logicalTimeMicros:
		if v < 0 || v >= 86400e6 {
			return nil, errors.New("time-micros value is not a time of day (0 to 86399999999)")
		}
		return timeOfDay(v/1e6, v%1e6, 6), nil
	}
	return v, nil
}

// timeOfDay is "15:04:05.000" (digits 3) or "15:04:05.000000" (6).
func timeOfDay(sec, frac int64, digits int) string {
	b := make([]byte, 0, 15)
	two := func(v int64) { b = append(b, byte('0'+v/10), byte('0'+v%10)) }
	two(sec / 3600)
	b = append(b, ':')
	two(sec / 60 % 60)
	b = append(b, ':')
	two(sec % 60)
	b = append(b, '.')
	for p := int64(math.Pow10(digits - 1)); p > 0; p /= 10 {
		b = append(b, byte('0'+frac/p%10))
	}
	return string(b)
}

// fromBytes is the value of bytes or fixed b of n's logical type. b may be
// the payload's memory: the result does not alias it.
func (n *node) fromBytes(b []byte) (any, error) {
	switch n.logical {
	case logicalDecimal:
		return decimal(b, n.scale, n.maxLen)
	case logicalUUID:
		const hex = "0123456789abcdef"
		s := make([]byte, 0, 36)
		for i, c := range b {
			if i == 4 || i == 6 || i == 8 || i == 10 {
				s = append(s, '-')
			}
			s = append(s, hex[c>>4], hex[c&15])
		}
		return string(s), nil
	}
	return slices.Clone(b), nil
}

// decimal is the decimal text of the big-endian two's complement
// unscaled value b with scale digits after the point. maxLen > 0 bounds b's
// length, without its redundant sign bytes.
func decimal(b []byte, scale, maxLen int) (value.Decimal, error) {
	for len(b) > 1 && (b[0] == 0 && b[1] < 0x80 || b[0] == 0xff && b[1] >= 0x80) {
		b = b[1:]
	}
	if maxLen > 0 && len(b) > maxLen {
		return "", fmt.Errorf("decimal of %d bytes is more than its precision allows (%d bytes)", len(b), maxLen)
	}
	neg := len(b) > 0 && b[0] >= 0x80
	var digits []byte
	if len(b) <= 8 {
		var v uint64
		if neg {
			v = math.MaxUint64
		}
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		if neg {
			v = -v // the magnitude; -2^63 too, as a uint64
		}
		digits = strconv.AppendUint(make([]byte, 0, 24), v, 10)
	} else {
		v := new(big.Int).SetBytes(b)
		if neg {
			v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
			v.Neg(v)
		}
		digits = v.Append(nil, 10)
	}
	out := make([]byte, 0, len(digits)+scale+3)
	if neg {
		out = append(out, '-')
	}
	switch whole := len(digits) - scale; {
	case scale == 0:
		out = append(out, digits...)
	case whole > 0:
		out = append(append(append(out, digits[:whole]...), '.'), digits[whole:]...)
	default: // 0.0012
		out = append(append(append(out, '0', '.'), strings.Repeat("0", -whole)...), digits...)
	}
	return value.Decimal(out), nil
}

// widenFloat32 is the float64 nearest the shortest decimal that reads back
// as f: 0.1f becomes 0.1.
func widenFloat32(f float32) float64 {
	if f != f || math.IsInf(float64(f), 0) || f == float32(int32(f)) {
		return float64(f)
	}
	var b [32]byte
	v, err := strconv.ParseFloat(string(strconv.AppendFloat(b[:0], float64(f), 'g', -1, 32)), 64)
	if err != nil {
		return float64(f)
	}
	return v
}

// defaultValue converts a field's default, as hamba/avro parsed it, to the
// value model.
func defaultValue(n *node, v any, depth int) (any, error) {
	if depth > value.MaxDepth {
		return nil, errDeep
	}
	bad := fmt.Errorf("default %v does not fit type %s", v, n.describe())
	switch n.kind {
	case avroNull:
		return nil, nil
	case avroBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case avroInt, avroLong:
		switch x := v.(type) {
		case int:
			return n.fromLong(int64(x))
		case int32:
			return n.fromLong(int64(x))
		case int64:
			return n.fromLong(x)
		case float64:
			if x == math.Trunc(x) && math.Abs(x) <= 1<<53 {
				return n.fromLong(int64(x))
			}
		}
	case avroFloat:
		switch x := v.(type) {
		case float32:
			return widenFloat32(x), nil
		case float64:
			return widenFloat32(float32(x)), nil
		}
	case avroDouble:
		if x, ok := v.(float64); ok {
			return x, nil
		}
	case avroString:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case avroEnum:
		if s, ok := v.(string); ok {
			if i, ok := n.index[s]; ok {
				return n.symbols[i], nil
			}
		}
	case avroBytes, avroFixed:
		switch x := v.(type) {
		case []byte:
			return n.fromBytes(x)
		case string:
			b, ok := codePoints(x)
			if ok {
				return n.fromBytes(b)
			}
		default: // hamba/avro makes a fixed's default a [size]byte
			rv := reflect.ValueOf(v)
			if rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 {
				b := make([]byte, rv.Len())
				reflect.Copy(reflect.ValueOf(b), rv)
				return n.fromBytes(b)
			}
		}
	case avroArray:
		if l, ok := v.([]any); ok {
			out := make([]any, len(l))
			for i, e := range l {
				var err error
				if out[i], err = defaultValue(n.elem, e, depth+1); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
	case avroMap:
		if m, ok := v.(map[string]any); ok {
			out := make(map[string]any, len(m))
			for k, e := range m {
				var err error
				if out[k], err = defaultValue(n.elem, e, depth+1); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
	case avroRecord:
		if m, ok := v.(map[string]any); ok {
			out := make(map[string]any, len(n.fields))
			for _, f := range n.fields {
				e, ok := m[f.name]
				if !ok {
					return nil, bad
				}
				v, err := defaultValue(f.node, e, depth+1)
				if err != nil {
					return nil, err
				}
				if v != nil { // a null field is absent (doc.go's (3))
					out[f.name] = v
				}
			}
			return out, nil
		}
	case avroUnion: // a union's default is its first branch's
		return defaultValue(n.branches[0], v, depth)
	}
	return nil, bad
}

// codePoints is the bytes a JSON string of code points U+0000..U+00FF
// stands for.
func codePoints(s string) ([]byte, bool) {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r > 0xff || r == utf8.RuneError && size == 1 {
			return nil, false
		}
		b = append(b, byte(r))
		i += size
	}
	return b, true
}

// clone copies the maps, lists and bytes of a default, so that no two
// decoded trees share them.
func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = clone(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = clone(e)
		}
		return l
	case []byte:
		return slices.Clone(x)
	}
	return v
}
