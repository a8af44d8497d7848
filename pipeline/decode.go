package pipeline

import (
	"time"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping"
)

// record is what one message becomes on its way through the pipeline: the
// mapping's result (event time, dedupe key, rows), and, once its copy was
// confirmed, why it was dead-lettered.
type record struct {
	mapping.Result
	reason deadletter.Reason
	// resumed: the message's dedupe claim was made by an earlier delivery
	// of it, whose rows this one writes again (counted apart).
	resumed bool
	// lapped is when the message's last stage ended (its receipt before
	// the first), zero if its stages are not timed: see Pipeline.lap.
	lapped time.Time
}
