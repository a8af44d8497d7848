// Package mapping turns one message into what the pipeline writes: its
// event time, its dedupe key, whether the filter keeps it, and its rows.
//
// It owns the payload's format (JSON, Avro, Protocol Buffers, string, raw)
// and schema (a schema file, or per message the revision of the topic's
// Pub/Sub schema that its googclient_schema* attributes name, fetched once
// and cached), the CEL expressions (filter, when, each, {= EXPR} computed
// values), the templates of every mapping, and the bounds on what a message
// may make (rows, sizes, decoded memory). It does not own fetching a schema
// (source.Schemas), writing rows (sinks), dedupe or the watermark, nor what
// happens to a message it refuses (pipeline, deadletter).
//
// The entry points are New, once per pipeline (it compiles everything and
// reports every problem as config.Problems with its key), CheckRevision (a
// topic schema's revision checked ahead), and Mapper.Map, per message:
//
//	m, err := mapping.New(cfg, schemas, btsink.Limits)
//	...
//	var r mapping.Result
//	err = m.Map(ctx, msg, &r) // r.Filtered, r.EventTime, r.Key, r.Rows
//
// # The rooms below it
//
// mapping holds the schema cache and the rows of a message; what it
// builds on has a package each: mapping/value (the value model every
// format decodes into, and how a template renders it), mapping/schema (the
// Codec every format implements: decode, check a path, a schema's CEL
// types; schematest is the conformance suite every format runs), one
// package per format (mapping/avro, mapping/protobuf, mapping/jsontree for
// JSON's tree; string and raw need no code of their own), and mapping/expr
// (CEL's environment, typed checking and evaluation). None of them imports
// mapping or another format.
//
// # How a message is mapped
//
//  1. A JSON pipeline whose expressions read no payload takes the plain path:
//     templates read the JSON text itself (package template), no tree is
//     built, and Map allocates nothing of its own.
//  2. Otherwise the payload is decoded into a tree of plain Go values, the
//     same for every format (package value): Avro (mapping/avro) and Protocol
//     Buffers (mapping/protobuf) before anything reads it, JSON, string and raw
//     only when an expression reads data (mapping/jsontree).
//  3. The filter runs first, before the event time and the dedupe key are
//     read, so that a heartbeat without them is filtered, not refused.
//  4. Event time and dedupe key: attributes, or templates over the payload.
//  5. Each mapping in order: when, then one row, or one per element of each
//     (the element is {item…} and item): its row key, its op, its cells
//     (see below), each row checked against the sink's limits, at most
//     sink.max_rows rows in all.
//
// # Ops and missing values
//
// A mapping's op is fixed (set, delete, delete_family, delete_columns: no
// expression runs) or a CEL expression of type string, with the variables
// of its templates (item too, with each), evaluated per row: one that fails,
// or whose value names no operation, makes the message expression_failed.
// A change mapping (config.Mapping.IsChange) gives each row its op and its
// write mode (sinks.Row.Change) for the sink to apply by event time; a plain
// mapping's rows keep Change's zero value and are written as before. A
// delete renders no column, only the row key and the timestamp (and, for
// delete_columns, names the columns it deletes: delete_columns, or the
// mapping's columns).
//
// A column's value is missing when its template fails with
// template.ErrMissingField (an absent or null JSON member, an Avro field
// whose union is null, an unset proto field, an absent attribute or item
// field, an index out of range, an expression whose value is null or an
// empty optional), or when its expression reads an absent map key, field or
// index (cel-go's resolution error, told by its type, not its text:
// expr.ErrNoSuchValue). The column's policy (on_missing, on_missing_columns)
// decides: dead_letter, the message, with the reason and text it had before
// policies; skip, no cell; empty, an empty cell; delete, the column in
// Change.Delete. Result.Missing counts them by policy. Any other failure (a
// payload that does not decode, a type error, the cost limit), and a row
// key, timestamp or dedupe key that is missing, is the message's whatever
// the policy. A plain mapping's row whose every column was skipped is not
// made; a change mapping's row is made without cells. A plain mapping whose
// policies are all dead_letter renders as it did (renderCells: no new frame
// on the stack, no allocation); the others take renderOp (change.go).
//
// # Types over a schema
//
// With a schema file, New type-checks every expression and {item…} path
// against the schema's types (the Codec's schema.Types, checked by
// mapping/expr: records and messages as CEL object types, the rest as the
// value model decodes them), so that a misspelled field or an operator
// over the wrong types is a problem at its key, not a dead-lettered
// message. CheckRevision does the same against one revision of a topic's
// schema, for validate and run's start-up (app). The typed check only
// refuses: every expression is evaluated by the program
// compiled over a dyn data, whatever the schema or revision.
//
// # Guarantees
//
//   - The same message maps to the same rows, bytes and cell timestamps:
//     expressions are side-effect free and read no clock, so a redelivery
//     rewrites what the first delivery wrote.
//   - A message is refused whole or mapped whole: Map never returns some of
//     a message's rows.
//   - Decoding is bounded whatever the payload: nesting at most 128 levels,
//     a number of decoded values bounded by the payload's size (a hostile
//     block count or a flood of empty messages is refused before it is
//     allocated), and the payload bytes whose trees are held at once at most
//     max_outstanding_bytes/64 (BoundDecoding): decoded trees take at most
//     about the memory the flow control allows the raw payloads.
//   - Expressions are bounded by a cost limit (mapping/expr says how it is
//     counted), so that no payload can hold a handler.
//   - A Mapper is safe for concurrent use; a topic schema's revision is
//     fetched once however many messages need it at once.
//
// # Errors
//
// Map returns nil, a *BadInput with its dead-letter reason (invalid_payload,
// missing_field, bad_event_time, too_large, schema_unavailable,
// expression_failed, too_many_rows), or a transient error: a topic schema
// that could not be fetched yet, or ctx's error while the message waits for
// its share of the decoding budget. The pipeline retries transient errors
// and never dead-letters them. Error texts name the key, the placeholder,
// the path or the decoder's complaint, never a payload value.
//
// # Costs
//
// Measured with go test -bench Map (map_bench_test.go) on the shared 2-core
// machine, ~200-byte JSON payload: the plain path's default mapping about
// 0.1 µs and 0 allocations, four {data.…} placeholders about 1.5 µs; a
// filter on one attribute adds about 0.1 µs and no allocation; a filter on
// a payload field decodes the JSON for CEL (mapping/jsontree). Avro and Protocol
// Buffers decoding: see mapping/avro and mapping/protobuf.
package mapping
