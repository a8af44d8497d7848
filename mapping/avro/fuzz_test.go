package avro

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// FuzzAvroDecode decodes arbitrary bytes, binary or JSON, with a few
// schemas (a recursive one, and ones whose items take no bytes), and checks
// what the package's doc promises of hostile payloads: no panic, an error
// that is invalid_payload, a tree no deeper than value.MaxDepth made only of
// the value model's types, at most 3*len(data)+1024 nodes for these schemas (each
// makes at most 2 nodes per payload byte, plus the budget of len+1024
// zero-byte items), and allocation proportional to the payload.
func FuzzAvroDecode(f *testing.F) {
	schemas := []string{
		testdataFile(f, "all_types.avsc"),
		testdataFile(f, "recursive.avsc"),
		testdataFile(f, "tree.avsc"),
		testdataFile(f, "bench.avsc"),
		`{"type": "array", "items": "null"}`,
		`{"type": "map", "values": {"type": "array", "items": {"type": "record", "name": "E", "fields": []}}}`,
		`["null", "string", {"type": "map", "values": ["null", "long"]}, {"type": "array", "items": "double"}]`,
	}
	codecs := make([]*Codec, len(schemas))
	for i, s := range schemas {
		codecs[i] = mustCompile(f, s)
	}

	f.Add(uint8(0), false, marshal(f, schemas[0], allTypesValue()))
	f.Add(uint8(0), true, []byte(testdataFile(f, "all_types.json")))
	bin, js := linkedList(20)
	f.Add(uint8(1), false, bin)
	f.Add(uint8(1), true, js)
	deep, deepJS := linkedList(value.MaxDepth + 2)
	f.Add(uint8(1), false, deep)
	f.Add(uint8(1), true, deepJS)
	f.Add(uint8(2), false, cat(varint(1), []byte("x"), varint(0), varint(3), varint(0), varint(1), varint(1), []byte("k"), varint(0)))
	f.Add(uint8(2), true, []byte(`{"name": "a", "children": [{"name": "b", "children": [], "marks": [{}, {}], "gaps": {"k": null}}], "marks": [], "gaps": {}}`))
	f.Add(uint8(3), false, marshal(f, schemas[3], benchEvent()))
	f.Add(uint8(4), false, cat(varint(1<<31), varint(0)))
	f.Add(uint8(4), false, cat(varint(-8191), varint(0), varint(-8191), varint(0), varint(0)))
	f.Add(uint8(4), true, []byte(`[null, null, null]`))
	f.Add(uint8(5), false, cat(varint(2), varint(1), []byte("a"), varint(1<<31), varint(0), varint(0)))
	f.Add(uint8(6), true, []byte(`{"map": {"a": {"long": 1}, "b": null}}`))
	f.Add(uint8(6), true, []byte(`{"map": 5, "b": 1}`))
	f.Add(uint8(6), true, []byte(`[1.5, -0, 1e308]`))

	f.Fuzz(func(t *testing.T, which uint8, isJSON bool, data []byte) {
		c := codecs[int(which)%len(codecs)]
		var (
			v   any
			err error
		)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err = c.Decode(data, isJSON)
		runtime.ReadMemStats(&after)
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+512*len(data)); alloc > limit {
			t.Errorf("allocated %d bytes for a %d-byte payload (limit %d)", alloc, len(data), limit)
		}
		if err != nil {
			if !errors.Is(err, template.ErrInvalidPayload) {
				t.Fatalf("error %v is not invalid payload", err)
			}
			return
		}
		nodes, depth := countNodes(t, v, 0)
		if limit := 3*len(data) + 1024; nodes > limit {
			t.Errorf("%d nodes from a %d-byte payload (limit %d)", nodes, len(data), limit)
		}
		if depth > value.MaxDepth {
			t.Errorf("a tree %d levels deep", depth)
		}
		if _, err := value.AppendJSON(nil, v, 0); err != nil {
			t.Errorf("the tree does not render: %v", err)
		}
	})
}

// countNodes counts v's nodes and returns the depth of its deepest,
// failing on a Go type outside the value model.
func countNodes(t *testing.T, v any, depth int) (nodes, deepest int) {
	if depth > value.MaxDepth+1 {
		return 1, depth // deep enough to fail; no need to go on
	}
	nodes, deepest = 1, depth
	add := func(e any) {
		n, d := countNodes(t, e, depth+1)
		nodes += n
		deepest = max(deepest, d)
	}
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			add(e)
		}
	case []any:
		for _, e := range x {
			add(e)
		}
	case nil, bool, int64, float64, string, []byte, value.Decimal, time.Time:
	default:
		t.Fatalf("a %T in the tree", v)
	}
	return nodes, deepest
}
