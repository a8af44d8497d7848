package avro

import (
	"fmt"
	"testing"
	"time"

	"github.com/pubsink/pubsink/mapping/schema/schematest"
	"github.com/pubsink/pubsink/mapping/value"
)

// Avro runs the formats' conformance suite with the reading's schema
// (mapping/testdata/conformance/reading.avsc), in its binary and its JSON
// encoding; the depth check reads a linked list of recursive.avsc.
func TestConformance(t *testing.T) {
	definition := testdataFile(t, "../../testdata/conformance/reading.avsc")
	ts := time.Date(2026, 12, 1, 10, 0, 0, 123_000_000, time.UTC)
	deepBin, _ := linkedList(value.MaxDepth + 1)
	deep := mustCompile(t, testdataFile(t, "recursive.avsc"))
	c := mustCompile(t, definition)
	schematest.Run(t, schematest.Format{
		Name:   "avro",
		Decode: c.Decode,
		Codec:  c,
		Encode: func(tb testing.TB, r schematest.Reading) []schematest.Payload {
			var site any
			siteJSON := "null"
			if r.Site != "" {
				site, siteJSON = r.Site, fmt.Sprintf(`{"string":%q}`, r.Site)
			}
			bin := marshal(tb, definition, map[string]any{
				"id": "r1", "kind": r.Kind, "sensor": "s1", "value": 12.5, "ts": ts, "site": site,
				"points": []any{map[string]any{"n": int64(1), "v": 0.5}, map[string]any{"n": int64(2), "v": 1.5}},
			})
			js := fmt.Sprintf(`{"id":"r1","kind":%q,"sensor":"s1","value":12.5,"ts":%d,"site":%s,"points":[{"n":1,"v":0.5},{"n":2,"v":1.5}]}`, r.Kind, ts.UnixMilli(), siteJSON)
			return []schematest.Payload{{Encoding: "binary", Data: bin}, {Encoding: "json", JSON: true, Data: []byte(js)}}
		},
		Deep:       &schematest.Payload{Encoding: "binary", Data: deepBin},
		DeepDecode: deep.Decode,
	})
}
