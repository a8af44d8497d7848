package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/pubsink/pubsink/internal/buildinfo"
	"github.com/pubsink/pubsink/internal/server"
)

// Metrics holds every pubsink metric, registered in its own registry (no
// global state: tests and the demo each get their own).
type Metrics struct {
	Registry *prometheus.Registry

	received      *prometheus.CounterVec
	committed     *prometheus.CounterVec
	duplicate     *prometheus.CounterVec
	deadLettered  *prometheus.CounterVec
	late          *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	filtered      *prometheus.CounterVec
	resumed       *prometheus.CounterVec
	rows          *prometheus.CounterVec
	rowOps        *prometheus.CounterVec
	missing       *prometheus.CounterVec
	superseded    *prometheus.CounterVec
	retried       *prometheus.CounterVec
	inFlight      *prometheus.GaugeVec
	dlErrors      *prometheus.CounterVec
	sinkWrite     *prometheus.HistogramVec
	sinkErrors    *prometheus.CounterVec
	commitLatency *prometheus.HistogramVec
	stages        *prometheus.HistogramVec
	lookups       *prometheus.CounterVec
	filterFill    *prometheus.GaugeVec
	filterFPRate  *prometheus.GaugeVec
	conflicts     *prometheus.CounterVec
	conditional   *prometheus.CounterVec
	members       *prometheus.GaugeVec
	alone         *prometheus.GaugeVec
	renewals      *prometheus.CounterVec
	renewFailures *prometheus.CounterVec
	wmLeader      *prometheus.GaugeVec
	dlHeld        *prometheus.GaugeVec
	dlGaveUp      *prometheus.CounterVec
	takeovers     *prometheus.CounterVec
	neverFilled   *prometheus.GaugeVec

	// times are the figures read at scrape time from each pipeline: its
	// watermark and oldest message in flight.
	times *timeCollector
	// ready answers pubsink_ready at scrape time (nil: 0).
	readyMu sync.Mutex
	ready   func(ctx context.Context) error
	reopens *prometheus.CounterVec
	// trackingErrors counts the failed calls of the tracking subscription's
	// reader, by method.
	trackingErrors *prometheus.CounterVec
	// bigtable counts the rows the process's Bigtable clients mutate
	// (BigtableDialOptions): the process's, not a pipeline's.
	bigtable *bigtableCounter
}

// latencyBuckets span a fast local write (1 ms) to a message that waited
// out a long Bigtable outage (about 10 minutes), at bounds a reader can
// quote: 1, 2.5 and 5 of each power of ten.
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500}

// stageBuckets are latencyBuckets from 100 µs: a stage without I/O (the
// mapping) takes microseconds.
var stageBuckets = append([]float64{0.0001, 0.00025, 0.0005}, latencyBuckets...)

