package avro

// The schema's CEL types: Types makes them from the compiled schema
// (compile.go), for CEL's checker, as package schema says.

import (
	"slices"

	"github.com/google/cel-go/cel"
	"github.com/pubsink/pubsink/mapping/schema"
)

// Types is the schema's types (see schema.Types).
func (c *Codec) Types() *schema.Types {
	s := schema.NewTypes()
	s.Root = celType(s, c.root)
	return s
}

func celType(s *schema.Types, n *node) *cel.Type {
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
		return cel.ListType(celType(s, n.elem))
	case avroMap:
		return cel.MapType(cel.StringType, celType(s, n.elem))
	case avroRecord:
		t := cel.ObjectType(n.full)
		st, added := s.AddStruct(n.full, "record "+n.name)
		if !added {
			return t // a recursive record, or one named twice
		}
		for _, f := range n.fields {
			st.Add(f.name, celType(s, f.node))
		}
		return t
	case avroUnion:
		var branches []*cel.Type
		for _, b := range n.branches {
			if b.kind == avroNull {
				continue
			}
			t := celType(s, b)
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
