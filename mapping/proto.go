package mapping

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/reporter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/pubsink/pubsink/template"
)

// Protocol Buffers payloads: a message of a .proto file named in the
// configuration, or of a topic's schema (a PROTOCOL_BUFFER definition: one
// .proto text with one top-level message), in the wire format (BINARY
// encoding) or in protobuf's JSON mapping (JSON encoding). Both decode to the
// same tree (value.go), keyed by the fields' names in the .proto file
// (device_id, never the JSON name deviceId; a JSON payload may use either, as
// protobuf's JSON mapping allows). What a template renders for each type:
//
//	proto type                     decoded as      {data.f} renders
//	string                         string          its text: abc
//	bytes                          []byte          its bytes, as they are
//	bool                           bool            true | false
//	int32 int64 sint32 sint64      int64           decimal: -42
//	  sfixed32 sfixed64
//	uint32 uint64 fixed32 fixed64  uint64          decimal: 18446744073709551615
//	double                         float64         as JSON writes it: 2.5, 1e+21, NaN, Infinity
//	float                          float64         the float32's shortest text: 0.1 (not 0.10000000149011612)
//	enum                           string          the value's name: OK; a number the enum lacks: 7
//	message                        map[string]any  compact JSON, keys sorted: {"lat":1.5,"site":"a"}
//	repeated T                     []any           compact JSON: [1.5,2]
//	map<K, V>                      map[string]any  compact JSON, keys in decimal or boolean text: {"7":"a"}
//	google.protobuf.Timestamp      time.Time       RFC 3339 UTC, milliseconds: 2024-05-01T12:30:00.123Z
//	google.protobuf.Duration       time.Duration   seconds: 1.5s, 3s, -0.000001s
//	google.protobuf.*Value         the value       as the wrapped type: Int64Value 7 -> 7
//	  (wrappers)
//	google.protobuf.Struct         map[string]any  compact JSON: {"a":[1,"x",null]} (numbers are doubles)
//	google.protobuf.Value          its kind        null_value -> null (missing_field), else as the kind
//	google.protobuf.ListValue      []any           compact JSON: [1,"x"]
//	google.protobuf.Empty          map[string]any  {}
//	google.protobuf.Any            map[string]any  its type's fields and "@type": {"@type":"type.googleapis.com/a.B","x":1};
//	                                               a well-known type's value under "value" (as protobuf's JSON);
//	                                               a type not in the schema's files: {"@type":URL,"value":BYTES}
//	google.protobuf.FieldMask      string          its paths joined by commas: a.b,c
//	google.protobuf.NullValue      nil             missing_field
//
// Presence follows value.go: a message field, a oneof member and an
// `optional` field (every proto2 field) is absent when it is not set; any
// other field is present with its zero value ("", 0, false, the enum's zero
// name, [] or {}). Extensions are ignored, and so are unknown fields: a
// payload of a newer revision that adds fields decodes. The JSON encoding
// ignores unknown fields too (protojson DiscardUnknown), so that both
// encodings accept the same revisions; a misspelt JSON field name is lost
// without an error, as a field that the schema dropped.
//
// HOSTILE INPUT. Payloads are up to 10 MB and may be crafted. Nothing in
// here panics on a payload (a panic of the protobuf runtime's reflection is
// recovered as invalid_payload, and FuzzProtoDecode fails on one). Nesting
// is bounded as template bounds JSON's: no map or list of the tree more than
// maxDepth (128) levels deep; and the protobuf runtime nests no more than
// maxDepth messages (so a Struct nests about 40 levels: each of its levels
// is a Value, a Struct and a map entry). Memory is bounded by counting the
// nodes a payload will make before the protobuf runtime makes any: a wire
// payload is walked with its descriptor by protoScan (protowire, no
// allocation), a JSON payload's text is counted by jsonScan; both are
// counted exactly again while converting. A payload of n bytes may make
//
//	protoMaxNodes(n) = 2n + 65536 nodes
//
// where a scalar, a list element or a set optional field is a node, a map
// entry two, a message protoMessageCost (5: its map and what the message
// costs the protobuf runtime) plus one per field it always has (the fields
// without presence, in the tree even when the wire omits them), and a
// resolved google.protobuf.Any a node more per 8 bytes of its value (each
// level of Any copies its value once more). Past that the payload is
// invalid_payload ("more than N values"). So 10 MB of empty sub-messages
// (2 bytes and 6 nodes each in a list) is refused before one is made, while
// most honest payloads stay under 2 nodes a byte: a packed list of
// one-byte varints makes 1 a byte, a list of {x: 1, y: 2} (6 bytes each)
// 1.3. Sparse records of many fields are what the bound refuses first: a
// list of records of 30 int32 fields sending 3 small ones (8 bytes, 36
// nodes each) makes 4.5 nodes a byte, and more than 3,276 of them in one
// payload are refused (TestProtoBudget); a tree that size holds 100,000
// values for a 26 KB payload. TestProtoMemory measures the worst shapes at
// the bound: decoding allocates at most about 200 bytes per payload byte
// (most of it dynamicpb's and a growing list's copies, garbage once
// converted), and the tree it returns holds at most about 70 per payload
// byte; plus, for the 65536 nodes any payload may make, about 8 MB
// allocated and 3 MB held.
//
// In JSON, objects and arrays are counted at 7 nodes each (protoJSONCost)
// before protojson runs, and array elements at 6 when the schema has
// google.protobuf.Value (in a ListValue each, even a 0, is a message): a
// JSON array of more than about 30,000 one-digit numbers is then refused,
// as the same array of Values would be. protojson re-reads a JSON Any's
// object once per level of Any nesting: nested Anys cost CPU in proportion
// to their depth.

