package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The tier rules are written once, in ARCHITECTURE.md, in its `rules` and
// `external` blocks; this test reads them there and checks every import of
// every package of the module against them, so that a new import that
// breaks a tier fails with the sentence of the rule it breaks.

const module = "github.com/pubsink/pubsink"

// tiers assigns every package of the module to a tier, by the table in
// ARCHITECTURE.md. A package that matches none fails the test: a new
// package must be placed deliberately.
var tiers = []struct{ tier, pattern string }{
	{"cmd", "."},
	{"app", "app"},
	{"rig", "internal/testenv/..."},
	{"helper", "internal/..."},
	{"helper", "docs"},
	{"tool", "tools/..."},
	{"test", "e2e"},
	{"deploy", "deploy"},
	{"part", "pipeline"}, {"part", "source"}, {"part", "dedupe"}, {"part", "members"}, {"part", "watermark"},
	{"part", "sinks/..."}, {"part", "deadletter/..."}, {"part", "reprocess"}, {"part", "audit"}, {"part", "maptest"}, {"part", "setupplan"}, {"part", "config"}, {"part", "template"}, {"part", "mapping"}, {"part", "mapping/..."},
}

// rule is one line of a rules block: who may import what.
type rule struct {
	who      string   // a tier or a package pattern
	may      []string // tiers, package patterns, or -pattern to take one away
	sentence string
	line     string
}

// goPackage is what the test reads of `go list -json`.
type goPackage struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func TestImportsFollowTheTiers(t *testing.T) {
	rules, external := readRules(t, "ARCHITECTURE.md")
	pkgs := listPackages(t)
	// The rule for a package: its own line, else its tier's.
	ruleFor := func(rel string) (rule, bool) {
		for _, r := range rules {
			if r.who == rel {
				return r, true
			}
		}
		for _, r := range rules {
			if r.who == tierOf(rel) {
				return r, true
			}
		}
		return rule{}, false
	}

	for _, p := range pkgs {
		rel := relative(p.ImportPath)
		if tierOf(rel) == "" {
			t.Errorf("package %s is in no tier of ARCHITECTURE.md: place it in the table there and in this test's tiers", rel)
			continue
		}
		r, ok := ruleFor(rel)
		if !ok {
			t.Errorf("package %s (tier %s) has no rule in ARCHITECTURE.md's rules block", rel, tierOf(rel))
			continue
		}
		check := func(imports []string, inTests bool) {
			for _, imp := range imports {
				if !strings.HasPrefix(imp, module) {
					continue
				}
				to := relative(imp)
				if to == rel || (inTests && tierOf(to) == "rig") || r.allows(to) {
					continue
				}
				where := "imports"
				if inTests {
					where = "imports in its tests"
				}
				t.Errorf("%s %s %s (tier %s), which breaks the rule %q: %s", rel, where, to, tierOf(to), r.line, r.sentence)
			}
		}
		check(p.Imports, false)
		check(append(slices.Clone(p.TestImports), p.XTestImports...), true)
	}

	for _, e := range external {
		for _, p := range pkgs {
			rel := relative(p.ImportPath)
			for _, imp := range p.Imports { // tests may use the client to set up fakes
				if imp != e.who && !strings.HasPrefix(imp, e.who+"/") {
					continue
				}
				if !e.allows(rel) {
					t.Errorf("%s imports %s, which breaks the rule %q: %s", rel, imp, e.line, e.sentence)
				}
				break
			}
		}
	}
}

// TestTheRulesCatchABrokenTier: the checker must fail for an import that
// breaks a rule, or the test above could pass by reading no rule at all.
func TestTheRulesCatchABrokenTier(t *testing.T) {
	rules, external := readRules(t, "ARCHITECTURE.md")
	if len(rules) < 8 || len(external) < 1 {
		t.Fatalf("read %d rules and %d external rules from ARCHITECTURE.md; the blocks are missing or unparsed", len(rules), len(external))
	}
	byWho := map[string]rule{}
	for _, r := range rules {
		byWho[r.who] = r
	}
	for _, c := range []struct {
		who, to string
		want    bool
	}{
		{"part", "pipeline", false}, // dedupe importing pipeline
		{"part", "source", true},
		{"part", "app", false},
		{"config", "internal/state", false},
		{"config", "template", true},
		{"helper", "config", false},
		{"cmd", "config", false},
		{"cmd", "app", true},
		{"app", "internal/testenv/emulator", false},
		{"app", "tools/chaos", false},
	} {
		r, ok := byWho[c.who]
		if !ok {
			t.Fatalf("no rule for %s", c.who)
		}
		got := r.allows(c.to)
		if got != c.want {
			t.Errorf("rule %q allows %s: %v, want %v", r.line, c.to, got, c.want)
		}
	}
}

