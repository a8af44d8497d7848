package protobuf

// Decoding Protocol Buffers payloads: decode reads a payload in the wire
// format or protobuf's JSON mapping into a dynamic message of the compiled
// schema (proto.go), after a scan that charges its nodes against the budget
// (wireScan, nodeBudget), and converts the message to the value model
// (conv).

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// noExtensions resolves no extension, so that the wire format's extensions
// are unknown fields, discarded (they are not in the tree, and not counted).
var noExtensions = new(protoregistry.Types)

// Decode decodes one payload, in the wire format or (json) in protobuf's
// JSON mapping, into the tree of package value. Its errors wrap
// template.ErrInvalidPayload.
func (c *Codec) Decode(data []byte, json bool) (_ any, err error) {
	defer func() {
		// The protobuf runtime's reflection (dynamicpb) is less traveled
		// than generated code: a payload that finds a panic in it is
		// invalid, not the end of the process.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: protobuf: the decoder failed on the payload: %v", template.ErrInvalidPayload, r)
		}
	}()
	b := newNodeBudget(len(data))
	m := dynamicpb.NewMessage(c.desc)
	if json {
		if err := c.jsonScan(data, b); err != nil {
			return nil, err
		}
		opts := protojson.UnmarshalOptions{DiscardUnknown: true, RecursionLimit: value.MaxDepth, Resolver: c.types, AllowPartial: !c.required}
		if err := opts.Unmarshal(data, m); err != nil {
			return nil, value.DecodeError("protobuf", err)
		}
	} else {
		s := wireScan{c: c, data: data, budget: b}
		if _, err := s.message(data, c.desc, 0, 0); err != nil {
			return nil, err
		}
		if err := c.unmarshal(data, m); err != nil {
			return nil, err
		}
	}
	v := conv{c: c, budget: b}
	return v.message(m, 0)
}

// unmarshal unmarshals the wire format data into m.
func (c *Codec) unmarshal(data []byte, m protoreflect.Message) error {
	opts := proto.UnmarshalOptions{DiscardUnknown: true, RecursionLimit: value.MaxDepth, Resolver: noExtensions, AllowPartial: !c.required}
	if err := opts.Unmarshal(data, m.Interface()); err != nil {
		return value.DecodeError("protobuf", err)
	}
	return nil
}

// jsonScan counts, before protojson unmarshals a JSON payload, the nodes
// its text will make at least, so that protojson is not given a payload
// that would make a huge message tree only to be refused after: each object
// and array jsonCost, and each other element of an array one node, or
// 1 + messageCost when the schema has google.protobuf.Value (where
// each element is a message). A flood of empty messages ("[{},{},…]": 3
// bytes, 7 nodes each) or of Values ("[0,0,…]": 2 bytes, 6 nodes each) is
// so refused before a message is made, as wireScan refuses one in the wire
// format. The text's nesting is the tree's, so it is bounded here too. The
// count is thrown away: converting counts exactly.
func (c *Codec) jsonScan(data []byte, b nodeBudget) error {
	element := 1
	if c.dynamic {
		element = 1 + messageCost
	}
	var inArray [value.MaxDepth + 1]bool
	depth, nodes := 0, 0
	first := false // a value of an array may start here
	for i := 0; i < len(data); i++ {
		ch := data[i]
		if ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' {
			continue
		}
		if first && ch != '{' && ch != '[' && ch != ']' {
			nodes += element
		}
		first = false
		switch ch {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth >= len(inArray) {
				return value.ErrTooDeep
			}
			inArray[depth] = ch == '['
			first = ch == '['
			nodes += jsonCost
		case '}', ']':
			depth = max(depth-1, 0)
		case ',':
			first = inArray[depth]
		}
	}
	return b.charge(nodes)
}

// jsonCost is the nodes jsonScan counts for an object or array: more
// than an empty message in a list makes (1 + messageCost).
const jsonCost = 2 + messageCost

// nodeBudget counts the nodes of one payload against maxNodes.
type nodeBudget struct {
	left, total, size int
}

func newNodeBudget(size int) nodeBudget {
	n := maxNodes(size)
	return nodeBudget{left: n, total: n, size: size}
}

