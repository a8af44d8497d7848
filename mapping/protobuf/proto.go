package protobuf

// Compiling Protocol Buffers schemas: a .proto file (with its imports) or a
// topic schema's definition, into the descriptors of its files and the
// Codec of one message, with what the decoder needs of each message type
// computed once; and the errors of a file that does not compile or lacks
// the message named.

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
