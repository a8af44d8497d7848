package watermark

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/source"
)

const (
	project    = "proj"
	instance   = "inst"
	stateTable = "pubsink_state"
)

// backends starts the in-process Pub/Sub fake and Bigtable emulator.
func backends(t testing.TB) *fake.Backends {
	t.Helper()
	b, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// fakePubSub is a pstest server with one topic and two subscriptions on
// it, main and tracking, as setup creates them.
type fakePubSub struct {
	addr            string // of the pstest server
	client          *pubsub.Client
	topic           string
	main, tracking  string
	publisher       *pubsub.Publisher
	publishedEvents []time.Time
}

func newFakePubSub(t testing.TB) *fakePubSub {
	t.Helper()
	ctx := context.Background()
	b := backends(t)
	client, err := b.PubSubClient(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	f := &fakePubSub{addr: b.PubSub.Addr, client: client, topic: "projects/proj/topics/events",
		main: "projects/proj/subscriptions/events-main", tracking: "projects/proj/subscriptions/events-tracking"}
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: f.topic}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{f.main, f.tracking} {
		if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: s, Topic: f.topic, AckDeadlineSeconds: 10}); err != nil {
			t.Fatal(err)
		}
	}
	f.publisher = client.Publisher(f.topic)
	t.Cleanup(f.publisher.Stop)
	return f
}

// publish publishes one message with event time ev in attribute ts
// (milliseconds since the epoch) and returns its ID.
func (f *fakePubSub) publish(t testing.TB, ev time.Time) string {
	t.Helper()
	return f.publishWith(t, ev, nil)
}

// heldAttribute marks the message of publishHeldThenStream that the
// stand-in pipelines hold: set on the message itself, so that no delivery
// can come before the handler knows which one it is.
const heldAttribute = "held"

// isHeld reports whether m is publishHeldThenStream's held message.
func isHeld(m *source.Message) bool { return m.Attributes[heldAttribute] != "" }

