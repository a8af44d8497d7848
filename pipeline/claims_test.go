package pipeline

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/sinks"
)

// TestTheClaimDecidesTheKey runs the pipeline on the real dedupe part (on
// bttest) through the paths where the claim alone decides, with no record:
// a delivery that claimed its key and was nacked leaves the claim; a rival
// message of the key is then a duplicate; the message's redelivery, late
// by now, finishes its work (it was on time when it claimed) and counts as
// resumed; a late message that nobody claimed is dead-lettered and claims
// nothing.
func TestTheClaimDecidesTheKey(t *testing.T) {
	cfg := testConfig()
	cfg.Watermark.LateData = config.LateDeadLetter
	mt := metrics.New().Pipeline(cfg.Name)
	keys := dedupe.New(bttestClient(t), zap.NewNop(), dedupe.Config{Pipeline: cfg.Name, Table: "state", Metrics: mt})
	down := true
	sink := &fakeSink{fail: func(int, *sinks.Row) error {
		if down {
			return status.Error(codes.Unavailable, "down")
		}
		return nil
	}}
	dl := &fakeDeadLetter{}
	tracker := &fakeTracker{}
	p, err := New(zap.NewNop(), cfg, Deps{Sink: sink, Dedupe: keys, DeadLetter: dl, Tracker: tracker, Metrics: mt, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}

	// The first delivery claims o1, then its write fails until the stop.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if p.Handle(ctx, order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("a delivery whose write failed until the stop was acked")
	}
	down = false

	// A rival (another message, the same order_id) is a duplicate: the
	// claim stands for the nacked message, which comes back.
	rival := order("o1", "c9", `{"amount": 2}`)
	rival.ID = "m-rival"
	if !p.Handle(context.Background(), rival) || metrics.Value(mt.Duplicate) != 1 || len(sink.rows) != 0 {
		t.Fatalf("the rival: duplicate %v, rows %v; want a duplicate, nothing written", metrics.Value(mt.Duplicate), sink.rows)
	}

	// The redelivery comes after the watermark moved past its event time:
	// it resumes its claim and is written, not dead-lettered as late.
	tracker.wm = eventTime.Add(time.Hour)
	if !p.Handle(context.Background(), order("o1", "c9", `{"amount": 1}`)) {
		t.Fatal("the redelivery was nacked")
	}
	if row, ok := sink.rows["c9#o1"]; !ok || !hasCell(row, "amount", "1") {
		t.Fatalf("rows %v; want the first message's row", sink.rows)
	}
	if metrics.Value(mt.Committed) != 1 || metrics.Value(mt.Resumed) != 1 || metrics.Value(mt.Late) != 0 || len(dl.sent) != 0 {
		t.Fatalf("committed %v, resumed %v, late %v, dead-lettered %v; want one committed and resumed, nothing late",
			metrics.Value(mt.Committed), metrics.Value(mt.Resumed), metrics.Value(mt.Late), dl.sent)
	}

	// A late message that nobody claimed is dead-lettered, and claims
	// nothing: its key stays free.
	if !p.Handle(context.Background(), order("o2", "c9", `{"amount": 3}`)) || len(dl.sent) != 1 {
		t.Fatalf("the late o2: dead-lettered %v; want its copy", dl.sent)
	}
	c, dup, err := keys.Resume(context.Background(), "o2", "someone")
	if err != nil || dup || c.Held() {
		t.Fatalf("o2's key after the late dead letter: held %v, dup %v, %v; want it unclaimed", c.Held(), dup, err)
	}
}

// hasCell reports whether row has the cell column = value.
func hasCell(row sinks.Row, column, value string) bool {
	for _, c := range row.Cells {
		if c.Column == column && string(c.Value) == value {
			return true
		}
	}
	return false
}
