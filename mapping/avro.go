package mapping

// Avro payloads (issue 19): a schema compiles once (compileAvro) into a tree
// of avroNode; decode reads one message's datum, in Avro's binary encoding
// (the datum alone: no container, no header, no fingerprint) or its JSON
// encoding, into the value model of value.go.
//
// What each Avro type decodes to, and what a template renders for it
// (tree.AppendPath; inside a record, map or array the value is compact JSON
// as value.go's appendJSON writes it):
//
//	Avro type                      decoded as       rendered as
//	null                           nil              missing_field (the template fails)
//	boolean                        bool             true | false
//	int, long                      int64            -7, 1234567890123
//	float                          float64 (1)      0.1, 21.5, NaN, Infinity, -Infinity
//	double                         float64          21.5, 1e+21, 1e-7 (as JSON writes it)
//	string                         string           its bytes, as they are
//	bytes, fixed                   []byte           its bytes, as they are (base64 inside JSON)
//	enum                           string           the symbol: WARN
//	record, map                    map[string]any   {"lat":52.5,"lon":13.4} (keys sorted; a record's
//	                                                 null field is absent (3))
//	array                          []any            [1,2.5]
//	union                          its branch's value, as above
//	timestamp-millis, -micros,     time.Time (UTC)  2024-05-06T07:08:09.123Z (always 3 digits,
//	 -nanos (2), local-timestamp-*                   truncated: micros and nanos are kept in the
//	                                                 value, not in the text)
//	date                           string           2024-05-06
//	time-millis                    string           07:08:09.123
//	time-micros                    string           07:08:09.123456
//	decimal (bytes or fixed)       Decimal          -12.34 (exactly scale digits after the point;
//	                                                 a number, unquoted, inside JSON)
//	uuid (string)                  string           123e4567-e89b-12d3-a456-426614174000, as sent
//	uuid (fixed 16) (2)            string           the same text, lower-case hex
//	duration (fixed 12)            []byte           its 12 bytes (months, days, millis)
//
// (1) A float becomes the float64 nearest the shortest decimal that reads
// back as the same float32, so 0.1f renders 0.1, not 0.10000000149011612.
// (2) Avro 1.12 types that hamba/avro does not know; read from the schema's
// logicalType property. A logical type on the wrong base type, or a decimal
// whose precision and scale are invalid, is ignored (its base type is used),
// as the Avro specification says.
// (3) As an unset proto field is: has(data.site) is false for a null site,
// as for a JSON payload without it, and {data.site} is missing_field either
// way. A null in a map or an array is kept (nil).
//
// JSON encoding. decode(data, true) reads Avro's JSON encoding, as the
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
//
// Hostile payloads. A payload may be crafted; decoding never panics and its
// work and memory stay proportional to the payload:
//   - a decoded tree nests at most maxDepth levels (records, maps and arrays;
//     a union adds none), whatever recursion the schema allows: deeper is
//     invalid_payload, and no decoder recursion goes further;
//   - a string, bytes or fixed whose length is more than the bytes left is
//     an error before anything is allocated;
//   - an array or map block's count n is checked before its items are read:
//     n items of a type whose smallest encoding is k > 0 bytes must fit in
//     the bytes left (n*k <= left); items that can take no bytes at all
//     (null, a record of nulls, fixed of size 0) are counted, at most
//     len(payload)+1024 of them per payload (a block count of 2^31 nulls
//     takes 5 bytes); a map's keys take a byte at least, so a map is bounded
//     by its bytes; and room for at most 1024 items is made before they are
//     read (appending grows it as they come);
//   - a bytes or fixed decimal longer than its precision needs is an error
//     (so that its conversion to text stays cheap).
// Binary decoding therefore makes at most F nodes per payload byte plus F per
// zero-byte item, F being a constant of the schema (how many nodes its
// records make out of their smallest encoding); JSON decoding makes at most
// one node per byte plus the defaults of missing fields. Strings (but JSON
// strings with escapes) are substrings of one copy of the payload.
//
// Why not hamba/avro's decoder (Unmarshal into any), with its Config limits:
// it recurses as deep as the payload nests a recursive schema (a Go stack
// overflow is fatal, not a recoverable panic); its generic reader loops over
// a block's count appending an item each time, even after an error, and
// consults neither MaxSliceAllocSize (which bounds the typed decoder's
// items of one array, not zero-byte items across arrays) nor a map limit
// (v2.31.0 has no MaxMapAllocSize); and it allocates a string's claimed
// length, up to MaxByteSliceSize, before it knows the payload holds it
// (which a 10 MB payload makes 10 MB per claim). So hamba/avro parses the
// schema (and encodes the tests' payloads), and this file reads the datum,
// faster too (BenchmarkAvroDecode).

