package schema

import "github.com/pubsink/pubsink/template"

// Codec is one compiled schema of a format (an Avro schema, a .proto
// message): all that mapping needs of a format. Each format's package
// (mapping/avro, mapping/protobuf) compiles its schemas into one; the
// conformance suite (schematest) holds every Codec to the same reading.
type Codec interface {
	// Decode decodes one payload into the value model (package value): in
	// the schema's binary encoding, or its JSON encoding when json is true.
	// A payload the schema cannot read is template.ErrInvalidPayload,
	// naming the format ("avro: …"); a tree deeper than value.MaxDepth is
	// value.ErrTooDeep.
	Decode(data []byte, json bool) (any, error)
	// CheckPath reports whether path, a placeholder's after its root
	// ({data.a.b}: a.b), names a value that the schema can hold, with the
	// nearest field's name when it does not.
	CheckPath(path []template.Segment) error
	// Types is the schema's types, for CEL's checker.
	Types() *Types
}
