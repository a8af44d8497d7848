package mapping

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pubsink/pubsink/template"
)

// A schema's types, as CEL's checker sees them: expressions over a payload
// with a schema (an Avro or .proto file, a topic schema's revision) are
// type-checked against them at validate and at start, so that a misspelled
// field, a string used as a filter or a double multiplied by an int is
// refused with its key and types before any message is read.
//
// They are for checking only. Every expression is evaluated by the program
// compiled against a dyn `data` (expr.go), whatever the schema: a typed
// check changes what is refused, never how a message is evaluated, and one
// program serves every revision of a topic schema.
//
// The types follow the value model (value.go), not the formats' own CEL
// conventions: an Avro or proto enum is a string (its symbol), an Avro
// date, time or decimal a string, a timestamp a timestamp, a proto uint64 a
// uint, a wrapper its value, Struct a map, Value and Any dyn. A record or
// message is a CEL object type named by its full name, whose fields are the
// schema's. A union with null is its other branch: a null field is absent
// from the payload (has(data.f), data.?f.orValue(x)), as an unset proto
// field is; a union of several types is dyn.

// schemaTypes is one schema's CEL types. It is immutable once built.
type schemaTypes struct {
	root    *cel.Type
	structs map[string]*structType
}

// structType is a record's or message's fields.
type structType struct {
	what   string // "record Reading", "message acme.iot.Reading": for messages
	names  []string
	fields map[string]*cel.Type
}

// newSchemaTypes starts an empty set of types.
func newSchemaTypes() *schemaTypes {
	return &schemaTypes{structs: map[string]*structType{}}
}

// fieldType is the type of struct name's field, if both exist.
func (s *schemaTypes) fieldType(name, field string) (*cel.Type, bool) {
	st, ok := s.structs[name]
	if !ok {
		return nil, false
	}
	t, ok := st.fields[field]
	return t, ok
}

// ---- Avro ----

// celTypes is the schema's types (see schemaTypes).
func (c *avroCodec) celTypes() *schemaTypes {
	s := newSchemaTypes()
	s.root = s.avro(c.root)
	return s
}

func (s *schemaTypes) avro(n *avroNode) *cel.Type {
	switch n.kind {
	case avroNull:
		return cel.NullType
	case avroBoolean:
		return cel.BoolType
	case avroInt, avroLong:
		switch n.logical {
		case logicalTimestampMillis, logicalTimestampMicros, logicalTimestampNanos:
			return cel.TimestampType
		case logicalDate, logicalTimeMillis, logicalTimeMicros:
			return cel.StringType
		}
		return cel.IntType
	case avroFloat, avroDouble:
		return cel.DoubleType
	case avroBytes, avroFixed:
		if n.logical == logicalDecimal || n.logical == logicalUUID {
			return cel.StringType
		}
		return cel.BytesType
	case avroString, avroEnum:
		return cel.StringType
	case avroArray:
		return cel.ListType(s.avro(n.elem))
	case avroMap:
		return cel.MapType(cel.StringType, s.avro(n.elem))
	case avroRecord:
		t := cel.ObjectType(n.full)
		if _, done := s.structs[n.full]; done {
			return t // a recursive record, or one named twice
		}
		st := &structType{what: "record " + n.name, fields: map[string]*cel.Type{}}
		s.structs[n.full] = st // before its fields: they may name it
		for _, f := range n.fields {
			st.names = append(st.names, f.name)
			st.fields[f.name] = s.avro(f.node)
		}
		return t
	case avroUnion:
		var branches []*cel.Type
		for _, b := range n.branches {
			if b.kind == avroNull {
				continue
			}
			t := s.avro(b)
			if !slices.ContainsFunc(branches, t.IsExactType) {
				branches = append(branches, t)
			}
		}
		switch len(branches) {
		case 0:
			return cel.NullType
		case 1:
			return branches[0]
		}
	}
	return cel.DynType
}

// ---- Protocol Buffers ----

// celTypes is the message's types (see schemaTypes).
func (c *protoCodec) celTypes() *schemaTypes {
	s := newSchemaTypes()
	s.root = s.protoMessage(c, c.desc)
	return s
}

func (s *schemaTypes) protoMessage(c *protoCodec, md protoreflect.MessageDescriptor) *cel.Type {
	switch c.infoOf(md).wkt {
	case wktTimestamp:
		return cel.TimestampType
	case wktDuration:
		return cel.DurationType
	case wktWrapper:
		return s.protoValue(c, md.Fields().ByNumber(1))
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
	if _, done := s.structs[name]; done {
		return t
	}
	st := &structType{what: "message " + name, fields: map[string]*cel.Type{}}
	s.structs[name] = st
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		var ft *cel.Type
		switch {
		case fd.IsMap():
			ft = cel.MapType(cel.StringType, s.protoValue(c, fd.MapValue()))
		case fd.IsList():
			ft = cel.ListType(s.protoValue(c, fd))
		default:
			ft = s.protoValue(c, fd)
		}
		st.names = append(st.names, string(fd.Name()))
		st.fields[string(fd.Name())] = ft
	}
	return t
}