import (
	"bytes"
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

	"github.com/hamba/avro/v2"

	"github.com/pubsink/pubsink/template"
)

// avroCodec is a compiled Avro schema. It is immutable and safe for
// concurrent use.
type avroCodec struct {
	root *avroNode
}

type avroKind uint8

const (
	avroNull avroKind = iota
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

var avroKindNames = [...]string{
	avroNull: "null", avroBoolean: "boolean", avroInt: "int", avroLong: "long",
	avroFloat: "float", avroDouble: "double", avroBytes: "bytes", avroString: "string",
	avroRecord: "record", avroEnum: "enum", avroArray: "array", avroMap: "map",
	avroUnion: "union", avroFixed: "fixed",
}

type avroLogical uint8

const (
	logicalNone avroLogical = iota
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

// avroNode is one type of a compiled schema. A recursive schema's nodes
// point back at their named ancestors.
type avroNode struct {
	kind    avroKind
	logical avroLogical
	// logicalName is the schema's logicalType, for messages ("" if none).
	logicalName string
	// name is a named type's short name (record, enum, fixed); full its full
	// name; both are the type's name ("string", "array") for the others.
	name, full string

	fields  []avroField    // record
	index   map[string]int // record: field by name; enum: symbol by name
	symbols []string       // enum
	elem    *avroNode      // array items, map values
	size    int            // fixed
	scale   int            // decimal
	maxLen  int            // bytes decimal: the most bytes its precision needs

	branches []*avroNode     // union
	byName   map[string]int  // union: branch by JSON wrapper name
	plain    [jsonKinds]int8 // union: the branch a plain JSON value of each kind goes to; -1 none, -2 several

	// minSize is the fewest bytes a value takes in the binary encoding
	// (a lower bound while a recursive record is being sized).
	minSize int
	sized   uint8 // 1 while sizing, 2 once sized
}

type avroField struct {
	name   string
	node   *avroNode
	hasDef bool
	def    any // the default, decoded; copied before use when it is a map, list or bytes
}

// compileAvro parses an Avro schema (JSON text, as a Pub/Sub schema's
// definition or an .avsc file holds it). Each call parses into a fresh name
// cache: two revisions of a schema may define the same names differently.
func compileAvro(definition string) (*avroCodec, error) {
	if !json.Valid([]byte(definition)) {
		var v any
		err := json.Unmarshal([]byte(definition), &v)
		return nil, fmt.Errorf("avro schema is not valid JSON: %v", err)
	}
	s, err := avro.ParseWithCache(definition, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("avro schema: %s", strings.TrimPrefix(err.Error(), "avro: "))
	}
	c := &avroCompiler{named: map[string]*avroNode{}, seen: map[*avroNode]bool{}}
	root, err := c.node(s)
	if err != nil {
		return nil, fmt.Errorf("avro schema: %v", err)
	}
	for _, n := range c.all {
		avroSize(n)
	}
	for _, r := range c.records {
		for i := range r.fields {
			f := &r.fields[i]
			if !f.hasDef {
				continue
			}
			// A default that does not fit the model (hamba/avro checked it
			// against the type already) is as good as none.
			f.def, err = avroDefault(f.node, f.def, 0)
			f.hasDef = err == nil
		}
	}
	return &avroCodec{root: root}, nil
}

type avroCompiler struct {
	named   map[string]*avroNode
	records []*avroNode
	all     []*avroNode // every node, once
	seen    map[*avroNode]bool
}

func (c *avroCompiler) node(s avro.Schema) (*avroNode, error) {
	n, err := c.build(s)
	if err == nil && !c.seen[n] {
		c.seen[n] = true
		c.all = append(c.all, n)
	}
	return n, err
}

func (c *avroCompiler) build(s avro.Schema) (*avroNode, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if ns, ok := s.(avro.NamedSchema); ok {
		if n := c.named[ns.FullName()]; n != nil {
			return n, nil
		}
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return &avroNode{kind: avroNull, name: "null", full: "null"}, nil
	case *avro.PrimitiveSchema:
		n := &avroNode{}
		switch s.Type() {
		case avro.Boolean:
			n.kind = avroBoolean
		case avro.Int:
			n.kind = avroInt
		case avro.Long:
			n.kind = avroLong
		case avro.Float:
			n.kind = avroFloat
		case avro.Double:
			n.kind = avroDouble
		case avro.Bytes:
			n.kind = avroBytes
		case avro.String:
			n.kind = avroString
		default:
			return nil, fmt.Errorf("unknown primitive type %q", s.Type())
		}
		n.name, n.full = avroKindNames[n.kind], avroKindNames[n.kind]
		c.logical(n, s.Logical(), s.Prop("logicalType"))
		return n, nil
	case *avro.RecordSchema:
		n := &avroNode{kind: avroRecord, name: s.Name(), full: s.FullName(), index: map[string]int{}}
		c.named[s.FullName()] = n
		c.records = append(c.records, n)
		for i, f := range s.Fields() {
			fn, err := c.node(f.Type())
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.Name(), f.Name(), err)
			}
			n.fields = append(n.fields, avroField{name: f.Name(), node: fn, hasDef: f.HasDefault(), def: f.Default()})
			n.index[f.Name()] = i
		}
		return n, nil
	case *avro.EnumSchema:
		n := &avroNode{kind: avroEnum, name: s.Name(), full: s.FullName(), symbols: s.Symbols(), index: map[string]int{}}
		for i, sym := range n.symbols {
			n.index[sym] = i
		}
		c.named[s.FullName()] = n
		return n, nil
	case *avro.FixedSchema:
		if s.Size() < 0 {
			return nil, fmt.Errorf("fixed %s has a negative size", s.Name())
		}
		n := &avroNode{kind: avroFixed, name: s.Name(), full: s.FullName(), size: s.Size()}
		c.named[s.FullName()] = n
		c.logical(n, s.Logical(), s.Prop("logicalType"))
		return n, nil
	case *avro.ArraySchema:
		e, err := c.node(s.Items())
		if err != nil {
			return nil, err
		}
		return &avroNode{kind: avroArray, name: "array", full: "array", elem: e}, nil
	case *avro.MapSchema:
		e, err := c.node(s.Values())
		if err != nil {
			return nil, err
		}
		return &avroNode{kind: avroMap, name: "map", full: "map", elem: e}, nil
	case *avro.UnionSchema:
		n := &avroNode{kind: avroUnion, name: "union", full: "union", byName: map[string]int{}}
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
func (c *avroCompiler) logical(n *avroNode, l avro.LogicalSchema, prop any) {
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
	case avro.Decimal:
		n.logical = logicalDecimal
		if d, ok := l.(*avro.DecimalLogicalSchema); ok {
			n.scale = d.Scale()
			// p digits need ceil((p*log2(10)+1)/8) bytes, the sign bit included
			n.maxLen = int(math.Ceil((float64(d.Precision())*math.Log2(10) + 1) / 8))
		}
	case avro.UUID:
		n.logical = logicalUUID
	case avro.Date:
		n.logical = logicalDate
	case avro.TimeMillis:
		n.logical = logicalTimeMillis
	case avro.TimeMicros:
		n.logical = logicalTimeMicros
	case avro.TimestampMillis, avro.LocalTimestampMillis:
		n.logical = logicalTimestampMillis
	case avro.TimestampMicros, avro.LocalTimestampMicros:
		n.logical = logicalTimestampMicros
	default: // duration: its fixed bytes
		n.logicalName = ""
	}
}

// jsonKind is the kind of JSON value that holds a value of n.
func (n *avroNode) jsonKind() jsonKind {
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

// avroSize sets n.minSize and returns it: the fewest bytes a value of n
// takes. Within a recursion a record still being sized counts as 0, so the
// result is a lower bound; every cycle passes through a union, array or map,
// which take a byte at least.
func avroSize(n *avroNode) int {
	if n.sized != 0 {
		return n.minSize
	}
	n.sized = 1
	n.minSize = avroSizeOf(n)
	n.sized = 2
	return n.minSize
}

func avroSizeOf(n *avroNode) int {
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
			least = min(least, avroSize(b))
		}
		return 1 + least
	case avroRecord:
		total := 0
		for _, f := range n.fields {
			total = min(total+avroSize(f.node), math.MaxInt32)
		}
		return total
	}
	return 0
}

