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

// TestFilePathsAreRelativeToTheConfigFile: a schema file and a dead-letter
// file written as relative paths are found beside the configuration file,
// whatever the working directory (the test's is app/); a missing one is
// reported with the directory it was looked for in.
func TestFilePathsAreRelativeToTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	avsc, err := os.ReadFile("../mapping/testdata/conformance/reading.avsc")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schemas", "reading.avsc"), avsc, 0o644); err != nil {
		t.Fatal(err)
	}
	writeConfig := func(schema string) string {
		path := filepath.Join(dir, "pubsink.yaml")
		cfg := `project: p
pipelines:
  - name: readings
    mode: at_least_once
    source: {subscription: readings-sub}
    payload: {format: avro, schema: ` + schema + `}
    sink: {type: stdout, row_key: "{data.id}", columns: {v: "{data.value}"}}
    dead_letter: {file: dead-letters.jsonl}
`
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	path := writeConfig("schemas/reading.avsc")
	var out strings.Builder
	if err := Validate(context.Background(), path, true, &out); err != nil {
		t.Fatalf("validate: %v", err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pipelines[0]
	if want := filepath.Join(dir, "schemas", "reading.avsc"); p.Payload.Schema != want {
		t.Errorf("payload.schema = %s, want %s", p.Payload.Schema, want)
	}
	if want := filepath.Join(dir, "dead-letters.jsonl"); p.DeadLetter.File != want {
		t.Errorf("dead_letter.file = %s, want %s", p.DeadLetter.File, want)
	}

	path = writeConfig("reading.avsc")
	err = Validate(context.Background(), path, true, &out)
	var ps config.Problems
	if !errors.As(err, &ps) || len(ps) != 1 {
		t.Fatalf("validate with a missing schema file: %v, want one problem", err)
	}
	want := "pipelines[0].payload.schema: no file reading.avsc in " + dir + " (a relative path is relative to the configuration file's directory) (line 6)"
	if ps[0].String() != want {
		t.Errorf("problem:\n%s\nwant\n%s", ps[0], want)
	}
}

// TestSchemaFileProblemsAreLocatedOnce: a .proto's syntax error is one
// location, the file's path, line and column, without the key's line (a
// second line number, of another file); a message the .proto does not
// have is reported at payload.message, with its line.
func TestSchemaFileProblemsAreLocatedOnce(t *testing.T) {
	protos, err := filepath.Abs("../mapping/testdata/proto")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pubsink.yaml")
	cfg := `project: p
pipelines:
  - name: broken
    mode: at_least_once
    source: {subscription: broken-sub}
    payload: {format: protobuf, schema: ` + protos + `/syntax_error.proto, message: pubsink.test.Broken}
    sink: {type: stdout}
  - name: misnamed
    mode: at_least_once
    source: {subscription: misnamed-sub}
    payload:
      format: protobuf
      schema: ` + protos + `/reading.proto
      message: pubsink.test.Readin
    sink: {type: stdout}
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	err = Validate(context.Background(), path, true, &strings.Builder{})
	var ps config.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("validate: %v, want problems", err)
	}
	want := `pipelines[0].payload.schema: ` + protos + `/syntax_error.proto:8:3: syntax error: expecting ';'
pipelines[1].payload.message: no message "pubsink.test.Readin" in ` + protos + `/reading.proto; did you mean "pubsink.test.Reading"? (its messages: pubsink.test.Reading, pubsink.test.Reading.Location, pubsink.test.Node) (line 14)`
	if ps.Error() != want {
		t.Errorf("problems:\n%s\nwant\n%s", ps.Error(), want)
	}
}
