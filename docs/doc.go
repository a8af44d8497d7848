// Package docs carries into the binary the documentation files that it
// prints: the JSON Schema of the configuration, pubsink.schema.json, which
// `pubsink config schema` writes out, and that of pubsink test's tests
// file, pubsink-test.schema.json (`pubsink config schema --tests`). The
// first is generated from the code and docs/reference.md (config.JSONSchema;
// config's TestSchemaFileIsUpToDate keeps it current), so the binary prints
// the schema of the code it was built from. The package imports nothing.
package docs

import _ "embed" // for go:embed

// ConfigSchema is pubsink.schema.json: the configuration's JSON Schema
// (draft-07), indented JSON ending in a newline. Read-only.
//
//go:embed pubsink.schema.json
var ConfigSchema []byte

// TestsSchema is pubsink-test.schema.json: the JSON Schema (draft-07) of
// the tests file `pubsink test` reads, which `pubsink config schema
// --tests` writes out. It is written by hand; maptest's
// TestSchemaHasTheParsersKeys keeps its keys those Parse reads. Read-only.
//
//go:embed pubsink-test.schema.json
var TestsSchema []byte
