package dedupe

import (
	"context"
	"testing"
	"time"
)

// TestClaimedBetweenCountsTheJournalsKeysOfATimeSpan: the keys a pipeline
// claimed, counted by when they were claimed, from the journal alone; other
// pipelines' keys and other times are not counted.
func TestClaimedBetweenCountsTheJournalsKeysOfATimeSpan(t *testing.T) {
	ctx := context.Background()
	client := bttestClient(t)
	clk := newClock()
	t0 := clk.Now()
	orders := newTest(t, btStore{client.Open(testTable)}, clk, Config{}, true)
	commitRange(t, orders, 0, 100)
	clk.Advance(10 * time.Minute)
	commitRange(t, orders, 100, 130)
	orders.Close(ctx)
	clicks := newTest(t, btStore{client.Open(testTable)}, clk, Config{Pipeline: "clicks"}, true)
	commitRange(t, clicks, 0, 7)
	clicks.Close(ctx)

	for _, c := range []struct {
		pipeline string
		from, to time.Duration // after t0
		want     int64
	}{
		{"orders", -time.Second, time.Minute, 100},
		{"orders", 0, 0, 100}, // the span's ends count
		{"orders", 9 * time.Minute, 11 * time.Minute, 30},
		{"orders", -time.Hour, time.Hour, 130},
		{"orders", time.Minute, 9 * time.Minute, 0},
		{"clicks", 9 * time.Minute, 11 * time.Minute, 7},
		{"order", -time.Hour, time.Hour, 0}, // a prefix of another pipeline's name
	} {
		got, err := ClaimedBetween(ctx, client.Open(testTable), c.pipeline, t0.Add(c.from), t0.Add(c.to))
		if err != nil || got != c.want {
			t.Errorf("ClaimedBetween(%s, t0%+v, t0%+v) = %d, %v; want %d", c.pipeline, c.from, c.to, got, err, c.want)
		}
	}
}
