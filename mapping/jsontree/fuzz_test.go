package jsontree

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// FuzzJSONTree compares Decode with json.Unmarshal into an `any`:
// what encoding/json refuses, Decode refuses; what it accepts
// nested at most value.MaxDepth deep decodes to the same tree (to the bits of
// every number); what it accepts nested deeper is errTooDeep.
func FuzzJSONTree(f *testing.F) {
	for _, c := range jsonTreeCases {
		f.Add([]byte(c.in))
	}
	for _, c := range jsonTreeErrors {
		f.Add([]byte(c.in))
	}
	f.Add(benchPayload)
	f.Add(benchMapPayload)
	f.Add([]byte(strings.Repeat("[", value.MaxDepth) + strings.Repeat("]", value.MaxDepth)))
	f.Add([]byte(strings.Repeat("[", value.MaxDepth+1) + strings.Repeat("]", value.MaxDepth+1)))
	f.Add([]byte(strings.Repeat(`{"a":`, value.MaxDepth) + "1" + strings.Repeat("}", value.MaxDepth)))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		var std any
		stdErr := json.Unmarshal(data, &std)
		switch {
		case stdErr != nil:
			if err == nil {
				t.Fatalf("%q: got %#v; encoding/json: %v", data, got, stdErr)
			}
		case treeDepth(std) > value.MaxDepth:
			if !errors.Is(err, value.ErrTooDeep) {
				t.Fatalf("%q: nested %d deep: got %#v, %v", data, treeDepth(std), got, err)
			}
		case err != nil:
			t.Fatalf("%q: %v; encoding/json: %#v", data, err, std)
		case !reflect.DeepEqual(got, std) || !sameFloats(got, std):
			t.Fatalf("%q: got %#v, encoding/json %#v", data, got, std)
		}
		if err != nil && (got != nil || !errors.Is(err, template.ErrInvalidPayload) || !jsonTreeErrorText.MatchString(err.Error())) {
			t.Fatalf("%q: got %#v, error %q", data, got, err)
		}
	})
}

// treeDepth is how deeply v's objects and arrays nest.
func treeDepth(v any) int {
	deepest := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, treeDepth(e))
		}
	case []any:
		for _, e := range x {
			deepest = max(deepest, treeDepth(e))
		}
	default:
		return 0
	}
	return deepest + 1
}
