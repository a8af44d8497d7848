package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/config"
)

// TestValidateCompilesTheMappingWithLines: validate (and every command that
// loads the file) compiles the schema file and the expressions, checks
// placeholders' paths against the schema, and reports each problem at its
// key's line, as the file's own problems are.
func TestValidateCompilesTheMappingWithLines(t *testing.T) {
	dir := t.TempDir()
	avsc, err := os.ReadFile("../mapping/testdata/conformance/reading.avsc")
	if err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join(dir, "reading.avsc")
	if err := os.WriteFile(schema, avsc, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pubsink.yaml")
	cfg := `project: p
state: {instance: i}
pipelines:
  - name: readings
    source: {subscription: readings-sub}
    payload: {format: avro, schema: ` + schema + `}
    filter: "dta.kind == 'x'"
    sink:
      table: readings
      row_key: "{data.sensr}#{data.id}"
      columns:
        cents: "{= int(data.value * 100.0}"
        v: "{data.value}"
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	err = Validate(context.Background(), path, true, &strings.Builder{})
	var ce *ConfigError
	var ps config.Problems
	if !errors.As(err, &ce) || !errors.As(err, &ps) {
		t.Fatalf("validate: %v, want a ConfigError with problems", err)
	}
	want := []string{
		`pipelines[0].filter: 1:1: undeclared reference to 'dta' (did you mean 'data'?)`,
		`pipelines[0].sink.row_key: {data.sensr}: no field "sensr" in record`,
		`pipelines[0].sink.columns.cents: `,
	}
	lines := []int{7, 10, 12}
	if len(ps) != len(want) {
		t.Fatalf("problems:\n%v", ps)
	}
	for i, p := range ps {
		if !strings.HasPrefix(p.String(), want[i]) || p.Line != lines[i] {
			t.Errorf("problem %d: %q (line %d), want %q… on line %d", i, p.String(), p.Line, want[i], lines[i])
		}
	}
	if !strings.Contains(ps[1].Message, `did you mean "sensor"?`) {
		t.Errorf("no suggestion: %s", ps[1].Message)
	}
	// run refuses the same file before it opens any client.
	if _, err := LoadConfig(path); !errors.As(err, &ce) {
		t.Errorf("LoadConfig: %v, want a ConfigError", err)
	}
}
