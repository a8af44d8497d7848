// Package setup creates what a configuration names and is missing: topics,
// the main, tracking and dead-letter subscriptions, sink tables and column
// families, and the state table with its garbage-collection rules. It backs
// `pubsink setup`; it works the same on the emulators and on Google Cloud.
//
// # Guarantees
//
// Run is idempotent: it never deletes or changes what exists, and running it
// twice reports "exists" for everything the first run created. An existing
// subscription attached to another topic than source.topic is an error, not
// something to fix silently.
package setup
