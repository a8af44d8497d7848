package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
)

// The stream progress watchdog (package source, "Watchdog") against the
// emulators: StreamingPull streams that hang without an error; and the
// tracking subscription's Puller (package source, "Puller"), whose Pulls
// can hang the same way.

// watchdogStall is the stall timeout of these tests: short, so that they
// take seconds, and long against the emulator's stream start.
const watchdogStall = 3 * time.Second

const (
	streamingPull = "/google.pubsub.v1.Subscriber/StreamingPull"
	unaryPull     = "/google.pubsub.v1.Subscriber/Pull"
)

// hungStreams is a gRPC stream interceptor that makes StreamingPull
// streams hang without an error, as a proxy that lost them would: their
// requests never reach the server, which never serves them (the messages
// stay in the subscription), and RecvMsg blocks until the stream's context
// ends. It swallows the first first[sub] streams of each subscription sub
// (a full name), or all of them when that is -1.
//
// A stream that hangs on the client side only (the server sends, nobody
// reads) would do for Pub/Sub, where it holds at most its flow-control
// share, but not for the emulator, which ignores flow control and pushes a
// whole backlog onto it, leaving nothing for the watchdog's peek to see (see
// package source, "Watchdog", Limits).
//
// Its unary side does the same to the first pulls[sub] long-polling Pulls
// of a subscription (not the Puller's immediate check of one that timed
// out): they block until their deadline, as a Pull whose request was lost.
type hungStreams struct {
	mu        sync.Mutex
	first     map[string]int
	opened    map[string]int
	swallowed map[string]int
	pulls     map[string]int
	pulled    map[string]int
}

func newHungStreams(first map[string]int) *hungStreams {
	return &hungStreams{first: first, opened: map[string]int{}, swallowed: map[string]int{}, pulls: map[string]int{}, pulled: map[string]int{}}
}

// hangPulls makes the first n long-polling Pulls of sub hang.
func (h *hungStreams) hangPulls(sub string, n int) *hungStreams {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pulls[sub] = n
	return h
}

// hungPulls is how many Pulls of sub hung.
func (h *hungStreams) hungPulls(sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pulled[sub]
}

func (h *hungStreams) interceptUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r, ok := req.(*pubsubpb.PullRequest)
	//lint:ignore SA1019 the Puller's check of a timed-out Pull sets it
	if !ok || method != unaryPull || r.GetReturnImmediately() {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	h.mu.Lock()
	lose := h.pulled[r.GetSubscription()] < h.pulls[r.GetSubscription()]
	if lose {
		h.pulled[r.GetSubscription()]++
	}
	h.mu.Unlock()
	if !lose {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (h *hungStreams) count(sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.swallowed[sub]
}

// lose decides, at a stream's first request, whether it hangs.
func (h *hungStreams) lose(sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.first[sub]
	if !ok {
		return false
	}
	h.opened[sub]++
	if n >= 0 && h.opened[sub] > n {
		return false
	}
	h.swallowed[sub]++
	return true
}

func (h *hungStreams) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != streamingPull {
		return cs, err
	}
	return &hungStream{ClientStream: cs, h: h, ctx: ctx}, nil
}

type hungStream struct {
	grpc.ClientStream
	h       *hungStreams
	ctx     context.Context
	decided bool // the first request was seen (the library sends before it receives)
	lost    bool
}

func (s *hungStream) SendMsg(m any) error {
	if !s.decided {
		s.decided = true
		if req, ok := m.(*pubsubpb.StreamingPullRequest); ok {
			s.lost = s.h.lose(req.GetSubscription())
		}
	}
	if s.lost {
		return nil
	}
	return s.ClientStream.SendMsg(m)
}

func (s *hungStream) CloseSend() error {
	if s.lost {
		return nil
	}
	return s.ClientStream.CloseSend()
}

func (s *hungStream) RecvMsg(m any) error {
	if s.lost {
		<-s.ctx.Done()
		return s.ctx.Err()
	}
	return s.ClientStream.RecvMsg(m)
}

// pubsubOptions make the client the App creates (with its stream watch)
// talk to the emulator through h.
func (e *env) pubsubOptions(h *hungStreams) []option.ClientOption {
	return e.interceptedPubSub(h.intercept, h.interceptUnary)
}

// interceptedPubSub are the options of a client the App creates that talks
// to the emulator through the interceptors.
func (e *env) interceptedPubSub(stream grpc.StreamClientInterceptor, unary grpc.UnaryClientInterceptor) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(e.ps.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(stream)),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(unary)),
	}
}

