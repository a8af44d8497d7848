package members

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/metrics"
)

const testLease = 400 * time.Millisecond

// stateTable returns a client of a fresh state table on bttest.
func stateTable(t *testing.T) *bigtable.Client {
	return fake.StateTableFor(t, "state", time.Minute)
}

// member is one running member of pipeline "orders".
type member struct {
	*Members
	stop context.CancelFunc
	done chan struct{}
}

func start(t *testing.T, client *bigtable.Client, id string, s store) *member {
	t.Helper()
	cfg := Config{Pipeline: "orders", Table: "state", ID: id, Lease: testLease}
	m := New(client, zap.NewNop(), cfg)
	if s != nil {
		m.store = s
	}
	return run(t, m)
}

func run(t *testing.T, m *Members) *member {
	ctx, stop := context.WithCancel(context.Background())
	mb := &member{Members: m, stop: stop, done: make(chan struct{})}
	go func() { defer close(mb.done); m.Run(ctx) }()
	t.Cleanup(func() { stop(); <-mb.done })
	return mb
}

// halt stops renewing without a clean stop, as a crash or a pause would.
func (mb *member) halt() { mb.stop(); <-mb.done }

func joined(t *testing.T, m *member, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := m.Joined(ctx); err != nil {
		t.Fatalf("%s not joined after %v: %+v", m.ID(), within, m.Stats())
	}
}

func eventually(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAFirstMemberIsJoinedAndAlone(t *testing.T) {
	c := stateTable(t)
	a := start(t, c, "a", nil)
	joined(t, a, time.Second)
	v := a.View()
	if !v.Alone || v.FastUntil.Before(time.Now()) || v.AloneEpoch != 0 {
		t.Fatalf("view %+v; want alone with the fast path open, epoch 0", v)
	}
	mt := a.cfg.Metrics
	if metrics.Value(mt.Alone) != 1 || metrics.Value(mt.Members) != 1 || metrics.Value(mt.Renewals) < 1 {
		t.Fatalf("metrics: alone %v, members %v, renewals %v; want 1, 1, ≥ 1",
			metrics.Value(mt.Alone), metrics.Value(mt.Members), metrics.Value(mt.Renewals))
	}
}

// TestANewcomerIsJoinedOnlyAfterTheOtherLeftTheFastPath: the member that
// was alone leaves the fast path before it acknowledges a newcomer, so at
// no moment is the newcomer joined while the other is still alone.
func TestANewcomerIsJoinedOnlyAfterTheOtherLeftTheFastPath(t *testing.T) {
	c := stateTable(t)
	a := start(t, c, "a", nil)
	joined(t, a, time.Second)

	b := start(t, c, "b", nil)
	deadline := time.Now().Add(3 * time.Second)
	samples := 0
	for !b.View().Joined {
		if time.Now().After(deadline) {
			t.Fatalf("b not joined: %+v", b.Stats())
		}
		samples++
		time.Sleep(time.Millisecond)
	}
	if v := a.View(); v.Alone {
		t.Fatalf("b is joined while a is still alone: %+v", v)
	}
	if samples == 0 {
		t.Fatal("b was joined at once: the handshake did not wait for a")
	}
	if v := b.View(); v.Alone {
		t.Fatalf("b's view %+v; want shared", v)
	}
	if st := a.Stats(); len(st.Acked) != 1 || st.Acked[0] != "b" || len(st.Members) != 2 {
		t.Fatalf("a's stats %+v; want b acknowledged", st)
	}
}

// TestAMemberThatStopsRenewingLapses: a member that stops renewing without
// a clean stop (killed, paused) lapses after a lease on the other's clock;
// the other is then alone again in a new epoch.
func TestAMemberThatStopsRenewingLapses(t *testing.T) {
	c := stateTable(t)
	a := start(t, c, "a", nil)
	joined(t, a, time.Second)
	b := start(t, c, "b", nil)
	joined(t, b, 2*time.Second)
	eventually(t, "a sees b", time.Second, func() bool { return !a.View().Alone })

	b.halt()
	start := time.Now()
	eventually(t, "a alone again", 4*testLease, func() bool { return a.View().Alone })
	if took := time.Since(start); took < testLease/2 {
		t.Fatalf("a was alone again %v after b stopped renewing; a lease is %v", took, testLease)
	}
	if v := a.View(); v.AloneEpoch != 1 {
		t.Fatalf("view %+v; want epoch 1: the filters may lack b's keys", v)
	}
}

func TestACleanStopRemovesTheCell(t *testing.T) {
	c := stateTable(t)
	a := start(t, c, "a", nil)
	joined(t, a, time.Second)
	b := start(t, c, "b", nil)
	joined(t, b, 2*time.Second)
	b.halt()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	cells, err := a.store.read(context.Background())
	if err != nil || len(cells) != 1 {
		t.Fatalf("cells after b's clean stop: %v, %v; want a's only", cells, err)
	}
}

// failingStore fails every call while down is set.
type failingStore struct {
	store
	mu   sync.Mutex
	down bool
}

func (s *failingStore) set(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }
func (s *failingStore) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("unavailable")
	}
	return nil
}
func (s *failingStore) write(ctx context.Context, id, v string, at bigtable.Timestamp) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.store.write(ctx, id, v, at)
}
func (s *failingStore) read(ctx context.Context) (map[string]cell, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.store.read(ctx)
}

