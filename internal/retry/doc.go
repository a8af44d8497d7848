// Package retry is the one place where pubsink retries transient failures:
// a capped exponential backoff with full jitter, bounded by a context.
//
// The clients below (Bigtable, Pub/Sub) retry some codes inside a call;
// this package retries the calls themselves, above them, and nowhere else
// in pubsink. What is retryable is decided by the caller's classifier.
//
// # Guarantees
//
// Do (and Retry, which is Do after a first attempt the caller made) never
// sleeps past the end of its context and never calls op again once op
// succeeded or failed with an error the classifier rejects.
package retry
