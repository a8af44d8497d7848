package config

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a configuration: the key path it is about,
// as `pipelines[0].sink.row_key`, and what is wrong. Path is empty for a
// problem with the file as a whole. Line is the line of the file the path
// (or the nearest key above it) is on, 0 when the file does not say (a key
// set only by the environment, a key that is missing).
type Problem struct {
	Path    string
	Message string
	Line    int
	// Elsewhere: the message locates the problem in another file (a schema
	// file's PATH:LINE:COL), so String leaves out Line, which would be a
	// second line number of another file. Line still orders the problem.
	Elsewhere bool
}

func (p Problem) String() string {
	s := p.Message
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Line > 0 && !p.Elsewhere {
		s += fmt.Sprintf(" (line %d)", p.Line)
	}
	return s
}

// Problems is every problem found in one configuration. Load and Parse
// return it, as a value, as their error; test for it with errors.As.
type Problems []Problem

// Error prints one "path: message (line N)" per line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// collector gathers problems. A path reported as broken (an unknown key, a
// value of the wrong type) hides later problems at or under it, which would
// only repeat the first in other words.
type collector struct {
	list   Problems
	broken []string
}

func (c *collector) add(path, format string, args ...any) {
	for _, b := range c.broken {
		if path == b || strings.HasPrefix(path, b+".") || strings.HasPrefix(path, b+"[") {
			return
		}
	}
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	c.list = append(c.list, Problem{Path: path, Message: msg})
}

// addBroken reports a problem and hides later ones under path.
func (c *collector) addBroken(path, format string, args ...any) {
	c.add(path, format, args...)
	c.broken = append(c.broken, path)
}

// Locate gives problems found after Parse (by compiling what the file
// names: schemas, expressions) the lines of their paths in data, the file
// Parse read, as Parse gives its own, and puts them in file order.
func (ps Problems) Locate(data []byte) { ps.locate(keyLines(data)) }

// locate gives each problem the line of its path, or of the nearest key
// above it that the file has, and puts them in file order; problems
// without a line keep their order, after the others.
func (ps Problems) locate(lines map[string]int) {
	for i := range ps {
		for path := ps[i].Path; path != ""; path = parentPath(path) {
			if n, ok := lines[path]; ok {
				ps[i].Line = n
				break
			}
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i].Line, ps[j].Line
		return a > 0 && (b == 0 || a < b)
	})
}

// parentPath is path without its last key or index: "a.b[2].c" → "a.b[2]"
// → "a.b" → "a" → "".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}
