// Package audit is the audit command's logic: it reconciles a retained range
// of a pipeline's topic against its sink tables and its dead-letter output,
// read-only, and reports each message whose rows are missing, doubled or
// different from what the current mapping gives (docs/reference.md, "Audit").
//
// The command reads the range once (app/audit.go) and turns each message into
// Entries: the cells its mapping gives, with the message's role (the key's
// winner, or a rival the live pipeline judged a duplicate). The entries are
// spilled to disk and sorted by row (internal/spill), so that memory stays
// bounded whatever the range's size; then each row is read from the table
// once, all its versions, and compared with every entry of the range for it
// (CompareRow).
package audit