// New creates the metrics and a registry holding them, the Go runtime's and
// the process's.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pl := []string{"pipeline"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		r.MustRegister(v)
		return v
	}
	m := &Metrics{
		Registry:      r,
		received:      counter("pubsink_messages_received_total", "Messages delivered by the pipeline's subscription, redeliveries included.", pl...),
		committed:     counter("pubsink_messages_committed_total", "Messages whose row was written to the sink and whose outcome was made durable.", pl...),
		duplicate:     counter("pubsink_messages_duplicate_total", "Messages acked without a write because their dedupe key was claimed by another message, or recorded, within the window.", pl...),
		deadLettered:  counter("pubsink_messages_dead_lettered_total", "Messages acked after their copy was confirmed by the dead-letter output, by reason.", "pipeline", "reason"),
		late:          counter("pubsink_messages_late_total", "Messages whose event time was behind the watermark minus the allowed lateness, whatever the late-data policy did with them.", pl...),
		dropped:       counter("pubsink_messages_dropped_total", "Late messages acked and not written, as late_data: drop asks.", pl...),
		filtered:      counter("pubsink_messages_filtered_total", "Messages acked unwritten because the pipeline's filter was false for them.", pl...),
		resumed:       counter("pubsink_messages_resumed_total", "Committed messages whose dedupe key an earlier delivery of the same message had claimed (a redelivery after a crash, a nack, a lost ack or a paused replica): their rows were written again, the same cells. Included in committed; committed minus resumed counts each key once.", pl...),
		rows:          counter("pubsink_rows_committed_total", "Rows written by committed messages (a message makes none, one or many).", pl...),
		rowOps:        counter("pubsink_row_operations_total", "Rows written by committed messages, by operation (set, delete, delete_family, delete_columns) and result: applied, or superseded (nothing of a set row was set: the row held a newer change, a tombstone covered it, or an earlier insert was there). A plain mapping's rows are set, applied. The sum is pubsink_rows_committed_total.", "pipeline", "operation", "result"),
		missing:       counter("pubsink_missing_values_total", "Columns of committed messages whose value was missing, by the missing-value policy that applied (skip, empty, delete); a plain row left with no cell, and so not made, counts its columns too.", "pipeline", "policy"),
		superseded:    counter("pubsink_cells_superseded_total", "Cells of committed messages' set rows that were not written because the row held a newer cell or a tombstone covered them.", pl...),
		retried:       counter("pubsink_messages_retried_total", "Deliveries nacked for redelivery because their outcome could not be made durable (shutdown, or a failing dead-letter output).", pl...),
		sinkErrors:    counter("pubsink_sink_write_errors_total", "Rows a sink write did not write, by the gRPC code of the last failure (a failed call counts each of its rows).", "pipeline", "code"),
		lookups:       counter("pubsink_dedupe_catalog_lookups_total", "Dedupe keys confirmed against the durable catalog because the Bloom filters said maybe.", pl...),
		conflicts:     counter("pubsink_dedupe_claim_conflicts_total", "Times a dedupe claim found its key claimed by its own message and by another at once (an unconditional claim that was not trusted, being withdrawn), and looked again.", pl...),
		conditional:   counter("pubsink_dedupe_conditional_claims_total", "Dedupe claims made with a conditional mutation, because another process may run the pipeline.", pl...),
		renewals:      counter("pubsink_membership_renewals_total", "Successful writes of this process's membership cell.", pl...),
		renewFailures: counter("pubsink_membership_renewal_failures_total", "Failed renewals (writes or reads) of this process's membership.", pl...),
		dlGaveUp:      counter("pubsink_dead_letter_gave_up_total", "Messages nacked because the dead-letter output kept failing for the whole wait (a minute by default); they come back and try again.", pl...),
		takeovers:     counter("pubsink_watermark_leader_takeovers_total", "Times this process took the lease of the pipeline's watermark leader.", pl...),
		dlErrors:      counter("pubsink_dead_letter_errors_total", "Dead-letter sends that failed, by gRPC code (Unknown for a file output's errors); each is retried.", "pipeline", "code"),
		times:         newTimeCollector(),
		reopens:       counter("pubsink_source_stream_reopens_total", "Times the watchdog reopened the streams of the pipeline's main subscription: they delivered nothing for source.stall_timeout while messages waited and flow control had room.", pl...),
	}
	m.bigtable = newBigtableCounter(r)
	m.trackingErrors = counter("pubsink_tracking_errors_total", "Failed calls of the watermark tracker on the tracking subscription, by method (Pull, Acknowledge, ModifyAckDeadline). A failed Pull, or one that hung, is a break: the watermark holds for the message lease; the messages of a failed Acknowledge come back after the ack deadline, which the tracker ignores.", "pipeline", "method")
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_messages_in_flight", Help: "Messages received and not yet acked or nacked."}, pl)
	m.sinkWrite = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pubsink_sink_write_seconds", Help: "Duration of one write call to the sink: a batched ApplyBulk, or one call (CheckAndMutateRow, MutateRow, ReadRow) of a change row.", Buckets: latencyBuckets}, pl)
	m.commitLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pubsink_commit_latency_seconds", Help: "Time from a message's publication to its commit.", Buckets: latencyBuckets}, pl)
	m.stages = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pubsink_stage_seconds", Help: "Time a message spent in each stage of its processing: map (decode, filter, rows), dedupe (its key's claim, exactly_once), write (its rows durable in the sink, the batch delay included), commit (the end of its key's hold, exactly_once), report (its finish told to the watermark tracker). For one message in 16, observed when the stage succeeds.", Buckets: stageBuckets}, []string{"pipeline", "stage"})
	m.filterFill = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_dedupe_filter_fill_ratio", Help: "Fraction of bits set in the dedupe Bloom filters of the live window, averaged over its filters."}, pl)
	m.filterFPRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_dedupe_false_positive_ratio", Help: "Estimated probability that a new key is reported maybe-present by the dedupe filters and costs a catalog read."}, pl)
	m.members = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_members", Help: "Processes running the pipeline that this one sees live, itself included."}, pl)
	m.alone = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_membership_alone", Help: "1 while this process is provably the only one running the pipeline and claims keys on the fast path, else 0."}, pl)
	m.wmLeader = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_watermark_leader", Help: "1 while this process leads the pipeline's watermark (reads the tracking subscription and stores the watermark), else 0."}, pl)
	m.dlHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_dead_letter_held", Help: "Messages waiting, each in a flow-control slot, for a dead-letter output that failed at least once."}, pl)
	m.neverFilled = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pubsink_column_never_filled", Help: "1 while the column (its key in the pipeline, such as sink.columns.last_name) has had its value missing in every committed message that made its mapping's row for 5 minutes or more, else 0; only columns whose on_missing is skip, empty or delete have the series."}, []string{"pipeline", "column"})
	r.MustRegister(m.wmLeader, m.dlHeld, m.neverFilled)
	build := buildinfo.Read()
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "pubsink_build_info",
		Help:        "1, labelled with the module version, VCS revision and Go version of the binary.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "go_version": build.GoVersion},
	}, func() float64 { return 1 }))
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pubsink_ready",
		Help: "1 when the process is ready (what /readyz answers 200 to), else 0; checked at scrape time.",
	}, m.readyValue))
	r.MustRegister(m.times)
	r.MustRegister(m.inFlight, m.sinkWrite, m.commitLatency, m.stages, m.filterFill, m.filterFPRate, m.members, m.alone)
	return m
}

