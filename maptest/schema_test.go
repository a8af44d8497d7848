package maptest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/config"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.expected")

const schemaFile = "../docs/pubsink-test.schema.json"

// TestSchemaHasTheParsersKeys walks the types Parse decodes into beside
// docs/pubsink-test.schema.json: at every level, the schema's properties
// must be the keys Parse reads, and it must refuse others.
func TestSchemaHasTheParsersKeys(t *testing.T) {
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	defs := doc["definitions"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		for {
			ref, ok := s["$ref"].(string)
			if !ok {
				return s
			}
			s = defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
	}
	var walk func(typ reflect.Type, s map[string]any, path string)
	walk = func(typ reflect.Type, s map[string]any, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			if typ.Kind() == reflect.Slice {
				s = resolve(s["items"].(map[string]any))
			}
			typ = typ.Elem()
		}
		s = resolve(s)
		if typ.Kind() != reflect.Struct {
			return
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s: the schema must refuse unknown keys (additionalProperties: false)", path)
		}
		props, _ := s["properties"].(map[string]any)
		var keys []string
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			k := yamlKey(f)
			if k == "" {
				continue
			}
			keys = append(keys, k)
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s: Parse reads %s, the schema has no such property", path, joinPath(path, k))
				continue
			}
			walk(f.Type, ps, joinPath(path, k))
		}
		for k := range props {
			if !slices.Contains(keys, k) {
				t.Errorf("%s: the schema has %s, Parse does not read it", path, joinPath(path, k))
			}
		}
	}
	walk(reflect.TypeOf(File{}), doc, "")
}

// TestExamplesTestFileFollowsTheSchema validates ../examples.test.yaml
// and the passing cases of these tests with the schema, and checks that
// the example names the schema for editors; a bad file the parser refuses
// the schema refuses too.
func TestExamplesTestFileFollowsTheSchema(t *testing.T) {
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	sdoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("pubsink-test.schema.json", sdoc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("pubsink-test.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	instance := func(t *testing.T, text []byte) any {
		var v any
		if err := yaml.Unmarshal(text, &v); err != nil {
			t.Fatal(err)
		}
		// Through JSON, as an editor sees it: times as text, maps of text keys.
		b, err := json.Marshal(config.Normalize(v))
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	example, err := os.ReadFile("../examples.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(example, []byte("# yaml-language-server: $schema=docs/pubsink-test.schema.json\n")) {
		t.Error("examples.test.yaml does not start with # yaml-language-server: $schema=docs/pubsink-test.schema.json")
	}
	if err := sch.Validate(instance(t, example)); err != nil {
		t.Errorf("examples.test.yaml: %v", err)
	}
	if err := sch.Validate(instance(t, []byte(passing))); err != nil {
		t.Errorf("the passing cases: %v", err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range regexp.MustCompile("(?ms)^```yaml\n(# yaml-language-server: \\$schema=docs/pubsink-test.schema.json\n.*?)^```").FindAllSubmatch(readme, -1) {
		n++
		if err := sch.Validate(instance(t, b[1])); err != nil {
			t.Errorf("README's tests file: %v", err)
		}
		if _, err := Parse(b[1], ".."); err != nil {
			t.Errorf("README's tests file: %v", err)
		}
	}
	if n == 0 {
		t.Error("README.md has no yaml block of a tests file (# yaml-language-server: $schema=docs/pubsink-test.schema.json)")
	}
	for _, bad := range []string{"unknown-keys", "outcomes", "payloads"} {
		text, err := os.ReadFile("testdata/bad/" + bad + ".test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if sch.Validate(instance(t, text)) == nil {
			t.Errorf("testdata/bad/%s.test.yaml: the schema accepts what Parse refuses", bad)
		}
	}
}