// protoValue is the type of one value of fd (an element, a map value).
func (s *schemaTypes) protoValue(c *protoCodec, fd protoreflect.FieldDescriptor) *cel.Type {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return s.protoMessage(c, fd.Message())
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

// ---- the checker's view ----

// schemaProvider is a cel-go type provider that knows a schema's records
// and messages besides CEL's own types. It records the fields the checker
// looked for and did not find, so that the error can say which record lacks
// them and suggest one it has (the checker says only "undefined field").
type schemaProvider struct {
	*types.Registry
	s *schemaTypes

	mu     sync.Mutex
	misses []fieldMiss
}

// fieldMiss is a field looked for in a struct that lacks it.
type fieldMiss struct{ structName, field string }

func newSchemaProvider(s *schemaTypes) (*schemaProvider, error) {
	reg, err := types.NewRegistry()
	if err != nil {
		return nil, err
	}
	return &schemaProvider{Registry: reg, s: s}, nil
}

func (p *schemaProvider) FindStructType(name string) (*types.Type, bool) {
	if _, ok := p.s.structs[name]; ok {
		return types.NewTypeTypeWithParam(types.NewObjectType(name)), true
	}
	return p.Registry.FindStructType(name)
}

func (p *schemaProvider) FindStructFieldNames(name string) ([]string, bool) {
	if st, ok := p.s.structs[name]; ok {
		return slices.Clone(st.names), true
	}
	return p.Registry.FindStructFieldNames(name)
}

func (p *schemaProvider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if _, ok := p.s.structs[name]; !ok {
		return p.Registry.FindStructFieldType(name, field)
	}
	t, ok := p.s.fieldType(name, field)
	if !ok {
		p.mu.Lock()
		p.misses = append(p.misses, fieldMiss{name, field})
		p.mu.Unlock()
		return nil, false
	}
	// Never read: the typed check makes no program (see schemaTypes).
	return &types.FieldType{
		Type:    t,
		IsSet:   func(any) bool { return false },
		GetFrom: func(any) (any, error) { return nil, fmt.Errorf("field %s of %s is only type-checked", field, name) },
	}, true
}

// NewValue refuses to make a record: expressions read payloads, they do not
// build them (CEL's Reading{...} syntax).
func (p *schemaProvider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	if st, ok := p.s.structs[name]; ok {
		return types.NewErr("a %s cannot be made in an expression", st.what)
	}
	return p.Registry.NewValue(name, fields)
}

// takeMisses returns the fields not found since the last call, and forgets
// them.
func (p *schemaProvider) takeMisses() []fieldMiss {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.misses
	p.misses = nil
	return m
}

// noFieldText says that a struct has no field, with the nearest it has:
// `no field "knd" in record Reading; did you mean "kind"?`.
func (s *schemaTypes) noFieldText(m fieldMiss) string {
	st := s.structs[m.structName]
	msg := fmt.Sprintf("no field %q in %s", m.field, st.what)
	if c := closest(m.field, st.names); c != "" {
		msg += fmt.Sprintf("; did you mean %q?", c)
	}
	return msg
}

// checkPath checks that path, a placeholder's after its root ({item.a.b}:
// root "item", path a.b), names a value that type t can hold: a field of
// each record on the way, any key of a map, a numeric index into a list.
// dyn holds anything.
func (s *schemaTypes) checkPath(t *cel.Type, root string, path []template.Segment) error {
	for i, seg := range path {
		at := root
		if i > 0 {
			at += "." + pathText(path[:i])
		}
		switch t.Kind() {
		case types.StructKind:
			ft, ok := s.fieldType(t.TypeName(), seg.Key)
			if !ok {
				if _, known := s.structs[t.TypeName()]; !known {
					return nil // one of CEL's own: not ours to check
				}
				return errors.New(s.noFieldText(fieldMiss{t.TypeName(), seg.Key}))
			}
			t = ft
		case types.MapKind:
			t = t.Parameters()[1]
		case types.ListKind:
			if seg.Index < 0 {
				return fmt.Errorf("%s is a list: index it by a number (%s.0)", at, at)
			}
			t = t.Parameters()[0]
		case types.DynKind, types.AnyKind:
			return nil
		default:
			return fmt.Errorf("%s is of type %s: it has no field %q", at, cel.FormatCELType(t), seg.Key)
		}
	}
	return nil
}

// onlyLenient reports whether every error of a typed check is one that
// evaluation does not make, so that the check must not refuse the
// expression (it then gives no verdict, as an expression over dyn data):
// numbers of different kinds compared for equality (CEL's runtime compares
// 1 == 1.0 by value; its checker refuses it), and a record indexed by a
// string (data['in']: a field whose name CEL reserves can be read no other
// way), and an optional value's default of null (data.?f.orValue(null):
// a missing value, for the column's on_missing policy).
func (s *schemaTypes) onlyLenient(iss *cel.Issues) bool {
	for _, err := range iss.Errors() {
		fn, args, ok := overloadArgs(err.Message)
		if !ok || len(args) != 2 {
			return false
		}
		switch fn {
		case "_==_", "_!=_":
			if !mixedNumbers(args) {
				return false
			}
		case "_[_]", "_[?_]":
			if _, record := s.structs[args[0]]; !record || args[1] != "string" {
				return false
			}
		case "orValue":
			if !strings.HasPrefix(args[0], "optional_type(") || args[1] != "null" {
				return false
			}
		default:
			return false
		}
	}
	return true
}
