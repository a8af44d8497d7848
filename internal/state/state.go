package state

import (
	"time"

	"cloud.google.com/go/bigtable"
)

// Column families of the state table (state.table).
const (
	// FamilyDedupe holds the dedupe catalog: one row per committed key, the
	// commit time as the cell timestamp. Rows older than the longest dedupe
	// window are garbage, collected by the family's max-age rule.
	FamilyDedupe = "k"
	// FamilyMeta holds one-value records such as the watermark
	// (row watermark#PIPELINE, column m:watermark).
	FamilyMeta = "m"
	// FamilySnapshot holds periodic snapshots of the dedupe filters.
	FamilySnapshot = "s"
	// FamilyRulings holds the rulings of the dedupe catalog: for a key
	// that had a rival (another message with the same dedupe key), which
	// message won it, kept for as long as a topic can replay it
	// (RulingsMaxAge) so that a reprocess writes the same winner long
	// after the catalog forgot the claim.
	FamilyRulings = "r"
)

// RulingsMaxAge is the max-age rule of FamilyRulings: Pub/Sub's longest
// topic message retention (31 days), the farthest back a reprocess can
// replay, and an hour. A ruling is written only for a key that had a
// rival, so what it keeps is small beside the catalog.
const RulingsMaxAge = 31*24*time.Hour + time.Hour

// FamilyDeadLetter is the one column family of a dead-letter table
// (dead_letter.bigtable_table, in state.instance).
const FamilyDeadLetter = "f"

// dedupeGCMargin is added to the longest dedupe window in the catalog's
// max-age rule: Bigtable collects garbage lazily (up to a week), and reads
// ignore records older than the window anyway, so the margin only guards
// against a window lengthened in the config after setup ran.
const dedupeGCMargin = time.Hour

// CatalogMaxAge is the max-age rule that Families gives the dedupe
// catalog for a longest dedupe window of maxWindow.
func CatalogMaxAge(maxWindow time.Duration) time.Duration { return maxWindow + dedupeGCMargin }

// MaxAge returns the age of a max-age rule, false for any other rule (none,
// versions, a union or intersection): a rule pubsink did not set.
func MaxAge(gc bigtable.GCPolicy) (time.Duration, bool) {
	ma, ok := gc.(bigtable.MaxAgeGCPolicy)
	return time.Duration(ma), ok
}

// Family is a column family and its garbage-collection rule.
type Family struct {
	Name string
	GC   bigtable.GCPolicy
}

// Families returns the families of the state table for a longest dedupe
// window of maxWindow.
func Families(maxWindow time.Duration) []Family {
	return []Family{
		{FamilyDedupe, bigtable.MaxAgePolicy(CatalogMaxAge(maxWindow))},
		{FamilyMeta, bigtable.MaxVersionsPolicy(1)},
		{FamilySnapshot, bigtable.MaxVersionsPolicy(1)},
		{FamilyRulings, bigtable.MaxAgePolicy(RulingsMaxAge)},
	}
}

// WatermarkRow is the row key of a pipeline's stored watermark.
func WatermarkRow(pipeline string) string { return "watermark#" + pipeline }

// WatermarkColumn is the qualifier of the watermark in FamilyMeta. The value
// is RFC 3339 UTC with milliseconds (WatermarkFormat).
const WatermarkColumn = "watermark"

// LeaderColumn is the qualifier, in FamilyMeta of the watermark row, of the
// lease of the pipeline's watermark leader: "EPOCH/SEQ/MEMBER", one cell.
const LeaderColumn = "leader"

// FinishedRow is the row key of the finishes that member reports to the
// pipeline's watermark leader: one column per report in FamilyMeta, which
// the leader deletes once it has read it.
func FinishedRow(pipeline, member string) string { return FinishedPrefix(pipeline) + member }

// FinishedPrefix is the prefix of every FinishedRow of pipeline.
func FinishedPrefix(pipeline string) string { return "finished#" + pipeline + "#" }

// WatermarkFormat is the layout of a stored watermark.
const WatermarkFormat = "2006-01-02T15:04:05.000Z07:00"