// TestAMemberThatCannotRenewLosesTheFastPathBeforeOthersJudgeItLapsed: the
// fast path closes at lease − margin after the last successful write, on
// the member's own clock, before a lease has passed on anyone's.
func TestAMemberThatCannotRenewLosesTheFastPathBeforeOthersJudgeItLapsed(t *testing.T) {
	c := stateTable(t)
	fs := &failingStore{store: btStore{table: c.Open("state"), row: Row("orders")}}
	a := start(t, c, "a", fs)
	joined(t, a, time.Second)
	fs.set(true)
	down := time.Now()
	eventually(t, "a leaves the fast path", 2*testLease, func() bool { return !a.View().Alone })
	if took := time.Since(down); took > testLease {
		t.Fatalf("the fast path lasted %v after renewals began to fail; it must end within a lease (%v)", took, testLease)
	}
	if v := a.View(); v.Joined {
		t.Fatalf("view %+v; a member that cannot renew is not joined", v)
	}
	fs.set(false)
	joined(t, a, 2*time.Second)
	if v := a.View(); !v.Alone {
		t.Fatalf("view %+v after renewals resumed; want alone", v)
	}
}

// TestACellLeftByADeadPredecessorIsNoOther: the cell of a process that
// died without a clean stop keeps a newcomer from being alone until it
// lapses, but is not another process running the pipeline (View.Others);
// a member that renews is.
func TestACellLeftByADeadPredecessorIsNoOther(t *testing.T) {
	c := stateTable(t)
	s := btStore{table: c.Open("state"), row: Row("orders")}
	if err := s.write(context.Background(), "dead", "", bigtable.Time(time.Now()).TruncateToMilliseconds()); err != nil {
		t.Fatal(err)
	}
	a := start(t, c, "a", nil)
	time.Sleep(testLease / 2) // a few renewals: the dead cell does not change
	if v := a.View(); v.Alone || v.Others {
		t.Fatalf("view %+v beside a dead cell; want not alone yet, and no other", v)
	}
	eventually(t, "the dead cell lapses", 4*testLease, func() bool { return a.View().Alone })
	if v := a.View(); v.Others {
		t.Fatalf("view %+v; a dead cell is not another process", v)
	}
	b := start(t, c, "b", nil)
	joined(t, b, 2*time.Second)
	eventually(t, "a sees b as another process", 2*time.Second, func() bool { return a.View().Others })
	if v := b.View(); !v.Others {
		t.Fatalf("b's view %+v; a acknowledged it, so another process runs", v)
	}
}

