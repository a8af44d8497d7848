package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/reprocess"
	"github.com/pubsink/pubsink/sinks"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/source"
)

// TryRequest is what `pubsink try` was asked to do.
type TryRequest struct {
	Pipeline string // required
	// From, Snapshot and Until are the range, as for audit; Next takes
	// the next Next messages published instead (no range). Exactly one of
	// From, Snapshot and Next is set.
	From, Snapshot, Until string
	Next                  int
	// Limit caps the sample (with From or Snapshot; Next is its own cap).
	Limit int
	// JSON prints one JSON object per message and the summary as one to
	// the output, and the other lines to the progress writer.
	JSON bool
	// Idle ends the read once no message arrived for it.
	Idle time.Duration
}

// DefaultTryLimit is --limit's default: a sample a terminal shows whole,
// and enough messages for a column that is rarely filled to be seen once.
const DefaultTryLimit = 100

// DefaultTryIdle is --idle's default, as audit's.
const DefaultTryIdle = DefaultAuditIdle

// tryValueWidth is the width, in characters, a cell's value is shortened
// to in the text output (the JSON output has it whole).
const tryValueWidth = 60

// ErrTryStopped is a try stopped (SIGTERM, SIGINT) before its sample was
// complete: it printed the summary of what it had read, and deleted its
// subscription. The CLI exits 3.
var ErrTryStopped = errors.New("try stopped before its sample was complete")

// TryFile tries the mapping of the file at path on a topic's messages (see
// the command's help and docs/reference.md, "Try"): what it maps to out,
// logs to logs.
func TryFile(ctx context.Context, path string, req TryRequest, out, logs io.Writer) error {
	cfg, log, opts, err := loadJob(path, "-", logs)
	if err != nil {
		return err
	}
	defer log.Sync()
	return Try(ctx, log, cfg, req, opts, out, logs)
}

// Try maps a sample of the messages of req.Pipeline's topic with cfg's
// mapping, and writes nothing:
//
//  1. The range (--from or --snapshot until --until or now), or none
//     (--next).
//  2. A subscription of its own on the topic (as audit's: one-day
//     expiration policy), seeked to the range's start, or to the start of
//     the try for --next.
//  3. The read: each message mapped (mapping.Mapper.Map, as run does) and
//     printed, then acked on that subscription, until the sample has its
//     size, no message arrived for --idle, or ctx ends.
//  4. The subscription deleted, the summary: per column filled and
//     missing by policy, dead-lettered by reason, filtered, and a warning
//     for each column never filled.
//
// It never touches the live subscription (no ack, no seek) nor a table,
// and publishes no dead-letter copy. A sample of 0 messages is a
// *ConfigError saying why; stopped (ctx), it prints what it had and returns
// ErrTryStopped.
func Try(ctx context.Context, log *zap.Logger, cfg *config.Config, req TryRequest, opts Options, out, progress io.Writer) error {
	err := runTry(ctx, log, cfg, req, opts, out, progress)
	if errors.Is(err, errTryStoppedEarly) {
		w := out
		if req.JSON {
			w = progress
		}
		fmt.Fprintf(w, "try of %s: stopped before its read\n", req.Pipeline)
		return ErrTryStopped
	}
	return err
}

// errTryStoppedEarly is a try stopped before its read: Try says so.
var errTryStoppedEarly = errors.New("try stopped before its read")

