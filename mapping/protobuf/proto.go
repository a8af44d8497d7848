package protobuf

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/reporter"
	"github.com/pubsink/pubsink/mapping/schema"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Protocol Buffers payloads: a message of a .proto file named in the
// configuration, or of a topic's schema (a PROTOCOL_BUFFER definition: one
// .proto text with one top-level message), in the wire format (BINARY
// encoding) or in protobuf's JSON mapping (JSON encoding). Both decode to the
// same tree (value.go), keyed by the fields' names in the .proto file
// (device_id, never the JSON name deviceId; a JSON payload may use either, as
// protobuf's JSON mapping allows). This file compiles the .proto text into
// descriptors and the codec; proto_decode.go decodes payloads and
// proto_path.go checks placeholder paths against the message. What a
// template renders for each type:
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
// Presence follows package value: a message field, a oneof member and an
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
// value.MaxDepth (128) levels deep; and the protobuf runtime nests no more than
// value.MaxDepth messages (so a Struct nests about 40 levels: each of its levels
// is a Value, a Struct and a map entry). Memory is bounded by counting the
// nodes a payload will make before the protobuf runtime makes any: a wire
// payload is walked with its descriptor by wireScan (protowire, no
// allocation), a JSON payload's text is counted by jsonScan; both are
// counted exactly again while converting. A payload of n bytes may make
//
//	maxNodes(n) = 2n + 65536 nodes
//
// where a scalar, a list element or a set optional field is a node, a map
// entry two, a message messageCost (5: its map and what the message
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
// In JSON, objects and arrays are counted at 7 nodes each (jsonCost)
// before protojson runs, and array elements at 6 when the schema has
// google.protobuf.Value (in a ListValue each, even a 0, is a message): a
// JSON array of more than about 30,000 one-digit numbers is then refused,
// as the same array of Values would be. protojson re-reads a JSON Any's
// object once per level of Any nesting: nested Anys cost CPU in proportion
// to their depth.

// Codec decodes the payloads of one message type: the schema.Codec of a
// .proto message. It is read-only once compiled, so one serves every
// goroutine.
type Codec struct {
	desc  protoreflect.MessageDescriptor
	types *dynamicpb.Types // the schema's files' messages, for Any
	info  map[protoreflect.FullName]*msgInfo
	// required: some message of the files has a proto2 required field, so
	// that unmarshalling must check them (a walk of the whole message).
	required bool
	// dynamic: the files have google.protobuf.Value, whose every value
	// (even a JSON 0) is a message.
	dynamic bool
}

var _ schema.Codec = (*Codec)(nil)

// Descriptor is the descriptor of the message that c decodes.
func (c *Codec) Descriptor() protoreflect.MessageDescriptor { return c.desc }

// msgInfo is what the decoder needs of a message type, computed once.
type msgInfo struct {
	// cost is the nodes one message of the type counts (messageCost and
	// one per field of always).
	cost int
	// always are the fields without presence: the tree has them, set or not.
	always []protoreflect.FieldDescriptor
	wkt    wellKnown
}

// wellKnown is a well-known type that the tree does not hold as a message.
type wellKnown uint8

