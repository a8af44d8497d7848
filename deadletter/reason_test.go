package deadletter

import "testing"

// TestEveryReasonParses: replay's --reason takes every reason the pipeline
// can dead-letter with, issue 19's among them, and nothing else.
func TestEveryReasonParses(t *testing.T) {
	for _, want := range []Reason{InvalidPayload, MissingField, BadEventTime, SinkRejected, Late, TooLarge,
		SchemaUnavailable, ExpressionFailed, TooManyRows, UnsupportedChange} {
		if got, ok := ParseReason(string(want)); !ok || got != want {
			t.Errorf("ParseReason(%q) = %q, %v", want, got, ok)
		}
	}
	if _, ok := ParseReason("filtered"); ok {
		t.Error("filtered is an outcome, not a dead-letter reason")
	}
}
