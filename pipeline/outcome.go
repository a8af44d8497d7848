package pipeline

// Outcome is how one delivery ended. Every delivery ends in exactly one
// outcome, and the outcome alone decides ack or nack (Outcome.Ack).
type Outcome uint8

const (
	// Retry: the outcome could not be made durable (shutdown, a failing
	// dead-letter output, a catalog that cannot be reached). The message is
	// nacked and Pub/Sub redelivers it.
	Retry Outcome = iota
	// Committed: the row is durable in the sink and, in exactly_once mode,
	// its dedupe key is recorded.
	Committed
	// Duplicate: the dedupe key was committed within the window; no write.
	Duplicate
	// DeadLettered: the dead-letter output confirmed a copy.
	DeadLettered
	// Dropped: a late message that late_data: drop says to ack unwritten.
	Dropped
	// Filtered: the pipeline's filter was false for the message; acked
	// unwritten.
	Filtered
)

// Ack reports whether the delivery is acked.
func (o Outcome) Ack() bool { return o != Retry }

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case Duplicate:
		return "duplicate"
	case DeadLettered:
		return "dead_lettered"
	case Dropped:
		return "dropped"
	case Filtered:
		return "filtered"
	}
	return "retry"
}
