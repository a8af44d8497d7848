// Package jsontext is the lexical layer of the module's JSON readers: it
// scans JSON text token by token, exactly as strictly as encoding/json, and
// decodes a token's text, but builds nothing and knows no schema. It is
// named after Go's encoding/json/jsontext, which separates the tokenizer
// from the decoders built on it in the same way.
//
// Its readers keep their own structure on top of it: template's path finder
// (template/json.go), which finds one field's value in a single validating
// pass without allocating; mapping/jsontree's tree builder, which decodes a
// payload into the value model for expressions; and the Avro-JSON decoder,
// which is directed by a schema.
//
// The entry point is a Scanner over the text, which a reader keeps (usually
// embedded) on its own stack:
//
//	s := jsontext.Scanner{Data: data}
//	if s.Next() == '"' {
//		start := s.Pos
//		flags, p := s.String() // p != jsontext.OK: not valid JSON at s.Pos
//		...
//		text := jsontext.Unquote(s.Data[start+1:s.Pos-1]) // or Verbatim, Equal
//	}
//
// Scanner's methods scan one token each (SkipSpace, Next, Literal, Number,
// String, and PlainString, String's inlined fast path for the common
// string), what follows a member or element (More), or one whole value
// (SkipValue, with a bound on nesting); AtEnd checks that nothing but white
// space follows a document's value. A failing method returns a Problem,
// with Pos at the byte that is wrong (see each Problem for where); each
// reader words its own errors from it.
// Functions decode what the scanner accepted: a string token's inside
// (AppendUnquoted, Unquote, Equal, Verbatim, AppendUnescaped), a number
// token (Float64), a whole object or array (AppendCompact).
//
// # Guarantees
//
//   - A token is accepted exactly when encoding/json accepts it: the number
//     grammar of RFC 8259, strings with its escapes and no control
//     characters; invalid UTF-8 is accepted in strings, as encoding/json
//     accepts it.
//   - A string's inside decodes as json.Unmarshal decodes it: escapes
//     resolved, a surrogate pair joined, a lone surrogate and each invalid
//     UTF-8 byte U+FFFD (AppendUnescaped keeps such a byte as it is). A
//     number's value is strconv.ParseFloat's.
//   - Scanning allocates nothing; only Unquote and the Append functions'
//     growth of dst do. A Scanner is not safe for concurrent use; the
//     functions are.
package jsontext
