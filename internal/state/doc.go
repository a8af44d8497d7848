// Package state fixes the layout of the state table (state.table): its
// column families and their garbage-collection rules, and the row keys that
// outside readers rely on (the watermark). The dedupe catalog, the watermark
// store and `pubsink setup` all take the layout from here.
//
// CheckConditionalWrites is the start-up check that the state table's app
// profile runs the conditional mutations of the dedupe catalog.
//
// Row keys of the dedupe catalog are the dedupe package's own business; it
// keeps them from hotspotting a single tablet.
package state
