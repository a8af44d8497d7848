package protobuf

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// FuzzProtoDecode decodes arbitrary payloads, in both encodings, as a
// pubsink.test.Reading (every kind of field, recursion, Any, Struct). A
// payload either decodes or is invalid_payload; it never panics; its tree
// has no more nodes than maxNodes allows and renders without error
// (so is no deeper than value.MaxDepth); and decoding allocates no more than a
// bounded multiple of the payload, in bounded time.
//
//	go test ./mapping/protobuf -run '^$' -fuzz FuzzProtoDecode -fuzztime 20s
func FuzzProtoDecode(f *testing.F) {
	c := testCodec(f, "pubsink.test.Reading")
	_, full := fromJSON(f, c, fullReading)
	f.Add(full, false)
	f.Add([]byte(fullReading), true)
	f.Add([]byte{}, false)
	f.Add([]byte("{}"), true)
	f.Add([]byte(`{"attrs": {"a": [[{"b": null}], {}]}, "list": [[], {}], "dyn": {"x": [1]}}`), true)
	f.Add([]byte(`{"extra": {"@type": "type.googleapis.com/pubsink.test.Reading", "path": [{}, {"parent": {}}],
		"extra": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1s"}}}`), true)
	f.Add([]byte(`{"path": [{},{},{},{},{},{},{},{}], "byId": {"1": {}, "2": {}}}`), true)
	f.Add(anyOf(f, c, "pubsink.test.Reading", full), false)
	f.Add(anyOf(f, c, "google.protobuf.Struct", []byte("\x0a\x07\x0a\x01a\x12\x02\x08\x00")), false)
	f.Add(anyOf(f, c, "no.Such", []byte("xyz")), false)
	var chain []byte // location.parent.parent…
	for range 20 {
		chain = protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), chain)
	}
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 17, protowire.BytesType), chain), false)
	f.Add([]byte("\xa2\x01\x00\xa2\x01\x00\xa2\x01\x00\xca\x01\x02\x08\x01"), false) // path: {}, {}, {}; by_id: {1: {}}
	f.Add([]byte("\xfb\x06\xfb\x06\xfc\x06\xfc\x06"), false)                         // unknown groups
	f.Add([]byte("\x9a\x01\x03\x01\x02\x03"), false)                                 // packed samples, truncated
	f.Fuzz(func(t *testing.T, data []byte, json bool) {
		tm := time.AfterFunc(5*time.Second, func() { panic(fmt.Sprintf("decoding took 5 s: json %v, %q", json, data)) })
		defer tm.Stop()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err := c.Decode(data, json)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 400*uint64(len(data))+16<<20 {
			t.Errorf("decoding %d bytes allocated %d", len(data), alloc)
		}
		if err != nil {
			if !errors.Is(err, template.ErrInvalidPayload) || strings.Contains(err.Error(), "decoder failed") {
				t.Fatalf("%v", err) // not invalid_payload, or a panic recovered
			}
			return
		}
		if n, max := countNodes(v), maxNodes(len(data)); n > max {
			t.Fatalf("%d nodes from %d bytes; at most %d", n, len(data), max)
		}
		if _, err := value.Append(nil, v); err != nil {
			t.Fatalf("rendering the tree: %v", err)
		}
	})
}
