package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// CI fuzzes each target that .ci/run names as PKG:NAME. `go test -fuzz`
// on a package without that target only warns and passes, so a target
// that moved to another package would silently stop being fuzzed: every
// name must be a Fuzz function of its package's tests, and every fuzz
// target of the module must be named (the README lists them too).
func TestCIFuzzesEveryTargetWhereItIs(t *testing.T) {
	run, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`([a-z][a-z0-9/]*):(Fuzz\w+)`).FindAllStringSubmatch(string(run), -1) {
		named[m[1]+":"+m[2]] = true
	}
	if len(named) == 0 {
		t.Fatal(".ci/run names no fuzz target")
	}
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	found := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			found[filepath.ToSlash(filepath.Dir(path))+":"+m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for target := range named {
		if !found[target] {
			t.Errorf(".ci/run fuzzes %s, which is no fuzz target of that package", target)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for target := range found {
		if !named[target] {
			t.Errorf("fuzz target %s is not in .ci/run's list", target)
		}
		if name := target[strings.Index(target, ":")+1:]; !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("fuzz target %s is not in the README's list", target)
		}
	}
}