const (
	wktNone wellKnown = iota
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

var wellKnowns = map[protoreflect.FullName]wellKnown{
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

// messageCost is the nodes a message counts besides its fields: itself
// and, in the same unit, its overhead (a dynamicpb message is about 180
// bytes, an empty Go map about 50; a list element is about 50 in all).
const messageCost = 5

// maxNodes is the number of nodes a payload of n bytes may make.
func maxNodes(n int) int { return 2*n + 1<<16 }

// anyBytesPerNode: a resolved Any counts a node per this many bytes
// of its value, for the copy of it that decoding it makes.
const anyBytesPerNode = 8

// CompileFile compiles the .proto file at path, resolving its imports
// from its folder and the well-known types from the protobuf runtime, and
// returns the codec of its message named message (a full name,
// "pkg.Outer.Inner"). A wrong name gets the nearest of the file's messages.
func CompileFile(path, message string) (*Codec, error) {
	dir, name := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	resolver := &protocompile.SourceResolver{ImportPaths: []string{dir}}
	file, reg, err := compile(resolver, name)
	if err != nil {
		return nil, locateIn(dir, err)
	}
	want := protoreflect.FullName(strings.TrimPrefix(message, "."))
	if d, err := reg.FindDescriptorByName(want); err == nil {
		if md, ok := d.(protoreflect.MessageDescriptor); ok && !md.IsMapEntry() {
			return newCodec(reg, md), nil
		}
	}
	var names []string
	messageNames(file.Messages(), &names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s defines no message", path)
	}
	hint := schema.Closest(string(want), names)
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
	return nil, &MessageError{fmt.Errorf("%s (its messages: %s)", msg, strings.Join(names, ", "))}
}

// MessageError is a .proto file that compiles but has not the message
// payload.message names: a problem of that key, not of payload.schema.
type MessageError struct{ Err error }

func (e *MessageError) Error() string { return e.Err.Error() }
func (e *MessageError) Unwrap() error { return e.Err }

// LocatedError is a problem of a schema file at a line and column of it
// (or of a file it imports): its text starts with PATH:LINE:COL, the path
// as the configuration's key resolves it, so that an editor or terminal
// opens it there. It is the problem's one location: the configuration
// key's line is not added.
type LocatedError struct{ Err error }

func (e *LocatedError) Error() string { return e.Err.Error() }
func (e *LocatedError) Unwrap() error { return e.Err }

// locateIn gives a compiler error at a position of a file the full path of
// that file (protocompile names it as imported: relative to dir).
func locateIn(dir string, err error) error {
	var at reporter.ErrorWithPos
	if !errors.As(err, &at) {
		return err
	}
	pos := at.GetPosition()
	return &LocatedError{fmt.Errorf("%s:%d:%d: %w", filepath.Join(dir, pos.Filename), pos.Line, pos.Col, at.Unwrap())}
}

// CompileDefinition compiles the definition of a Pub/Sub schema of
// type PROTOCOL_BUFFER: the text of one .proto file whose one top-level
// message is the payload's type.
func CompileDefinition(definition string) (*Codec, error) {
	const name = "schema.proto"
	resolver := &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{name: definition})}
	file, reg, err := compile(resolver, name)
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
	return newCodec(reg, msgs.Get(0)), nil
}

// compile compiles file with resolver (and the standard imports), and
// registers it and its imports.
func compile(resolver protocompile.Resolver, file string) (protoreflect.FileDescriptor, *protoregistry.Files, error) {
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

// messageNames appends the full names of msgs and their nested messages
// (not map entries).
func messageNames(msgs protoreflect.MessageDescriptors, names *[]string) {
	for i := range msgs.Len() {
		md := msgs.Get(i)
		if md.IsMapEntry() {
			continue
		}
		*names = append(*names, string(md.FullName()))
		messageNames(md.Messages(), names)
	}
}

func newCodec(reg *protoregistry.Files, md protoreflect.MessageDescriptor) *Codec {
	c := &Codec{desc: md, types: dynamicpb.NewTypes(reg), info: map[protoreflect.FullName]*msgInfo{}}
	var add func(msgs protoreflect.MessageDescriptors)
	add = func(msgs protoreflect.MessageDescriptors) {
		for i := range msgs.Len() {
			m := msgs.Get(i)
			c.info[m.FullName()] = newMsgInfo(m)
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

func newMsgInfo(md protoreflect.MessageDescriptor) *msgInfo {
	in := &msgInfo{wkt: wellKnowns[md.FullName()]}
	fields := md.Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !fd.HasPresence() {
			in.always = append(in.always, fd)
		}
	}
	in.cost = messageCost + len(in.always)
	return in
}

// infoOf is md's msgInfo; every message of the schema's files has one.
func (c *Codec) infoOf(md protoreflect.MessageDescriptor) *msgInfo {
	if in := c.info[md.FullName()]; in != nil {
		return in
	}
	return newMsgInfo(md) // not reached: Any resolves in the same files
}