// Pipeline is the metrics of one pipeline, with the label already bound so
// that the hot path does no label lookups.
type Pipeline struct {
	Received      prometheus.Counter
	Committed     prometheus.Counter
	Duplicate     prometheus.Counter
	Late          prometheus.Counter
	Dropped       prometheus.Counter
	Filtered      prometheus.Counter
	Resumed       prometheus.Counter
	Rows          prometheus.Counter
	Retried       prometheus.Counter
	InFlight      prometheus.Gauge
	SinkWrite     prometheus.Observer
	CommitLatency prometheus.Observer
	Lookups       prometheus.Counter
	FilterFill    prometheus.Gauge
	FilterFPRate  prometheus.Gauge
	Conflicts     prometheus.Counter
	Conditional   prometheus.Counter
	Members       prometheus.Gauge
	Alone         prometheus.Gauge
	Renewals      prometheus.Counter
	RenewFailures prometheus.Counter
	// WatermarkLeader and Takeovers are the watermark's leadership.
	WatermarkLeader prometheus.Gauge
	// DeadLetterHeld and DeadLetterGaveUp follow a failing dead-letter
	// output.
	DeadLetterHeld   prometheus.Gauge
	DeadLetterGaveUp prometheus.Counter
	Takeovers        prometheus.Counter
	// StreamReopens counts the watchdog's reopens of the streams of the
	// pipeline's subscriptions (package source).
	StreamReopens prometheus.Counter
	// CellsSuperseded counts the cells of committed set rows that a newer
	// cell or a tombstone kept from being written (RowOperations and
	// MissingValues are the other counts of changes).
	CellsSuperseded prometheus.Counter

	name         string
	times        *timeCollector
	deadLettered *prometheus.CounterVec
	sinkErrors   *prometheus.CounterVec
	dlErrors     *prometheus.CounterVec
	stages       prometheus.ObserverVec
	tracking     *prometheus.CounterVec
	rowOps       *prometheus.CounterVec
	missing      *prometheus.CounterVec
	neverFilled  *prometheus.GaugeVec
}

