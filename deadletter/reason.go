package deadletter

// Reason says why a message was dead-lettered. The set is closed: the same
// constants name the pubsink_reason attribute and the reason label of
// pubsink_messages_dead_lettered_total.
type Reason string

// The reasons of docs/reference.md "Dead letter".
const (
	// InvalidPayload: the payload does not decode by its format and schema
	// (not JSON where JSON is read, not a datum of its Avro or Protocol
	// Buffers schema, nested too deep, too many values).
	InvalidPayload Reason = "invalid_payload"
	// MissingField: an attribute or JSON field a template names is absent.
	MissingField Reason = "missing_field"
	// BadEventTime: the timestamp attribute is missing or unparsable.
	BadEventTime Reason = "bad_event_time"
	// SinkRejected: the sink refused the row itself (not a transient failure).
	SinkRejected Reason = "sink_rejected"
	// Late: the event time is behind the watermark and late_data is dead_letter.
	Late Reason = "late"
	// TooLarge: the row exceeds what the sink accepts, found before writing.
	TooLarge Reason = "too_large"
	// SchemaUnavailable: the payload's schema can never be had: the topic's
	// schema or revision was deleted, the Schema API answers NotFound, the
	// revision does not compile, or the message names no schema while the
	// pipeline reads the topic's.
	SchemaUnavailable Reason = "schema_unavailable"
	// ExpressionFailed: a CEL expression (filter, when, each, or a computed
	// value) failed on the message: a missing field, a type error, its
	// cost limit.
	ExpressionFailed Reason = "expression_failed"
	// TooManyRows: the message would make more rows than sink.max_rows; none
	// is written.
	TooManyRows Reason = "too_many_rows"
	// UnsupportedChange: a change mapping's op expression gave dead_letter:
	// the message is a change the mapping does not apply (a truncate).
	UnsupportedChange Reason = "unsupported_change"
)

// Reasons lists every reason, for metrics initialisation and validation.
var Reasons = []Reason{InvalidPayload, MissingField, BadEventTime, SinkRejected, Late, TooLarge,
	SchemaUnavailable, ExpressionFailed, TooManyRows, UnsupportedChange}

// ParseReason returns the Reason named s, and false when s names none of
// Reasons (a typo on the command line must not match nothing silently).
func ParseReason(s string) (Reason, bool) {
	for _, r := range Reasons {
		if string(r) == s {
			return r, true
		}
	}
	return "", false
}
