package protobuf

// Checking placeholder paths against a Protocol Buffers message: CheckPath
// tells, when a mapping compiles, whether a {data.…} placeholder names a
// field that a payload of the compiled message type (proto.go) may have.

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// CheckPath says whether path names a field that a payload of the message
// may have: a field of each message on the way, any key of a map that its
// key type can have, a numeric index into a repeated field. Struct, Value,
// ListValue and Any may hold anything; the other well-known types
// (Timestamp, Duration, the wrappers, FieldMask) and scalars have no fields.
func (c *Codec) CheckPath(path []template.Segment) error {
	cur := pathNode{msg: c.desc}
	for i, seg := range path {
		at := value.PathText(path[:i])
		switch {
		case cur.list:
			if seg.Index < 0 {
				return fmt.Errorf("%s is a repeated field: its elements are numbered, %q is not a number", at, seg.Key)
			}
			cur = valueNode(cur.fd)
		case cur.mapped:
			if !mapKeyOK(cur.fd.MapKey().Kind(), seg.Key) {
				return fmt.Errorf("%s is a map with %s keys: %q is not one", at, cur.fd.MapKey().Kind(), seg.Key)
			}
			cur = valueNode(cur.fd.MapValue())
		case cur.msg != nil:
			switch c.infoOf(cur.msg).wkt {
			case wktStruct, wktValue, wktListValue, wktAny:
				return nil // anything may be in it
			case wktTimestamp, wktDuration, wktWrapper, wktFieldMask:
				return fmt.Errorf("%s is a %s, a single value: it has no field %q", at, cur.msg.FullName(), seg.Key)
			}
			fd := cur.msg.Fields().ByName(protoreflect.Name(seg.Key))
			if fd == nil {
				return noField(cur.msg, seg.Key)
			}
			cur = fieldNode(fd)
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

// pathNode is where a path is: a message (msg), a repeated field
// (list), a map (mapped), or a scalar (fd alone).
type pathNode struct {
	msg          protoreflect.MessageDescriptor
	fd           protoreflect.FieldDescriptor
	list, mapped bool
}

func fieldNode(fd protoreflect.FieldDescriptor) pathNode {
	switch {
	case fd.IsMap():
		return pathNode{fd: fd, mapped: true}
	case fd.IsList():
		return pathNode{fd: fd, list: true}
	}
	return valueNode(fd)
}

// valueNode is one value of fd: an element, a map value.
func valueNode(fd protoreflect.FieldDescriptor) pathNode {
	if fd.Message() != nil {
		return pathNode{msg: fd.Message()}
	}
	return pathNode{fd: fd}
}

// noField is the error of a path naming no field of md, with the
// field it may have meant: the one of that JSON name, the one of that name
// but for case, or the nearest by edit distance.
func noField(md protoreflect.MessageDescriptor, name string) error {
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
		hint = schema.Closest(name, names)
	}
	if hint == "" {
		return fmt.Errorf("no field %q in message %s", name, md.FullName())
	}
	return fmt.Errorf("no field %q in message %s; did you mean %q?", name, md.FullName(), hint)
}

// mapKeyOK says whether key is the text of a map key of kind k.
func mapKeyOK(k protoreflect.Kind, key string) bool {
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