// protoCodec decodes the payloads of one message type. It is read-only once
// compiled, so one serves every goroutine.
type protoCodec struct {
	desc  protoreflect.MessageDescriptor
	types *dynamicpb.Types // the schema's files' messages, for Any
	info  map[protoreflect.FullName]*protoInfo
	// required: some message of the files has a proto2 required field, so
	// that unmarshalling must check them (a walk of the whole message).
	required bool
	// dynamic: the files have google.protobuf.Value, whose every value
	// (even a JSON 0) is a message.
	dynamic bool
}

// protoInfo is what the decoder needs of a message type, computed once.
type protoInfo struct {
	// cost is the nodes one message of the type counts (protoMessageCost and
	// one per field of always).
	cost int
	// always are the fields without presence: the tree has them, set or not.
	always []protoreflect.FieldDescriptor
	wkt    protoWKT
}

// protoWKT is a well-known type that the tree does not hold as a message.
type protoWKT uint8

const (
	wktNone protoWKT = iota
	wktTimestamp
	wktDuration
	wktWrapper
	wktStruct
	wktValue
	wktListValue
	wktEmpty
	wktAny
	wktFieldMask
)

var protoWKTs = map[protoreflect.FullName]protoWKT{
	"google.protobuf.Timestamp":   wktTimestamp,
	"google.protobuf.Duration":    wktDuration,
	"google.protobuf.DoubleValue": wktWrapper,
	"google.protobuf.FloatValue":  wktWrapper,
	"google.protobuf.Int64Value":  wktWrapper,
	"google.protobuf.UInt64Value": wktWrapper,
	"google.protobuf.Int32Value":  wktWrapper,
	"google.protobuf.UInt32Value": wktWrapper,
	"google.protobuf.BoolValue":   wktWrapper,
	"google.protobuf.StringValue": wktWrapper,
	"google.protobuf.BytesValue":  wktWrapper,
	"google.protobuf.Struct":      wktStruct,
	"google.protobuf.Value":       wktValue,
	"google.protobuf.ListValue":   wktListValue,
	"google.protobuf.Empty":       wktEmpty,
	"google.protobuf.Any":         wktAny,
	"google.protobuf.FieldMask":   wktFieldMask,
}

// protoMessageCost is the nodes a message counts besides its fields: itself
// and, in the same unit, its overhead (a dynamicpb message is about 180
// bytes, an empty Go map about 50; a list element is about 50 in all).
const protoMessageCost = 5

// protoMaxNodes is the number of nodes a payload of n bytes may make.
func protoMaxNodes(n int) int { return 2*n + 1<<16 }

// protoAnyBytesPerNode: a resolved Any counts a node per this many bytes
// of its value, for the copy of it that decoding it makes.
const protoAnyBytesPerNode = 8

