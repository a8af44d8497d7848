package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration: the key path it is about,
// as `pipelines[0].sink.row_key`, and what is wrong. Path is empty for a
// problem with the file as a whole.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Problems is every problem found in one configuration. Load and Parse
// return it, as a value, as their error; test for it with errors.As.
type Problems []Problem

// Error prints one "path: message" per line, in the order found.
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