// publishWith publishes one message with event time ev in attribute ts
// and the attributes attrs, and returns its ID.
func (f *fakePubSub) publishWith(t testing.TB, ev time.Time, attrs map[string]string) string {
	t.Helper()
	a := map[string]string{"ts": strconv.FormatInt(ev.UnixMilli(), 10)}
	for k, v := range attrs {
		a[k] = v
	}
	id, err := f.publisher.Publish(context.Background(), &pubsub.Message{Data: []byte("x"), Attributes: a}).Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// publishHeldThenStream publishes, at now, a message with an event time a
// little in the past, marked held (isHeld), waits until tracker says it
// received it, then publishes n messages 10ms apart in event time from
// then; it returns the held message's event time and the last one's.
//
// The wait keeps the tests about holding a message the tracker knows,
// whatever the machine's load: one it has not received yet is the transit
// allowance's case.
func (f *fakePubSub) publishHeldThenStream(t *testing.T, n int, tracker *Tracker) (held, last time.Time) {
	t.Helper()
	held = time.Now().Add(-200 * time.Millisecond)
	f.publishWith(t, held, map[string]string{heldAttribute: "true"})
	waitFor(t, "the tracker received the held message", 10*time.Second, func() bool { return tracker.Stats().Pending > 0 })
	start := time.Now()
	for i := range n {
		last = start.Add(time.Duration(i) * 10 * time.Millisecond)
		f.publish(t, last)
	}
	return held, last
}

func (f *fakePubSub) source(sub string) *source.Source {
	return source.New(f.client, zap.NewNop(), sub, config.Source{Streams: 2, MaxOutstandingMessages: 1000}, 64<<20)
}

// puller reads sub as app reads the tracking subscription, in batches of at
// most batch messages, through client (nil: f's).
func (f *fakePubSub) puller(sub string, batch int, client *pubsub.Client) *source.Puller {
	if client == nil {
		client = f.client
	}
	return source.NewPuller(client, zap.NewNop(), sub, source.PullerConfig{Loops: 2, MaxMessages: batch})
}

// readerKinds name the two kinds of tracking reader the tests run the
// tracker on: app's Puller, and a Source (StreamingPull).
var readerKinds = []string{"puller", "source"}

// readers make a reader of the tracking subscription of each kind.
func (f *fakePubSub) readers() map[string]func() Reader {
	return map[string]func() Reader{
		"puller": func() Reader { return f.puller(f.tracking, 0, nil) },
		"source": func() Reader { return f.source(f.tracking) },
	}
}

// newStateTable starts a bttest server with the state table and returns a
// client of it.
func newStateTable(t testing.TB) *bigtable.Client {
	t.Helper()
	client, err := backends(t).StateTable(context.Background(), project, instance, stateTable, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// fastConfig shrinks every period so that a test runs in about a second.
func fastConfig(m *metrics.Pipeline) Config {
	return Config{
		Pipeline: "orders", StateTable: stateTable,
		TimestampAttribute: "ts", TimestampFormat: config.TimestampAuto,
		Band: 300 * time.Millisecond, Tick: 10 * time.Millisecond, Transit: 100 * time.Millisecond,
		Idle: 200 * time.Millisecond, StoreEvery: 50 * time.Millisecond, Lease: 200 * time.Millisecond,
		LeaderLease: 400 * time.Millisecond, Member: "a",
		Metrics: m,
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTrackerHoldsForAnUnfinishedMessageThenCatchesUpAndStores runs the
// tracker on pstest with a stand-in pipeline reading the main subscription:
// it finishes every message but one, which it holds until told. The
// watermark must stay at or below that message's event time, then reach the
// last event time minus the band, and be stored; a new tracker on the same
// state table starts from the stored value.
func TestTrackerHoldsForAnUnfinishedMessageThenCatchesUpAndStores(t *testing.T) {
	for _, name := range readerKinds {
		t.Run(name, func(t *testing.T) {
			ps := newFakePubSub(t)
			transit := fastConfig(nil).Transit
			if name == "puller" {
				transit = pstestPullWait + 200*time.Millisecond
			}
			holdsThenCatchesUpAndStores(t, ps, ps.readers()[name], transit)
		})
	}
}

// pstestPullWait is how long pstest takes to answer a unary Pull of an
// empty subscription: it does not wake when a message comes, so a message
// published on an idle subscription reaches a Puller up to this late, past
// fastConfig's transit allowance (100 ms), and the frontier, moving with
// the probes of the idle topic, passes it before it arrives. (Pub/Sub
// answers a waiting Pull as soon as a message comes.) Tests of a Puller
// on pstest that rely on the allowance give it this much more.
const pstestPullWait = 500 * time.Millisecond

// holdsThenCatchesUpAndStores is the test of a tracker reading with reader
// under the transit allowance transit.
func holdsThenCatchesUpAndStores(t *testing.T, ps *fakePubSub, reader func() Reader, transit time.Duration) {
	bt := newStateTable(t)
	m := metrics.New().Pipeline("orders")
	cfg := fastConfig(m)
	cfg.Transit = transit
	tr, err := NewTracker(reader(), bt, zap.NewNop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !tr.Watermark().IsZero() {
		t.Fatalf("watermark %v with nothing stored, want zero", tr.Watermark())
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
	release := make(chan struct{})
	et, _ := NewEventTime("ts", config.TimestampAuto)
	mainSrc := ps.source(ps.main)
	var held inFlight
	tr.WatchInFlight(held.oldest)
	go func() {
		defer wg.Done()
		mainSrc.Run(ctx, context.WithoutCancel(ctx), func(_ context.Context, msg *source.Message) bool {
			defer held.add(msg.PublishTime)()
			if isHeld(msg) {
				select { // ends with the test, failed or not
				case <-release:
				case <-ctx.Done():
					return false
				}
			}
			ev, _ := et.Of(msg.Attributes, msg.PublishTime)
			if err := tr.Finished(ctx, msg, ev); err != nil {
				t.Errorf("Finished: %v", err)
				return false
			}
			return true
		})
	}()

	// Messages published within the transit allowance of the start count
	// as published before it (a clock skew), and the pipeline reports its
	// in-flight publish times to the second: the startup guard waits for
	// a message held from the start's second. Publish after that.
	time.Sleep(1200 * time.Millisecond)
	heldEvent, last := ps.publishHeldThenStream(t, 20, tr)
	// Well past the band and the idle period: only the held message keeps
	// the watermark back.
	time.Sleep(time.Second)
	if wm := tr.Watermark(); wm.After(heldEvent) {
		t.Fatalf("watermark %v passed the unfinished event time %v; stats %+v", wm, heldEvent, tr.Stats())
	}
	if wm := tr.Watermark(); wm.Before(heldEvent.Add(-time.Second)) {
		t.Errorf("watermark %v, want it held just behind the unfinished %v (exact to a second)", wm, heldEvent)
	}
	close(release)
	want := last.Add(-300 * time.Millisecond)
	waitFor(t, "watermark reaches the last event time minus the band", 5*time.Second, func() bool { return !tr.Watermark().Before(want) })
	cancel()
	wg.Wait()
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	final := tr.Watermark()

	st, err := newBigtableStore(bt, stateTable, "orders").Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stored := st.Watermark
	if !stored.Equal(final.Truncate(time.Millisecond)) {
		t.Fatalf("stored %v, want the final watermark %v to the millisecond", stored, final)
	}

	again, err := NewTracker(reader(), bt, zap.NewNop(), fastConfig(metrics.New().Pipeline("orders")))
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !again.Watermark().Equal(stored) {
		t.Fatalf("restarted tracker starts at %v, want the stored %v", again.Watermark(), stored)
	}
}

// inFlight is a stand-in pipeline's record of the publish times it holds.
type inFlight struct {
	mu   sync.Mutex
	pubs map[*time.Time]bool
}

// add records a message held until the returned func is called.
func (f *inFlight) add(pub time.Time) (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pubs == nil {
		f.pubs = map[*time.Time]bool{}
	}
	k := &pub
	f.pubs[k] = true
	return func() { f.mu.Lock(); delete(f.pubs, k); f.mu.Unlock() }
}

func (f *inFlight) oldest() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var o time.Time
	for p := range f.pubs {
		if o.IsZero() || p.Before(o) {
			o = *p
		}
	}
	return o.Truncate(time.Second), !o.IsZero()
}

func TestStoredWatermarkNeverMovesBackwards(t *testing.T) {
	bt := newStateTable(t)
	s := newBigtableStore(bt, stateTable, "orders")
	ctx := context.Background()
	if got, err := s.Load(ctx); err != nil || got != (Stored{}) {
		t.Fatalf("Load of nothing = %+v, %v; want zero", got, err)
	}
	const leader = "1/0/a"
	if ok, err := s.Take(ctx, "", leader); !ok || err != nil {
		t.Fatalf("Take of no lease = %v, %v", ok, err)
	}
	later := time.Date(2026, 6, 1, 12, 0, 5, 123_456_789, time.UTC)
	earlier := later.Add(-time.Minute)
	for _, wm := range []time.Time{later, earlier, later} {
		if ok, err := s.Save(ctx, leader, wm); !ok || err != nil {
			t.Fatalf("Save = %v, %v", ok, err)
		}
	}
	got, err := s.Load(ctx)
	if err != nil || !got.Watermark.Equal(later.Truncate(time.Millisecond)) || got.Leader != leader {
		t.Fatalf("Load = %+v, %v; want %v led by %s", got, err, later.Truncate(time.Millisecond), leader)
	}
	// The cell outside readers rely on (docs/reference.md).
	row, err := bt.Open(stateTable).ReadRow(ctx, "watermark#orders", bigtable.RowFilter(bigtable.ChainFilters(
		bigtable.ColumnFilter("^watermark$"), bigtable.LatestNFilter(1))))
	if err != nil {
		t.Fatal(err)
	}
	cells := row[state.FamilyMeta]
	if len(cells) != 1 || cells[0].Column != "m:watermark" || string(cells[0].Value) != "2026-06-01T12:00:05.123Z" {
		t.Fatalf("stored cells %+v, want m:watermark = 2026-06-01T12:00:05.123Z", cells)
	}
}

// TestOnlyTheLeaseHolderStoresTheWatermark: the save is fenced by the
// lease, and the lease changes hands only from the exact value expected.
func TestOnlyTheLeaseHolderStoresTheWatermark(t *testing.T) {
	s := newBigtableStore(newStateTable(t), stateTable, "orders")
	ctx := context.Background()
	if ok, err := s.Take(ctx, "", "1/0/a"); !ok || err != nil {
		t.Fatalf("a takes no lease = %v, %v", ok, err)
	}
	if ok, err := s.Take(ctx, "", "1/0/b"); ok || err != nil {
		t.Fatalf("b takes a held lease as if there were none = %v, %v; want refused", ok, err)
	}
	if ok, err := s.Take(ctx, "1/0/a", "2/0/b"); !ok || err != nil {
		t.Fatalf("b takes over the value it read = %v, %v", ok, err)
	}
	wm := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	if ok, err := s.Save(ctx, "1/0/a", wm); ok || err != nil {
		t.Fatalf("the stale leader's save = %v, %v; want fenced", ok, err)
	}
	if ok, err := s.Take(ctx, "1/0/a", "1/1/a"); ok || err != nil {
		t.Fatalf("the stale leader's renewal = %v, %v; want refused", ok, err)
	}
	if got, _ := s.Load(ctx); !got.Watermark.IsZero() || got.Leader != "2/0/b" {
		t.Fatalf("after the stale leader: %+v, want nothing stored, led by 2/0/b", got)
	}
	if ok, err := s.Save(ctx, "2/0/b", wm); !ok || err != nil {
		t.Fatalf("the leader's save = %v, %v", ok, err)
	}
	if got, _ := s.Load(ctx); !got.Watermark.Equal(wm) {
		t.Fatalf("stored %v, want %v", got.Watermark, wm)
	}
}

func TestRunFailsWhenTheStateTableIsMissing(t *testing.T) {
	ps := newFakePubSub(t)
	bt := newStateTable(t)
	cfg := fastConfig(metrics.New().Pipeline("orders"))
	cfg.StateTable = "missing"
	tr, err := NewTracker(ps.source(ps.tracking), bt, zap.NewNop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Run(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want an error naming the missing table", err)
	}
}

func TestNewTrackerRejectsAnUnknownTimestampFormat(t *testing.T) {
	cfg := fastConfig(metrics.New().Pipeline("orders"))
	cfg.TimestampFormat = "iso"
	if _, err := NewTracker(nil, nil, zap.NewNop(), cfg); err == nil {
		t.Fatal("want an error")
	}
}

func TestCloseIsIdempotentAndBoundedByItsContext(t *testing.T) {
	cfg := fastConfig(metrics.New().Pipeline("orders"))
	blocked := make(chan struct{})
	cfg.Store = blockingStore{blocked}
	tr, err := NewTracker(nil, nil, zap.NewNop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.loaded.Store(true)
	if !tr.follow(context.Background()) {
		t.Fatal("the tracker did not take a vacant lease")
	}
	tr.startEstimator()
	tr.publish(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := tr.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want the context's error", err)
	}
	if err := tr.Close(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Close = %v, want the first result", err)
	}
}

type blockingStore struct{ ch chan struct{} }

func (blockingStore) Load(context.Context) (Stored, error)               { return Stored{}, nil }
func (blockingStore) Take(context.Context, string, string) (bool, error) { return true, nil }
func (s blockingStore) Save(ctx context.Context, _ string, _ time.Time) (bool, error) {
	select {
	case <-s.ch:
		return true, nil
	case <-ctx.Done():
		return false, fmt.Errorf("save: %w", ctx.Err())
	}
}

// TestTheTrackerPausesAtItsPendingBudget: with the pipeline holding
// everything, the tracker keeps at most MaxPending (plus what arrived
// within one tick) unfinished messages, pausing the tracking subscription,
// and resumes once the pipeline catches up: every message is then seen and
// the watermark passes them all.
func TestTheTrackerPausesAtItsPendingBudget(t *testing.T) {
	for _, name := range readerKinds {
		t.Run(name, func(t *testing.T) {
			ps := newFakePubSub(t)
			pausesAtThePendingBudget(t, ps, ps.readers()[name]())
		})
	}
}

func pausesAtThePendingBudget(t *testing.T, ps *fakePubSub, reader Reader) {
	cfg := fastConfig(metrics.New().Pipeline("orders"))
	cfg.MaxPending = 20
	tr, err := NewTracker(reader, newStateTable(t), zap.NewNop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var held inFlight
	tr.WatchInFlight(held.oldest)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	release := make(chan struct{})
	et, _ := NewEventTime("ts", config.TimestampAuto)
	wg.Add(2)
	go func() { defer wg.Done(); tr.Run(ctx) }()
	go func() {
		defer wg.Done()
		ps.source(ps.main).Run(ctx, context.WithoutCancel(ctx), func(hctx context.Context, msg *source.Message) bool {
			defer held.add(msg.PublishTime)()
			select {
			case <-release:
			case <-ctx.Done():
				return false
			}
			ev, _ := et.Of(msg.Attributes, msg.PublishTime)
			return tr.Finished(hctx, msg, ev) == nil
		})
	}()
	waitFor(t, "leading", 5*time.Second, tr.Leading)
	var last time.Time
	for i := range 60 {
		last = time.Now().Add(time.Duration(i) * time.Millisecond)
		ps.publish(t, last)
	}
	waitFor(t, "paused", 5*time.Second, func() bool { return tr.Stats().Paused })
	time.Sleep(300 * time.Millisecond)
	// Pending is counted once a tick: what arrives within one tick may
	// pass the budget.
	if st := tr.Stats(); st.Pending < 20 || st.Pending > 25 || !st.Paused {
		t.Fatalf("stats %+v with a budget of 20 and 60 published: want about 20 pending and the rest held back", st)
	}
	close(release)
	waitFor(t, "everything seen and finished", 10*time.Second, func() bool {
		st := tr.Stats()
		return st.Pending == 0 && !st.Paused && !tr.Watermark().Before(last.Add(-cfg.Band))
	})
}

// TestTheLogSaysAnUnknownWatermarkIsUnknown: a leader that starts, and
// stops, before any message made the watermark known logs it as unknown,
// not as the zero time (00:00:00.000 in the console format).
func TestTheLogSaysAnUnknownWatermarkIsUnknown(t *testing.T) {
	var out lockedBuffer
	log, err := logging.New("info", "console", &out)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(metrics.New().Pipeline("orders"))
	cfg.Store = blockingStore{make(chan struct{})}
	tr, err := NewTracker(idleReader{}, nil, log, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.loaded.Store(true)
	if !tr.follow(context.Background()) {
		t.Fatal("the tracker did not take a vacant lease")
	}
	tr.startTerm(context.Background()).stop(false)
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := out.String()
	for _, want := range []string{
		"leading the watermark: reading the tracking subscription\t{\"pipeline\": \"orders\", \"watermark\": \"unknown\"}",
		"watermark unknown: nothing to store",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "00:00:00.000") || strings.Contains(logs, "watermark stored") {
		t.Errorf("the log prints an unknown watermark as a time, or as stored:\n%s", logs)
	}
}

// idleReader is a tracking subscription that delivers nothing.
type idleReader struct{}

func (idleReader) Run(receiveCtx, _ context.Context, _ source.Handler) error {
	<-receiveCtx.Done()
	return nil
}
func (idleReader) Check(context.Context) (source.Info, error) { return source.Info{}, nil }
func (idleReader) Stalled() error                             { return nil }

// lockedBuffer is a log's output, written by the tracker's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