// compileProtoFile compiles the .proto file at path, resolving its imports
// from its folder and the well-known types from the protobuf runtime, and
// returns the codec of its message named message (a full name,
// "pkg.Outer.Inner"). A wrong name gets the nearest of the file's messages.
func compileProtoFile(path, message string) (*protoCodec, error) {
	dir, name := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	resolver := &protocompile.SourceResolver{ImportPaths: []string{dir}}
	file, reg, err := compileProto(resolver, name)
	if err != nil {
		return nil, locateIn(dir, err)
	}
	want := protoreflect.FullName(strings.TrimPrefix(message, "."))
	if d, err := reg.FindDescriptorByName(want); err == nil {
		if md, ok := d.(protoreflect.MessageDescriptor); ok && !md.IsMapEntry() {
			return newProtoCodec(reg, md), nil
		}
	}
	var names []string
	protoMessages(file.Messages(), &names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s defines no message", path)
	}
	hint := closest(string(want), names)
	if hint == "" { // a name without its package: "Reading" for "pkg.Reading"
		for _, n := range names {
			if strings.HasSuffix(n, "."+string(want)) {
				hint = n
				break
			}
		}
	}
	msg := fmt.Sprintf("no message %q in %s", message, path)
	if message == "" {
		msg = "no message named (the message's full name is needed)"
	}
	if hint != "" {
		msg += fmt.Sprintf("; did you mean %q?", hint)
	}
	const listed = 20
	if len(names) > listed {
		names = append(names[:listed], fmt.Sprintf("and %d more", len(names)-listed))
	}
	return nil, &messageError{fmt.Errorf("%s (its messages: %s)", msg, strings.Join(names, ", "))}
}

// messageError is a .proto file that compiles but has not the message
// payload.message names: a problem of that key, not of payload.schema.
type messageError struct{ Err error }

func (e *messageError) Error() string { return e.Err.Error() }
func (e *messageError) Unwrap() error { return e.Err }

// locatedError is a problem of a schema file at a line and column of it
// (or of a file it imports): its text starts with PATH:LINE:COL, the path
// as the configuration's key resolves it, so that an editor or terminal
// opens it there. It is the problem's one location: the configuration
// key's line is not added.
type locatedError struct{ Err error }

func (e *locatedError) Error() string { return e.Err.Error() }
func (e *locatedError) Unwrap() error { return e.Err }

// locateIn gives a compiler error at a position of a file the full path of
// that file (protocompile names it as imported: relative to dir).
func locateIn(dir string, err error) error {
	var at reporter.ErrorWithPos
	if !errors.As(err, &at) {
		return err
	}
	pos := at.GetPosition()
	return &locatedError{fmt.Errorf("%s:%d:%d: %w", filepath.Join(dir, pos.Filename), pos.Line, pos.Col, at.Unwrap())}
}

// compileProtoDefinition compiles the definition of a Pub/Sub schema of
// type PROTOCOL_BUFFER: the text of one .proto file whose one top-level
// message is the payload's type.
func compileProtoDefinition(definition string) (*protoCodec, error) {
	const name = "schema.proto"
	resolver := &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{name: definition})}
	file, reg, err := compileProto(resolver, name)
	if err != nil {
		return nil, err
	}
	msgs := file.Messages()
	if msgs.Len() != 1 {
		names := make([]string, msgs.Len())
		for i := range names {
			names[i] = string(msgs.Get(i).FullName())
		}
		if len(names) == 0 {
			return nil, errors.New("the protocol buffer schema defines no message")
		}
		return nil, fmt.Errorf("the protocol buffer schema defines %d top-level messages (%s); it must define one", len(names), strings.Join(names, ", "))
	}
	return newProtoCodec(reg, msgs.Get(0)), nil
}

// compileProto compiles file with resolver (and the standard imports), and
// registers it and its imports.
func compileProto(resolver protocompile.Resolver, file string) (protoreflect.FileDescriptor, *protoregistry.Files, error) {
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(resolver)}
	files, err := c.Compile(context.Background(), file)
	if err != nil {
		return nil, nil, err
	}
	reg := new(protoregistry.Files)
	var root protoreflect.FileDescriptor
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor) error
	add = func(fd protoreflect.FileDescriptor) error {
		if seen[fd.Path()] {
			return nil
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			if err := add(imports.Get(i).FileDescriptor); err != nil {
				return err
			}
		}
		// Rebuilt by the protobuf runtime, whose descriptors answer in a
		// field read what the compiler's work out on each call (presence,
		// from the edition's features): dynamicpb asks on every field.
		f, err := protodesc.NewFile(protodesc.ToFileDescriptorProto(fd), reg)
		if err != nil {
			return err
		}
		if fd == files[0] {
			root = f
		}
		return reg.RegisterFile(f)
	}
	if err := add(files[0]); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	return root, reg, nil
}