// describe names n's type for messages: "record Reading", "long
// (timestamp-millis)", "union [null, string]".
func (n *avroNode) describe() string {
	switch n.kind {
	case avroRecord, avroEnum, avroFixed:
		s := avroKindNames[n.kind] + " " + n.name
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
		return avroKindNames[n.kind] + " (" + n.logicalName + ")"
	}
	return avroKindNames[n.kind]
}

// ---- values of logical types, shared by both encodings and the defaults ----

// fromLong is the value of an int or long v of n's logical type.
func (n *avroNode) fromLong(v int64) (any, error) {
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
		return avroTimeOfDay(v/1e3, v%1e3, 3), nil
	case logicalTimeMicros:
		if v < 0 || v >= 86400e6 {
			return nil, errors.New("time-micros value is not a time of day (0 to 86399999999)")
		}
		return avroTimeOfDay(v/1e6, v%1e6, 6), nil
	}
	return v, nil
}

// avroTimeOfDay is "15:04:05.000" (digits 3) or "15:04:05.000000" (6).
func avroTimeOfDay(sec, frac int64, digits int) string {
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
func (n *avroNode) fromBytes(b []byte) (any, error) {
	switch n.logical {
	case logicalDecimal:
		return avroDecimal(b, n.scale, n.maxLen)
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

// avroDecimal is the decimal text of the big-endian two's complement
// unscaled value b with scale digits after the point. maxLen > 0 bounds b's
// length, without its redundant sign bytes.
func avroDecimal(b []byte, scale, maxLen int) (Decimal, error) {
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
	return Decimal(out), nil
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

// avroDefault converts a field's default, as hamba/avro parsed it, to the
// value model.
func avroDefault(n *avroNode, v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errAvroDeep
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
			b, ok := avroCodePoints(x)
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
				if out[i], err = avroDefault(n.elem, e, depth+1); err != nil {
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
				if out[k], err = avroDefault(n.elem, e, depth+1); err != nil {
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
				v, err := avroDefault(f.node, e, depth+1)
				if err != nil {
					return nil, err
				}
				if v != nil { // a null field is absent (see decode)
					out[f.name] = v
				}
			}
			return out, nil
		}
	case avroUnion: // a union's default is its first branch's
		return avroDefault(n.branches[0], v, depth)
	}
	return nil, bad
}

// avroCodePoints is the bytes a JSON string of code points U+0000..U+00FF
// stands for.
func avroCodePoints(s string) ([]byte, bool) {
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

// avroClone copies the maps, lists and bytes of a default, so that no two
// decoded trees share them.
func avroClone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = avroClone(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = avroClone(e)
		}
		return l
	case []byte:
		return slices.Clone(x)
	}
	return v
}

// ---- decoding ----

var (
	errAvroDeep = fmt.Errorf("nested more than %d levels deep", maxDepth)
	errAvroEOF  = errors.New("unexpected end of data")
)

// avroPathError is a decoding error and where it happened: path holds the
// steps from the failure up (reversed), added as the error returns.
type avroPathError struct {
	path []string
	err  error
}

func (e *avroPathError) Error() string {
	p := slices.Clone(e.path)
	slices.Reverse(p)
	if len(p) > 12 {
		p = append(append(p[:5:5], "…"), p[len(p)-5:]...)
	}
	return "at " + strings.Join(p, ".") + ": " + e.err.Error()
}

func (e *avroPathError) Unwrap() error { return e.err }

// avroAt adds step to err's path. Map keys are payload text and are not
// named ("*"): errors do not quote payloads.
func avroAt(err error, step string) error {
	if pe, ok := err.(*avroPathError); ok {
		pe.path = append(pe.path, step)
		return pe
	}
	return &avroPathError{path: []string{step}, err: err}
}

// decode reads one datum of the schema from data: Avro's binary encoding,
// or its JSON encoding when json is set. The datum must take all of data.
// Errors wrap template.ErrInvalidPayload.
func (c *avroCodec) decode(data []byte, isJSON bool) (any, error) {
	var (
		v   any
		err error
	)
	if isJSON {
		d := avroJSONDecoder{s: data}
		v, err = d.value(c.root, 0)
		if err == nil {
			d.ws()
			if d.pos < len(d.s) {
				err = fmt.Errorf("data after the JSON value (at byte %d)", d.pos)
			}
		}
	} else {
		// Bytes after the datum are ignored, as Pub/Sub ignores them when
		// it validates a message against a revision: it tags a message with
		// the newest revision that reads it, and that may read only a
		// prefix of the writer's record (docs/emulator-schemas.md). A
		// message Pub/Sub accepted under a revision decodes under it.
		d := avroBinaryDecoder{data: data, zero: len(data) + 1024}
		v, err = d.value(c.root, 0)
	}
	if err != nil {
		return nil, errDecode("avro", err)
	}
	return v, nil
}

// avroPrealloc bounds the room made for a block's items before they are
// read: a block's count, though checked against the bytes left, is the
// payload's claim; appending grows the rest as items come.
const avroPrealloc = 1024

// avroBinaryDecoder reads Avro's binary encoding.
type avroBinaryDecoder struct {
	data []byte
	pos  int
	// str is data as a string, made at the first string: strings and map
	// keys are its substrings, one copy of the payload instead of one
	// allocation each.
	str string
	// zero is how many more items of types that can take no bytes may be
	// decoded.
	zero int
}

func (d *avroBinaryDecoder) long() (int64, error) {
	if d.pos < len(d.data) {
		if b := d.data[d.pos]; b < 0x80 {
			d.pos++
			return int64(b>>1) ^ -int64(b&1), nil
		}
	}
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if d.pos >= len(d.data) {
			return 0, errAvroEOF
		}
		b := d.data[d.pos]
		d.pos++
		if shift == 63 && b > 1 {
			return 0, errors.New("varint overflows 64 bits")
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			break
		}
	}
	return int64(v>>1) ^ -int64(v&1), nil
}

// length reads a length and checks that the payload holds that many bytes.
func (d *avroBinaryDecoder) length(what string) (int, error) {
	n, err := d.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("negative %s length %d", what, n)
	}
	if n > int64(len(d.data)-d.pos) {
		return 0, fmt.Errorf("%s length %d is more than the %d bytes left", what, n, len(d.data)-d.pos)
	}
	return int(n), nil
}

