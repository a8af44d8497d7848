package jsontree

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/mapping/schema/schematest"
	"github.com/pubsink/pubsink/mapping/value"
)

// JSON runs the formats' conformance suite without a schema: its tree is
// read as the schema'd formats' trees are, and paths and types are not
// checked (a JSON payload's data is dyn).
func TestConformance(t *testing.T) {
	deep := strings.Repeat("[", value.MaxDepth+1) + strings.Repeat("]", value.MaxDepth+1)
	schematest.Run(t, schematest.Format{
		Name:   "json",
		Decode: func(data []byte, _ bool) (any, error) { return Decode(data) },
		Encode: func(_ testing.TB, r schematest.Reading) []schematest.Payload {
			site := ""
			if r.Site != "" {
				site = fmt.Sprintf(`,"site":%q`, r.Site)
			}
			text := fmt.Sprintf(`{"id":"r1","kind":%q,"sensor":"s1","value":12.5,"ts":"2026-12-01T10:00:00.123Z"%s,"points":[{"n":1,"v":0.5},{"n":2,"v":1.5}]}`, r.Kind, site)
			return []schematest.Payload{{Encoding: "json", JSON: true, Data: []byte(text)}}
		},
		Deep: &schematest.Payload{Encoding: "json", JSON: true, Data: []byte(deep)},
	})
}