// protoMessages appends the full names of msgs and their nested messages
// (not map entries).
func protoMessages(msgs protoreflect.MessageDescriptors, names *[]string) {
	for i := range msgs.Len() {
		md := msgs.Get(i)
		if md.IsMapEntry() {
			continue
		}
		*names = append(*names, string(md.FullName()))
		protoMessages(md.Messages(), names)
	}
}

func newProtoCodec(reg *protoregistry.Files, md protoreflect.MessageDescriptor) *protoCodec {
	c := &protoCodec{desc: md, types: dynamicpb.NewTypes(reg), info: map[protoreflect.FullName]*protoInfo{}}
	var add func(msgs protoreflect.MessageDescriptors)
	add = func(msgs protoreflect.MessageDescriptors) {
		for i := range msgs.Len() {
			m := msgs.Get(i)
			c.info[m.FullName()] = newProtoInfo(m)
			c.required = c.required || m.RequiredNumbers().Len() > 0
			add(m.Messages())
		}
	}
	reg.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		add(fd.Messages())
		return true
	})
	_, err := reg.FindDescriptorByName("google.protobuf.Value")
	c.dynamic = err == nil
	return c
}

func newProtoInfo(md protoreflect.MessageDescriptor) *protoInfo {
	in := &protoInfo{wkt: protoWKTs[md.FullName()]}
	fields := md.Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !fd.HasPresence() {
			in.always = append(in.always, fd)
		}
	}
	in.cost = protoMessageCost + len(in.always)
	return in
}

// infoOf is md's protoInfo; every message of the schema's files has one.
func (c *protoCodec) infoOf(md protoreflect.MessageDescriptor) *protoInfo {
	if in := c.info[md.FullName()]; in != nil {
		return in
	}
	return newProtoInfo(md) // not reached: Any resolves in the same files
}

// noExtensions resolves no extension, so that the wire format's extensions
// are unknown fields, discarded (they are not in the tree, and not counted).
var noExtensions = new(protoregistry.Types)

// decode decodes one payload, in the wire format or (json) in protobuf's
// JSON mapping, into the tree of value.go. Its errors wrap
// template.ErrInvalidPayload.
func (c *protoCodec) decode(data []byte, json bool) (_ any, err error) {
	defer func() {
		// The protobuf runtime's reflection (dynamicpb) is less traveled
		// than generated code: a payload that finds a panic in it is
		// invalid, not the end of the process.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: protobuf: the decoder failed on the payload: %v", template.ErrInvalidPayload, r)
		}
	}()
	b := newProtoBudget(len(data))
	m := dynamicpb.NewMessage(c.desc)
	if json {
		if err := c.jsonScan(data, b); err != nil {
			return nil, err
		}
		opts := protojson.UnmarshalOptions{DiscardUnknown: true, RecursionLimit: maxDepth, Resolver: c.types, AllowPartial: !c.required}
		if err := opts.Unmarshal(data, m); err != nil {
			return nil, errDecode("protobuf", err)
		}
	} else {
		s := protoScan{c: c, data: data, budget: b}
		if _, err := s.message(data, c.desc, 0, 0); err != nil {
			return nil, err
		}
		if err := c.unmarshal(data, m); err != nil {
			return nil, err
		}
	}
	v := protoConv{c: c, budget: b}
	return v.message(m, 0)
}

// unmarshal unmarshals the wire format data into m.
func (c *protoCodec) unmarshal(data []byte, m protoreflect.Message) error {
	opts := proto.UnmarshalOptions{DiscardUnknown: true, RecursionLimit: maxDepth, Resolver: noExtensions, AllowPartial: !c.required}
	if err := opts.Unmarshal(data, m.Interface()); err != nil {
		return errDecode("protobuf", err)
	}
	return nil
}