// trackingMethods are the calls the tracking subscription's reader makes,
// the values of pubsink_tracking_errors_total's method label: each series
// exists from the start, at 0, so that a rate over it is defined.
var trackingMethods = []string{"Pull", "Acknowledge", "ModifyAckDeadline"}

// The values of the labels of the counts of changes, each series exported
// at 0 from the start so that a rate over it is defined.
var (
	// Operations are pubsink_row_operations_total's operation label: the
	// names of sinks.Op, in its order.
	Operations = []string{"set", "delete", "delete_family", "delete_columns"}
	// OperationResults are its result label: applied or superseded
	// (sinks.Applied).
	OperationResults = []string{"applied", "superseded"}
	// MissingPolicies are pubsink_missing_values_total's policy label: the
	// missing-value policies that write the message (mapping.Missing).
	MissingPolicies = []string{"skip", "empty", "delete"}
)

// Pipeline returns the metrics of the pipeline called name.
func (m *Metrics) Pipeline(name string) *Pipeline {
	for _, method := range trackingMethods {
		m.trackingErrors.WithLabelValues(name, method)
	}
	for _, op := range Operations {
		for _, result := range OperationResults {
			m.rowOps.WithLabelValues(name, op, result)
		}
	}
	for _, policy := range MissingPolicies {
		m.missing.WithLabelValues(name, policy)
	}
	return &Pipeline{
		Received:         m.received.WithLabelValues(name),
		Committed:        m.committed.WithLabelValues(name),
		Duplicate:        m.duplicate.WithLabelValues(name),
		Late:             m.late.WithLabelValues(name),
		Dropped:          m.dropped.WithLabelValues(name),
		Filtered:         m.filtered.WithLabelValues(name),
		Resumed:          m.resumed.WithLabelValues(name),
		Rows:             m.rows.WithLabelValues(name),
		CellsSuperseded:  m.superseded.WithLabelValues(name),
		Retried:          m.retried.WithLabelValues(name),
		InFlight:         m.inFlight.WithLabelValues(name),
		SinkWrite:        m.sinkWrite.WithLabelValues(name),
		CommitLatency:    m.commitLatency.WithLabelValues(name),
		Lookups:          m.lookups.WithLabelValues(name),
		FilterFill:       m.filterFill.WithLabelValues(name),
		FilterFPRate:     m.filterFPRate.WithLabelValues(name),
		Conflicts:        m.conflicts.WithLabelValues(name),
		Conditional:      m.conditional.WithLabelValues(name),
		Members:          m.members.WithLabelValues(name),
		Alone:            m.alone.WithLabelValues(name),
		Renewals:         m.renewals.WithLabelValues(name),
		RenewFailures:    m.renewFailures.WithLabelValues(name),
		WatermarkLeader:  m.wmLeader.WithLabelValues(name),
		DeadLetterHeld:   m.dlHeld.WithLabelValues(name),
		DeadLetterGaveUp: m.dlGaveUp.WithLabelValues(name),
		Takeovers:        m.takeovers.WithLabelValues(name),
		name:             name,
		times:            m.times,
		dlErrors:         m.dlErrors.MustCurryWith(prometheus.Labels{"pipeline": name}),
		StreamReopens:    m.reopens.WithLabelValues(name),
		tracking:         m.trackingErrors.MustCurryWith(prometheus.Labels{"pipeline": name}),
		deadLettered:     m.deadLettered.MustCurryWith(prometheus.Labels{"pipeline": name}),
		sinkErrors:       m.sinkErrors.MustCurryWith(prometheus.Labels{"pipeline": name}),
		stages:           m.stages.MustCurryWith(prometheus.Labels{"pipeline": name}),
		rowOps:           m.rowOps.MustCurryWith(prometheus.Labels{"pipeline": name}),
		missing:          m.missing.MustCurryWith(prometheus.Labels{"pipeline": name}),
		neverFilled:      m.neverFilled.MustCurryWith(prometheus.Labels{"pipeline": name}),
	}
}

