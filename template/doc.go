// Package template renders row keys and column values from one message.
//
// It owns the template language of docs/reference.md "Templates": parsing it once at
// start-up, and rendering it for every message on the hot path. It does not
// own what a message is (source), how its event time is read (watermark), or
// what happens to a message that cannot be rendered (pipeline, deadletter).
//
// The entry points are Compile, at start-up, and Template.AppendTo, per
// message:
//
//	key, err := template.Compile("{attributes.customer_id}#{event_time:reverse}")
//	...
//	buf, err = key.AppendTo(buf[:0], &template.Input{...})
//
// # Placeholders
//
//	{message_id}          the Pub/Sub message ID
//	{publish_time}        the publish time, RFC 3339 UTC with exactly 3 fractional digits (truncated)
//	{event_time}          the event time, in the same form: 2026-01-02T03:04:05.678Z
//	{event_time:reverse}  MaxInt64 - event time in Unix milliseconds, zero-padded to 19 digits,
//	                      so that the newest event sorts first
//	{attributes.NAME}     the attribute NAME; NAME is everything after the first dot
//	{data}                the raw payload
//	{data.a.b}            a field of a JSON payload: a string decoded from its escapes, a number or
//	                      boolean in its JSON text, an object or array as compact JSON. A segment of
//	                      only digits indexes an array (and still names a member of an object). A
//	                      member whose name contains a dot cannot be reached.
//	{{  }}                literal braces
//
// Anything else inside braces is a compile error, as are an unclosed {, a
// lone }, an empty attribute name and an empty path segment.
//
// # Guarantees
//
//   - AppendTo never writes a partial value: on error it returns dst exactly
//     as given.
//   - Rendering does not allocate on success (beyond growing dst), and reads
//     the payload without unmarshalling it. A {data.…} placeholder validates
//     the whole payload in one pass per placeholder; it accepts exactly what
//     encoding/json accepts, nested at most 128 levels deep (encoding/json
//     allows 10,000, which would take a handler 2 MiB of stack), and reads
//     the same value json.Unmarshal into an `any` would: the last of
//     repeated keys wins, invalid UTF-8 and lone surrogates in strings
//     become U+FFFD. FuzzRender checks this against encoding/json.
//   - The same Input always renders the same bytes, which is what makes
//     rewriting a redelivered message idempotent.
//   - A Template is immutable and safe for concurrent use.
//
// # Errors
//
// Compile errors name the placeholder or the brace, e.g.
// `unknown placeholder "{atributes.x}"`, for config validation to prefix with
// the key path.
//
// AppendTo errors wrap one sentinel, to be told apart with errors.Is and
// mapped to a dead-letter reason:
//
//   - ErrMissingField (missing_field): an attribute is not set (an empty one
//     is fine), a JSON member is absent or null, an array index is out of
//     range.
//   - ErrInvalidPayload (invalid_payload): the payload is not valid JSON or
//     nests objects and arrays more than 128 levels deep, or the path runs
//     into a value that is not an object or array (including a payload that
//     is a bare scalar).
//   - ErrBadTime (bad_event_time): a time placeholder got a time outside
//     1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z, where its fixed-width
//     form would break (a zero time.Time is one).
//
// Error texts name the placeholder and the path, never a payload or
// attribute value, so they are safe to log and to copy into pubsink_error.
package template
