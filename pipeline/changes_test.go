package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// changeMapper makes, for each message, the rows and missing values of its
// ID in results (none for an ID not there), keyed by its order_id.
type changeMapper struct {
	results map[string]mapping.Result
}

func (f *changeMapper) Map(_ context.Context, m *source.Message, r *mapping.Result) error {
	res := f.results[m.ID]
	r.EventTime, r.Key, r.Filtered = eventTime, m.Attributes["order_id"], false
	r.Rows, r.Missing = append([]sinks.Row(nil), res.Rows...), res.Missing
	return nil
}

func (f *changeMapper) Stats() mapping.Stats      { return mapping.Stats{Format: config.FormatJSON} }
func (f *changeMapper) Columns() []mapping.Column { return nil }

// applyingSink is what a sink that applies changes tells the pipeline: it
// fills the Applied of each change row with applied[its key], and rejects
// a row whose key starts with "bad". It fails its first write with
// unavailable when failFirst is set, having filled Applied all the same
// (a retry must not count twice).
type applyingSink struct {
	applied   map[string]sinks.Applied
	failFirst bool
	writes    int
}

func (s *applyingSink) Write(_ context.Context, rows []sinks.Row) error {
	s.writes++
	for i := range rows {
		if strings.HasPrefix(rows[i].Key, "bad") {
			return &sinks.RejectedError{Row: i, Err: errors.New("bad row")}
		}
		if rows[i].Change.IsChange() {
			rows[i].Change.Applied = s.applied[rows[i].Key]
		}
	}
	if s.failFirst && s.writes == 1 {
		return errors.New("unavailable")
	}
	return nil
}

func (s *applyingSink) Close(context.Context) error { return nil }
func (s *applyingSink) Check(context.Context) error { return nil }

