package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// batchConfig makes one row per element of data.items, and an index row in
// a second table for the messages whose data.site is set.
func batchConfig() config.Pipeline {
	cfg := testConfig()
	cfg.Filter = "attributes.?type.orValue('') != 'heartbeat'"
	cfg.Sink = config.Sink{
		Table:        "readings",
		ColumnFamily: "d",
		Timestamp:    config.CellTimeEvent,
		MaxRows:      60,
		Mappings: []config.Mapping{
			{Each: "data.items", RowKey: "{attributes.order_id}#{item.n}", Columns: map[string]string{
				"v": "{item.v}", "cents": "{= int(item.v * 100.0)}"}},
			{Table: "by_site", When: "has(data.site)", RowKey: "{data.site}#{attributes.order_id}",
				Columns: map[string]string{"order": "{attributes.order_id}"}},
		},
	}
	return cfg
}

func items(n int, site bool) string {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"n":%d,"v":%d.25}`, i, i)
	}
	b.WriteString("]")
	if site {
		b.WriteString(`,"site":"berlin"`)
	}
	b.WriteString("}")
	return b.String()
}

func TestEveryElementIsARowWrittenInOneCallAndCommittedOnce(t *testing.T) {
	sink := &fakeSink{}
	dd := &fakeDedupe{}
	p, m := newTestPipeline(t, batchConfig(), Deps{Sink: sink, Dedupe: dd})
	msg := order("o1", "c9", items(50, true))
	if !p.Handle(context.Background(), msg) {
		t.Fatal("want ack")
	}
	if sink.n != 1 || len(sink.rows) != 51 {
		t.Fatalf("%d writes of %d rows; want one write of 50 element rows and one index row", sink.n, len(sink.rows))
	}
	row := sink.rows["o1#7"]
	if row.Table != "" && row.Table != "readings" || string(row.Cells[0].Value) != "725" || string(row.Cells[1].Value) != "7.25" {
		t.Errorf("element row %+v; want cents 725 and v 7.25 in readings", row)
	}
	if idx := sink.rows["berlin#o1"]; idx.Table != "by_site" {
		t.Errorf("index row %+v, want it in by_site", idx)
	}
	if got := metrics.Value(m.Rows); got != 51 {
		t.Errorf("rows committed = %v, want 51", got)
	}
	// A rival (another payload, same dedupe key) writes nothing new.
	rival := order("o1", "c9", items(3, false))
	rival.ID = "m-rival"
	if !p.Handle(context.Background(), rival) || sink.n != 1 {
		t.Fatalf("the rival was written: %d writes", sink.n)
	}
	if got := metrics.Value(m.Duplicate); got != 1 {
		t.Errorf("duplicate = %v, want 1", got)
	}
}

func TestAFilteredMessageIsAckedUnwrittenAndFinished(t *testing.T) {
	sink := &fakeSink{}
	dd := &fakeDedupe{}
	tr := &fakeTracker{}
	p, m := newTestPipeline(t, batchConfig(), Deps{Sink: sink, Dedupe: dd, Tracker: tr})
	// A heartbeat has neither a dedupe attribute nor an event time: the
	// filter runs first, so it is filtered, not dead-lettered.
	hb := &source.Message{ID: "hb", Data: []byte("{}"), Attributes: map[string]string{"type": "heartbeat"}, PublishTime: eventTime}
	if !p.Handle(context.Background(), hb) {
		t.Fatal("want ack")
	}
	if sink.n != 0 || len(dd.winners) != 0 {
		t.Errorf("a filtered message wrote %d times and claimed %v", sink.n, dd.winners)
	}
	if len(tr.finished) != 1 || metrics.Value(m.Filtered) != 1 || metrics.Value(m.Committed) != 0 {
		t.Errorf("finished %v, filtered %v, committed %v; want finished, filtered 1", tr.finished, metrics.Value(m.Filtered), metrics.Value(m.Committed))
	}
	if s := p.Status(); s.Filtered != 1 || s.Mapping.Format != config.FormatJSON {
		t.Errorf("status filtered %d, mapping %+v", s.Filtered, s.Mapping)
	}
}

func TestAMessageWithNoRowsIsCommittedWithNothingWritten(t *testing.T) {
	sink := &fakeSink{}
	dd := &fakeDedupe{}
	p, m := newTestPipeline(t, batchConfig(), Deps{Sink: sink, Dedupe: dd})
	if !p.Handle(context.Background(), order("o2", "c9", `{"items":[]}`)) {
		t.Fatal("want ack")
	}
	if sink.n != 0 || !dd.committed["o2"] || metrics.Value(m.Committed) != 1 {
		t.Errorf("writes %d, key committed %v, committed %v", sink.n, dd.committed["o2"], metrics.Value(m.Committed))
	}
}

func TestMappingFailuresAreDeadLetteredWithTheirReasons(t *testing.T) {
	cases := []struct {
		name   string
		cfg    func(*config.Pipeline)
		data   string
		reason deadletter.Reason
	}{
		{"more rows than max_rows", nil, items(61, false), deadletter.TooManyRows},
		{"more rows than max_rows with the index row", nil, items(60, true), deadletter.TooManyRows},
		{"a filter on a missing field", func(c *config.Pipeline) { c.Filter = "data.kind == 'x'" }, `{"items":[]}`, deadletter.ExpressionFailed},
		{"each over a value that is not a list", nil, `{"items":{"n":1}}`, deadletter.ExpressionFailed},
		{"an element without the field a cell reads", nil, `{"items":[{"n":1}]}`, deadletter.ExpressionFailed},
		{"a payload that is not JSON", nil, `items`, deadletter.InvalidPayload},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := batchConfig()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			sink, dl := &fakeSink{}, &fakeDeadLetter{}
			p, _ := newTestPipeline(t, cfg, Deps{Sink: sink, DeadLetter: dl, Dedupe: &fakeDedupe{}})
			if !p.Handle(context.Background(), order("o3", "c9", c.data)) {
				t.Fatal("want ack after the dead-letter copy")
			}
			if len(dl.sent) != 1 || dl.sent[0].reason != c.reason {
				t.Fatalf("dead letters %v, want one %s", dl.sent, c.reason)
			}
			if sink.n != 0 {
				t.Errorf("%d writes; a message that fails its mapping writes nothing", sink.n)
			}
		})
	}
}

// rejectingSink refuses the row whose key is key, as Bigtable proves it
// can never take it, and writes nothing of that call.
type rejectingSink struct {
	fakeSink
	key   string
	cause error
}

func (s *rejectingSink) Write(ctx context.Context, rows []sinks.Row) error {
	for i := range rows {
		if rows[i].Key == s.key {
			s.n++
			return &sinks.RejectedError{Err: errors.New("refused"), Row: i}
		}
	}
	return s.fakeSink.Write(ctx, rows)
}

type causeDeadLetter struct {
	fakeDeadLetter
	causes []error
}

func (d *causeDeadLetter) Send(ctx context.Context, m *source.Message, reason deadletter.Reason, cause error) error {
	d.causes = append(d.causes, cause)
	return d.fakeDeadLetter.Send(ctx, m, reason, cause)
}

func TestARowTheSinkRefusesDeadLettersTheMessageOnceNamingTheRow(t *testing.T) {
	sink := &rejectingSink{key: "o4#2"}
	dl := &causeDeadLetter{}
	p, _ := newTestPipeline(t, batchConfig(), Deps{Sink: sink, DeadLetter: dl, Dedupe: &fakeDedupe{}})
	if !p.Handle(context.Background(), order("o4", "c9", items(5, false))) {
		t.Fatal("want ack after the dead-letter copy")
	}
	if len(dl.sent) != 1 || dl.sent[0].reason != deadletter.SinkRejected {
		t.Fatalf("dead letters %v, want one sink_rejected", dl.sent)
	}
	if got := dl.causes[0].Error(); !strings.Contains(got, "row 3 of 5 (readings)") {
		t.Errorf("the cause %q does not name the row", got)
	}
}
