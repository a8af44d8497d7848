// Package schema is what a format gives the mapping: a Codec (one compiled
// schema: it decodes payloads into the value model, checks a placeholder's
// path, and gives the schema's Types for CEL's checker), the Types
// themselves, and the did-you-mean (Closest) that every format's errors
// share.
//
// As gocloud.dev's driver packages do, it holds the small interface and
// nothing else of a format: mapping/avro and mapping/protobuf implement
// it, mapping names it, and schematest is the one conformance suite that
// every format runs.
package schema
