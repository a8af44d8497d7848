package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The README links into docs/ and docs/ links back; a section that moves
// (the bench went to docs/performance.md) or is renamed breaks links that
// nothing else would notice. This test follows every relative link of every
// Markdown file of the repository to its file and, for a Markdown target,
// to a heading of that file, with GitHub's anchor rules.

var (
	fencedBlock  = regexp.MustCompile("(?ms)^```.*?^```")
	inlineCode   = regexp.MustCompile("`[^`\n]*`")
	markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading      = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*$`)
)

func TestEveryMarkdownLinkResolves(t *testing.T) {
	anchorsOf := map[string]map[string]bool{} // by file: each file's headings are read once
	for _, file := range markdownFiles(t) {
		for _, target := range relativeLinks(t, file) {
			if problem := resolveLink(file, target, anchorsOf); problem != "" {
				t.Errorf("%s: link (%s): %s", file, target, problem)
			}
		}
	}
}

// markdownFiles lists the repository's Markdown files, test data left out.
func markdownFiles(t *testing.T) []string {
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d Markdown files (%v); want README.md, ARCHITECTURE.md and docs/", len(files), files)
	}
	return files
}

// relativeLinks returns the targets of the file's links that stay in the
// repository, leaving out code, where `](x)` is text, not a link.
func relativeLinks(t *testing.T, file string) []string {
	text := readText(t, file)
	text = fencedBlock.ReplaceAllString(text, "")
	text = inlineCode.ReplaceAllString(text, "")
	var targets []string
	for _, m := range markdownLink.FindAllStringSubmatch(text, -1) {
		if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
			targets = append(targets, m[1])
		}
	}
	return targets
}

// resolveLink says what is wrong with a link from file to target, or "".
func resolveLink(file, target string, anchorsOf map[string]map[string]bool) string {
	path, anchor, _ := strings.Cut(target, "#")
	resolved := file
	if path != "" {
		resolved = filepath.Join(filepath.Dir(file), path)
		if _, err := os.Stat(resolved); err != nil {
			return "no file " + resolved
		}
	}
	if anchor == "" || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	if anchorsOf[resolved] == nil {
		text, err := os.ReadFile(resolved)
		if err != nil {
			return err.Error()
		}
		anchorsOf[resolved] = headingAnchors(string(text))
	}
	if !anchorsOf[resolved][anchor] {
		return "no heading of " + resolved + " has the anchor #" + anchor
	}
	return ""
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, punctuation dropped, spaces as hyphens, and a
// repeated one suffixed -1, -2, ...
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fencedBlock.ReplaceAllString(text, ""), -1) {
		slug := headingSlug(m[1])
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func headingSlug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestHeadingSlugIsGitHubs(t *testing.T) {
	for title, want := range map[string]string{
		"Change mappings and ordering":                                "change-mappings-and-ordering",
		"The Pub/Sub emulator fixes":                                  "the-pubsub-emulator-fixes",
		"Scaling: replicas":                                           "scaling-replicas",
		"Real payloads: formats, filters, computed values, many rows": "real-payloads-formats-filters-computed-values-many-rows",
		"`sink.batch` and `dead_letter`":                              "sinkbatch-and-dead_letter",
	} {
		if got := headingSlug(title); got != want {
			t.Errorf("headingSlug(%q) = %q; want %q", title, got, want)
		}
	}
}

func readText(t *testing.T, file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
