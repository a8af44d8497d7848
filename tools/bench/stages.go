package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// stageMetric is the prefix of pubsink_stage_seconds' series in the
// Prometheus text.
const stageMetric = "pubsink_stage_seconds_"

// hist is one stage's histogram of pubsink_stage_seconds, summed over a
// run's processes: cumulative counts by upper bound, as exported.
type hist struct {
	le    []float64 // upper bounds, ascending, +Inf last
	cum   []float64 // observations at or under each bound
	sum   float64   // seconds
	count float64
}

// mean is the stage's mean time in milliseconds, NaN without observations.
func (h *hist) mean() float64 {
	if h == nil || h.count == 0 {
		return math.NaN()
	}
	return h.sum / h.count * 1000
}

// quantile is the stage's q-quantile in milliseconds, interpolated
// linearly within its bucket as PromQL's histogram_quantile does (so only
// as exact as the buckets: 1, 2.5 and 5 of each power of ten); NaN without
// observations.
func (h *hist) quantile(q float64) float64 {
	if h == nil || h.count == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, le := range h.le {
		if h.cum[i] >= rank {
			if math.IsInf(le, 1) { // past the last bound: the last bound
				return lower * 1000
			}
			in := h.cum[i] - below
			if in == 0 {
				return le * 1000
			}
			return (lower + (le-lower)*(rank-below)/in) * 1000
		}
		lower, below = le, h.cum[i]
	}
	return lower * 1000
}

// addStageLine adds one line of the Prometheus text to stages if it is a
// series of pubsink_stage_seconds (bucket, sum or count); it reports
// whether it was.
func addStageLine(stages map[string]*hist, line string) (bool, error) {
	rest, ok := strings.CutPrefix(line, stageMetric)
	if !ok {
		return false, nil
	}
	series, labels, ok := strings.Cut(rest, "{")
	stage := labelValue(labels, "stage")
	if !ok || stage == "" {
		return true, fmt.Errorf("metrics: %q: no stage label", line)
	}
	v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	if err != nil {
		return true, fmt.Errorf("metrics: %q: %w", line, err)
	}
	h := stages[stage]
	if h == nil {
		h = &hist{}
		stages[stage] = h
	}
	switch series {
	case "sum":
		h.sum += v
	case "count":
		h.count += v
	case "bucket":
		le, err := strconv.ParseFloat(labelValue(labels, "le"), 64)
		if err != nil {
			return true, fmt.Errorf("metrics: %q: le: %w", line, err)
		}
		i, found := slices.BinarySearch(h.le, le)
		if !found {
			h.le, h.cum = slices.Insert(h.le, i, le), slices.Insert(h.cum, i, 0)
		}
		h.cum[i] += v
	}
	return true, nil
}

// labelValue is the value of label name in the label set labels (the
// text after a series' "{"), "" if it has none.
func labelValue(labels, name string) string {
	_, v, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// stageOrder is pubsink's stages in the order a message passes them.
var stageOrder = []string{"map", "dedupe", "write", "commit", "report"}

// printStages prints, per connector that exports pubsink_stage_seconds,
// the mean, p50 and p99 of each stage over the messages of its runs that
// pubsink timed (one in 16; medians over the rounds): where its latency
// goes.
func printStages(w io.Writer, o options, byKind map[kind][]result) {
	header := false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, k := range o.connectors {
		for _, s := range stageOrder {
			var mean, p50, p99 []float64
			for _, r := range byKind[k] {
				if h := r.stages[s]; h != nil && h.count > 0 {
					mean, p50, p99 = append(mean, h.mean()), append(p50, h.quantile(0.5)), append(p99, h.quantile(0.99))
				}
			}
			if len(mean) == 0 {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nstages (pubsink_stage_seconds, one message in 16; p50 and p99 interpolated within buckets of 1, 2.5 and 5 of each power of ten; medians [min–max] over the rounds):\n")
				fmt.Fprintln(tw, "connector\tstage\tmean ms\tp50 ms\tp99 ms\t")
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", k, s, spread(mean), spread(p50), spread(p99))
		}
	}
	tw.Flush()
}

// spread is the median [min–max] of vs, in milliseconds.
func spread(vs []float64) string {
	slices.Sort(vs)
	return fmt.Sprintf("%.2f [%.2f–%.2f]", median(vs), vs[0], vs[len(vs)-1])
}

// plus is h and g summed (a new histogram; h may be nil). Both come from
// pubsink's one set of bounds.
func (h *hist) plus(g *hist) *hist {
	s := &hist{sum: g.sum, count: g.count, le: slices.Clone(g.le), cum: slices.Clone(g.cum)}
	if h == nil {
		return s
	}
	s.sum, s.count = s.sum+h.sum, s.count+h.count
	for i, le := range h.le {
		j, found := slices.BinarySearch(s.le, le)
		if !found {
			s.le, s.cum = slices.Insert(s.le, j, le), slices.Insert(s.cum, j, 0)
		}
		s.cum[j] += h.cum[i]
	}
	return s
}