// DeadLettered is the counter of dead-lettered messages for one reason.
func (p *Pipeline) DeadLettered(reason string) prometheus.Counter {
	return p.deadLettered.WithLabelValues(reason)
}

// RowOperations is the counter of committed rows of one operation (one of
// Operations) with one result (one of OperationResults). The pipeline
// resolves each once, not per message.
func (p *Pipeline) RowOperations(operation, result string) prometheus.Counter {
	return p.rowOps.WithLabelValues(operation, result)
}

// MissingValues is the counter of missing values of committed messages'
// columns under one policy (one of MissingPolicies).
func (p *Pipeline) MissingValues(policy string) prometheus.Counter {
	return p.missing.WithLabelValues(policy)
}

// ColumnNeverFilled is the gauge of pubsink_column_never_filled for the
// column whose key in the pipeline is column (config-bound: one series per
// column the pipeline follows).
func (p *Pipeline) ColumnNeverFilled(column string) prometheus.Gauge {
	return p.neverFilled.WithLabelValues(column)
}

// Stage is the histogram of pubsink_stage_seconds for one stage of the
// pipeline's; asking for it exports the stage's series.
func (p *Pipeline) Stage(stage string) prometheus.Observer {
	return p.stages.WithLabelValues(stage)
}

// SinkWriteErrors is the counter of rows the sink did not write, for one
// gRPC code (its name, as codes.Code.String gives it).
func (p *Pipeline) SinkWriteErrors(code string) prometheus.Counter {
	return p.sinkErrors.WithLabelValues(code)
}

// TrackingErrors is the counter of failed calls on the tracking
// subscription, for one method ("Pull", "Acknowledge", "ModifyAckDeadline").
func (p *Pipeline) TrackingErrors(method string) prometheus.Counter {
	return p.tracking.WithLabelValues(method)
}

// DeadLetterErrors is the counter of failed dead-letter sends, for one
// gRPC code (its name).
func (p *Pipeline) DeadLetterErrors(code string) prometheus.Counter {
	return p.dlErrors.WithLabelValues(code)
}

// WatchWatermark makes the pipeline's watermark and its lag behind the
// clock metrics, read from watermark at every scrape:
// pubsink_watermark_timestamp_seconds and pubsink_watermark_lag_seconds,
// both absent while watermark returns the zero time (not known yet), so
// that an alert on the lag cannot fire before there is one.
func (p *Pipeline) WatchWatermark(watermark func() time.Time) {
	p.times.set(p.name, func(c *pipelineTimes) { c.watermark = watermark })
}

// WatchOldestInFlight makes pubsink_oldest_in_flight_age_seconds: the age,
// since its publication, of the oldest message being processed, read from
// oldest at every scrape; 0 when none is.
func (p *Pipeline) WatchOldestInFlight(oldest func() (time.Time, bool)) {
	p.times.set(p.name, func(c *pipelineTimes) { c.oldest = oldest })
}

// WatchReady makes pubsink_ready ask ready at every scrape.
func (m *Metrics) WatchReady(ready func(ctx context.Context) error) {
	m.readyMu.Lock()
	defer m.readyMu.Unlock()
	m.ready = ready
}

func (m *Metrics) readyValue() float64 {
	m.readyMu.Lock()
	ready := m.ready
	m.readyMu.Unlock()
	if ready == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), server.ReadyTimeout)
	defer cancel()
	if ready(ctx) != nil {
		return 0
	}
	return 1
}

// Value reads the current value of a counter or gauge, so that /status and
// the demo report the same numbers as /metrics.
func Value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return 0
}