func (b *nodeBudget) charge(n int) error {
	if b.left -= n; b.left < 0 {
		return fmt.Errorf("%w: protobuf: more than %d values in a payload of %d bytes", template.ErrInvalidPayload, b.total, b.size)
	}
	return nil
}

// wireScan walks a payload's wire format with its descriptor before it is
// unmarshalled, counting the nodes it will make and the depth of the tree,
// without allocating. It validates only what it must to walk: what it lets
// through, proto.Unmarshal checks.
type wireScan struct {
	c      *Codec
	data   []byte // the buffer scanned, to say where it is malformed
	budget nodeBudget
}

// Codes of protowire.ParseError.
const (
	wireTruncated = -1 // unexpected EOF
	wireEndGroup  = -5 // mismatching end group marker
	wireKeyType   = -7 // not protowire's: a map key of the wrong wire type
)

func (s *wireScan) malformed(b []byte, code int) error {
	var why error
	if code == wireKeyType {
		why = errors.New("a map key of the wrong wire type")
	} else {
		why = protowire.ParseError(code)
	}
	return fmt.Errorf("%w: protobuf: malformed wire format at byte %d: %v", template.ErrInvalidPayload, cap(s.data)-cap(b), why)
}

// message scans a message of type md that makes a node at depth of the
// tree, from b: all of b, or (group > 0) up to the end of the group that
// number group began. It returns the bytes it read.
func (s *wireScan) message(b []byte, md protoreflect.MessageDescriptor, depth int, group protowire.Number) (int, error) {
	in := s.c.infoOf(md)
	if err := s.budget.charge(in.cost); err != nil {
		return 0, err
	}
	if in.container() && depth >= value.MaxDepth {
		return 0, value.ErrTooDeep
	}
	var anyURL, anyValue []byte
	fields := md.Fields()
	start := len(b)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, s.malformed(b, n)
		}
		if typ == protowire.EndGroupType {
			if num != group {
				return 0, s.malformed(b, wireEndGroup)
			}
			return start - len(b) + n, nil
		}
		b = b[n:]
		fd := fields.ByNumber(num)
		packed := fd != nil && typ == protowire.BytesType && fd.IsList() && packable(fd.Kind())
		if fd != nil && typ != wireType(fd.Kind()) && !packed {
			fd = nil // the wrong wire type: proto.Unmarshal takes it for an unknown field
		}
		var err error
		switch {
		case fd == nil:
			n, err = s.skip(b, num, typ, depth)
		case fd.IsMap():
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				err = s.mapEntry(v, fd, in.wkt, depth)
			}
		case fd.Message() != nil:
			d := childDepth(in.wkt, fd, depth)
			if fd.IsList() {
				err = s.element(in.wkt, depth)
			}
			if err != nil {
				break
			}
			if typ == protowire.StartGroupType {
				n, err = s.message(b, fd.Message(), d, num)
				break
			}
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				_, err = s.message(v, fd.Message(), d, 0)
			}
		case packed:
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				err = s.budget.charge(packedLen(v, fd.Kind()))
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if fd.IsList() || fd.HasPresence() {
				err = s.budget.charge(1)
			}
			if in.wkt == wktAny && n >= 0 {
				if num == 1 {
					anyURL, _ = protowire.ConsumeBytes(b)
				} else if num == 2 {
					anyValue, _ = protowire.ConsumeBytes(b)
				}
			}
		}
		if err != nil {
			return 0, err
		}
		if n < 0 {
			return 0, s.malformed(b, n)
		}
		b = b[n:]
	}
	if group > 0 {
		return 0, s.malformed(b, wireTruncated)
	}
	if in.wkt == wktAny {
		return start, s.anyValue(string(anyURL), anyValue, depth)
	}
	return start, nil
}

// element counts one element of a repeated field of a message of kind wkt
// at depth.
func (s *wireScan) element(wkt wellKnown, depth int) error {
	if wkt == wktNone && depth+1 >= value.MaxDepth { // the list
		return value.ErrTooDeep
	}
	return s.budget.charge(1)
}

