package pipeline

import (
	"time"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/watermark"
)

// Status is the state of one pipeline as /status shows it.
type Status struct {
	Name      string `json:"name"`
	Mode      string `json:"mode"`
	Receiving bool   `json:"receiving"`

	Received  int64 `json:"received"`
	Committed int64 `json:"committed"`
	// Resumed counts the committed deliveries that resumed their message's
	// claim, made by an earlier delivery of it: committed − resumed counts
	// each key once.
	Resumed      int64            `json:"resumed"`
	Duplicate    int64            `json:"duplicate"`
	DeadLettered map[string]int64 `json:"dead_lettered"`
	Late         int64            `json:"late"`
	Dropped      int64            `json:"dropped"`
	// Filtered counts the messages the filter said no to; Rows the rows
	// committed messages made.
	Filtered int64 `json:"filtered"`
	Rows     int64 `json:"rows"`
	Retried  int64 `json:"retried"`
	InFlight int64 `json:"in_flight"`
	// Operations counts the rows committed messages made by operation
	// (set, delete, delete_family, delete_columns, every one present) and
	// result (pubsink_row_operations_total): the sum is Rows.
	// MissingValues counts their columns whose value was missing, by
	// policy; CellsSuperseded the cells of their set rows that a newer cell
	// or a tombstone kept out.
	Operations      map[string]OperationCounts `json:"operations"`
	MissingValues   MissingValues              `json:"missing_values"`
	CellsSuperseded int64                      `json:"cells_superseded"`
	// StreamReopens counts the watchdog's reopens of the streams of the
	// pipeline's subscriptions (pubsink_source_stream_reopens_total);
	// Stalled is the reason the process is unhealthy, when a reopen did not
	// help (what /healthz answers).
	StreamReopens int64  `json:"stream_reopens"`
	Stalled       string `json:"stalled,omitempty"`
	// FilteredEverything is set while the filter has dropped every
	// message (none passed) for FilterWarnAfter or longer while messages
	// arrived, until a message passes.
	FilteredEverything *FilterWarning `json:"filtered_everything,omitempty"`
	// ColumnsNeverFilled are the columns (of a policy other than
	// dead_letter) whose value has been missing in every committed
	// message that made their mapping's row for ColumnWarnAfter or longer,
	// until a committed message fills them; in Columns order.
	ColumnsNeverFilled []ColumnWarning `json:"columns_never_filled,omitempty"`

	// OldestInFlight is the oldest publish time (to the second) among the
	// messages being processed.
	OldestInFlight *time.Time `json:"oldest_in_flight_publish_time,omitempty"`
	// Watermark and its lag behind now, when the pipeline tracks one.
	Watermark           *time.Time `json:"watermark,omitempty"`
	WatermarkLagSeconds *float64   `json:"watermark_lag_seconds,omitempty"`

	// Mapping is the payload's format and the topic-schema revisions met.
	Mapping mapping.Stats `json:"mapping"`

	// Dedupe is the dedupe state (filter fill, estimated false-positive
	// rate, catalog lookups), when the pipeline dedupes.
	Dedupe *dedupe.Stats `json:"dedupe,omitempty"`
	// Members are the processes running the pipeline as this one sees
	// them, whether it is alone (the fast path) or shared, when it dedupes.
	Members *members.Stats `json:"members,omitempty"`
	// Tracker is the watermark tracker's bookkeeping (pending messages,
	// frontier), when the pipeline tracks a watermark.
	Tracker *watermark.Stats `json:"tracker,omitempty"`
}

// OperationCounts are the rows of one operation, by result.
type OperationCounts struct {
	Applied    int64 `json:"applied"`
	Superseded int64 `json:"superseded"`
}

// MissingValues are the columns whose value was missing, by the policy
// that applied.
type MissingValues struct {
	Skip   int64 `json:"skip"`
	Empty  int64 `json:"empty"`
	Delete int64 `json:"delete"`
}

// Status reports the pipeline's counts and times. The counts are read from
// the same counters /metrics exports, so the two always agree.
func (p *Pipeline) Status() Status {
	m := p.deps.Metrics
	s := Status{
		Name:         p.name,
		Mode:         p.cfg.Mode,
		Receiving:    p.deps.Source != nil && p.deps.Source.Receiving(),
		Received:     int64(metrics.Value(m.Received)),
		Committed:    int64(metrics.Value(m.Committed)),
		Resumed:      int64(metrics.Value(m.Resumed)),
		Duplicate:    int64(metrics.Value(m.Duplicate)),
		Late:         int64(metrics.Value(m.Late)),
		Dropped:      int64(metrics.Value(m.Dropped)),
		Filtered:     int64(metrics.Value(m.Filtered)),
		Rows:         int64(metrics.Value(m.Rows)),
		Mapping:      p.mapper.Stats(),
		Retried:      int64(metrics.Value(m.Retried)),
		InFlight:     int64(metrics.Value(m.InFlight)),
		DeadLettered: map[string]int64{},

		StreamReopens: int64(metrics.Value(m.StreamReopens)),

		Operations: make(map[string]OperationCounts, numOps),
		MissingValues: MissingValues{
			Skip:   int64(metrics.Value(p.changes.missing[missingSkip])),
			Empty:  int64(metrics.Value(p.changes.missing[missingEmpty])),
			Delete: int64(metrics.Value(p.changes.missing[missingDelete])),
		},
		CellsSuperseded: int64(metrics.Value(p.changes.cells)),
	}
	for op, c := range p.changes.ops {
		s.Operations[sinks.Op(op).String()] = OperationCounts{
			Applied:    int64(metrics.Value(c[applied])),
			Superseded: int64(metrics.Value(c[superseded])),
		}
	}
	if err := p.Stalled(); err != nil {
		s.Stalled = err.Error()
	}
	if p.filters != nil {
		s.FilteredEverything = p.filters.warning()
	}
	if p.columns != nil {
		s.ColumnsNeverFilled = p.columns.warnings()
	}
	for _, r := range deadletter.Reasons {
		s.DeadLettered[string(r)] = int64(metrics.Value(m.DeadLettered(string(r))))
	}
	if t, ok := p.inFlight.oldest(); ok {
		s.OldestInFlight = &t
	}
	if p.deps.Tracker != nil {
		if wm := p.deps.Tracker.Watermark(); !wm.IsZero() {
			wm = wm.UTC()
			lag := time.Since(wm).Seconds()
			s.Watermark, s.WatermarkLagSeconds = &wm, &lag
		}
	}
	if p.deps.Dedupe != nil {
		st := p.deps.Dedupe.Stats()
		s.Dedupe = &st
	}
	if p.deps.Members != nil {
		st := p.deps.Members.Stats()
		s.Members = &st
	}
	if p.deps.Tracker != nil {
		st := p.deps.Tracker.Stats()
		s.Tracker = &st
	}
	return s
}
