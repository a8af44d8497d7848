package protobuf

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/pubsink/pubsink/mapping/schema/schematest"
)

// Protocol Buffers runs the formats' conformance suite with the reading's
// message (mapping/testdata/conformance/reading.proto), in its binary and
// its JSON encoding; the depth check reads a chain of testdata's Node.
func TestConformance(t *testing.T) {
	c, err := CompileFile("../testdata/conformance/reading.proto", "pubsink.test.Reading")
	if err != nil {
		t.Fatal(err)
	}
	schematest.Run(t, schematest.Format{
		Name:   "protobuf",
		Decode: c.Decode,
		Codec:  c,
		Encode: func(tb testing.TB, r schematest.Reading) []schematest.Payload {
			site := ""
			if r.Site != "" {
				site = fmt.Sprintf(`,"site":%q`, r.Site)
			}
			js := fmt.Sprintf(`{"id":"r1","kind":%q,"sensor":"s1","value":12.5,"ts":"2026-12-01T10:00:00.123Z"%s,"points":[{"n":1,"v":0.5},{"n":2,"v":1.5}]}`, r.Kind, site)
			m := dynamicpb.NewMessage(c.Descriptor())
			if err := protojson.Unmarshal([]byte(js), m); err != nil {
				tb.Fatal(err)
			}
			bin, err := proto.Marshal(m)
			if err != nil {
				tb.Fatal(err)
			}
			return []schematest.Payload{{Encoding: "binary", Data: bin}, {Encoding: "json", JSON: true, Data: []byte(js)}}
		},
		Deep:       &schematest.Payload{Encoding: "binary", Data: nodeChain(127)},
		DeepDecode: testCodec(t, "pubsink.test.Node").Decode,
	})
}
