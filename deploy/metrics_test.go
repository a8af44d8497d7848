package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// metric is one metric pubsink exports: its type and its own labels.
type metric struct {
	typ    string // counter, gauge or histogram
	labels []string
}

// exportedMetrics is every metric whose name the deployment files may use:
// the names docs/reference.md ("Metrics") fixes. It is written here, as the
// contract, and TestExportedMetricsAreTheRegistrys compares it with what
// internal/metrics registers, so that a renamed metric fails here too.
var exportedMetrics = map[string]metric{
	"pubsink_messages_received_total":           {"counter", []string{"pipeline"}},
	"pubsink_messages_committed_total":          {"counter", []string{"pipeline"}},
	"pubsink_messages_duplicate_total":          {"counter", []string{"pipeline"}},
	"pubsink_messages_dead_lettered_total":      {"counter", []string{"pipeline", "reason"}},
	"pubsink_messages_late_total":               {"counter", []string{"pipeline"}},
	"pubsink_messages_dropped_total":            {"counter", []string{"pipeline"}},
	"pubsink_messages_filtered_total":           {"counter", []string{"pipeline"}},
	"pubsink_messages_resumed_total":            {"counter", []string{"pipeline"}},
	"pubsink_rows_committed_total":              {"counter", []string{"pipeline"}},
	"pubsink_row_operations_total":              {"counter", []string{"pipeline", "operation", "result"}},
	"pubsink_missing_values_total":              {"counter", []string{"pipeline", "policy"}},
	"pubsink_cells_superseded_total":            {"counter", []string{"pipeline"}},
	"pubsink_column_never_filled":               {"gauge", []string{"pipeline", "column"}},
	"pubsink_messages_retried_total":            {"counter", []string{"pipeline"}},
	"pubsink_messages_in_flight":                {"gauge", []string{"pipeline"}},
	"pubsink_watermark_timestamp_seconds":       {"gauge", []string{"pipeline"}},
	"pubsink_watermark_lag_seconds":             {"gauge", []string{"pipeline"}},
	"pubsink_oldest_in_flight_age_seconds":      {"gauge", []string{"pipeline"}},
	"pubsink_sink_write_errors_total":           {"counter", []string{"pipeline", "code"}},
	"pubsink_dead_letter_errors_total":          {"counter", []string{"pipeline", "code"}},
	"pubsink_dead_letter_held":                  {"gauge", []string{"pipeline"}},
	"pubsink_dead_letter_gave_up_total":         {"counter", []string{"pipeline"}},
	"pubsink_ready":                             {"gauge", nil},
	"pubsink_build_info":                        {"gauge", []string{"version", "revision", "go_version"}},
	"pubsink_commit_latency_seconds":            {"histogram", []string{"pipeline"}},
	"pubsink_stage_seconds":                     {"histogram", []string{"pipeline", "stage"}},
	"pubsink_sink_write_seconds":                {"histogram", []string{"pipeline"}},
	"pubsink_dedupe_filter_fill_ratio":          {"gauge", []string{"pipeline"}},
	"pubsink_dedupe_false_positive_ratio":       {"gauge", []string{"pipeline"}},
	"pubsink_dedupe_catalog_lookups_total":      {"counter", []string{"pipeline"}},
	"pubsink_members":                           {"gauge", []string{"pipeline"}},
	"pubsink_membership_alone":                  {"gauge", []string{"pipeline"}},
	"pubsink_watermark_leader":                  {"gauge", []string{"pipeline"}},
	"pubsink_dedupe_claim_conflicts_total":      {"counter", []string{"pipeline"}},
	"pubsink_dedupe_conditional_claims_total":   {"counter", []string{"pipeline"}},
	"pubsink_membership_renewals_total":         {"counter", []string{"pipeline"}},
	"pubsink_membership_renewal_failures_total": {"counter", []string{"pipeline"}},
	"pubsink_watermark_leader_takeovers_total":  {"counter", []string{"pipeline"}},
	"pubsink_source_stream_reopens_total":       {"counter", []string{"pipeline"}},
	"pubsink_tracking_errors_total":             {"counter", []string{"pipeline", "method"}},
	"pubsink_bigtable_mutations_total":          {"counter", []string{"table", "call"}},
}

// targetLabels are the labels a scrape adds to every series: Prometheus's
// own (instance, job) and Managed Prometheus's (the PodMonitoring's target
// labels and the resource's).
var targetLabels = []string{"instance", "job", "namespace", "pod", "container", "node", "cluster", "location", "project_id"}

var (
	pubsinkName  = regexp.MustCompile(`\bpubsink_[a-zA-Z0-9_]+`)
	selector     = regexp.MustCompile(`\b(pubsink_[a-zA-Z0-9_]+)\s*\{([^}]*)\}`)
	matcherLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	rateOf       = regexp.MustCompile(`\b(rate|irate|increase|resets)\s*\(\s*(pubsink_[a-zA-Z0-9_]+)`)
	quantileOf   = regexp.MustCompile(`\bhistogram_quantile\s*\([^,]*,[\s\S]*?(pubsink_[a-zA-Z0-9_]+)`)
)

// resolve returns the exported metric a series name belongs to (a
// histogram's _bucket, _sum and _count series belong to the histogram), and
// the suffix.
func resolve(name string) (base string, m metric, suffix string, ok bool) {
	if m, ok := exportedMetrics[name]; ok {
		return name, m, "", true
	}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, found := strings.CutSuffix(name, s); found {
			if m, ok := exportedMetrics[b]; ok && m.typ == "histogram" {
				return b, m, s, true
			}
		}
	}
	return "", metric{}, "", false
}

// queryProblems lists what is wrong with the metric names in a PromQL
// query: a name pubsink does not export, a label matcher on a label the
// metric does not have, a rate of something that is not a counter, a
// quantile of something that is not a histogram's buckets. A query that
// names no pubsink metric at all is a problem too (a typo in the prefix).
func queryProblems(query string) []string {
	var problems []string
	names := pubsinkName.FindAllString(query, -1)
	if len(names) == 0 {
		problems = append(problems, "names no pubsink metric")
	}
	for _, n := range names {
		if _, _, _, ok := resolve(n); !ok {
			problems = append(problems, fmt.Sprintf("%s is not an exported metric", n))
		}
	}
	for _, s := range selector.FindAllStringSubmatch(query, -1) {
		_, m, suffix, ok := resolve(s[1])
		if !ok {
			continue // reported above
		}
		for _, l := range matcherLabel.FindAllStringSubmatch(s[2], -1) {
			label := l[1]
			if slices.Contains(m.labels, label) || slices.Contains(targetLabels, label) || (label == "le" && suffix == "_bucket") {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s has no label %q (its labels: %v)", s[1], label, m.labels))
		}
	}
	for _, r := range rateOf.FindAllStringSubmatch(query, -1) {
		_, m, suffix, ok := resolve(r[2])
		if ok && m.typ != "counter" && suffix == "" {
			problems = append(problems, fmt.Sprintf("%s(%s): %s is a %s, not a counter", r[1], r[2], r[2], m.typ))
		}
	}
	for _, q := range quantileOf.FindAllStringSubmatch(query, -1) {
		if _, _, suffix, ok := resolve(q[1]); ok && suffix != "_bucket" {
			problems = append(problems, fmt.Sprintf("histogram_quantile of %s: not a histogram's _bucket series", q[1]))
		}
	}
	return problems
}