func (d *avroBinaryDecoder) string(n int) string {
	if d.str == "" {
		d.str = string(d.data)
	}
	s := d.str[d.pos : d.pos+n]
	d.pos += n
	return s
}

// blockCount reads an array or map block's count (skipping the byte size of
// a negative count) and checks it against the bytes left: items of at least
// size bytes, or, for size 0, against the budget of zero-byte items.
func (d *avroBinaryDecoder) blockCount(size int) (int, error) {
	n, err := d.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == math.MinInt64 {
			return 0, errors.New("invalid block count")
		}
		n = -n
		if bytes, err := d.long(); err != nil {
			return 0, err
		} else if bytes < 0 {
			return 0, fmt.Errorf("negative block size %d", bytes)
		}
	}
	left := int64(len(d.data) - d.pos)
	if size > 0 {
		if n > left/int64(size) {
			return 0, fmt.Errorf("block of %d items of %d+ bytes is more than the %d bytes left", n, size, left)
		}
		return int(n), nil
	}
	if n > int64(d.zero) {
		return 0, fmt.Errorf("block of %d items that take no bytes: more than a payload of %d bytes may hold", n, len(d.data))
	}
	d.zero -= int(n)
	return int(n), nil
}

func (d *avroBinaryDecoder) value(n *avroNode, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errAvroDeep
	}
	switch n.kind {
	case avroNull:
		return nil, nil
	case avroBoolean:
		if d.pos >= len(d.data) {
			return nil, errAvroEOF
		}
		b := d.data[d.pos]
		if b > 1 {
			return nil, fmt.Errorf("invalid boolean byte %d", b)
		}
		d.pos++
		return b == 1, nil
	case avroInt, avroLong:
		v, err := d.long()
		if err != nil {
			return nil, err
		}
		if n.kind == avroInt && int64(int32(v)) != v {
			return nil, errors.New("int value out of range")
		}
		if n.logical == logicalNone {
			return v, nil
		}
		return n.fromLong(v)
	case avroFloat:
		if len(d.data)-d.pos < 4 {
			return nil, errAvroEOF
		}
		b := d.data[d.pos:]
		d.pos += 4
		return widenFloat32(math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)), nil
	case avroDouble:
		if len(d.data)-d.pos < 8 {
			return nil, errAvroEOF
		}
		b := d.data[d.pos:]
		d.pos += 8
		return math.Float64frombits(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56), nil
	case avroString:
		l, err := d.length("string")
		if err != nil {
			return nil, err
		}
		return d.string(l), nil
	case avroBytes:
		l, err := d.length("bytes")
		if err != nil {
			return nil, err
		}
		b := d.data[d.pos : d.pos+l]
		d.pos += l
		return n.fromBytes(b)
	case avroFixed:
		if len(d.data)-d.pos < n.size {
			return nil, fmt.Errorf("fixed %s of %d bytes: %w", n.name, n.size, errAvroEOF)
		}
		b := d.data[d.pos : d.pos+n.size]
		d.pos += n.size
		return n.fromBytes(b)
	case avroEnum:
		i, err := d.long()
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(n.symbols)) {
			return nil, fmt.Errorf("enum %s has no symbol %d", n.name, i)
		}
		return n.symbols[i], nil
	case avroUnion:
		i, err := d.long()
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(n.branches)) {
			return nil, fmt.Errorf("%s has no branch %d", n.describe(), i)
		}
		return d.value(n.branches[i], depth) // a union is its branch: no level
	case avroRecord:
		m := make(map[string]any, len(n.fields))
		for i := range n.fields {
			f := &n.fields[i]
			v, err := d.value(f.node, depth+1)
			if err != nil {
				return nil, avroAt(err, f.name)
			}
			if v != nil { // a null field is absent (see decode)
				m[f.name] = v
			}
		}
		return m, nil
	case avroArray:
		var l []any
		for {
			count, err := d.blockCount(n.elem.minSize)
			if err != nil {
				return nil, avroAt(err, strconv.Itoa(len(l)))
			}
			if count == 0 {
				break
			}
			l = slices.Grow(l, min(count, avroPrealloc))
			for range count {
				v, err := d.value(n.elem, depth+1)
				if err != nil {
					return nil, avroAt(err, strconv.Itoa(len(l)))
				}
				l = append(l, v)
			}
		}
		if l == nil {
			l = []any{}
		}
		return l, nil
	case avroMap:
		var m map[string]any
		for {
			count, err := d.blockCount(1 + n.elem.minSize) // a key takes a byte at least
			if err != nil {
				return nil, avroAt(err, "*")
			}
			if count == 0 {
				break
			}
			if m == nil {
				m = make(map[string]any, min(count, avroPrealloc))
			}
			for range count {
				l, err := d.length("map key")
				if err != nil {
					return nil, avroAt(err, "*")
				}
				k := d.string(l)
				v, err := d.value(n.elem, depth+1)
				if err != nil {
					return nil, avroAt(err, "*")
				}
				m[k] = v
			}
		}
		if m == nil {
			m = map[string]any{}
		}
		return m, nil
	}
	return nil, fmt.Errorf("unknown type %s", n.describe()) // unreachable: compileAvro sets every kind
}