// watchdogYAML is the harness's pipeline with two streams and the test's
// stall timeout.
func watchdogYAML(t *testing.T, y string) string {
	t.Helper()
	const streams = "      streams: 8\n"
	if !strings.Contains(y, streams) {
		t.Fatalf("the harness's YAML changed; no %q in\n%s", streams, y)
	}
	return strings.Replace(y, streams, fmt.Sprintf("      streams: 2\n      stall_timeout: %s\n", watchdogStall), 1)
}

// appRun is an App running in this process.
type appRun struct {
	t      *testing.T
	a      *app.App
	cancel context.CancelFunc
	done   chan error
	start  time.Time
}

func (e *env) runWatchedApp(cfg *config.Config, opts app.Options) *appRun {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts.Bigtable = e.bigtableFor
	opts.HTTPAddr = "127.0.0.1:0"
	a, err := app.Open(ctx, nopLogger(), cfg, opts)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	r := &appRun{t: e.t, a: a, cancel: cancel, done: make(chan error, 1), start: time.Now()}
	go func() { r.done <- a.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// stop stops the App and returns how long Run took to return.
func (r *appRun) stop(within time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		if err != nil {
			r.t.Fatalf("Run: %v", err)
		}
	case <-time.After(within):
		r.t.Fatalf("Run still running %v after the stop", within)
	}
	return time.Since(start)
}

func (r *appRun) get(path string) (int, string) {
	r.t.Helper()
	resp, err := http.Get("http://" + r.a.Addr() + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// healthWatch polls /healthz until stopped and keeps what was not 200.
type healthWatch struct {
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	bad    []string
	probes atomic.Int64
}

func (r *appRun) watchHealth() *healthWatch {
	h := &healthWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			select {
			case <-h.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			resp, err := http.Get("http://" + r.a.Addr() + "/healthz")
			h.probes.Add(1)
			if err != nil {
				continue // the server stops last, after Run's pipelines
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				h.mu.Lock()
				h.bad = append(h.bad, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b))))
				h.mu.Unlock()
			}
		}
	}()
	return h
}

func (h *healthWatch) end() []string {
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bad
}

