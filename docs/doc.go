// Package docs carries into the binary the one documentation file that it
// prints: the JSON Schema of the configuration, pubsink.schema.json, which
// `pubsink config schema` writes out. The file is generated from the code
// and docs/reference.md (config.JSONSchema; config's
// TestSchemaFileIsUpToDate keeps it current), so the binary prints the
// schema of the code it was built from. The package imports nothing.
package docs

import _ "embed" // for go:embed

// ConfigSchema is pubsink.schema.json: the configuration's JSON Schema
// (draft-07), indented JSON ending in a newline. Read-only.
//
//go:embed pubsink.schema.json
var ConfigSchema []byte