// ---- JSON encoding ----

// avroJSONDecoder reads Avro's JSON encoding, directed by the schema: every
// value it makes consumes input bytes, and it nests no deeper than the
// decoded tree (maxDepth).
type avroJSONDecoder struct {
	s   []byte
	pos int
	str string // s as a string, made at the first string without escapes
}

func (d *avroJSONDecoder) ws() {
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
func (d *avroJSONDecoder) next() byte {
	d.ws()
	if d.pos < len(d.s) {
		return d.s[d.pos]
	}
	return 0
}

func (d *avroJSONDecoder) errAt(format string, args ...any) error {
	return fmt.Errorf(format+" (at byte %d)", append(args, d.pos)...)
}

// unexpected is the error of a token that is not what the syntax needs.
func (d *avroJSONDecoder) unexpected(what string) error {
	if d.pos >= len(d.s) {
		return errAvroEOF
	}
	return d.errAt("%s", what)
}

func (d *avroJSONDecoder) expect(c byte) error {
	if d.next() != c {
		return d.unexpected(fmt.Sprintf("expected %q", c))
	}
	d.pos++
	return nil
}

func (d *avroJSONDecoder) literal(word string) error {
	if !bytes.HasPrefix(d.s[d.pos:], []byte(word)) {
		return d.unexpected("invalid JSON literal")
	}
	d.pos += len(word)
	return nil
}

// stringToken reads a JSON string. Without escapes its text is s[a:b] and
// unesc is nil; otherwise unesc holds it.
func (d *avroJSONDecoder) stringToken() (a, b int, unesc []byte, err error) {
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
				return 0, 0, nil, errAvroEOF
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
	return 0, 0, nil, errAvroEOF
}

func (d *avroJSONDecoder) hex4() (rune, bool) {
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
func (d *avroJSONDecoder) text(a, b int, unesc []byte) string {
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
func (d *avroJSONDecoder) number() ([]byte, bool, error) {
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
func (d *avroJSONDecoder) integer(lo, hi int64) (int64, error) {
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
func (d *avroJSONDecoder) codePoints() ([]byte, error) {
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

func (d *avroJSONDecoder) value(n *avroNode, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errAvroDeep
	}
	c := d.next()
	if c == 0 {
		return nil, errAvroEOF
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
				return nil, avroAt(err, strconv.Itoa(len(l)))
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
func (d *avroJSONDecoder) object(n *avroNode, depth int) (any, error) {
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
				return nil, avroAt(err, key)
			}
			if v != nil || n.kind == avroMap { // a record's null field is absent (see decode)
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
				m[f.name] = avroClone(f.def)
			}
		}
	}
	return m, nil
}

// skipValue reads one JSON value of any shape and drops it: an object
// member that the record does not name. It nests at most maxDepth levels.
func (d *avroJSONDecoder) skipValue(depth int) error {
	if depth > maxDepth {
		return errTooDeep
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

// avroQuote is a field name as an error quotes it: at most 64 bytes (it is
// payload text, but a name the schema lacks is what the reader needs).
func avroQuote(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// union reads a union's value: null, the wrapper {"TYPE": value}, or a plain
// value that one branch alone can hold (see the file's comment).
func (d *avroJSONDecoder) union(n *avroNode, c byte, depth int) (any, error) {
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

func (d *avroJSONDecoder) plain(n *avroNode, kind jsonKind, depth int) (any, error) {
	switch i := n.plain[kind]; i {
	case -1:
		return nil, d.errAt("%s cannot hold a JSON %s", n.describe(), jsonKindNames[kind])
	case -2:
		return nil, d.errAt("%s has several branches for a JSON %s: wrap the value as {\"TYPE\": value}", n.describe(), jsonKindNames[kind])
	default:
		return d.value(n.branches[i], depth)
	}
}

func (d *avroJSONDecoder) unionObject(n *avroNode, depth int) (any, error) {
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
		return nil, d.errAt("%s has no branch %q", n.describe(), avroQuote(name))
	}
	if err := d.expect(':'); err != nil {
		return nil, err
	}
	v, err := d.value(n.branches[i], depth)
	if err != nil {
		return nil, err
	}
	if d.next() != '}' {
		return nil, d.unexpected(fmt.Sprintf("a union's {\"TYPE\": value} has one member (an object whose first member is named after a branch, %q, is read as one)", avroQuote(name)))
	}
	d.pos++
	return v, nil
}

// ---- validation of paths ----

// avroEachStep, in a path given to checkPath, stands for "every element" of
// the array before it: a mapping with `each: data.readings` can check its
// {item.value} as checkPath([readings, avroEachStep, value]). The steps
// after the last avroEachStep are the placeholder's own, from {item}.
var avroEachStep = template.Segment{Key: "[]", Index: -2}

// checkPath checks that path, a {data.…} placeholder's, names a field that
// the schema can hold (mapping.go's pathChecker): it walks records (by field
// name), maps (any key), arrays (a numeric index, or avroEachStep), and
// unions (any branch that has the rest of the path); any other type is a
// leaf, logical types included. The caller prefixes the placeholder:
//
//	{data.sensr}: no field "sensr" in record Reading; did you mean "sensor"?
func (c *avroCodec) checkPath(path []template.Segment) error {
	own, root := 0, "data"
	for i, s := range path {
		if s.Index == avroEachStep.Index {
			own, root = i+1, "item"
		}
	}
	return avroCheck(c.root, path, 0, root, own)
}

// avroCheck checks path[i:] from n. The value at path[:i] is called, in
// messages, by its steps after the placeholder's own start (own).
func avroCheck(n *avroNode, path []template.Segment, i int, root string, own int) error {
	if i == len(path) {
		return nil
	}
	at := func() string { // the value at path[:i], as the message calls it
		switch {
		case i == own:
			return root
		case i > own:
			return root + "." + pathText(path[own:i])
		}
		var keys []string // within each's path
		for _, s := range path[:i] {
			if s.Index != avroEachStep.Index {
				keys = append(keys, s.Key)
			}
		}
		if len(keys) == 0 {
			return "the payload"
		}
		return strings.Join(keys, ".")
	}
	seg := path[i]
	each := seg.Index == avroEachStep.Index
	switch n.kind {
	case avroRecord:
		if each {
			break
		}
		j, ok := n.index[seg.Key]
		if !ok {
			e := &avroPathCheckError{msg: fmt.Sprintf("no field %q in record %s", seg.Key, n.name), rank: 1}
			names := make([]string, len(n.fields))
			for k, f := range n.fields {
				names[k] = f.name
			}
			if s := closest(seg.Key, names); s != "" { // expr.go's
				e.msg += fmt.Sprintf("; did you mean %q?", s)
				e.rank = 2
			}
			return e
		}
		return avroCheck(n.fields[j].node, path, i+1, root, own)
	case avroMap:
		if each {
			break
		}
		return avroCheck(n.elem, path, i+1, root, own)
	case avroArray:
		if seg.Index < 0 && !each {
			return fmt.Errorf("%s is an array: index it by a number (%s.0), or make a row per element with each", at(), at())
		}
		return avroCheck(n.elem, path, i+1, root, own)
	case avroUnion:
		var best error // the first of the most telling errors
		for _, b := range n.branches {
			if b.kind == avroNull {
				continue
			}
			err := avroCheck(b, path, i, root, own)
			if err == nil {
				return nil
			}
			if best == nil || avroRank(err) > avroRank(best) {
				best = err
			}
		}
		if best == nil {
			return fmt.Errorf("%s is always null", at())
		}
		return best
	}
	if each {
		return fmt.Errorf("each needs an array: %s has type %s", at(), n.describe())
	}
	if n.kind == avroNull {
		return fmt.Errorf("%s is always null", at())
	}
	return &avroPathCheckError{msg: fmt.Sprintf("%s has type %s, not a record, map or array: it has no %q", at(), n.describe(), seg.Key)}
}

// avroPathCheckError is checkPath's complaint about a record's field (rank
// 1, 2 with a suggestion) or a leaf (0); of its branches' complaints, a
// union's check returns the first of the highest rank. Other errors rank 1.
type avroPathCheckError struct {
	msg  string
	rank int
}

func (e *avroPathCheckError) Error() string { return e.msg }

func avroRank(err error) int {
	if e, ok := err.(*avroPathCheckError); ok {
		return e.rank
	}
	return 1
}