// tierOf is the tier of the package in folder rel, "" for none.
func tierOf(rel string) string {
	for _, tp := range tiers {
		if matches(tp.pattern, rel) {
			return tp.tier
		}
	}
	return ""
}

// allows reports whether r lets its packages import the package in folder
// to: a name of r names its tier or matches it, and no -name takes it away.
func (r rule) allows(to string) bool {
	ok := false
	for _, m := range r.may {
		switch {
		case strings.HasPrefix(m, "-") && matches(m[1:], to):
			return false
		case m == tierOf(to) || matches(m, to):
			ok = true
		}
	}
	return ok
}

// readRules parses the ```rules and ```external blocks of the file. A line
// is `WHO may import: A B -C | sentence` (or `may be imported by:`);
// "(nothing)" allows nothing.
func readRules(t *testing.T, path string) (rules, external []rule) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```rules"), strings.HasPrefix(line, "```external"):
			block = strings.TrimPrefix(line, "```")
			continue
		case strings.HasPrefix(line, "```"):
			block = ""
			continue
		case block == "" || strings.TrimSpace(line) == "":
			continue
		}
		spec, sentence, ok := strings.Cut(line, "|")
		who, list, ok2 := strings.Cut(spec, " may import:")
		if !ok2 {
			who, list, ok2 = strings.Cut(spec, " may be imported by:")
		}
		if !ok || !ok2 {
			t.Fatalf("%s: cannot read the rule line %q", path, line)
		}
		r := rule{who: strings.TrimSpace(who), sentence: strings.TrimSpace(sentence), line: strings.TrimSpace(spec)}
		r.line = strings.Join(strings.Fields(r.line), " ")
		for _, m := range strings.Fields(list) {
			if m != "(nothing)" {
				r.may = append(r.may, m)
			}
		}
		if block == "rules" {
			rules = append(rules, r)
		} else {
			external = append(external, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rules, external
}

// listPackages runs `go list -json ./...` in the module.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(&out)
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	return pkgs
}

// relative turns an import path of the module into its folder ("." for
// the module's root).
func relative(importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}

// matches reports whether the folder rel matches pattern: equal, or under
// it for a pattern ending in /... .
func matches(pattern, rel string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return pattern == rel
}

// TestThePipelineFindsNoPartByTypeAssertion: pipeline.Deps names what each
// part does, so the pipeline's own code asserts no type: a type assertion
// there would discover a method a wrapper can hide (see ARCHITECTURE.md).
func TestThePipelineFindsNoPartByTypeAssertion(t *testing.T) {
	files, err := filepath.Glob("pipeline/*.go")
	if err != nil || len(files) < 5 {
		t.Fatalf("found %d files in pipeline/ (%v)", len(files), err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range typeAssertions(t, path, src) {
			t.Errorf("%s: a type assertion in the pipeline: name the method in the part's interface in pipeline/deps.go instead", at)
		}
	}
	// The check must see both forms, or the loop above could pass blind.
	probe := "package p\nfunc f(x any) { _, _ = x.(interface{ Check() error }); switch x.(type) {} }\n"
	if got := typeAssertions(t, "probe.go", []byte(probe)); len(got) != 2 {
		t.Fatalf("typeAssertions found %v in a probe with two", got)
	}
}

// typeAssertions returns the positions of the type assertions and type
// switches in the Go source src.
func typeAssertions(t *testing.T, path string, src []byte) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var at []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeAssertExpr: // x.(T), and x.(type) inside a type switch
			at = append(at, fset.Position(n.Pos()).String())
		}
		return true
	})
	return at
}
