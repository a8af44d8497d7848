package watermark

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/source"
)

// replica is one process of a replicated pipeline in miniature: a tracker
// and a stand-in pipeline on the main subscription that finishes what it
// receives, except the message it is told to hold.
type replica struct {
	tr     *Tracker
	held   inFlight
	cancel context.CancelFunc
	done   chan struct{}
}

// TestReplicasShareOneWatermark runs two trackers of one pipeline, each
// with its own pipeline on the shared main subscription: one leads, the
// other reports its finishes. The watermark holds just behind a message
// held in either process, catches up once it is finished, is the same in
// both (the follower's is the stored value), never goes backwards, and
// survives the leader's stop, clean (the lease is vacated: the other takes
// over at once) or not (after a leader lease).
func TestReplicasShareOneWatermark(t *testing.T) {
	for _, clean := range []bool{true, false} {
		name := "leader dies"
		if clean {
			name = "leader stops cleanly"
		}
		t.Run(name, func(t *testing.T) { testReplicas(t, clean) })
	}
}

// replicaLease is the leader lease of the replicas test, longer than
// fastConfig's so that the clean stop's bound (half a lease) leaves room for
// a slow machine's stop while a takeover by lapse (at least three quarters of
// a lease) still fails it: a CI run took 451 ms to stop, vacate and take over
// against fastConfig's 400 ms lease.
const replicaLease = 2 * time.Second

