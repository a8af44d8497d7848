package maptest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pubsink/pubsink/config"
)

// FuzzParse: any text, a tests file or not, parses or gives problems,
// each with a message; it never panics (a YAML null where a value was
// expected once did).
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/bad/*.test.yaml")
	seeds = append(seeds, "../examples.test.yaml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(passing))
	f.Add([]byte("cases:\n  - {name: n, pipeline: p, message: {json: null}, expect: {no_rows: true}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "testdata")
		if err == nil {
			if file == nil || len(file.Cases) == 0 {
				t.Fatal("no problem and no case")
			}
			return
		}
		var ps config.Problems
		if !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("error %v is not a list of problems", err)
		}
		for _, p := range ps {
			if p.Message == "" {
				t.Fatalf("a problem without a message at %q", p.Path)
			}
		}
	})
}