// TestALapsedCellStaysLapsedUntilItChanges: the cell of a member that
// died stays in the row until it is collected (deadAfter, many leases);
// once lapsed it must not come back as a newcomer at the next read, which
// would end the fast path for a lease, again and again. A cell that
// changes after it lapsed is a member that resumed: live again.
func TestALapsedCellStaysLapsedUntilItChanges(t *testing.T) {
	c := stateTable(t)
	s := btStore{table: c.Open("state"), row: Row("orders")}
	if err := s.write(context.Background(), "dead", "", bigtable.Time(time.Now()).TruncateToMilliseconds()); err != nil {
		t.Fatal(err)
	}
	a := start(t, c, "a", nil)
	eventually(t, "the dead cell lapses", 4*testLease, func() bool { return a.View().Alone })
	epoch := a.View().AloneEpoch
	for deadline := time.Now().Add(4 * testLease); time.Now().Before(deadline); time.Sleep(testLease / 20) {
		if v := a.View(); !v.Alone || v.AloneEpoch != epoch {
			t.Fatalf("view %+v after the dead cell lapsed; want alone in epoch %d: an unchanged lapsed cell is not a newcomer", v, epoch)
		}
	}
	if err := s.write(context.Background(), "dead", "", bigtable.Time(time.Now()).TruncateToMilliseconds()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed cell is live again", 2*testLease, func() bool { return !a.View().Alone })
}

// TestANewcomerDoesNotStallAJoinedMember: while b joins, a (joined, fresh)
// stays joined, so its claims never wait for b's handshake; b still waits
// for a.
func TestANewcomerDoesNotStallAJoinedMember(t *testing.T) {
	c := stateTable(t)
	a := start(t, c, "a", nil)
	joined(t, a, time.Second)
	// b's acknowledgement of a lands a while after b's first cell: a reads
	// the row in between, and sees a newcomer that does not ack it yet.
	b := start(t, c, "b", &slowAck{store: btStore{table: c.Open("state"), row: Row("orders")}, delay: testLease / 2})
	deadline := time.Now().Add(3 * time.Second)
	for !b.View().Joined {
		if !a.View().Joined {
			t.Fatalf("a unjoined while b joins: a %+v, b %+v", a.Stats(), b.Stats())
		}
		if time.Now().After(deadline) {
			t.Fatalf("b not joined: %+v", b.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if v := a.View(); !v.Joined || v.Alone {
		t.Fatalf("a's view %+v once b joined; want joined, shared", v)
	}
}

// slowAck delays every write after the first: b's acknowledgements.
type slowAck struct {
	store
	delay  time.Duration
	writes int
}

func (s *slowAck) write(ctx context.Context, id, v string, at bigtable.Timestamp) error {
	if s.writes++; s.writes > 1 && v != "" {
		time.Sleep(s.delay)
	}
	return s.store.write(ctx, id, v, at)
}

// TestMembersOnSkewedClocksStampTheirOwnAndStillSeeEachOther: Config.Now
// is the clock a member stamps its cell with and measures on. Two members
// whose wall clocks are seconds apart (offsets that keep the monotonic
// reading, as PUBSINK_CLOCK_OFFSET's do) each stamp their own time, see
// each other live, and join: lapses are measured on each one's own
// monotonic clock, never by comparing the other's stamps.
func TestMembersOnSkewedClocksStampTheirOwnAndStillSeeEachOther(t *testing.T) {
	c := stateTable(t)
	offsets := map[string]time.Duration{"ahead": 3 * time.Second, "behind": -3 * time.Second}
	var ms []*member
	for _, id := range []string{"ahead", "behind"} {
		off := offsets[id]
		cfg := Config{Pipeline: "orders", Table: "state", ID: id, Lease: testLease, Now: func() time.Time { return time.Now().Add(off) }}
		ms = append(ms, run(t, New(c, zap.NewNop(), cfg)))
	}
	for _, m := range ms {
		eventually(t, m.ID()+" joined and not alone", 3*time.Second, func() bool {
			v := m.View()
			return v.Joined && !v.Alone
		})
	}
	// Both stay live for each other over several leases.
	time.Sleep(4 * testLease)
	for _, m := range ms {
		if st := m.Stats(); len(st.Members) != 2 || !st.Joined {
			t.Errorf("%s: %+v; want both members, joined", m.ID(), st)
		}
	}
	row, err := c.Open("state").ReadRow(context.Background(), Row("orders"), bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range row["m"] {
		id := it.Column[len("m:"):]
		if d := time.Until(it.Timestamp.Time()) - offsets[id]; d < -time.Second || d > time.Second {
			t.Errorf("%s's cell stamped %v: %v off its clock", id, it.Timestamp.Time(), d)
		}
	}
}
