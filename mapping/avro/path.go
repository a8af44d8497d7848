package avro

// Checking placeholder paths against an Avro schema: CheckPath tells, when
// a mapping compiles, whether a {data.…} placeholder names a field that the
// compiled schema (compile.go) can hold.

import (
	"fmt"
	"strings"

	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// eachStep, in a path given to CheckPath, stands for "every element" of
// the array before it: a mapping with `each: data.readings` can check its
// {item.value} as CheckPath([readings, eachStep, value]). The steps
// after the last eachStep are the placeholder's own, from {item}.
var eachStep = template.Segment{Key: "[]", Index: -2}

// CheckPath checks that path, a {data.…} placeholder's, names a field that
// the schema can hold (schema.Codec's CheckPath): it walks records (by field
// name), maps (any key), arrays (a numeric index, or eachStep), and
// unions (any branch that has the rest of the path); any other type is a
// leaf, logical types included. The caller prefixes the placeholder:
//
//	{data.sensr}: no field "sensr" in record Reading; did you mean "sensor"?
func (c *Codec) CheckPath(path []template.Segment) error {
	own, root := 0, "data"
	for i, s := range path {
		if s.Index == eachStep.Index {
			own, root = i+1, "item"
		}
	}
	return check(c.root, path, 0, root, own)
}

// check checks path[i:] from n. The value at path[:i] is called, in
// messages, by its steps after the placeholder's own start (own).
func check(n *node, path []template.Segment, i int, root string, own int) error {
	if i == len(path) {
		return nil
	}
	at := func() string { // the value at path[:i], as the message calls it
		switch {
		case i == own:
			return root
		case i > own:
			return root + "." + value.PathText(path[own:i])
		}
		var keys []string // within each's path
		for _, s := range path[:i] {
			if s.Index != eachStep.Index {
				keys = append(keys, s.Key)
			}
		}
		if len(keys) == 0 {
			return "the payload"
		}
		return strings.Join(keys, ".")
	}
	seg := path[i]
	each := seg.Index == eachStep.Index
	switch n.kind {
	case avroRecord:
		if each {
			break
		}
		j, ok := n.index[seg.Key]
		if !ok {
			e := &checkError{msg: fmt.Sprintf("no field %q in record %s", seg.Key, n.name), rank: 1}
			names := make([]string, len(n.fields))
			for k, f := range n.fields {
				names[k] = f.name
			}
			if s := schema.Closest(seg.Key, names); s != "" {
				e.msg += fmt.Sprintf("; did you mean %q?", s)
				e.rank = 2
			}
			return e
		}
		return check(n.fields[j].node, path, i+1, root, own)
	case avroMap:
		if each {
			break
		}
		return check(n.elem, path, i+1, root, own)
	case avroArray:
		if seg.Index < 0 && !each {
			return fmt.Errorf("%s is an array: index it by a number (%s.0), or make a row per element with each", at(), at())
		}
		return check(n.elem, path, i+1, root, own)
	case avroUnion:
		var best error // the first of the most telling errors
		for _, b := range n.branches {
			if b.kind == avroNull {
				continue
			}
			err := check(b, path, i, root, own)
			if err == nil {
				return nil
			}
			if best == nil || rank(err) > rank(best) {
				best = err
			}
		}
		if best == nil {
			return fmt.Errorf("%s is always null", at())
		}
		return best
	}
	if each {
		return fmt.Errorf("each needs an array: %s has type %s", at(), n.describe())
	}
	if n.kind == avroNull {
		return fmt.Errorf("%s is always null", at())
	}
	return &checkError{msg: fmt.Sprintf("%s has type %s, not a record, map or array: it has no %q", at(), n.describe(), seg.Key)}
}

// checkError is CheckPath's complaint about a record's field (rank
// 1, 2 with a suggestion) or a leaf (0); of its branches' complaints, a
// union's check returns the first of the highest rank. Other errors rank 1.
type checkError struct {
	msg  string
	rank int
}

func (e *checkError) Error() string { return e.msg }

func rank(err error) int {
	if e, ok := err.(*checkError); ok {
		return e.rank
	}
	return 1
}
