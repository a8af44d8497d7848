// Package protobuf is the Protocol Buffers format of the mapping: it
// compiles a .proto file named in the configuration (CompileFile) or a
// topic schema's PROTOCOL_BUFFER definition (CompileDefinition: one .proto
// text with one top-level message) into the Codec of one message, which
// decodes payloads in the wire format (BINARY encoding) or in protobuf's
// JSON mapping (JSON encoding) into the value model (package value), checks
// a placeholder's path against the message, and gives the message's types
// to CEL's checker: the schema.Codec that mapping names.
//
// Both encodings decode to the same tree, keyed by the fields' names in the
// .proto file (device_id, never the JSON name deviceId; a JSON payload may
// use either, as protobuf's JSON mapping allows). proto.go compiles the
// .proto text into descriptors and the Codec; proto_decode.go decodes
// payloads, proto_path.go checks placeholder paths against the message and
// proto_types.go gives its CEL types. What a template renders for each
// type:
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
// is bounded as template bounds JSON's: no map or list of the tree more
// than value.MaxDepth (128) levels deep; and the protobuf runtime nests no
// more than value.MaxDepth messages (so a Struct nests about 40 levels:
// each of its levels is a Value, a Struct and a map entry). Memory is
// bounded by counting the nodes a payload will make before the protobuf
// runtime makes any: a wire payload is walked with its descriptor by
// wireScan (protowire, no allocation), a JSON payload's text is counted by
// jsonScan; both are counted exactly again while converting. A payload of
// n bytes may make
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
package protobuf
