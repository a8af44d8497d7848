package deadletter

import "time"

// Hooks for the external tests (package deadletter_test). They use the rig
// of deadletter/internal/dltest, which imports deadletter, so they cannot
// be in package deadletter.

// SubscriptionCheckPeriod is how long a topic output goes by one check
// that its topic has a subscription.
const SubscriptionCheckPeriod = subscriptionCheckPeriod

// SetClock makes o stamp the copies it makes (their failed_at) with now; a
// topic output also times its subscription checks by it.
func SetClock(o Output, now func() time.Time) {
	switch o := o.(type) {
	case *Topic:
		o.now = now
	case *Table:
		o.now = now
	case *File:
		o.now = now
	}
}

// FileSyncs is how many fsyncs o has done.
func FileSyncs(o *File) int64 { return o.syncs.Load() }

// TearFile makes o take its file as ending mid-line, as a write that failed
// part-way leaves it.
func TearFile(o *File) { o.partial = true }