func runTry(ctx context.Context, log *zap.Logger, cfg *config.Config, req TryRequest, opts Options, out, progress io.Writer) error {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	pc := pipelineNamed(cfg, req.Pipeline)
	if pc == nil {
		return &ConfigError{fmt.Errorf("try: the configuration has no pipeline %q", req.Pipeline)}
	}
	start := now()
	var rf rangeFlags
	var until time.Time
	size := req.Limit
	if req.Next > 0 {
		size = req.Next
	} else {
		var err error
		if rf, err = parseRange("try", cfg, req.From, req.Until, req.Snapshot, start); err != nil {
			return err
		}
		until = rf.until
		if until.IsZero() {
			until = start.Truncate(time.Millisecond)
		}
	}
	if size <= 0 {
		size = DefaultTryLimit
	}
	text := out
	if req.JSON {
		text = progress
	}

	// An App holds the clients; it runs no pipeline and serves nothing.
	acfg := *cfg
	acfg.Pipelines = nil
	opts.HTTPAddr = "-"
	a, err := Open(ctx, log, &acfg, opts)
	if err != nil {
		return stoppedOr(ctx, err)
	}
	defer a.closeClients()
	ps := a.pubsub
	live := cfg.SubscriptionName(pc.Source.Subscription)
	liveSub, err := ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: live})
	if err != nil {
		return stoppedOr(ctx, fmt.Errorf("try: the live subscription %s: %w", live, err))
	}
	if req.Next == 0 {
		if err := checkHistory(ctx, "try", ps, liveSub, rf.from, rf.snapshot, start); err != nil {
			return stoppedOr(ctx, err)
		}
	}
	maxBytes := int64(pc.Source.MaxOutstandingBytes)
	if maxBytes == 0 {
		maxBytes = source.DefaultMaxOutstandingBytes(memoryLimit(), 1)
	}
	limits := btsink.Limits
	if pc.Sink.Type == config.SinkStdout {
		limits = sinks.Limits{}
	}
	mp, err := a.mapper(ctx, *pc, limits, maxBytes)
	if err != nil {
		return stoppedOr(ctx, err)
	}

	stamp := reprocess.Stamp(start)
	name := pc.Name + "~t" + stamp
	own := ownSubscription{command: "try", live: liveSub}
	// --next: seeked to the start, so that what a topic with retention
	// (or the emulator) would give a new subscription of the past is not
	// taken.
	seek := rf
	if req.Next > 0 {
		seek.from = start
	}
	sub, err := own.create(ctx, ps, seek, stamp, start, func(stamp string) { name = pc.Name + "~t" + stamp })
	if err != nil {
		return stoppedOr(ctx, err)
	}
	deleted := false
	defer func() {
		if !deleted {
			own.delete(ctx, log, ps, sub)
		}
	}()
	what := fmt.Sprintf("the next %d messages published", size)
	rangeText := ""
	if req.Next == 0 {
		rangeText = describeAuditRange(rf, until)
		what = fmt.Sprintf("at most %d messages %s", size, rangeText)
	}
	fmt.Fprintf(text, "try %s: reading %s on the topic %s of pipeline %s, through %s; writing nothing\n", name, what, liveSub.GetTopic(), pc.Name, sub)

	// The read. With --next the gate has no range: every message counts.
	gateUntil := until
	if req.Next > 0 {
		gateUntil = time.Unix(math.MaxInt32, 0)
	}
	gate := reprocess.NewGate(rf.from, gateUntil, now)
	src := pc.Source
	src.Subscription, src.Ordering = sub, false
	gated := gate.Wrap(source.New(ps, log, sub, src, maxBytes))
	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	sample := newTrySample(pc, mp.Columns(), size, req.Idle, text, out, req.JSON)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		reprocess.Watch(readCtx, gate, reprocess.NewReporter(io.Discard, zap.NewNop(), "try"), req.Idle)
		stopRead()
	}()
	readErr := gated.Run(readCtx, ctx, func(hctx context.Context, msg *source.Message) bool {
		if !sample.take() {
			return false // the sample is full: the subscription goes
		}
		var r mapping.Result
		err := mp.Map(hctx, msg, &r)
		var bad *mapping.BadInput
		if err != nil && !errors.As(err, &bad) {
			sample.release()
			log.Warn("try: a message could not be mapped yet; it comes again", zap.String("message_id", msg.ID), zap.Error(err))
			return false
		}
		if sample.add(msg, &r, bad) {
			stopRead()
		}
		return true
	})
	stopRead()
	<-watched
	if readErr != nil && ctx.Err() == nil {
		return fmt.Errorf("try: read the topic: %w", readErr)
	}

	deleted = true
	delErr := own.delete(ctx, log, ps, sub)
	ended := "idle"
	switch {
	case ctx.Err() != nil:
		ended = "stopped"
	case sample.full():
		ended = "full"
	}
	sum := sample.summary(name, sub, ended, delErr == nil)
	sample.print(sum, sum.Messages > 0 || ctx.Err() != nil)
	switch {
	case delErr != nil:
		return delErr
	case ctx.Err() != nil:
		fmt.Fprintf(text, "try %s: stopped after %d messages; the summary covers those\n", name, sum.Messages)
		return ErrTryStopped
	case sum.Messages > 0:
		return nil
	case req.Next > 0:
		return &ConfigError{fmt.Errorf("try %s: no message was published on %s within --idle %s of the start: nothing to try the mapping on. "+
			"Publish some while it waits, give a longer --idle, or use --from if the topic retains messages", name, liveSub.GetTopic(), req.Idle)}
	}
	// The range gave nothing: proof that the topic had messages in it
	// (the live pipeline's claims) or the note on retention.
	stateClient, err := a.stateBigtable(ctx)
	if err != nil {
		return stoppedOr(ctx, err)
	}
	r := emptyRead{command: "try", name: name, rangeText: rangeText, live: pc.Name, topic: liveSub.GetTopic(),
		from: rf.from, until: until, snapshot: rf.snapshot, started: start,
		what: "try only a range published after retention was enabled, or the next messages published (--next)"}
	if err := r.check(context.WithoutCancel(ctx), ps, stateClient.Open(cfg.State.Table), text); err != nil {
		return err
	}
	return &ConfigError{fmt.Errorf("try %s: no message of the range (%s) arrived within --idle %s: nothing to try the mapping on (the note above says why it may be)", name, rangeText, req.Idle)}
}