// mapEntry scans one entry of map field fd of a message of kind wkt at
// depth: two nodes, and the value's message if it is one (a message made
// empty when the entry has none).
func (s *wireScan) mapEntry(b []byte, fd protoreflect.FieldDescriptor, wkt wellKnown, depth int) error {
	if wkt == wktNone && depth+1 >= value.MaxDepth { // the map
		return value.ErrTooDeep
	}
	if err := s.budget.charge(2); err != nil {
		return err
	}
	vd := fd.MapValue()
	d := childDepth(wkt, fd, depth)
	seen := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		if num == 1 && typ != wireType(fd.MapKey().Kind()) {
			// proto.Unmarshal (1.36) panics on a key of the wrong wire
			// type after one of the right type.
			return s.malformed(b, wireKeyType)
		}
		b = b[n:]
		if num == 2 && typ == protowire.BytesType && vd.Message() != nil {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			if _, err := s.message(v, vd.Message(), d, 0); err != nil {
				return err
			}
			seen = true
			b = b[n:]
			continue
		}
		var err error
		if n, err = s.skip(b, num, typ, depth); err != nil || n < 0 {
			return err // malformed: proto.Unmarshal says so
		}
		b = b[n:]
	}
	if !seen && vd.Message() != nil {
		return s.budget.charge(s.c.infoOf(vd.Message()).cost)
	}
	return nil
}

// skip skips the value of an unknown field, of a message at depth. Groups
// nest: each level is a level of depth, so that a payload cannot make the
// walk recurse deeper than the tree may be.
func (s *wireScan) skip(b []byte, num protowire.Number, typ protowire.Type, depth int) (int, error) {
	if typ != protowire.StartGroupType {
		return protowire.ConsumeFieldValue(num, typ, b), nil
	}
	if depth+1 >= value.MaxDepth {
		return 0, value.ErrTooDeep
	}
	start := len(b)
	for len(b) > 0 {
		n2, t2, n := protowire.ConsumeTag(b)
		if n < 0 {
			return n, nil
		}
		if t2 == protowire.EndGroupType {
			if n2 != num {
				return 0, s.malformed(b, wireEndGroup)
			}
			return start - len(b) + n, nil
		}
		b = b[n:]
		n, err := s.skip(b, n2, t2, depth+1)
		if err != nil || n < 0 {
			return n, err
		}
		b = b[n:]
	}
	return wireTruncated, nil
}

// anyValue scans the value of an Any at depth, if its type resolves.
func (s *wireScan) anyValue(url string, value []byte, depth int) error {
	mt, err := s.c.types.FindMessageByURL(url)
	if err != nil {
		return nil // the tree holds the bytes
	}
	if err := s.budget.charge(len(value) / anyBytesPerNode); err != nil {
		return err
	}
	md := mt.Descriptor()
	if s.c.infoOf(md).wkt != wktNone {
		depth++ // {"@type": URL, "value": VALUE}
	}
	_, err = s.message(value, md, depth, 0)
	return err
}

// container says whether a message of the type makes a map or a list.
func (in *msgInfo) container() bool {
	switch in.wkt {
	case wktNone, wktStruct, wktListValue, wktEmpty, wktAny:
		return true
	}
	return false
}

// childDepth is the depth of the tree where the message of field fd
// (an element of it, a map value) of a message of kind wkt at depth goes:
// a level deeper for a field, two for an element or a map value (the list
// or map, then it), none for a Value's Struct or ListValue.
func childDepth(wkt wellKnown, fd protoreflect.FieldDescriptor, depth int) int {
	switch wkt {
	case wktStruct, wktListValue: // the message is the map or list
		return depth + 1
	case wktValue:
		return depth
	}
	if fd.IsList() || fd.IsMap() {
		return depth + 2
	}
	return depth + 1
}

// wireType is the wire type of a field of kind k (unpacked).
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.BytesType
}

func packable(k protoreflect.Kind) bool {
	return wireType(k) != protowire.BytesType && k != protoreflect.GroupKind
}

// packedLen is the number of elements in the packed value b of kind k.
func packedLen(b []byte, k protoreflect.Kind) int {
	switch wireType(k) {
	case protowire.Fixed32Type:
		return len(b) / 4
	case protowire.Fixed64Type:
		return len(b) / 8
	}
	n := 0
	for _, c := range b {
		if c < 0x80 {
			n++
		}
	}
	return n
}