// reopensMetric reads pubsink_source_stream_reopens_total of the test's
// pipeline from /metrics.
func (r *appRun) reopensMetric() int {
	r.t.Helper()
	_, body := r.get("/metrics")
	m := regexp.MustCompile(`(?m)^pubsink_source_stream_reopens_total\{pipeline="e2e"\} (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		r.t.Fatalf("/metrics has no pubsink_source_stream_reopens_total for the pipeline")
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// trackingErrorsMetric reads pubsink_tracking_errors_total of the test's
// pipeline for method from /metrics.
func (r *appRun) trackingErrorsMetric(method string) int {
	r.t.Helper()
	_, body := r.get("/metrics")
	m := regexp.MustCompile(`(?m)^pubsink_tracking_errors_total\{method="` + method + `",pipeline="e2e"\} (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		r.t.Fatalf("/metrics has no pubsink_tracking_errors_total{method=%q} for the pipeline", method)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestWatchdogReopensHungStreamsAndEveryMessageCommits is case (1): the
// first streams of the main subscription and the first Pulls of the
// tracking one hang, with messages waiting. The watchdog reopens the main
// subscription's streams after the stall timeout; the tracking
// subscription's Puller takes its Pulls that timed out while messages
// waited for hung. Every message is committed once, /healthz answers 200
// throughout, the reopen shows in /metrics and /status, and the tracker
// counts the hung Pulls as a break (it holds the watermark for what they
// may have leased). A stop is clean.
func TestWatchdogReopensHungStreamsAndEveryMessageCommits(t *testing.T) {
	const n = 300
	e := newEnv(t)
	_, cfg := e.writeConfig(watchdogYAML(t, e.watermarkYAML(config.LateAccept, "")))
	main, tracking := cfg.SubscriptionName(e.sub), cfg.SubscriptionName(e.tracking)
	// The main subscription's 2 streams, the first set; and the first Pull
	// of each of the tracking subscription's 3 pull loops (app/watermark.go).
	hung := newHungStreams(map[string]int{main: 2}).hangPulls(tracking, 3)
	e.publish(0, n)
	time.Sleep(watchdogStall / 4) // the peek counts only messages that waited a while

	r := e.runWatchedApp(cfg, app.Options{PubSubOptions: e.pubsubOptions(hung)})
	health := r.watchHealth()
	p := r.a.Pipelines()[0]
	waitCommitted(t, p, n, 45*time.Second)
	took := time.Since(r.start)
	bad := health.end()

	if hung.count(main) != 2 || hung.hungPulls(tracking) != 3 {
		t.Fatalf("hung: main streams %d, tracking pulls %d; want 2 and 3: the fault was not injected", hung.count(main), hung.hungPulls(tracking))
	}
	if took < watchdogStall {
		t.Errorf("committed %d messages in %v, before the stall timeout: the streams did not hang", n, took)
	}
	if len(bad) > 0 {
		t.Errorf("/healthz was not 200 while a reopen helped (%d probes): %v", health.probes.Load(), bad)
	}
	// The tracking subscription's Puller starts after the tracker took the
	// lead, and the tracker takes a break into account at its next tick.
	st := p.Status()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); st = p.Status() {
		if st.StreamReopens >= 1 && st.Tracker != nil && st.Tracker.StreamBreaks >= 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.StreamReopens < 1 || st.Stalled != "" {
		t.Errorf("status: stream_reopens %d, stalled %q; want at least 1 (the main subscription's) and not stalled", st.StreamReopens, st.Stalled)
	}
	if m := r.reopensMetric(); m != int(st.StreamReopens) {
		t.Errorf("pubsink_source_stream_reopens_total = %d, /status says %d", m, st.StreamReopens)
	}
	if st.Tracker == nil || st.Tracker.StreamBreaks < 1 {
		t.Errorf("tracker %+v: the hung pulls of the tracking subscription are no break for it", st.Tracker)
	}
	if m := r.trackingErrorsMetric("Pull"); m < 3 {
		t.Errorf("pubsink_tracking_errors_total{method=\"Pull\"} = %d, want at least the 3 hung pulls", m)
	}
	if code, body := r.get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q after the reopen", code, body)
	}
	r.stop(15 * time.Second)
	e.checkRows(n)
	t.Logf("committed %d messages %v after the start; %d reopens", n, took.Round(time.Millisecond), st.StreamReopens)
}

// TestWatchdogFailsHealthzWhenReopeningDoesNotHelp is case (2): every
// stream of the main subscription hangs. After the reopen and another stall
// timeout, /healthz answers 503 with one line naming the pipeline and the
// subscription, and so do /readyz and /status; nothing is committed. A stop
// while hung is clean and prompt.
func TestWatchdogFailsHealthzWhenReopeningDoesNotHelp(t *testing.T) {
	e := newEnv(t)
	_, cfg := e.writeConfig(watchdogYAML(t, e.configYAML(config.ModeExactlyOnce, "")))
	main := cfg.SubscriptionName(e.sub)
	hung := newHungStreams(map[string]int{main: -1})
	e.publish(0, 50)
	time.Sleep(watchdogStall / 4)

	r := e.runWatchedApp(cfg, app.Options{PubSubOptions: e.pubsubOptions(hung)})
	if code, body := r.get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %q at the start", code, body)
	}
	var code int
	var body string
	deadline := time.Now().Add(6 * watchdogStall)
	for code, body = r.get("/healthz"); code == 200; code, body = r.get("/healthz") {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still 200 %v after the start, with every stream hung", time.Since(r.start).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(r.start)
	if code != 503 || !strings.HasPrefix(body, "unhealthy: pipeline e2e: subscription "+main+" ") ||
		!strings.Contains(body, "did not help") || strings.Count(body, "\n") != 1 {
		t.Fatalf("/healthz = %d %q; want 503 and one line naming the pipeline and the subscription", code, body)
	}
	if took < 2*watchdogStall {
		t.Errorf("/healthz failed %v after the start, before the reopen had a stall timeout to help", took)
	}
	if code, rbody := r.get("/readyz"); code != 503 || !strings.Contains(rbody, "pipeline e2e: subscription "+main) {
		t.Errorf("/readyz = %d %q; want 503 naming the stalled subscription", code, rbody)
	}
	p := r.a.Pipelines()[0]
	st := p.Status()
	if !strings.Contains(st.Stalled, main) || st.StreamReopens < 2 || st.Committed != 0 || st.Received != 0 {
		t.Errorf("status: stalled %q, stream_reopens %d, received %d, committed %d; want the reason, at least 2 reopens, nothing received",
			st.Stalled, st.StreamReopens, st.Received, st.Committed)
	}
	if hung.count(main) < 4 {
		t.Errorf("%d streams hung; want the first set and the reopened one (2 each)", hung.count(main))
	}
	stopped := r.stop(5 * time.Second)
	t.Logf("/healthz 503 %v after the start: %s; stopped in %v", took.Round(time.Millisecond), strings.TrimSpace(body), stopped.Round(time.Millisecond))
}

// blockingSink holds every write until released: a Bigtable stall that
// holds every flow-control slot.
type blockingSink struct {
	sinks.Sink
	release chan struct{}
	held    atomic.Int64
}

func (s *blockingSink) Write(ctx context.Context, rows []sinks.Row) error {
	s.held.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Sink.Write(ctx, rows)
}

// TestWatchdogLeavesAPipelineStalledOnItsSinkAlone: the sink holds every
// write, so the handlers hold every flow-control slot and the streams pull
// nothing, by design, while messages wait, for four stall timeouts: no
// reopen, /healthz 200 throughout. Then the sink is released and everything
// commits. The emulator pushes the waiting messages to the client anyway,
// where the peek cannot see them, so this guards against a watchdog that
// takes busy silence for a hang without evidence; the busy rule alone is
// tested in package source (TestWatchdogLeavesABusyPipelineAlone).
func TestWatchdogLeavesAPipelineStalledOnItsSinkAlone(t *testing.T) {
	const n, slots = 600, 100
	e := newEnv(t)
	y := watchdogYAML(t, e.configYAML(config.ModeExactlyOnce, ""))
	y = strings.Replace(y, "max_outstanding_messages: 2000", fmt.Sprintf("max_outstanding_messages: %d", slots), 1)
	y = strings.Replace(y, "      column_family: d\n", "      column_family: d\n      batch: {max_messages: 50}\n", 1)
	_, cfg := e.writeConfig(y)
	sink := &blockingSink{release: make(chan struct{})}
	e.publish(0, n)
	r := e.runWatchedApp(cfg, app.Options{
		PubSubOptions: e.pubsubOptions(newHungStreams(nil)),
		WrapSink:      func(_ string, s sinks.Sink) sinks.Sink { sink.Sink = s; return sink },
	})
	health := r.watchHealth()
	p := r.a.Pipelines()[0]
	deadline := time.Now().Add(30 * time.Second)
	for sink.held.Load() < slots {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes held; the flow control (%d) did not fill", sink.held.Load(), slots)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(4 * watchdogStall)
	if st := p.Status(); st.StreamReopens != 0 || st.Received != slots {
		t.Fatalf("while the sink held every slot: %d reopens, %d received; want none and %d", st.StreamReopens, st.Received, slots)
	}
	close(sink.release)
	waitCommitted(t, p, n, time.Minute)
	if bad := health.end(); len(bad) > 0 {
		t.Errorf("/healthz was not 200 while the pipeline was busy: %v", bad)
	}
	if st := p.Status(); st.StreamReopens != 0 {
		t.Errorf("%d reopens once the sink was released", st.StreamReopens)
	}
	r.stop(15 * time.Second)
	e.checkRows(n)
}