// stoppedOr is err, or errTryStoppedEarly when ctx ended (a *ConfigError
// stays one): a try stopped before its read.
func stoppedOr(ctx context.Context, err error) error {
	var ce *ConfigError
	if ctx.Err() != nil && !errors.As(err, &ce) {
		return errTryStoppedEarly
	}
	return err
}

// trySample is a try's sample: each message as it is mapped, printed, and
// the counts of the summary. Safe for concurrent use.
type trySample struct {
	pipeline config.Pipeline
	columns  []mapping.Column
	size     int
	idle     time.Duration // --idle, for the summary
	text     io.Writer     // the messages' and summary's lines
	out      io.Writer     // the JSON objects, with json
	json     bool

	mu       sync.Mutex
	taken    int // messages taken, mapped or being mapped
	messages int
	withRows int
	rows     int
	filtered int
	dead     map[deadletter.Reason]int
	counts   []columnCounts // by index in columns
}

// columnCounts is what the sample made of one column.
type columnCounts struct {
	Filled  int `json:"filled"`
	Skipped int `json:"skipped"`
	Emptied int `json:"emptied"`
	Deleted int `json:"deleted"`
}

func newTrySample(pc *config.Pipeline, columns []mapping.Column, size int, idle time.Duration, text, out io.Writer, json bool) *trySample {
	s := &trySample{pipeline: *pc, columns: columns, size: size, idle: idle, text: text, out: out, json: json,
		dead: map[deadletter.Reason]int{}, counts: make([]columnCounts, len(columns))}
	return s
}

// take reserves a place in the sample for a message: false when it is
// full.
func (s *trySample) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken >= s.size {
		return false
	}
	s.taken++
	return true
}

// release gives back a place taken by a message that was not mapped.
func (s *trySample) release() {
	s.mu.Lock()
	s.taken--
	s.mu.Unlock()
}

// tryMessage is one message of the sample in the JSON output.
type tryMessage struct {
	Kind        string          `json:"kind"` // "message"
	MessageID   string          `json:"message_id"`
	PublishTime time.Time       `json:"publish_time"`
	Outcome     string          `json:"outcome"` // "rows", "filtered", "dead_lettered"
	Reason      string          `json:"reason,omitempty"`
	Error       string          `json:"error,omitempty"`
	Rows        []tryRow        `json:"rows,omitempty"`
	Missing     []tryMissingCol `json:"missing,omitempty"`
}

type tryRow struct {
	Table     string    `json:"table"`
	Family    string    `json:"family"`
	Key       string    `json:"key"`
	Timestamp time.Time `json:"timestamp"`
	Op        string    `json:"op"`
	Mode      string    `json:"mode"`
	Cells     []tryCell `json:"cells"`
	Delete    []string  `json:"delete,omitempty"`
}

type tryCell struct {
	Column string `json:"column"`
	// Value is the cell's bytes as text when they are UTF-8, else
	// ValueBase64 holds them.
	Value       *string `json:"value,omitempty"`
	ValueBase64 []byte  `json:"value_base64,omitempty"`
}

type tryMissingCol struct {
	Column string `json:"column"` // its key, sink.columns.last_name
	Policy string `json:"policy"` // on_missing: skip, empty, delete
}

