package mapping

import (
	"github.com/google/cel-go/cel"
	"github.com/pubsink/pubsink/mapping/schema"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ---- Protocol Buffers ----

// Types is the message's types (see schemaTypes).
func (c *protoCodec) Types() *schema.Types {
	s := schema.NewTypes()
	s.Root = protoMessageType(s, c, c.desc)
	return s
}

func protoMessageType(s *schema.Types, c *protoCodec, md protoreflect.MessageDescriptor) *cel.Type {
	switch c.infoOf(md).wkt {
	case wktTimestamp:
		return cel.TimestampType
	case wktDuration:
		return cel.DurationType
	case wktWrapper:
		return protoValueType(s, c, md.Fields().ByNumber(1))
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
			ft = cel.MapType(cel.StringType, protoValueType(s, c, fd.MapValue()))
		case fd.IsList():
			ft = cel.ListType(protoValueType(s, c, fd))
		default:
			ft = protoValueType(s, c, fd)
		}
		st.Add(string(fd.Name()), ft)
	}
	return t
}

// protoValue is the type of one value of fd (an element, a map value).
func protoValueType(s *schema.Types, c *protoCodec, fd protoreflect.FieldDescriptor) *cel.Type {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return protoMessageType(s, c, fd.Message())
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