// conv converts an unmarshalled message into the tree, counting its
// nodes as wireScan does (a JSON payload is counted here only).
type conv struct {
	c      *Codec
	budget nodeBudget
}

// message converts m, a node at depth of the tree.
func (v *conv) message(m protoreflect.Message, depth int) (any, error) {
	md := m.Descriptor()
	in := v.c.infoOf(md)
	if err := v.budget.charge(in.cost); err != nil {
		return nil, err
	}
	if in.container() && depth >= value.MaxDepth {
		return nil, value.ErrTooDeep
	}
	switch in.wkt {
	case wktTimestamp:
		return timestamp(m)
	case wktDuration:
		return duration(m)
	case wktWrapper:
		fd := md.Fields().ByNumber(1)
		return scalar(fd, m.Get(fd)), nil
	case wktFieldMask:
		l := m.Get(md.Fields().ByNumber(1)).List()
		paths := make([]string, l.Len())
		for i := range paths {
			paths[i] = l.Get(i).String()
		}
		return strings.Join(paths, ","), nil
	case wktValue:
		fd := m.WhichOneof(md.Oneofs().ByName("kind"))
		if fd == nil {
			return nil, nil
		}
		if fd.Message() != nil {
			return v.message(m.Get(fd).Message(), depth)
		}
		return scalar(fd, m.Get(fd)), nil
	case wktAny:
		return v.anyMessage(m, depth)
	}
	out := make(map[string]any, len(in.always)+2)
	for _, fd := range in.always {
		x, err := v.field(m, fd, in.wkt, depth)
		if err != nil {
			return nil, err
		}
		if in.wkt == wktStruct || in.wkt == wktListValue {
			return x, nil // the message is its one field
		}
		out[string(fd.Name())] = x
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, x protoreflect.Value) bool {
		if !fd.HasPresence() || fd.IsExtension() {
			return true // in always; not in the tree
		}
		var y any
		if fd.Message() != nil {
			y, err = v.message(x.Message(), depth+1)
		} else if err = v.budget.charge(1); err == nil {
			y = scalar(fd, x)
		}
		out[string(fd.Name())] = y
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// field converts field fd, without presence, of m, a message of kind wkt
// at depth.
func (v *conv) field(m protoreflect.Message, fd protoreflect.FieldDescriptor, wkt wellKnown, depth int) (any, error) {
	d := childDepth(wkt, fd, depth)
	switch {
	case fd.IsList():
		l := m.Get(fd).List()
		if wkt == wktNone && depth+1 >= value.MaxDepth {
			return nil, value.ErrTooDeep
		}
		if err := v.budget.charge(l.Len()); err != nil {
			return nil, err
		}
		out := make([]any, l.Len())
		for i := range out {
			x, err := v.value(fd, l.Get(i), d)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case fd.IsMap():
		mp := m.Get(fd).Map()
		if wkt == wktNone && depth+1 >= value.MaxDepth {
			return nil, value.ErrTooDeep
		}
		if err := v.budget.charge(2 * mp.Len()); err != nil {
			return nil, err
		}
		out := make(map[string]any, mp.Len())
		vd := fd.MapValue()
		var err error
		mp.Range(func(k protoreflect.MapKey, x protoreflect.Value) bool {
			var y any
			if y, err = v.value(vd, x, d); err == nil {
				out[mapKey(k)] = y
			}
			return err == nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return scalar(fd, m.Get(fd)), nil
}

// value converts one value of field fd (an element, a map value): a
// message at depth, or a scalar.
func (v *conv) value(fd protoreflect.FieldDescriptor, x protoreflect.Value, depth int) (any, error) {
	if fd.Message() != nil {
		return v.message(x.Message(), depth)
	}
	return scalar(fd, x), nil
}

// anyMessage converts a google.protobuf.Any at depth: the fields of its value and
// its "@type", or a well-known type's value under "value", or (a type the
// schema's files lack) the bytes of its value.
func (v *conv) anyMessage(m protoreflect.Message, depth int) (any, error) {
	fields := m.Descriptor().Fields()
	url, value := m.Get(fields.ByNumber(1)).String(), m.Get(fields.ByNumber(2)).Bytes()
	if url == "" && len(value) == 0 {
		return map[string]any{}, nil
	}
	mt, err := v.c.types.FindMessageByURL(url)
	if err != nil {
		if value == nil {
			value = []byte{}
		}
		return map[string]any{"@type": url, "value": value}, v.budget.charge(2)
	}
	md := mt.Descriptor()
	wkt := v.c.infoOf(md).wkt != wktNone
	d := depth
	if wkt {
		d++
	}
	// The value is unmarshalled here: scan it first (again, for a wire
	// payload) against what the budget has left.
	if err := v.budget.charge(len(value) / anyBytesPerNode); err != nil {
		return nil, err
	}
	s := wireScan{c: v.c, data: value, budget: v.budget}
	if _, err := s.message(value, md, d, 0); err != nil {
		return nil, err
	}
	inner := mt.New()
	if err := v.c.unmarshal(value, inner); err != nil {
		return nil, err
	}
	x, err := v.message(inner, d)
	if err != nil {
		return nil, err
	}
	if wkt {
		return map[string]any{"@type": url, "value": x}, v.budget.charge(2)
	}
	out := x.(map[string]any) // a message without a kind is a map
	out["@type"] = url
	return out, v.budget.charge(1)
}

// mapKey is the text of a map key: decimal or boolean text, as
// protobuf's JSON writes it.
func mapKey(k protoreflect.MapKey) string {
	switch x := k.Interface().(type) {
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	}
	return k.String() // not reached: no other kind is a key
}

// scalar converts a value of field fd, not a message.
func scalar(fd protoreflect.FieldDescriptor, x protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return x.Bool()
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if ed.FullName() == "google.protobuf.NullValue" {
			return nil
		}
		if ev := ed.Values().ByNumber(x.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.FormatInt(int64(x.Enum()), 10)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return x.Int()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return x.Uint()
	case protoreflect.FloatKind:
		return shortFloat32(float32(x.Float()))
	case protoreflect.DoubleKind:
		return x.Float()
	case protoreflect.StringKind:
		return x.String()
	case protoreflect.BytesKind:
		if b := x.Bytes(); b != nil {
			return b
		}
		return []byte{}
	}
	return nil // not reached: messages are not scalars
}

// shortFloat32 is f as the float64 nearest its shortest decimal text, so
// that a float renders as it was written: 0.1, not 0.10000000149011612.
func shortFloat32(f float32) float64 {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return float64(f)
	}
	var buf [32]byte
	x, err := strconv.ParseFloat(string(strconv.AppendFloat(buf[:0], float64(f), 'g', -1, 32)), 64)
	if err != nil {
		return float64(f) // not reached
	}
	return x
}

// The ranges of protobuf's Timestamp (years 1 to 9999) and Duration
// (±10,000 years), as protobuf's JSON mapping checks them.
const (
	minTimestamp = -62135596800
	maxTimestamp = 253402300799
	maxDuration  = 315576000000
)

func timestamp(m protoreflect.Message) (any, error) {
	fields := m.Descriptor().Fields()
	s, n := m.Get(fields.ByNumber(1)).Int(), m.Get(fields.ByNumber(2)).Int()
	if s < minTimestamp || s > maxTimestamp || n < 0 || n >= 1e9 {
		return nil, fmt.Errorf("%w: protobuf: google.protobuf.Timestamp out of range (%d seconds, %d nanos)", template.ErrInvalidPayload, s, n)
	}
	return time.Unix(s, n).UTC(), nil
}

func duration(m protoreflect.Message) (any, error) {
	fields := m.Descriptor().Fields()
	s, n := m.Get(fields.ByNumber(1)).Int(), m.Get(fields.ByNumber(2)).Int()
	if s < -maxDuration || s > maxDuration || n <= -1e9 || n >= 1e9 || s > 0 && n < 0 || s < 0 && n > 0 {
		return nil, fmt.Errorf("%w: protobuf: google.protobuf.Duration out of range (%d seconds, %d nanos)", template.ErrInvalidPayload, s, n)
	}
	const limit = math.MaxInt64 / int64(time.Second)
	if s > limit || s < -limit {
		return nil, fmt.Errorf("%w: protobuf: google.protobuf.Duration of %d seconds is longer than 292 years", template.ErrInvalidPayload, s)
	}
	return time.Duration(s)*time.Second + time.Duration(n), nil
}