// add counts and prints msg, mapped into r (bad: dead-lettered), and
// reports whether the sample is full.
func (s *trySample) add(msg *source.Message, r *mapping.Result, bad *mapping.BadInput) bool {
	m := tryMessage{Kind: "message", MessageID: msg.ID, PublishTime: msg.PublishTime.UTC()}
	switch {
	case bad != nil:
		m.Outcome, m.Reason, m.Error = "dead_lettered", string(bad.Reason), deadletter.ErrorText(bad.Err)
	case r.Filtered:
		m.Outcome = "filtered"
	default:
		m.Outcome = "rows"
		for _, row := range r.Rows {
			m.Rows = append(m.Rows, s.row(row))
		}
		for _, i := range r.MissingColumns {
			m.Missing = append(m.Missing, tryMissingCol{Column: s.columns[i].Key, Policy: s.columns[i].OnMissing})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages++
	switch m.Outcome {
	case "dead_lettered":
		s.dead[bad.Reason]++
	case "filtered":
		s.filtered++
	default:
		s.withRows++
		s.rows += len(r.Rows)
		s.count(r)
	}
	if s.json {
		b, _ := json.Marshal(m)
		fmt.Fprintf(s.out, "%s\n", b)
	} else {
		s.printMessage(m)
	}
	return s.messages >= s.size
}

// count adds the columns of r's rows: the cells that hold a value
// (mapping.Result.Filled), and the values r missed by policy.
func (s *trySample) count(r *mapping.Result) {
	for i, col := range s.columns {
		s.counts[i].Filled += r.Filled(i, col)
	}
	for _, i := range r.MissingColumns {
		c := &s.counts[i]
		switch s.columns[i].OnMissing {
		case config.MissingSkip:
			c.Skipped++
		case config.MissingEmpty:
			c.Emptied++
		case config.MissingDelete:
			c.Deleted++
		}
	}
}

func (s *trySample) row(row sinks.Row) tryRow {
	t := tryRow{Table: row.Table, Family: row.Family, Key: row.Key, Timestamp: row.Timestamp.UTC(),
		Op: row.Change.Op.String(), Mode: row.Change.Mode.String(), Cells: []tryCell{}, Delete: row.Change.Delete}
	if t.Table == "" {
		t.Table = s.pipeline.Sink.Table
	}
	if t.Family == "" {
		t.Family = s.pipeline.Sink.ColumnFamily
	}
	for _, c := range row.Cells {
		tc := tryCell{Column: c.Column}
		if utf8.Valid(c.Value) {
			v := string(c.Value)
			tc.Value = &v
		} else {
			tc.ValueBase64 = c.Value
		}
		t.Cells = append(t.Cells, tc)
	}
	return t
}

// printMessage prints m as text: a line for the message and its outcome,
// then per row a line and a line per cell.
func (s *trySample) printMessage(m tryMessage) {
	head := fmt.Sprintf("message %s  published %s  ", m.MessageID, m.PublishTime.Format(time.RFC3339Nano))
	switch m.Outcome {
	case "dead_lettered":
		fmt.Fprintf(s.text, "%sdead-lettered (%s): %s\n", head, m.Reason, m.Error)
		return
	case "filtered":
		fmt.Fprintf(s.text, "%sfiltered\n", head)
		return
	}
	fmt.Fprintf(s.text, "%s%d rows\n", head, len(m.Rows))
	for _, r := range m.Rows {
		op := r.Op
		if r.Mode != sinks.ModePlain.String() {
			op += ", " + r.Mode
		}
		fmt.Fprintf(s.text, "  %s  row %s  family %s  at %s  (%s)\n", r.Table, strconv.Quote(r.Key), r.Family, r.Timestamp.Format(time.RFC3339Nano), op)
		for _, c := range r.Cells {
			v := "base64:" + string(c.ValueBase64)
			if c.Value != nil {
				v = shorten(*c.Value, tryValueWidth)
			}
			fmt.Fprintf(s.text, "    %s = %s\n", c.Column, v)
		}
		for _, d := range r.Delete {
			fmt.Fprintf(s.text, "    %s deleted\n", d)
		}
	}
	for _, c := range m.Missing {
		fmt.Fprintf(s.text, "  missing %s (on_missing %s)\n", c.Column, c.Policy)
	}
}

// shorten quotes v, cut to width characters with the length said.
func shorten(v string, width int) string {
	if utf8.RuneCountInString(v) <= width {
		return strconv.Quote(v)
	}
	i, n := 0, 0
	for i = range v {
		if n == width {
			break
		}
		n++
	}
	return strconv.Quote(v[:i]) + fmt.Sprintf("… (%d bytes)", len(v))
}

// trySummary is the summary of a try, as --json prints it.
type trySummary struct {
	Kind         string         `json:"kind"` // "summary"
	Try          string         `json:"try"`
	Pipeline     string         `json:"pipeline"`
	Subscription string         `json:"subscription"`
	Messages     int            `json:"messages"`
	Ended        string         `json:"ended"` // "full", "idle", "stopped"
	WithRows     int            `json:"with_rows"`
	Rows         int            `json:"rows"`
	Filtered     int            `json:"filtered"`
	DeadLettered map[string]int `json:"dead_lettered"`
	Columns      []tryColumn    `json:"columns"`
	Warnings     []string       `json:"warnings"`
	WroteNothing bool           `json:"wrote_nothing"`
	Deleted      bool           `json:"subscription_deleted"`
}

type tryColumn struct {
	Key       string `json:"key"`
	Table     string `json:"table"`
	Family    string `json:"family"`
	Column    string `json:"column"`
	Template  string `json:"template"`
	OnMissing string `json:"on_missing"`
	columnCounts
}

// full reports whether the sample has its size.
func (s *trySample) full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messages >= s.size
}

func (s *trySample) summary(name, sub, ended string, deleted bool) trySummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := trySummary{Kind: "summary", Try: name, Pipeline: s.pipeline.Name, Subscription: sub, Messages: s.messages, Ended: ended, WithRows: s.withRows,
		Rows: s.rows, Filtered: s.filtered, DeadLettered: map[string]int{}, Columns: []tryColumn{}, Warnings: []string{},
		WroteNothing: true, Deleted: deleted}
	for r, n := range s.dead {
		sum.DeadLettered[string(r)] = n
	}
	for i, c := range s.columns {
		tc := tryColumn{Key: c.Key, Table: c.Table, Family: c.Family, Column: c.Name, Template: c.Template, OnMissing: c.OnMissing, columnCounts: s.counts[i]}
		if tc.Table == "" {
			tc.Table = s.pipeline.Sink.Table
		}
		if tc.Family == "" {
			tc.Family = s.pipeline.Sink.ColumnFamily
		}
		sum.Columns = append(sum.Columns, tc)
		if s.messages > 0 && tc.Filled == 0 {
			missed := tc.Skipped + tc.Emptied + tc.Deleted
			sum.Warnings = append(sum.Warnings, fmt.Sprintf("column %s (template %q) was never filled in %d messages: missing in %d of their rows (on_missing %s); check the template's path against the messages above",
				c.Key, c.Template, s.messages, missed, c.OnMissing))
		}
	}
	return sum
}

