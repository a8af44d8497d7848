package app

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "limit")
		os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	cases := map[string]int64{
		"536870912\n":           536870912,
		"max\n":                 0,
		"9223372036854771712\n": 0, // cgroup v1's "unlimited"
		"garbage":               0,
	}
	for content, want := range cases {
		if got := readLimit(write(content)); got != want {
			t.Errorf("readLimit(%q) = %d, want %d", content, got, want)
		}
	}
	if got := readLimit(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("missing file: %d, want 0", got)
	}
}