// jsonScan counts, before protojson unmarshals a JSON payload, the nodes
// its text will make at least, so that protojson is not given a payload
// that would make a huge message tree only to be refused after: each object
// and array protoJSONCost, and each other element of an array one node, or
// 1 + protoMessageCost when the schema has google.protobuf.Value (where
// each element is a message). A flood of empty messages ("[{},{},…]": 3
// bytes, 7 nodes each) or of Values ("[0,0,…]": 2 bytes, 6 nodes each) is
// so refused before a message is made, as protoScan refuses one in the wire
// format. The text's nesting is the tree's, so it is bounded here too. The
// count is thrown away: converting counts exactly.
func (c *protoCodec) jsonScan(data []byte, b protoBudget) error {
	element := 1
	if c.dynamic {
		element = 1 + protoMessageCost
	}
	var inArray [maxDepth + 1]bool
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
				return errTooDeep
			}
			inArray[depth] = ch == '['
			first = ch == '['
			nodes += protoJSONCost
		case '}', ']':
			depth = max(depth-1, 0)
		case ',':
			first = inArray[depth]
		}
	}
	return b.charge(nodes)
}

// protoJSONCost is the nodes jsonScan counts for an object or array: more
// than an empty message in a list makes (1 + protoMessageCost).
const protoJSONCost = 2 + protoMessageCost

// protoBudget counts the nodes of one payload against protoMaxNodes.
type protoBudget struct {
	left, total, size int
}

func newProtoBudget(size int) protoBudget {
	n := protoMaxNodes(size)
	return protoBudget{left: n, total: n, size: size}
}

func (b *protoBudget) charge(n int) error {
	if b.left -= n; b.left < 0 {
		return fmt.Errorf("%w: protobuf: more than %d values in a payload of %d bytes", template.ErrInvalidPayload, b.total, b.size)
	}
	return nil
}

// protoScan walks a payload's wire format with its descriptor before it is
// unmarshalled, counting the nodes it will make and the depth of the tree,
// without allocating. It validates only what it must to walk: what it lets
// through, proto.Unmarshal checks.
type protoScan struct {
	c      *protoCodec
	data   []byte // the buffer scanned, to say where it is malformed
	budget protoBudget
}

// Codes of protowire.ParseError.
const (
	wireTruncated = -1 // unexpected EOF
	wireEndGroup  = -5 // mismatching end group marker
	wireKeyType   = -7 // not protowire's: a map key of the wrong wire type
)

