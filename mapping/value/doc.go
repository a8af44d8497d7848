// Package value is the value model of a decoded payload: the tree of plain
// Go values that every format decodes into (value.go lists its nodes), how
// a template renders one (Append, AppendJSON), how a placeholder's path
// reads one (Tree, Lookup), and the errors every decoder shares
// (DecodeError, ErrTooDeep, with the one depth bound MaxDepth).
//
// It is the floor of the mapping room: the formats (mapping/avro,
// mapping/protobuf, mapping/jsontree) make these trees, the expressions
// (mapping/expr) and templates read them, and none of them needs another
// to agree on what a decimal, a timestamp or a null is.
package value
