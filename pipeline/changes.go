package pipeline

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
)

// numOps is the number of sinks.Op values.
const numOps = sinks.OpDeleteColumns + 1

// The results of a row, pubsink_row_operations_total's result label.
const (
	applied = iota
	superseded
	numResults
)

// The missing-value policies that write a message, by their index in
// changeCounters.missing.
var missingPolicies = [...]string{config.MissingSkip, config.MissingEmpty, config.MissingDelete}

const (
	missingSkip = iota
	missingEmpty
	missingDelete
)

// changeCounters count what committed messages' rows did
// (pubsink_row_operations_total, pubsink_missing_values_total,
// pubsink_cells_superseded_total), their counters resolved once, in New.
type changeCounters struct {
	// ops are by sinks.Op, then applied or superseded.
	ops [numOps][numResults]prometheus.Counter
	// missing are by policy (missingPolicies).
	missing [len(missingPolicies)]prometheus.Counter
	cells   prometheus.Counter
	// any: the pipeline has a change mapping, whose rows may be other
	// than set and applied. Without one, every row is (a plain mapping's
	// row is set as it comes), and a message's rows count at once.
	any bool
}

func newChangeCounters(cfg config.Pipeline, mt *metrics.Pipeline) changeCounters {
	c := changeCounters{any: slices.ContainsFunc(cfg.Sink.AllMappings(), config.Mapping.IsChange), cells: mt.CellsSuperseded}
	for op := range numOps {
		for res := range numResults {
			c.ops[op][res] = mt.RowOperations(op.String(), metrics.OperationResults[res])
		}
	}
	for i, policy := range missingPolicies {
		c.missing[i] = mt.MissingValues(policy)
	}
	return c
}

// count counts the rows and missing values of r, a committed message's.
func (c *changeCounters) count(r *mapping.Result) {
	switch {
	case c.any:
		c.countRows(r.Rows)
	case len(r.Rows) > 0:
		c.ops[sinks.OpSet][applied].Add(float64(len(r.Rows)))
	}
	if r.Missing != (mapping.Missing{}) {
		c.countMissing(&r.Missing)
	}
}

// countRows counts rows by operation and result, and the cells of theirs
// that were superseded: an Add per combination met, not per row.
func (c *changeCounters) countRows(rows []sinks.Row) {
	var n [numOps][numResults]int
	cells := 0
	for i := range rows {
		ch := &rows[i].Change
		op := ch.Op
		if op >= numOps {
			op = sinks.OpSet // as Op.String names it
		}
		res := applied
		if ch.Applied.Superseded {
			res = superseded
		}
		n[op][res]++
		cells += ch.Applied.SkippedCells
	}
	for op := range n {
		for res, k := range n[op] {
			if k > 0 {
				c.ops[op][res].Add(float64(k))
			}
		}
	}
	if cells > 0 {
		c.cells.Add(float64(cells))
	}
}

func (c *changeCounters) countMissing(m *mapping.Missing) {
	for i, k := range [...]int{missingSkip: m.Skip, missingEmpty: m.Empty, missingDelete: m.Delete} {
		if k > 0 {
			c.missing[i].Add(float64(k))
		}
	}
}
