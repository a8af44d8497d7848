package deadletter

// Reason says why a message was dead-lettered. The set is closed: the same
// constants name the pubsink_reason attribute and the reason label of
// pubsink_messages_dead_lettered_total.
type Reason string

// The reasons of docs/reference.md "Dead letter".
const (
	// InvalidPayload: a {data.…} placeholder needs JSON and the payload is not.
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
)

// Reasons lists every reason, for metrics initialisation and validation.
var Reasons = []Reason{InvalidPayload, MissingField, BadEventTime, SinkRejected, Late, TooLarge}

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