func (s *protoScan) malformed(b []byte, code int) error {
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
func (s *protoScan) message(b []byte, md protoreflect.MessageDescriptor, depth int, group protowire.Number) (int, error) {
	in := s.c.infoOf(md)
	if err := s.budget.charge(in.cost); err != nil {
		return 0, err
	}
	if in.container() && depth >= maxDepth {
		return 0, errTooDeep
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
		packed := fd != nil && typ == protowire.BytesType && fd.IsList() && protoPackable(fd.Kind())
		if fd != nil && typ != protoWireType(fd.Kind()) && !packed {
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
			d := protoChildDepth(in.wkt, fd, depth)
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
				err = s.budget.charge(protoPacked(v, fd.Kind()))
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
func (s *protoScan) element(wkt protoWKT, depth int) error {
	if wkt == wktNone && depth+1 >= maxDepth { // the list
		return errTooDeep
	}
	return s.budget.charge(1)
}

// mapEntry scans one entry of map field fd of a message of kind wkt at
// depth: two nodes, and the value's message if it is one (a message made
// empty when the entry has none).
func (s *protoScan) mapEntry(b []byte, fd protoreflect.FieldDescriptor, wkt protoWKT, depth int) error {
	if wkt == wktNone && depth+1 >= maxDepth { // the map
		return errTooDeep
	}
	if err := s.budget.charge(2); err != nil {
		return err
	}
	vd := fd.MapValue()
	d := protoChildDepth(wkt, fd, depth)
	seen := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		if num == 1 && typ != protoWireType(fd.MapKey().Kind()) {
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
func (s *protoScan) skip(b []byte, num protowire.Number, typ protowire.Type, depth int) (int, error) {
	if typ != protowire.StartGroupType {
		return protowire.ConsumeFieldValue(num, typ, b), nil
	}
	if depth+1 >= maxDepth {
		return 0, errTooDeep
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
func (s *protoScan) anyValue(url string, value []byte, depth int) error {
	mt, err := s.c.types.FindMessageByURL(url)
	if err != nil {
		return nil // the tree holds the bytes
	}
	if err := s.budget.charge(len(value) / protoAnyBytesPerNode); err != nil {
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
func (in *protoInfo) container() bool {
	switch in.wkt {
	case wktNone, wktStruct, wktListValue, wktEmpty, wktAny:
		return true
	}
	return false
}

// protoChildDepth is the depth of the tree where the message of field fd
// (an element of it, a map value) of a message of kind wkt at depth goes:
// a level deeper for a field, two for an element or a map value (the list
// or map, then it), none for a Value's Struct or ListValue.
func protoChildDepth(wkt protoWKT, fd protoreflect.FieldDescriptor, depth int) int {
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

// protoWireType is the wire type of a field of kind k (unpacked).
func protoWireType(k protoreflect.Kind) protowire.Type {
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

func protoPackable(k protoreflect.Kind) bool {
	return protoWireType(k) != protowire.BytesType && k != protoreflect.GroupKind
}

// protoPacked is the number of elements in the packed value b of kind k.
func protoPacked(b []byte, k protoreflect.Kind) int {
	switch protoWireType(k) {
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

// protoConv converts an unmarshalled message into the tree, counting its
// nodes as protoScan does (a JSON payload is counted here only).
type protoConv struct {
	c      *protoCodec
	budget protoBudget
}

// message converts m, a node at depth of the tree.
func (v *protoConv) message(m protoreflect.Message, depth int) (any, error) {
	md := m.Descriptor()
	in := v.c.infoOf(md)
	if err := v.budget.charge(in.cost); err != nil {
		return nil, err
	}
	if in.container() && depth >= maxDepth {
		return nil, errTooDeep
	}
	switch in.wkt {
	case wktTimestamp:
		return protoTimestamp(m)
	case wktDuration:
		return protoDuration(m)
	case wktWrapper:
		fd := md.Fields().ByNumber(1)
		return protoScalar(fd, m.Get(fd)), nil
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
		return protoScalar(fd, m.Get(fd)), nil
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
			y = protoScalar(fd, x)
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
func (v *protoConv) field(m protoreflect.Message, fd protoreflect.FieldDescriptor, wkt protoWKT, depth int) (any, error) {
	d := protoChildDepth(wkt, fd, depth)
	switch {
	case fd.IsList():
		l := m.Get(fd).List()
		if wkt == wktNone && depth+1 >= maxDepth {
			return nil, errTooDeep
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
		if wkt == wktNone && depth+1 >= maxDepth {
			return nil, errTooDeep
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
				out[protoMapKey(k)] = y
			}
			return err == nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return protoScalar(fd, m.Get(fd)), nil
}

// value converts one value of field fd (an element, a map value): a
// message at depth, or a scalar.
func (v *protoConv) value(fd protoreflect.FieldDescriptor, x protoreflect.Value, depth int) (any, error) {
	if fd.Message() != nil {
		return v.message(x.Message(), depth)
	}
	return protoScalar(fd, x), nil
}

// anyMessage converts a google.protobuf.Any at depth: the fields of its value and
// its "@type", or a well-known type's value under "value", or (a type the
// schema's files lack) the bytes of its value.
func (v *protoConv) anyMessage(m protoreflect.Message, depth int) (any, error) {
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
	if err := v.budget.charge(len(value) / protoAnyBytesPerNode); err != nil {
		return nil, err
	}
	s := protoScan{c: v.c, data: value, budget: v.budget}
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

// protoMapKey is the text of a map key: decimal or boolean text, as
// protobuf's JSON writes it.
func protoMapKey(k protoreflect.MapKey) string {
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

// protoScalar converts a value of field fd, not a message.
func protoScalar(fd protoreflect.FieldDescriptor, x protoreflect.Value) any {
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
		return protoFloat32(float32(x.Float()))
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

// protoFloat32 is f as the float64 nearest its shortest decimal text, so
// that a float renders as it was written: 0.1, not 0.10000000149011612.
func protoFloat32(f float32) float64 {
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

func protoTimestamp(m protoreflect.Message) (any, error) {
	fields := m.Descriptor().Fields()
	s, n := m.Get(fields.ByNumber(1)).Int(), m.Get(fields.ByNumber(2)).Int()
	if s < minTimestamp || s > maxTimestamp || n < 0 || n >= 1e9 {
		return nil, fmt.Errorf("%w: protobuf: google.protobuf.Timestamp out of range (%d seconds, %d nanos)", template.ErrInvalidPayload, s, n)
	}
	return time.Unix(s, n).UTC(), nil
}

func protoDuration(m protoreflect.Message) (any, error) {
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

// checkPath says whether path names a field that a payload of the message
// may have: a field of each message on the way, any key of a map that its
// key type can have, a numeric index into a repeated field. Struct, Value,
// ListValue and Any may hold anything; the other well-known types
// (Timestamp, Duration, the wrappers, FieldMask) and scalars have no fields.
func (c *protoCodec) checkPath(path []template.Segment) error {
	cur := protoPathNode{msg: c.desc}
	for i, seg := range path {
		at := pathText(path[:i])
		switch {
		case cur.list:
			if seg.Index < 0 {
				return fmt.Errorf("%s is a repeated field: its elements are numbered, %q is not a number", at, seg.Key)
			}
			cur = protoValueNode(cur.fd)
		case cur.mapped:
			if !protoMapKeyOK(cur.fd.MapKey().Kind(), seg.Key) {
				return fmt.Errorf("%s is a map with %s keys: %q is not one", at, cur.fd.MapKey().Kind(), seg.Key)
			}
			cur = protoValueNode(cur.fd.MapValue())
		case cur.msg != nil:
			switch c.infoOf(cur.msg).wkt {
			case wktStruct, wktValue, wktListValue, wktAny:
				return nil // anything may be in it
			case wktTimestamp, wktDuration, wktWrapper, wktFieldMask:
				return fmt.Errorf("%s is a %s, a single value: it has no field %q", at, cur.msg.FullName(), seg.Key)
			}
			fd := cur.msg.Fields().ByName(protoreflect.Name(seg.Key))
			if fd == nil {
				return protoNoField(cur.msg, seg.Key)
			}
			cur = protoFieldNode(fd)
		default:
			kind := cur.fd.Kind().String()
			if cur.fd.Enum() != nil {
				kind = "enum " + string(cur.fd.Enum().FullName())
			}
			return fmt.Errorf("%s is a %s, a single value: it has no field %q", at, kind, seg.Key)
		}
	}
	return nil
}

// protoPathNode is where a path is: a message (msg), a repeated field
// (list), a map (mapped), or a scalar (fd alone).
type protoPathNode struct {
	msg          protoreflect.MessageDescriptor
	fd           protoreflect.FieldDescriptor
	list, mapped bool
}

func protoFieldNode(fd protoreflect.FieldDescriptor) protoPathNode {
	switch {
	case fd.IsMap():
		return protoPathNode{fd: fd, mapped: true}
	case fd.IsList():
		return protoPathNode{fd: fd, list: true}
	}
	return protoValueNode(fd)
}

// protoValueNode is one value of fd: an element, a map value.
func protoValueNode(fd protoreflect.FieldDescriptor) protoPathNode {
	if fd.Message() != nil {
		return protoPathNode{msg: fd.Message()}
	}
	return protoPathNode{fd: fd}
}

// protoNoField is the error of a path naming no field of md, with the
// field it may have meant: the one of that JSON name, the one of that name
// but for case, or the nearest by edit distance.
func protoNoField(md protoreflect.MessageDescriptor, name string) error {
	fields := md.Fields()
	names := make([]string, fields.Len())
	hint := ""
	for i := range names {
		fd := fields.Get(i)
		names[i] = string(fd.Name())
		if hint == "" && (fd.JSONName() == name || strings.EqualFold(names[i], name)) {
			hint = names[i]
		}
	}
	if hint == "" {
		hint = closest(name, names)
	}
	if hint == "" {
		return fmt.Errorf("no field %q in message %s", name, md.FullName())
	}
	return fmt.Errorf("no field %q in message %s; did you mean %q?", name, md.FullName(), hint)
}

// protoMapKeyOK says whether key is the text of a map key of kind k.
func protoMapKeyOK(k protoreflect.Kind, key string) bool {
	var err error
	switch k {
	case protoreflect.BoolKind:
		return key == "true" || key == "false"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		_, err = strconv.ParseInt(key, 10, 32)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		_, err = strconv.ParseInt(key, 10, 64)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		_, err = strconv.ParseUint(key, 10, 32)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		_, err = strconv.ParseUint(key, 10, 64)
	}
	return err == nil
}
