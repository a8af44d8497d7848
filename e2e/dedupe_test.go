package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/sinks"
)

// dupMsg is one message of the dedupe tests: its "id" attribute (the
// dedupe key and the row key), payload and event time.
type dupMsg struct {
	id   string
	data string
	ts   time.Time
}

// dupBatch returns the messages for ids [0, n) in version v: the payload
// and the event time differ by version, so that a second write of a row
// shows as a second version of its cells.
func dupBatch(n, v int) []dupMsg {
	out := make([]dupMsg, n)
	for i := range out {
		out[i] = dupMsg{
			id:   rowKey(i),
			data: fmt.Sprintf(`{"n":%d,"version":%d}`, i, v),
			ts:   eventTime(i).Add(time.Duration(v) * time.Second),
		}
	}
	return out
}

// publishDup publishes msgs and returns their message IDs.
func (e *env) publishDup(msgs []dupMsg) []string {
	e.t.Helper()
	ctx := context.Background()
	pub := e.pubsub.Publisher(e.topic)
	defer pub.Stop()
	results := make([]*pubsub.PublishResult, len(msgs))
	for i, m := range msgs {
		results[i] = pub.Publish(ctx, &pubsub.Message{
			Data:       []byte(m.data),
			Attributes: map[string]string{"id": m.id, "ts": fmt.Sprint(m.ts.UnixMicro())},
		})
	}
	ids := make([]string, len(msgs))
	for i, r := range results {
		id, err := r.Get(ctx)
		if err != nil {
			e.t.Fatalf("publish: %v", err)
		}
		ids[i] = id
	}
	return ids
}

// checkDupRows verifies that every row of msgs holds exactly one version of
// its data cell, with the payload of msgs.
func (e *env) checkDupRows(msgs []dupMsg) {
	e.t.Helper()
	rows := e.readTable(e.table)
	if len(rows) != len(msgs) {
		e.t.Errorf("%d rows, want %d", len(rows), len(msgs))
	}
	bad := 0
	for _, m := range msgs {
		data := rows[m.id]["data"]
		switch {
		case len(data) != 1:
			e.t.Errorf("row %s: %d versions of data, want 1: %v", m.id, len(data), data)
		case data[0].value != m.data:
			e.t.Errorf("row %s: data %s, want %s", m.id, data[0].value, m.data)
		default:
			continue
		}
		if bad++; bad > 10 {
			e.t.Fatal("too many bad rows")
		}
	}
}

// catalogIO counts the requests a Bigtable client sends that touch the
// dedupe catalog (rows under "dedupe#" of the state table).
type catalogIO struct {
	stateTable string
	reads      atomic.Int64 // ReadRows requests (point reads and scans)
	readRows   atomic.Int64 // row keys asked for by point reads
	writes     atomic.Int64 // MutateRows requests
}

func (c *catalogIO) observe(req any) {
	switch r := req.(type) {
	case *btpb.ReadRowsRequest:
		if !strings.HasSuffix(r.GetTableName(), "/tables/"+c.stateTable) {
			return
		}
		touches := false
		for _, k := range r.GetRows().GetRowKeys() {
			if strings.HasPrefix(string(k), "dedupe#") {
				touches = true
				c.readRows.Add(1)
			}
		}
		for _, rng := range r.GetRows().GetRowRanges() {
			if strings.HasPrefix(string(rng.GetStartKeyClosed()), "dedupe#") || strings.HasPrefix(string(rng.GetStartKeyOpen()), "dedupe#") {
				touches = true
			}
		}
		if touches {
			c.reads.Add(1)
		}
	case *btpb.MutateRowsRequest:
		if !strings.HasSuffix(r.GetTableName(), "/tables/"+c.stateTable) {
			return
		}
		for _, en := range r.GetEntries() {
			if strings.HasPrefix(string(en.GetRowKey()), "dedupe#") {
				c.writes.Add(1)
				return
			}
		}
	}
}

// bigtableCounting opens data clients on the emulator whose requests are
// observed by cio, for app.Options.Bigtable.
func (e *env) bigtableCounting(cio *catalogIO) func(ctx context.Context, inst string) (*bigtable.Client, error) {
	return func(ctx context.Context, inst string) (*bigtable.Client, error) {
		conn, err := grpc.NewClient("passthrough:///"+e.bt.Host,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<28), grpc.MaxCallRecvMsgSize(1<<28)),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				s, err := streamer(ctx, desc, cc, method, opts...)
				return observedStream{s, cio}, err
			}))
		if err != nil {
			return nil, err
		}
		return bigtable.NewClientWithConfig(ctx, project, inst,
			bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	}
}

type observedStream struct {
	grpc.ClientStream
	cio *catalogIO
}