func testReplicas(t *testing.T, clean bool) {
	ps := newFakePubSub(t)
	bt := newStateTable(t)
	et, _ := NewEventTime("ts", config.TimestampAuto)

	release := make(chan struct{})
	ids := []string{"a", "b"}
	reps := map[string]*replica{}
	var live sync.Map // member → true while its Run runs
	for _, id := range ids {
		cfg := fastConfig(metrics.New().Pipeline("orders"))
		cfg.Member = id
		cfg.LeaderLease = replicaLease
		cfg.Peers = func() []string {
			var out []string
			for _, other := range ids {
				if _, ok := live.Load(other); ok && other != id {
					out = append(out, other)
				}
			}
			return out
		}
		tr, err := NewTracker(ps.source(ps.tracking), bt, zap.NewNop(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{tr: tr, done: make(chan struct{})}
		tr.WatchInFlight(r.held.oldest)
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		reps[id] = r
		live.Store(id, true)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := tr.Run(ctx); err != nil {
				t.Errorf("%s: Run: %v", id, err)
			}
		}()
		go func() {
			defer wg.Done()
			ps.source(ps.main).Run(ctx, context.WithoutCancel(ctx), func(hctx context.Context, msg *source.Message) bool {
				defer r.held.add(msg.PublishTime)()
				if isHeld(msg) {
					select {
					case <-release:
					case <-ctx.Done():
						return false
					}
				}
				ev, _ := et.Of(msg.Attributes, msg.PublishTime)
				return tr.Finished(hctx, msg, ev) == nil
			})
		}()
		go func() { wg.Wait(); close(r.done) }()
	}
	stop := func(id string, close bool) {
		r := reps[id]
		r.cancel()
		<-r.done
		live.Delete(id)
		if close {
			if err := r.tr.Close(context.Background()); err != nil {
				t.Errorf("%s: Close: %v", id, err)
			}
		}
	}
	defer func() {
		for id := range reps {
			if _, ok := live.Load(id); ok {
				stop(id, true)
			}
		}
	}()

	// Every watermark, sampled, never goes backwards.
	var sampling atomic.Bool
	sampling.Store(true)
	sampled := make(chan error, 1)
	go func() {
		last := map[string]time.Time{}
		for sampling.Load() {
			for id, r := range reps {
				wm := r.tr.Watermark()
				if wm.Before(last[id]) {
					sampled <- errors.New(id + ": the watermark went backwards from " + last[id].String() + " to " + wm.String())
					return
				}
				last[id] = wm
			}
			time.Sleep(2 * time.Millisecond)
		}
		sampled <- nil
	}()
	defer func() {
		sampling.Store(false)
		if err := <-sampled; err != nil {
			t.Error(err)
		}
	}()

	leader := func() string {
		var out []string
		for id, r := range reps {
			if _, ok := live.Load(id); ok && r.tr.Leading() {
				out = append(out, id)
			}
		}
		if len(out) != 1 {
			return ""
		}
		return out[0]
	}
	waitFor(t, "one leader", 5*time.Second, func() bool { return leader() != "" })
	first := leader()
	follower := ids[0]
	if follower == first {
		follower = ids[1]
	}

	// Past the startup guard, on an idle topic.
	time.Sleep(1500 * time.Millisecond)
	heldEvent, last := ps.publishHeldThenStream(t, 40, reps[first].tr)
	time.Sleep(1500 * time.Millisecond)
	for id, r := range reps {
		if wm := r.tr.Watermark(); wm.After(heldEvent) {
			t.Fatalf("%s: watermark %v passed the unfinished event time %v", id, wm, heldEvent)
		}
	}
	// Exact to a second: the leader counted the follower's finishes too.
	if wm := reps[first].tr.Watermark(); wm.Before(heldEvent.Add(-time.Second)) {
		t.Fatalf("leader's watermark %v, want it just behind the held %v: the follower's finishes were not counted", wm, heldEvent)
	}
	close(release)
	want := last.Add(-300 * time.Millisecond)
	for _, id := range ids {
		waitFor(t, id+"'s watermark reaches the last event time minus the band", 5*time.Second, func() bool {
			return !reps[id].tr.Watermark().Before(want)
		})
	}
	if st := reps[follower].tr.Stats(); st.Leading || st.Leader != first {
		t.Fatalf("follower's stats %+v, want following %s", st, first)
	}

	// The leader goes; the follower takes over and the watermark goes on.
	before := reps[follower].tr.Watermark()
	stopped := time.Now()
	stop(first, clean)
	waitFor(t, "the follower takes over", 5*time.Second, func() bool { return reps[follower].tr.Leading() })
	took := time.Since(stopped)
	if clean && took > replicaLease/2 {
		t.Errorf("took %v to take over a vacated lease, want less than half a leader lease (%v): a lapse takes at least three quarters", took, replicaLease)
	}
	// The dead leader renewed at most a quarter lease before it died.
	if !clean && took < replicaLease*3/4-fastConfig(nil).StoreEvery {
		t.Errorf("took over a dead leader's lease after %v, before its last renewal could have lapsed (a lease of %v)", took, replicaLease)
	}
	if wm := reps[follower].tr.Watermark(); wm.Before(before) {
		t.Fatalf("the new leader starts at %v, behind %v", wm, before)
	}
	next := time.Now()
	for i := range 10 {
		ps.publish(t, next.Add(time.Duration(i)*10*time.Millisecond))
	}
	waitFor(t, "the new leader's watermark passes the new events", 10*time.Second, func() bool {
		return reps[follower].tr.Watermark().After(next.Add(-300 * time.Millisecond))
	})
}

// TestLeadershipIsTakenOnlyFromALapsedOrVacantLease drives two members'
// leadership with their own clocks on the state table: the lease is taken
// when vacant, not while its holder renews, and after it stayed unchanged
// for a lease; a holder that was paused past its lease distrusts itself at
// once and finds the lease gone; a renewal whose reply was lost is
// recognised as its own.
func TestLeadershipIsTakenOnlyFromALapsedOrVacantLease(t *testing.T) {
	ctx := context.Background()
	store := &lossyStore{Store: newBigtableStore(newStateTable(t), stateTable, "orders")}
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	const lease = 10 * time.Second
	a := newLeadership(store, "a", lease, now)
	b := newLeadership(store, "b", lease, now)
	observe := func(l *leadership) bool {
		t.Helper()
		st, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := l.observe(ctx, st.Leader)
		if err != nil && !errors.Is(err, errLost) {
			t.Fatal(err)
		}
		return ok
	}
	if !observe(a) {
		t.Fatal("a did not take the vacant lease")
	}
	for range 12 { // 30s of a renewing every 2.5s
		advance(lease / 4)
		if !observe(a) {
			t.Fatal("a lost a lease it renews")
		}
		if observe(b) {
			t.Fatal("b took the lease of a live leader")
		}
	}
	// A renewal whose reply is lost: applied, but a does not know.
	store.lose.Store(true)
	advance(lease / 4)
	observe(a)
	store.lose.Store(false)
	advance(lease / 4)
	if !observe(a) {
		t.Fatal("a did not recognise its own renewal")
	}
	// a is paused: b takes over once the cell stayed unchanged for a
	// lease since b first read it.
	advance(lease / 2)
	if observe(b) {
		t.Fatal("b took the lease before it lapsed")
	}
	advance(lease - time.Millisecond)
	if observe(b) {
		t.Fatal("b took the lease before it lapsed")
	}
	advance(time.Millisecond)
	if !observe(b) {
		t.Fatal("b did not take a lapsed lease")
	}
	// a wakes up: it distrusts itself before reading, and then knows.
	if a.trusted(now()) {
		t.Fatal("a paused past its lease still trusts itself")
	}
	if observe(a) {
		t.Fatal("a took back a lease b holds")
	}
	if err := b.release(ctx); err != nil {
		t.Fatal(err)
	}
	if !observe(a) {
		t.Fatal("a did not take the lease b vacated")
	}
	if a.takeovers != 2 || b.takeovers != 1 {
		t.Fatalf("takeovers a %d, b %d; want 2 and 1", a.takeovers, b.takeovers)
	}
}

var errLost = errors.New("reply lost")

// lossyStore applies a Take and then, when lose is set, reports an error,
// as a lost reply does.
type lossyStore struct {
	Store
	lose atomic.Bool
}

func (s *lossyStore) Take(ctx context.Context, expect, next string) (bool, error) {
	ok, err := s.Store.Take(ctx, expect, next)
	if err == nil && s.lose.Load() {
		return false, errLost
	}
	return ok, err
}