// endedText says why the read ended, in the summary's first line.
func (s *trySample) endedText(ended string) string {
	switch ended {
	case "full":
		return "the sample's size"
	case "stopped":
		return "then stopped"
	}
	return "then none for --idle " + s.idle.String()
}

// print prints sum: the text table and lines, or the JSON object (and the
// warnings and the last line as text, to the progress writer); without
// counts (an empty sample), the text is only the last line.
func (s *trySample) print(sum trySummary, counts bool) {
	switch {
	case s.json:
		b, _ := json.Marshal(sum)
		fmt.Fprintf(s.out, "%s\n", b)
	case !counts:
	default:
		fmt.Fprintf(s.text, "try %s: %d messages, %s: %d with rows (%d rows), %d filtered, %d dead-lettered\n",
			sum.Try, sum.Messages, s.endedText(sum.Ended), sum.WithRows, sum.Rows, sum.Filtered, sum.Messages-sum.WithRows-sum.Filtered)
		tw := tabwriter.NewWriter(s.text, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  column\ttemplate\ton_missing\tfilled\tskipped\temptied\tdeleted")
		for _, c := range sum.Columns {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%d\n", c.Key, c.Template, c.OnMissing, c.Filled, c.Skipped, c.Emptied, c.Deleted)
		}
		tw.Flush()
		reasons := make([]string, 0, len(sum.DeadLettered))
		for r := range sum.DeadLettered {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			fmt.Fprintf(s.text, "  dead-lettered %s: %d\n", r, sum.DeadLettered[r])
		}
		fmt.Fprintf(s.text, "  filtered: %d\n", sum.Filtered)
	}
	for _, w := range sum.Warnings {
		fmt.Fprintf(s.text, "warning: %s\n", w)
	}
	if sum.Deleted {
		fmt.Fprintf(s.text, "try %s: wrote nothing (no table, no dead-letter copy, no ack on the live subscription); deleted its subscription %s\n", sum.Try, sum.Subscription)
	}
}