func (s observedStream) SendMsg(m any) error {
	s.cio.observe(m)
	return s.ClientStream.SendMsg(m)
}

// countingSink counts the successful writes of each row key.
type countingSink struct {
	sinks.Sink
	mu     sync.Mutex
	writes map[string]int
}

func (s *countingSink) Write(ctx context.Context, rows []sinks.Row) error {
	err := s.Sink.Write(ctx, rows)
	if err == nil {
		s.mu.Lock()
		for i := range rows {
			s.writes[rows[i].Key]++
		}
		s.mu.Unlock()
	}
	return err
}

// runApp runs cfg in this process until stop is called, which returns Run's
// error. The sink of the pipeline counts its writes.
func (e *env) runApp(cfg *config.Config, cio *catalogIO) (*app.App, *countingSink, func() error) {
	e.t.Helper()
	sink := &countingSink{writes: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Open(ctx, nopLogger(), cfg, app.Options{
		PubSub:   e.pubsub,
		Bigtable: e.bigtableCounting(cio),
		HTTPAddr: "-",
		WrapSink: func(_ string, s sinks.Sink) sinks.Sink { sink.Sink = s; return sink },
	})
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	e.t.Cleanup(func() { stop() })
	return a, sink, stop
}

// waitFinished waits until the pipeline has finished want messages
// (committed or duplicate) and holds none.
func waitFinished(t *testing.T, p *pipeline.Pipeline, want int64, timeout time.Duration) pipeline.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := p.Status()
		if st.Committed+st.Duplicate >= want && st.InFlight == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %+v", timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getText returns the body of a GET of path on the child's HTTP server.
func (c *child) getText(path string) string {
	c.t.Helper()
	resp, err := http.Get("http://" + c.addr + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

func dedupeStatus(t *testing.T, st map[string]any) map[string]any {
	t.Helper()
	d, ok := st["dedupe"].(map[string]any)
	if !ok {
		t.Fatalf("no dedupe section in /status: %v", st)
	}
	return d
}

// TestDuplicatesByIDAttributeAreAckedAndTheRowKeepsTheFirstPayload: the
// same ids published again (new message IDs, another payload, another event
// time) within the window are acked as duplicates without a write.
func TestDuplicatesByIDAttributeAreAckedAndTheRowKeepsTheFirstPayload(t *testing.T) {
	const n = 1000
	e := newEnv(t)
	path, cfg := e.writeConfig(e.configYAML(config.ModeExactlyOnce, ""))
	info, err := e.admin.TableInfo(context.Background(), e.stateTable)
	if err != nil {
		t.Fatal(err)
	}
	gcOK := false
	for _, f := range info.FamilyInfos {
		if ma, ok := f.FullGCPolicy.(bigtable.MaxAgeGCPolicy); ok && f.Name == state.FamilyDedupe {
			gcOK = time.Duration(ma) >= cfg.Pipelines[0].Dedupe.Window
		}
	}
	if !gcOK {
		t.Errorf("setup made state families %+v; want %s with a max-age rule of at least the window", info.FamilyInfos, state.FamilyDedupe)
	}
	first := dupBatch(n, 0)
	e.publishDup(first)

	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	waitStatus(t, c, func(st map[string]any) bool { return st["committed"].(float64) >= n && st["in_flight"].(float64) == 0 }, 2*time.Minute)
	newLookups := dedupeStatus(t, c.status())["catalog_lookups"].(float64)

	e.publishDup(dupBatch(n, 1))
	waitStatus(t, c, func(st map[string]any) bool { return st["duplicate"].(float64) >= n && st["in_flight"].(float64) == 0 }, 2*time.Minute)
	// Acked: nothing comes back for a while.
	time.Sleep(2 * time.Second)
	st := c.status()
	if st["committed"].(float64) != n || st["duplicate"].(float64) != n || st["retried"].(float64) != 0 || st["received"].(float64) != 2*n {
		t.Errorf("status %v: want %d committed, %d duplicates, no retries, %d received", st, n, n, 2*n)
	}
	d := dedupeStatus(t, st)
	if d["rebuilt"] != true {
		t.Errorf("dedupe status %v: not rebuilt", d)
	}
	text := c.getText("/metrics")
	for _, want := range []string{
		fmt.Sprintf(`pubsink_messages_duplicate_total{pipeline="e2e"} %d`, n),
		fmt.Sprintf(`pubsink_dedupe_catalog_lookups_total{pipeline="e2e"} %v`, d["catalog_lookups"]),
		`pubsink_dedupe_filter_fill_ratio{pipeline="e2e"} `,
		`pubsink_dedupe_false_positive_ratio{pipeline="e2e"} `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no line %q", want)
		}
	}
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	e.checkDupRows(first)
	t.Logf("%.0f catalog lookups for %d new keys (the ones before the start-up rebuild ended, and false positives), %.0f for %d duplicates; dedupe status %v",
		newLookups, n, d["catalog_lookups"].(float64)-newLookups, n, d)
}

// TestRedeliveredMessageIDsAreCaughtInMessageIDMode: with no id_attribute
// the key is the message ID. The topic has a second subscription; the
// pipeline drains the first, then, restarted on the second, receives every
// message again under the same message IDs (as a redelivery would), and
// drops them all without a write.
func TestRedeliveredMessageIDsAreCaughtInMessageIDMode(t *testing.T) {
	const n = 500
	e := newEnv(t)
	_, cfg := e.writeConfig(strings.Replace(e.configYAML(config.ModeExactlyOnce, ""), "id_attribute: id", `id_attribute: ""`, 1))
	if cfg.Pipelines[0].DedupeKeyAttribute() != "" {
		t.Fatal("the config still has an id_attribute")
	}
	second := cfg.SubscriptionName("s2-" + e.sub[2:])
	if _, err := e.pubsub.SubscriptionAdminClient.CreateSubscription(context.Background(), &pubsubpb.Subscription{
		Name: second, Topic: cfg.TopicName(e.topic), AckDeadlineSeconds: 60,
	}); err != nil {
		t.Fatal(err)
	}
	first := dupBatch(n, 0)
	e.publishDup(first)

	cio := &catalogIO{stateTable: e.stateTable}
	a, sink, stop := e.runApp(cfg, cio)
	waitFinished(t, a.Pipelines()[0], n, 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := a.Pipelines()[0].Status(); st.Committed != n || st.Duplicate != 0 {
		t.Fatalf("first run: %+v", st)
	}

	again := *cfg
	again.Pipelines = slices.Clone(cfg.Pipelines)
	again.Pipelines[0].Source.Subscription = second
	a, sink, stop = e.runApp(&again, cio)
	st := waitFinished(t, a.Pipelines()[0], n, 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st.Committed != 0 || st.Duplicate != n || len(sink.writes) != 0 {
		t.Fatalf("second run: %d committed, %d duplicates, %d rows written; want 0, %d, 0", st.Committed, st.Duplicate, len(sink.writes), n)
	}
	e.checkDupRows(first)
	t.Logf("both runs: %d catalog point reads, %d catalog write requests", cio.readRows.Load(), cio.writes.Load())
}

// TestRestartBetweenOriginalAndDuplicateStillDropsIt: the binary commits
// the originals and stops; the duplicates wait in the subscription and are
// the first thing the restarted binary reads, while it rebuilds its
// filters.
func TestRestartBetweenOriginalAndDuplicateStillDropsIt(t *testing.T) {
	const n = 1000
	e := newEnv(t)
	path, cfg := e.writeConfig(e.configYAML(config.ModeExactlyOnce, ""))
	first := dupBatch(n, 0)
	e.publishDup(first)
	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	waitStatus(t, c, func(st map[string]any) bool { return st["committed"].(float64) >= n && st["in_flight"].(float64) == 0 }, 2*time.Minute)
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}

	e.publishDup(dupBatch(n, 1))
	c = e.start(path, cfg)
	c.waitReady(30 * time.Second)
	waitStatus(t, c, func(st map[string]any) bool { return st["duplicate"].(float64) >= n && st["in_flight"].(float64) == 0 }, 2*time.Minute)
	st := c.status()
	d := dedupeStatus(t, st)
	if st["committed"].(float64) != 0 || d["rebuilt"] != true || d["rebuild_keys"].(float64) != n {
		t.Errorf("after the restart: status %v", st)
	}
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	e.checkDupRows(first)
	t.Logf("restart: %.0f duplicates, %.0f catalog lookups, rebuild of %.0f keys in %.3fs", st["duplicate"], d["catalog_lookups"], d["rebuild_keys"], d["rebuild_seconds"])
}

// TestConcurrentDuplicatesWriteOnce: four copies of each id (different
// payloads and event times) are in the subscription at once and delivered
// together; exactly one copy of each is written.
func TestConcurrentDuplicatesWriteOnce(t *testing.T) {
	const n, copies = 500, 4
	e := newEnv(t)
	_, cfg := e.writeConfig(e.configYAML(config.ModeExactlyOnce, ""))
	var all []dupMsg
	for i := 0; i < n; i++ {
		for v := 0; v < copies; v++ {
			all = append(all, dupBatch(i+1, v)[i])
		}
	}
	e.publishDup(all)

	cio := &catalogIO{stateTable: e.stateTable}
	a, sink, stop := e.runApp(cfg, cio)
	st := waitFinished(t, a.Pipelines()[0], n*copies, 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st.Committed != n || st.Duplicate != n*(copies-1) {
		t.Errorf("%d committed, %d duplicates; want %d and %d", st.Committed, st.Duplicate, n, n*(copies-1))
	}
	for key, w := range sink.writes {
		if w != 1 {
			t.Errorf("row %s written %d times", key, w)
		}
	}
	rows := e.readTable(e.table)
	if len(rows) != n || len(sink.writes) != n {
		t.Errorf("%d rows, %d written; want %d", len(rows), len(sink.writes), n)
	}
	for key, cols := range rows {
		if len(cols["data"]) != 1 {
			t.Errorf("row %s: %d versions", key, len(cols["data"]))
		}
	}
	if cio.writes.Load() == 0 {
		t.Error("no catalog write request seen: catalogIO does not count (TestAtLeastOnceDoesNoCatalogIO relies on it)")
	}
	t.Logf("%d catalog point reads, %d catalog write requests for %d deliveries of %d keys", cio.readRows.Load(), cio.writes.Load(), n*copies, n)
}

// TestAtLeastOnceDoesNoCatalogIO: in at_least_once mode a duplicate is
// written again, and no request touches the catalog.
func TestAtLeastOnceDoesNoCatalogIO(t *testing.T) {
	const n = 300
	e := newEnv(t)
	_, cfg := e.writeConfig(e.configYAML(config.ModeAtLeastOnce, ""))
	e.publishDup(dupBatch(n, 0))
	e.publishDup(dupBatch(n, 1))

	cio := &catalogIO{stateTable: e.stateTable}
	a, _, stop := e.runApp(cfg, cio)
	p := a.Pipelines()[0]
	st := waitFinished(t, p, 2*n, 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st.Committed != 2*n || st.Duplicate != 0 || st.Dedupe != nil {
		t.Errorf("status %+v: want %d committed, no duplicates, no dedupe section", st, 2*n)
	}
	if r, w := cio.reads.Load(), cio.writes.Load(); r != 0 || w != 0 {
		t.Errorf("%d catalog reads and %d catalog writes in at_least_once mode", r, w)
	}
	if v := metrics.Value(a.Metrics().Pipeline("e2e").Lookups); v != 0 {
		t.Errorf("pubsink_dedupe_catalog_lookups_total = %v", v)
	}
	for key, cols := range e.readTable(e.table) {
		if len(cols["data"]) != 2 {
			t.Errorf("row %s: %d versions, want 2 (both copies written)", key, len(cols["data"]))
		}
	}
}

// TestKeyIsNewAgainAfterTheWindow runs the binary with the shortest window
// (1m): a copy within the window is dropped; one after it is written.
func TestKeyIsNewAgainAfterTheWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a one-minute window to pass")
	}
	const n = 100
	e := newEnv(t)
	path, cfg := e.writeConfig(e.configYAML(config.ModeExactlyOnce, "    dedupe: {window: 1m}\n"))
	if cfg.Pipelines[0].Dedupe.Window != time.Minute {
		t.Fatalf("window %v", cfg.Pipelines[0].Dedupe.Window)
	}
	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	e.publishDup(dupBatch(n, 0))
	waitStatus(t, c, func(st map[string]any) bool { return st["committed"].(float64) >= n && st["in_flight"].(float64) == 0 }, time.Minute)
	committed := time.Now()

	e.publishDup(dupBatch(n, 1))
	waitStatus(t, c, func(st map[string]any) bool { return st["duplicate"].(float64) >= n && st["in_flight"].(float64) == 0 }, time.Minute)
	if time.Since(committed) > 50*time.Second {
		t.Fatal("the duplicates took too long to test the window")
	}

	time.Sleep(time.Until(committed.Add(time.Minute + 2*time.Second)))
	third := dupBatch(n, 2)
	e.publishDup(third)
	waitStatus(t, c, func(st map[string]any) bool {
		return st["committed"].(float64) >= 2*n && st["in_flight"].(float64) == 0
	}, time.Minute)
	st := c.status()
	if st["committed"].(float64) != 2*n || st["duplicate"].(float64) != n {
		t.Errorf("status %v: want %d committed, %d duplicates", st, 2*n, n)
	}
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	rows := e.readTable(e.table)
	for i := 0; i < n; i++ {
		data := rows[rowKey(i)]["data"]
		if len(data) != 2 || data[0].value != third[i].data {
			t.Errorf("row %s: %v; want 2 versions, the newest from after the window", rowKey(i), data)
		}
	}
}
