// Package jsontree decodes a JSON payload into the value model (package
// value) for CEL expressions: objects, arrays, strings, float64 numbers (CEL
// doubles, as in google.protobuf.Struct), booleans and null, in one pass
// (Decode). It accepts what encoding/json accepts and decodes it as
// json.Unmarshal into an `any` does (FuzzJSONTree holds it to that), but
// refuses what template's JSON reader refuses: more than value.MaxDepth
// levels of nesting. Its errors wrap template.ErrInvalidPayload. Its
// tokens are internal/jsontext's, the tokenizer that template's JSON reader
// scans with too, so that both read JSON text alike.
//
// Templates never need it: they read the JSON text itself (package
// template), and a JSON pipeline whose expressions read no payload builds
// no tree at all.
package jsontree
