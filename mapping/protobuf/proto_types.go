package protobuf

// The message's types as CEL's checker sees them (schema.Types): a message
// is an object type of its fields, the well-known types are what the value
// model makes of them (a Timestamp a timestamp, a wrapper its value, Struct
// a map, Value and Any dyn), an enum a string (NullValue null).

import (
	"github.com/google/cel-go/cel"
	"github.com/pubsink/pubsink/mapping/schema"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Types is the message's types, for CEL's checker.
func (c *Codec) Types() *schema.Types {
	s := schema.NewTypes()
	s.Root = messageType(s, c, c.desc)
	return s
}

func messageType(s *schema.Types, c *Codec, md protoreflect.MessageDescriptor) *cel.Type {
	switch c.infoOf(md).wkt {
	case wktTimestamp:
		return cel.TimestampType
	case wktDuration:
		return cel.DurationType
	case wktWrapper:
		return valueType(s, c, md.Fields().ByNumber(1))
	case wktStruct:
		return cel.MapType(cel.StringType, cel.DynType)
	case wktListValue:
		return cel.ListType(cel.DynType)
	case wktFieldMask:
		return cel.StringType
	case wktValue, wktAny:
		return cel.DynType
	}
	name := string(md.FullName())
	t := cel.ObjectType(name)
	st, added := s.AddStruct(name, "message "+name)
	if !added {
		return t
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		var ft *cel.Type
		switch {
		case fd.IsMap():
			ft = cel.MapType(cel.StringType, valueType(s, c, fd.MapValue()))
		case fd.IsList():
			ft = cel.ListType(valueType(s, c, fd))
		default:
			ft = valueType(s, c, fd)
		}
		st.Add(string(fd.Name()), ft)
	}
	return t
}

// valueType is the type of one value of fd (an element, a map value).
func valueType(s *schema.Types, c *Codec, fd protoreflect.FieldDescriptor) *cel.Type {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageType(s, c, fd.Message())
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return cel.NullType
		}
		return cel.StringType
	case protoreflect.BoolKind:
		return cel.BoolType
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return cel.IntType
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return cel.UintType
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return cel.DoubleType
	case protoreflect.StringKind:
		return cel.StringType
	case protoreflect.BytesKind:
		return cel.BytesType
	}
	return cel.DynType
}
