package schema

import (
	"errors"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// A schema's types, as CEL's checker sees them: expressions over a payload
// with a schema (an Avro or .proto file, a topic schema's revision) are
// type-checked against them at validate and at start, so that a misspelled
// field, a string used as a filter or a double multiplied by an int is
// refused with its key and types before any message is read.
//
// They are for checking only. Every expression is evaluated by the program
// compiled against a dyn `data` (mapping/expr), whatever the schema: a typed
// check changes what is refused, never how a message is evaluated, and one
// program serves every revision of a topic schema.
//
// The types follow the value model (package value), not the formats' own CEL
// conventions: an Avro or proto enum is a string (its symbol), an Avro
// date, time or decimal a string, a timestamp a timestamp, a proto uint64 a
// uint, a wrapper its value, Struct a map, Value and Any dyn. A record or
// message is a CEL object type named by its full name, whose fields are the
// schema's. A union with null is its other branch: a null field is absent
// from the payload (has(data.f), data.?f.orValue(x)), as an unset proto
// field is; a union of several types is dyn.

// Types is one schema's CEL types. A format builds them (NewTypes,
// AddStruct); they are immutable once built.
type Types struct {
	Root    *cel.Type
	structs map[string]*Struct
}

// Struct is a record's or message's fields.
type Struct struct {
	what   string // "record Reading", "message acme.iot.Reading": for messages
	names  []string
	fields map[string]*cel.Type
}

// NewTypes starts an empty set of types.
func NewTypes() *Types {
	return &Types{structs: map[string]*Struct{}}
}

// AddStruct adds the record or message name (its CEL object type is
// cel.ObjectType(name)), described by what ("record Reading", "message
// acme.iot.Reading"), and returns it to take its fields. added is false
// when name is there already: a recursive record, or one named twice, whose
// fields are (being) added by its first naming. Add a struct before its
// fields: they may name it.
func (s *Types) AddStruct(name, what string) (st *Struct, added bool) {
	if st, ok := s.structs[name]; ok {
		return st, false
	}
	st = &Struct{what: what, fields: map[string]*cel.Type{}}
	s.structs[name] = st
	return st, true
}

// Add adds a field, in the schema's order.
func (st *Struct) Add(field string, t *cel.Type) {
	st.names = append(st.names, field)
	st.fields[field] = t
}

// FieldType is the type of struct name's field, if both exist.
func (s *Types) FieldType(name, field string) (*cel.Type, bool) {
	st, ok := s.structs[name]
	if !ok {
		return nil, false
	}
	t, ok := st.fields[field]
	return t, ok
}

// Describe is struct name's description ("record Reading") and its
// fields in the schema's order; ok is false when name is not one of the
// schema's structs (one of CEL's own, or none).
func (s *Types) Describe(name string) (what string, fields []string, ok bool) {
	st, ok := s.structs[name]
	if !ok {
		return "", nil, false
	}
	return st.what, st.names, true
}

// FieldMiss is a field looked for in a struct that lacks it.
type FieldMiss struct{ Struct, Field string }

// NoFieldText says that a struct has no field, with the nearest it has:
// `no field "knd" in record Reading; did you mean "kind"?`.
func (s *Types) NoFieldText(m FieldMiss) string {
	st := s.structs[m.Struct]
	msg := fmt.Sprintf("no field %q in %s", m.Field, st.what)
	if c := Closest(m.Field, st.names); c != "" {
		msg += fmt.Sprintf("; did you mean %q?", c)
	}
	return msg
}

// CheckPath checks that path, a placeholder's after its root ({item.a.b}:
// root "item", path a.b), names a value that type t can hold: a field of
// each record on the way, any key of a map, a numeric index into a list.
// dyn holds anything.
func (s *Types) CheckPath(t *cel.Type, root string, path []template.Segment) error {
	for i, seg := range path {
		at := root
		if i > 0 {
			at += "." + value.PathText(path[:i])
		}
		switch t.Kind() {
		case types.StructKind:
			ft, ok := s.FieldType(t.TypeName(), seg.Key)
			if !ok {
				if _, known := s.structs[t.TypeName()]; !known {
					return nil // one of CEL's own: not ours to check
				}
				return errors.New(s.NoFieldText(FieldMiss{Struct: t.TypeName(), Field: seg.Key}))
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
