package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("project: p\npipelines:\n  - name: a\n    mode: at_least_once\n    source: {subscription: subs-a}\n    sink: {type: stdout}\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("project: p\npipelines:\n  - name: a\n    source: {subscription: subs-a}\n    sink: {table: t, colums: {}}\n"), 0o644)
	noDir := filepath.Join(dir, "nodir.yaml")
	os.WriteFile(noDir, []byte("project: p\npipelines:\n  - name: a\n    mode: at_least_once\n    source: {subscription: subs-a}\n    sink: {type: stdout}\n    dead_letter: {file: "+filepath.Join(dir, "missing", "dl.jsonl")+"}\n"), 0o644)

	cases := []struct {
		name string
		args []string
		code int
		out  string // expected in stdout+stderr
	}{
		{"no command is a usage error", nil, exitUsage, "Usage:"},
		{"an unknown command is a usage error", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"an unknown flag is a usage error", []string{"validate", "--nope"}, exitUsage, "flag provided but not defined"},
		{"version", []string{"version"}, exitOK, "pubsink "},
		{"validate accepts a good file", []string{"validate", "-c", good}, exitOK, "ok (1 pipelines)"},
		{"validate prints every problem and exits 2", []string{"validate", "--config", bad}, exitUsage, "pipelines[0].sink.colums: unknown key"},
		{"validate of a missing file exits 2", []string{"validate", "-c", filepath.Join(dir, "none.yaml")}, exitUsage, "none.yaml"},
		{"the examples validate", []string{"validate", "-c", "examples.yaml"}, exitOK, "ok (2 pipelines)"},
		{"validate refuses a dead-letter file in a missing directory", []string{"validate", "-c", noDir}, exitUsage, "pipelines[0].dead_letter.file: directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(c.args, &out, &out)
			if code != c.code || !strings.Contains(out.String(), c.out) {
				t.Fatalf("run(%q) = %d, output:\n%s\nwant %d and %q", c.args, code, out.String(), c.code, c.out)
			}
		})
	}
}

func TestConfigDefaultsToTheEnvironment(t *testing.T) {
	t.Setenv("PUBSINK_CONFIG", "examples.yaml")
	var out bytes.Buffer
	if code := run([]string{"validate"}, &out, &out); code != exitOK {
		t.Fatalf("validate with $PUBSINK_CONFIG = %d:\n%s", code, out.String())
	}
}
