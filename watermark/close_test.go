package watermark

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/source"
)

// TestCloseStoresTheFinalWatermarkInAGapBetweenTerms stops a leader while
// it distrusts itself: its renewals take longer than three quarters of the
// lease (a loaded machine, a slow state table), so each round ends its
// term until the next renews. The lease is still its own, so Close stores
// the watermark it published, fenced, and the stored value is the final
// one. Before, Close stored nothing in that gap and the stored value was
// the last periodic save, behind the final watermark (CI's "stored
// 20:44:47.654, want the final watermark 20:44:47.987").
func TestCloseStoresTheFinalWatermarkInAGapBetweenTerms(t *testing.T) {
	ps := newFakePubSub(t)
	store := &slowStore{Store: newBigtableStore(newStateTable(t), stateTable, "orders")}
	cfg := fastConfig(metrics.New().Pipeline("orders"))
	cfg.Store = store
	tr, err := NewTracker(ps.source(ps.tracking), nil, zap.NewNop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := tr.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	et, _ := NewEventTime("ts", config.TimestampAuto)
	var held inFlight
	tr.WatchInFlight(held.oldest)
	go func() {
		defer wg.Done()
		ps.source(ps.main).Run(ctx, context.WithoutCancel(ctx), func(hctx context.Context, msg *source.Message) bool {
			defer held.add(msg.PublishTime)()
			ev, _ := et.Of(msg.Attributes, msg.PublishTime)
			return tr.Finished(hctx, msg, ev) == nil
		})
	}()
	stored := func() time.Time {
		st, err := store.Store.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Watermark
	}
	publish := func() {
		for range 10 {
			ps.publish(t, time.Now())
			time.Sleep(10 * time.Millisecond)
		}
	}

	publish()
	waitFor(t, "a watermark is stored", 10*time.Second, func() bool { return !stored().IsZero() })
	// The stored value falls behind: saves fail, the watermark moves on.
	store.failSaves.Store(true)
	before := stored()
	publish()
	waitFor(t, "the watermark passes the stored one", 10*time.Second, func() bool { return tr.Watermark().After(before) })
	// Renewals get slow: the leader distrusts itself after each.
	store.slowTakes.Store(true)
	waitFor(t, "the leader ends its term", 10*time.Second, func() bool { return !tr.Leading() })
	cancel()
	wg.Wait()
	store.slowTakes.Store(false)
	store.failSaves.Store(false)
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	final := tr.Watermark()
	if got := stored(); !got.Equal(final.Truncate(time.Millisecond)) {
		t.Fatalf("stored %v, want the final watermark %v to the millisecond (stored before the gap: %v)", got, final, before)
	}
	if st, _ := store.Store.Load(context.Background()); parseLease(st.Leader).member != "" {
		t.Fatalf("leader cell %q after Close, want it vacated", st.Leader)
	}
}

// slowStore is a Store whose saves fail (a transient error) while
// failSaves is set, and whose Takes take longer than fastConfig's trust
// (three quarters of its 400 ms lease) while slowTakes is set; a Take cut
// short by its context applies nothing.
type slowStore struct {
	Store
	failSaves, slowTakes atomic.Bool
}

func (s *slowStore) Save(ctx context.Context, leader string, wm time.Time) (bool, error) {
	if s.failSaves.Load() {
		return false, context.DeadlineExceeded
	}
	return s.Store.Save(ctx, leader, wm)
}

func (s *slowStore) Take(ctx context.Context, expect, next string) (bool, error) {
	if s.slowTakes.Load() {
		select {
		case <-time.After(350 * time.Millisecond):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return s.Store.Take(ctx, expect, next)
}