// changePipeline is a pipeline of cfg on the mapper and sink, with its
// metrics' registry.
func changePipeline(t *testing.T, cfg config.Pipeline, deps Deps) (*Pipeline, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	deps.Metrics, deps.Retry = m.Pipeline(cfg.Name), fastRetry
	p, err := New(zap.NewNop(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return p, m
}

func set(key string, mode sinks.Mode, cells ...string) sinks.Row {
	r := sinks.Row{Key: key, Timestamp: eventTime, Change: sinks.Change{Op: sinks.OpSet, Mode: mode}}
	for _, c := range cells {
		r.Cells = append(r.Cells, sinks.Cell{Column: c, Value: []byte("v")})
	}
	return r
}

func del(key string, op sinks.Op) sinks.Row {
	return sinks.Row{Key: key, Timestamp: eventTime, Change: sinks.Change{Op: op}}
}

// changeSeries are the counts of changes, as /metrics has them.
const changeSeries = "pubsink_row_operations_total pubsink_missing_values_total pubsink_cells_superseded_total pubsink_rows_committed_total"

// TestChangesOfCommittedMessagesAreCounted: the rows of committed messages
// count by operation and result as the sink applied them, their missing
// values by policy, their superseded cells; a duplicate, a dead-lettered
// message and a failed write count nothing; the operations sum to the rows
// committed; /status has the same counts.
func TestChangesOfCommittedMessagesAreCounted(t *testing.T) {
	cfg := testConfig()
	cfg.Sink.WriteMode = config.WriteUpsert
	cfg.Sink.OnMissing = config.MissingDelete // a change mapping
	mapper := &changeMapper{results: map[string]mapping.Result{
		// Two upserts: one set but for a newer column, one superseded
		// whole; a skipped value.
		"m-o1": {Rows: []sinks.Row{set("a", sinks.ModeUpsert, "x", "y"), set("b", sinks.ModeUpsert, "x", "y")},
			Missing: mapping.Missing{Skip: 1}},
		// The three deletes, and an upsert with two columns deleted.
		"m-o2": {Rows: []sinks.Row{del("c", sinks.OpDelete), del("d", sinks.OpDeleteFamily), del("e", sinks.OpDeleteColumns),
			set("f", sinks.ModeUpsert, "x")}, Missing: mapping.Missing{Empty: 1, Delete: 2}},
		// The sink refuses one of its rows: dead-lettered, not counted.
		"m-o3": {Rows: []sinks.Row{del("g", sinks.OpDelete), set("bad", sinks.ModeUpsert, "x")}, Missing: mapping.Missing{Skip: 7}},
		// o1 again, another message: a duplicate, not counted.
		"m-o1-again": {Rows: []sinks.Row{del("a", sinks.OpDelete)}, Missing: mapping.Missing{Skip: 7}},
	}}
	sink := &applyingSink{failFirst: true, applied: map[string]sinks.Applied{
		"a": {SkippedCells: 1},
		"b": {Superseded: true, SkippedCells: 2},
		"g": {Superseded: true, SkippedCells: 9},
	}}
	p, m := changePipeline(t, cfg, Deps{Mapper: mapper, Sink: sink, Dedupe: &fakeDedupe{}, DeadLetter: &fakeDeadLetter{}})
	ctx := context.Background()
	for _, id := range []string{"o1", "o2", "o3"} {
		if !p.Handle(ctx, order(id, "c9", "{}")) {
			t.Fatalf("%s nacked", id)
		}
	}
	again := order("o1", "c9", "{}")
	again.ID = "m-o1-again"
	if !p.Handle(ctx, again) {
		t.Fatal("the duplicate nacked")
	}
	st := p.Status()
	if st.Committed != 2 || st.Duplicate != 1 || st.DeadLettered[string(deadletter.SinkRejected)] != 1 || sink.writes != 4 {
		t.Fatalf("committed %d, duplicate %d, dead-lettered %v, %d writes; want 2, 1, one sink_rejected, 4 (a retry)",
			st.Committed, st.Duplicate, st.DeadLettered, sink.writes)
	}

	want := `
# HELP pubsink_cells_superseded_total Cells of committed messages' set rows that were not written because the row held a newer cell or a tombstone covered them.
# TYPE pubsink_cells_superseded_total counter
pubsink_cells_superseded_total{pipeline="orders"} 3
# HELP pubsink_missing_values_total Columns of committed messages whose value was missing, by the missing-value policy that applied (skip, empty, delete); a plain row left with no cell, and so not made, counts its columns too.
# TYPE pubsink_missing_values_total counter
pubsink_missing_values_total{pipeline="orders",policy="delete"} 2
pubsink_missing_values_total{pipeline="orders",policy="empty"} 1
pubsink_missing_values_total{pipeline="orders",policy="skip"} 1
# HELP pubsink_row_operations_total Rows written by committed messages, by operation (set, delete, delete_family, delete_columns) and result: applied, or superseded (nothing of a set row was set: the row held a newer change, a tombstone covered it, or an earlier insert was there). A plain mapping's rows are set, applied. The sum is pubsink_rows_committed_total.
# TYPE pubsink_row_operations_total counter
pubsink_row_operations_total{operation="delete",pipeline="orders",result="applied"} 1
pubsink_row_operations_total{operation="delete",pipeline="orders",result="superseded"} 0
pubsink_row_operations_total{operation="delete_columns",pipeline="orders",result="applied"} 1
pubsink_row_operations_total{operation="delete_columns",pipeline="orders",result="superseded"} 0
pubsink_row_operations_total{operation="delete_family",pipeline="orders",result="applied"} 1
pubsink_row_operations_total{operation="delete_family",pipeline="orders",result="superseded"} 0
pubsink_row_operations_total{operation="set",pipeline="orders",result="applied"} 2
pubsink_row_operations_total{operation="set",pipeline="orders",result="superseded"} 1
# HELP pubsink_rows_committed_total Rows written by committed messages (a message makes none, one or many).
# TYPE pubsink_rows_committed_total counter
pubsink_rows_committed_total{pipeline="orders"} 6
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), strings.Fields(changeSeries)...); err != nil {
		t.Error(err)
	}

	wantStatus := Status{
		Operations: map[string]OperationCounts{
			"set": {Applied: 2, Superseded: 1}, "delete": {Applied: 1}, "delete_family": {Applied: 1}, "delete_columns": {Applied: 1}},
		MissingValues:   MissingValues{Skip: 1, Empty: 1, Delete: 2},
		CellsSuperseded: 3,
	}
	if !reflect.DeepEqual(st.Operations, wantStatus.Operations) || st.MissingValues != wantStatus.MissingValues || st.CellsSuperseded != 3 {
		t.Errorf("status operations %v, missing values %+v, cells superseded %d; want %v, %+v, 3",
			st.Operations, st.MissingValues, st.CellsSuperseded, wantStatus.Operations, wantStatus.MissingValues)
	}
	var sum int64
	for _, c := range st.Operations {
		sum += c.Applied + c.Superseded
	}
	if sum != st.Rows {
		t.Errorf("the operations sum to %d rows, %d were committed", sum, st.Rows)
	}

	// The JSON of /status: its names.
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Operations      map[string]map[string]int64 `json:"operations"`
		MissingValues   map[string]int64            `json:"missing_values"`
		CellsSuperseded *int64                      `json:"cells_superseded"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	wantOps := map[string]map[string]int64{
		"set":            {"applied": 2, "superseded": 1},
		"delete":         {"applied": 1, "superseded": 0},
		"delete_family":  {"applied": 1, "superseded": 0},
		"delete_columns": {"applied": 1, "superseded": 0},
	}
	if !reflect.DeepEqual(doc.Operations, wantOps) || !reflect.DeepEqual(doc.MissingValues, map[string]int64{"skip": 1, "empty": 1, "delete": 2}) ||
		doc.CellsSuperseded == nil || *doc.CellsSuperseded != 3 {
		t.Errorf("/status JSON has %s", b)
	}
}

// TestPlainRowsAreSetAndApplied: a plain pipeline's rows count as set,
// applied, all the other series there at 0 from the start; its skipped
// and empty values count too (those policies are not changes).
func TestPlainRowsAreSetAndApplied(t *testing.T) {
	cfg := testConfig()
	p, m := changePipeline(t, cfg, Deps{Sink: &fakeSink{}, Dedupe: &fakeDedupe{}})
	zeros := `
# HELP pubsink_cells_superseded_total Cells of committed messages' set rows that were not written because the row held a newer cell or a tombstone covered them.
# TYPE pubsink_cells_superseded_total counter
pubsink_cells_superseded_total{pipeline="orders"} 0
# HELP pubsink_missing_values_total Columns of committed messages whose value was missing, by the missing-value policy that applied (skip, empty, delete); a plain row left with no cell, and so not made, counts its columns too.
# TYPE pubsink_missing_values_total counter
pubsink_missing_values_total{pipeline="orders",policy="delete"} 0
pubsink_missing_values_total{pipeline="orders",policy="empty"} 0
pubsink_missing_values_total{pipeline="orders",policy="skip"} 0
# HELP pubsink_row_operations_total Rows written by committed messages, by operation (set, delete, delete_family, delete_columns) and result: applied, or superseded (nothing of a set row was set: the row held a newer change, a tombstone covered it, or an earlier insert was there). A plain mapping's rows are set, applied. The sum is pubsink_rows_committed_total.
# TYPE pubsink_row_operations_total counter
pubsink_row_operations_total{operation="delete",pipeline="orders",result="applied"} 0
pubsink_row_operations_total{operation="delete",pipeline="orders",result="superseded"} 0
pubsink_row_operations_total{operation="delete_columns",pipeline="orders",result="applied"} 0
pubsink_row_operations_total{operation="delete_columns",pipeline="orders",result="superseded"} 0
pubsink_row_operations_total{operation="delete_family",pipeline="orders",result="applied"} 0
pubsink_row_operations_total{operation="delete_family",pipeline="orders",result="superseded"} 0
pubsink_row_operations_total{operation="set",pipeline="orders",result="applied"} %d
pubsink_row_operations_total{operation="set",pipeline="orders",result="superseded"} 0
# HELP pubsink_rows_committed_total Rows written by committed messages (a message makes none, one or many).
# TYPE pubsink_rows_committed_total counter
pubsink_rows_committed_total{pipeline="orders"} %d
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(strings.ReplaceAll(zeros, "%d", "0")), strings.Fields(changeSeries)...); err != nil {
		t.Errorf("before any message: %v", err)
	}
	for _, id := range []string{"o1", "o2", "o3"} {
		p.Handle(context.Background(), order(id, "c9", `{"amount": 1}`))
	}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(strings.ReplaceAll(zeros, "%d", "3")), strings.Fields(changeSeries)...); err != nil {
		t.Errorf("after three messages of a row: %v", err)
	}
	if st := p.Status(); st.Operations["set"] != (OperationCounts{Applied: 3}) || len(st.Operations) != 4 || st.MissingValues != (MissingValues{}) {
		t.Errorf("status operations %v, missing values %+v", st.Operations, st.MissingValues)
	}

	// A plain mapping's skipped and empty values.
	mapper := &changeMapper{results: map[string]mapping.Result{
		"m-o1": {Rows: []sinks.Row{{Key: "a"}, {Key: "b"}}, Missing: mapping.Missing{Skip: 2, Empty: 1}},
	}}
	p, _ = changePipeline(t, cfg, Deps{Mapper: mapper, Sink: &fakeSink{}})
	p.Handle(context.Background(), order("o1", "c9", "{}"))
	if st := p.Status(); st.Operations["set"] != (OperationCounts{Applied: 2}) || st.MissingValues != (MissingValues{Skip: 2, Empty: 1}) {
		t.Errorf("status operations %v, missing values %+v; want 2 set, applied; 2 skipped, 1 empty", st.Operations, st.MissingValues)
	}
}

// TestOperationLabelsAreTheSinksOps: the operation label's values are the
// names of sinks.Op, in its order, so that the series the pipeline counts
// are those exported at 0.
func TestOperationLabelsAreTheSinksOps(t *testing.T) {
	var ops []string
	for op := range numOps {
		ops = append(ops, op.String())
	}
	if !reflect.DeepEqual(ops, metrics.Operations) || (sinks.Op(numOps)).String() != "set" {
		t.Errorf("sinks.Op names %q, metrics.Operations %q", ops, metrics.Operations)
	}
	if !reflect.DeepEqual(missingPolicies[:], metrics.MissingPolicies) {
		t.Errorf("policies %q, metrics.MissingPolicies %q", missingPolicies, metrics.MissingPolicies)
	}
}
