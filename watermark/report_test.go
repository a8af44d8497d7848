package watermark

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestReportsRoundTrip encodes reports of every shape and reads them back.
func TestReportsRoundTrip(t *testing.T) {
	for _, r := range []report{
		{},
		{hasOldest: true, oldest: t0.Unix()},
		{hasOldest: true, oldest: -1, finishes: []finish{{id: "1", publish: t0.UnixNano(), event: t0.UnixNano()}}},
		{finishes: []finish{
			{id: "17000000000001", publish: t0.UnixNano(), event: t0.Add(-time.Hour).UnixNano()},
			{id: "", publish: t0.Add(-time.Second).UnixNano(), event: math.MaxInt64 / 2},
			{id: "x\x00y", publish: 0, event: math.MinInt64 / 2},
		}},
	} {
		got, err := decodeReport(r.encode(nil))
		if err != nil {
			t.Fatalf("decode %+v: %v", r, err)
		}
		if len(r.finishes) == 0 {
			r.finishes = []finish{}
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v gave %+v", r, got)
		}
	}
}

// FuzzDecodeReport: a report read from the state table is never trusted
// to be well formed; decoding any bytes must not panic, and whatever
// decodes re-encodes to bytes that decode to the same report.
func FuzzDecodeReport(f *testing.F) {
	f.Add((&report{hasOldest: true, oldest: 5, finishes: []finish{{id: "a", publish: 1e9, event: 2e9}}}).encode(nil))
	f.Add([]byte{reportVersion, 0, 0})
	f.Add([]byte{reportVersion, 1})
	f.Add([]byte{reportVersion, 0, 0x7e})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReport(b)
		if err != nil {
			return
		}
		again, err := decodeReport(r.encode(nil))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%x decodes to %+v, which re-encodes to %+v (%v)", b, r, again, err)
		}
	})
}

// TestALeaderAppliesAndDeletesReports: reports written by two followers
// reach the leader's histogram, what they hold in flight reaches its
// startup guard, and the leader deletes what it applied.
func TestALeaderAppliesAndDeletesReports(t *testing.T) {
	ctx := context.Background()
	store := btReports{table: newStateTable(t).Open(stateTable), pipeline: "orders"}
	holding := time.Unix(t0.Unix()-30, 0)
	b := newReporter(store, "b", func() (time.Time, bool) { return holding, true })
	c := newReporter(store, "c", func() (time.Time, bool) { return time.Time{}, false })
	defer b.close(ctx)
	defer c.close(ctx)
	if err := b.add(ctx, finish{id: "m1", publish: t0.UnixNano(), event: t0.UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if err := c.heartbeat(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	e := newEstimator(testParams, t0)
	e.seen("m1", t0, t0)
	peers := newPeerReports(store, "a", func() []string { return []string{"b", "c", "d"} }, 2*time.Second, zap.NewNop())
	now := time.Now()
	peers.collect(ctx, e, now)
	if sc := e.hist.sweep(math.MinInt64, 0); sc.pending != 0 {
		t.Fatalf("%d pending after b's report of m1, want 0", sc.pending)
	}
	if got := peers.oldest(now); got != never {
		t.Fatalf("oldest in flight %d with d never heard from, want never (held)", got)
	}
	peers.peers = func() []string { return []string{"b", "c"} }
	if got := peers.oldest(now); got != holding.UnixNano() {
		t.Fatalf("oldest in flight %v, want b's %v", time.Unix(0, got), holding)
	}
	if got := peers.oldest(now.Add(3 * time.Second)); got != never {
		t.Fatalf("oldest in flight %d once b and c went quiet, want never (held)", got)
	}
	if left, err := store.read(ctx); err != nil || len(left) != 0 {
		t.Fatalf("%d reports left after collect (%v), want them deleted", len(left), err)
	}
}
