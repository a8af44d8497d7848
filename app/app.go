package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/dedupe"
	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/retry"
	"github.com/pubsink/pubsink/internal/server"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/members"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/sinks"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/sinks/stdout"
	"github.com/pubsink/pubsink/source"
)

// Options are what a caller may inject instead of the defaults; the zero
// value runs against Google Cloud (or the emulators named by
// PUBSUB_EMULATOR_HOST and BIGTABLE_EMULATOR_HOST).
type Options struct {
	// PubSub is the client to use; nil: one is created for cfg.Project and
	// closed by the App.
	PubSub *pubsub.Client
	// PubSubOptions are the options of the client the App creates when
	// PubSub is nil; tests give an endpoint, or gRPC interceptors that
	// break the streams or the pulls.
	PubSubOptions []option.ClientOption
	// Bigtable opens a data client of an instance; nil: clients are
	// created for cfg.Project, one per instance and app profile, whose
	// requests name that profile (state.app_profile, sink.app_profile).
	// It is called once per instance and profile, and the client it
	// returns may ignore the profile (the emulators accept every request
	// through any profile). The App closes the clients either way.
	Bigtable func(ctx context.Context, instance string) (*bigtable.Client, error)
	// BigtableAdmin opens an admin client of an instance, for the start-up
	// check of the catalog's GC rule; nil: one is created for cfg.Project,
	// unless Bigtable is given (then the check is skipped).
	BigtableAdmin Admin
	// Schemas fetches topic-schema revisions (payload.schema: topic); nil:
	// a Schema API client is opened with PubSubOptions when a pipeline
	// needs one, and closed by the App.
	Schemas mapping.Schemas
	// Stdout receives the rows of stdout sinks; nil means os.Stdout.
	Stdout io.Writer
	// WrapSink, if set, wraps every pipeline's sink (fault injection in
	// tests).
	WrapSink func(pipeline string, s sinks.Sink) sinks.Sink
	// HTTPAddr overrides http.addr ("" keeps it; "-" serves no HTTP).
	HTTPAddr string
	// MemoryLimit is the container's memory limit in bytes, which sizes the
	// default flow control; 0: read it from the cgroup.
	MemoryLimit int64
	// Now is the wall clock of every part that stamps a time into the state
	// table or the dead-letter output, or compares one that another process
	// or a service stamped: dedupe (claim and commit times, the window),
	// members (renewal times), the watermark tracker (the estimate against
	// publish times, the leader lease) and the dead-letter output
	// (pubsink_failed_at). nil: time.Now. RunFile sets it from
	// $PUBSINK_CLOCK_OFFSET. Durations measured within the process stay on
	// the monotonic clock either way.
	Now func() time.Time

	// reprocess is set by Reprocess: the App runs one pipeline of a
	// reprocess (app/reprocess.go).
	reprocess *reprocessRun
	// audit is set by Audit: the App runs no pipeline, and shows the audit
	// (app/audit.go).
	audit *auditRun
	// filterWarnAfter and columnWarnAfter override
	// pipeline.DefaultFilterWarnAfter and DefaultColumnWarnAfter (tests).
	filterWarnAfter time.Duration
	columnWarnAfter time.Duration
}

// App is every pipeline of one configuration, running in this process,
// with the HTTP server.
type App struct {
	cfg       *config.Config
	log       *zap.Logger
	opts      Options
	metrics   *metrics.Metrics
	pubsub    *pubsub.Client
	ownPubSub bool
	// streams follows the StreamingPull streams of the client the App
	// opened (nil with Options.PubSub): a break of a main subscription's
	// streams holds its watermark's startup guard (watermark.Config.MainStreams).
	streams *source.StreamWatch
	// schemaClient is the Schema API's, opened when a pipeline reads topic
	// schemas (app/mapping.go).
	schemaClient *vkit.SchemaClient
	bigtables    map[bigtableKey]*bigtable.Client
	// id names this process among the members of its pipelines.
	id     string
	server *server.Server
	page   *page

	mu        sync.RWMutex
	pipelines []*pipeline.Pipeline // set once every start-up check passed
	starting  string               // what the start waits for; "" once started
}

// Open connects the clients, starts the HTTP server (/healthz answers at
// once, /readyz says what the start waits for), checks that every
// subscription, table and output exists and builds the pipelines. A check
// that fails for a transient reason (Pub/Sub or Bigtable unreachable or
// slow) is retried with backoff until ctx ends, each attempt bounded and
// logged; any other failure returns an error naming what is missing. When
// ctx ends first it returns ctx's error.
func Open(ctx context.Context, log *zap.Logger, cfg *config.Config, opts Options) (_ *App, err error) {
	a := &App{cfg: cfg, log: log, opts: opts, metrics: metrics.New(), bigtables: map[bigtableKey]*bigtable.Client{}, id: members.NewID() + dedupe.MemberTag}
	a.metrics.WatchReady(a.Ready)
	// The status page lists each pipeline's last warnings and errors: a
	// tee of the log keeps them.
	recent := logging.NewRecent(pageErrors)
	a.log = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, recent.Core()) }))
	log = a.log
	a.page = &page{app: a, recent: recent, now: time.Now}
	defer func() {
		if err != nil {
			a.stopServer()
			a.closeClients()
		}
	}()
	a.pubsub = opts.PubSub
	if a.pubsub == nil {
		a.streams = source.NewStreamWatch()
		popts := append([]option.ClientOption{a.streams.ClientOption()}, opts.PubSubOptions...)
		if a.pubsub, err = openPubSub(ctx, cfg.Project, popts...); err != nil {
			return nil, err
		}
		a.ownPubSub = true
	}
	a.setStarting("starting: checking the subscriptions, tables and outputs")
	addr := cfg.HTTP.Addr
	if opts.HTTPAddr != "" {
		addr = opts.HTTPAddr
	}
	if addr != "-" {
		a.server, err = server.Listen(log, addr, a.metrics.Registry, server.Probes{Ready: a.Ready, Status: a.Status, Live: a.Live, Page: a.page})
		if err != nil {
			return nil, listenError(addr, err, opts.reprocess != nil || opts.audit != nil)
		}
		go func() {
			if err := a.server.Serve(); err != nil {
				a.log.Error("http server failed", zap.Error(err))
			}
		}()
	}
	memLimit := opts.MemoryLimit
	if memLimit == 0 {
		memLimit = memoryLimit()
	}
	if err := a.startupChecks(ctx, memLimit); err != nil {
		return nil, err
	}
	a.setStarting("")
	return a, nil
}

// Start-up checks: each attempt of the whole sequence is bounded, and a
// transient failure is retried after a backoff growing to half a minute.
var startupAttemptTimeout = 20 * time.Second

var startupBackoff = retry.Policy{Initial: time.Second, Max: 30 * time.Second}

// startupChecks runs checkAndBuild until it succeeds, fails permanently,
// or ctx ends.
func (a *App) startupChecks(ctx context.Context, memLimit int64) error {
	return startupBackoff.Do(ctx, func(err error) bool { return ctx.Err() == nil && startupTransient(err) }, func() error {
		actx, cancel := context.WithTimeout(ctx, startupAttemptTimeout)
		defer cancel()
		return a.checkAndBuild(actx, memLimit)
	}, func(attempt int, err error) {
		waiting := a.endpoints()
		a.setStarting(fmt.Sprintf("starting: waiting for %s: %v", waiting, err))
		a.log.Warn("a start-up check failed for a transient reason; retrying", zap.String("waiting_for", waiting),
			zap.Int("attempt", attempt), zap.Error(err))
	})
}

// checkAndBuild is one attempt at the start-up checks and the pipelines.
func (a *App) checkAndBuild(ctx context.Context, memLimit int64) error {
	if err := a.checkStateTable(ctx); err != nil {
		return err
	}
	if err := a.checkCatalogGC(ctx); err != nil {
		return err
	}
	var built []*pipeline.Pipeline
	for _, pc := range a.cfg.Pipelines {
		p, err := a.build(ctx, pc, memLimit)
		if err != nil {
			return fmt.Errorf("pipeline %s: %w", pc.Name, err)
		}
		built = append(built, p)
	}
	a.mu.Lock()
	a.pipelines = built
	a.mu.Unlock()
	return nil
}

// startupTransient says which start-up failures are worth waiting out: a
// service unreachable, overloaded or slow. A missing resource, a refusal
// or a mismatch is the configuration's, and is reported at once.
func startupTransient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// endpoints names the services the start-up checks talk to, for the log.
func (a *App) endpoints() string {
	if a.opts.PubSub != nil || a.opts.Bigtable != nil {
		return "the Pub/Sub and Bigtable clients given"
	}
	return "Pub/Sub at " + envOr("PUBSUB_EMULATOR_HOST", "pubsub.googleapis.com:443") +
		" and Bigtable at " + envOr("BIGTABLE_EMULATOR_HOST", "bigtable.googleapis.com:443")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (a *App) setStarting(s string) {
	a.mu.Lock()
	a.starting = s
	a.mu.Unlock()
}

func (a *App) stopServer() {
	a.page.stop()
	if a.server != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a.server.Shutdown(sctx)
		cancel()
	}
}

// build wires one pipeline from its configuration.
func (a *App) build(ctx context.Context, pc config.Pipeline, memLimit int64) (*pipeline.Pipeline, error) {
	maxBytes := int64(pc.Source.MaxOutstandingBytes)
	if maxBytes == 0 {
		maxBytes = source.DefaultMaxOutstandingBytes(memLimit, len(a.cfg.Pipelines))
	}
	src := source.New(a.pubsub, a.log, a.cfg.SubscriptionName(pc.Source.Subscription), pc.Source, maxBytes)
	info, err := src.Check(ctx)
	if err != nil {
		return nil, err
	}
	topic := info.Topic
	if want := pc.Source.Topic; want != "" && topic != a.cfg.TopicName(want) {
		return nil, fmt.Errorf("subscription %s is attached to %s, but source.topic says %s", src.Subscription(), topic, a.cfg.TopicName(want))
	}
	if err := a.checkOrdering(ctx, pc, src.Subscription()); err != nil {
		return nil, err
	}
	warnings, err := a.checkTopicSchemaAtStart(ctx, pipelineIndex(a.cfg, pc.Name), pc, topic)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		a.log.Warn("the mapping does not fit some revisions of the topic's schema", zap.String("pipeline", pc.Name), zap.String("problem", w.String()))
	}

	m := a.metrics.Pipeline(pc.Name)
	src.SetWatchdogHooks(a.watchdogHooks(m))
	var gsrc pipeline.Source = src
	if r := a.opts.reprocess; r != nil {
		// Only the run's range is processed; what follows it is acked.
		gsrc = r.gate.Wrap(src)
	}
	var sink sinks.Sink
	limits := SinkLimits(pc)
	switch pc.Sink.Type {
	case config.SinkStdout:
		w := a.opts.Stdout
		if w == nil {
			w = os.Stdout
		}
		sink = stdout.New(w, a.log, pc.Sink)
	default:
		bt, err := a.bigtableClient(ctx, pc.Sink.Instance, pc.Sink.AppProfile)
		if err != nil {
			return nil, err
		}
		s := btsink.New(bt, a.log.With(zap.String("pipeline", pc.Name)), pc.Sink, &btsink.Metrics{WriteSeconds: m.SinkWrite, WriteErrors: m.SinkWriteErrors})
		if err := s.Check(ctx); err != nil {
			return nil, err
		}
		sink = s
	}
	if a.opts.WrapSink != nil {
		sink = a.opts.WrapSink(pc.Name, sink)
	}
	mp, err := a.mapper(ctx, pc, limits, int64(maxBytes))
	if err != nil {
		return nil, err
	}
	deps := pipeline.Deps{
		Source:  gsrc,
		Mapper:  mp,
		Sink:    sink,
		Limits:  limits,
		Metrics: m,

		FilterWarnAfter: a.opts.filterWarnAfter,
		ColumnWarnAfter: a.opts.columnWarnAfter,
	}
	// Each optional part is built in a file of its own (dedupe.go,
	// watermark.go, deadletter.go); a nil part is left out.
	mb, err := a.members(ctx, pc, m)
	if err != nil {
		return nil, err
	}
	if mb != nil {
		deps.Members = mb // not a typed nil: the pipeline tests Members against nil
	}
	if deps.Dedupe, err = a.dedupe(ctx, pc, mb, m); err != nil {
		return nil, err
	}
	if deps.Tracker, err = a.tracker(ctx, pc, src, info, maxBytes, mb, m); err != nil {
		return nil, err
	}
	if deps.DeadLetter, err = a.deadLetter(ctx, pc, topic, m); err != nil {
		return nil, err
	}
	return pipeline.New(a.log, pc, deps)
}

// checkOrdering compares the message ordering of the main subscription sub
// with source.ordering. Without it, asked for, run refuses the
// subscription: Pub/Sub cannot add ordering to an existing one. With it,
// unasked, run says so: the client orders anyway, since it takes the
// setting from the subscription (the flag each StreamingPull response
// carries), not from pubsink, and hands the messages of each ordering key
// over one at a time, each after the previous one's outcome.
func (a *App) checkOrdering(ctx context.Context, pc config.Pipeline, sub string) error {
	got, err := a.pubsub.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	if err != nil {
		return fmt.Errorf("get subscription %s: %w", sub, err)
	}
	switch ordered := got.GetEnableMessageOrdering(); {
	case pc.Source.Ordering && !ordered:
		return fmt.Errorf("subscription %s has no message ordering, and source.ordering is true; Pub/Sub cannot add it to an existing subscription: create one with it (gcloud pubsub subscriptions create NEW --topic=%s --enable-message-ordering) and name it in source.subscription, or set source.ordering to false",
			sub, got.GetTopic())
	case !pc.Source.Ordering && ordered:
		a.log.Info("the subscription has message ordering, which source.ordering does not ask for: the client orders anyway, handing the messages of each ordering key over one at a time, in publish order (set source.ordering to true to say so)",
			zap.String("pipeline", pc.Name), zap.String("subscription", sub))
	}
	return nil
}

// checkStateTable refuses to start when some pipeline is exactly_once and
// the state table's app profile does not run the conditional mutations its
// dedupe needs (state.CheckConditionalWrites). It probes once, for every
// pipeline: there is one state table.
func (a *App) checkStateTable(ctx context.Context) error {
	if !slices.ContainsFunc(a.cfg.Pipelines, config.Pipeline.ExactlyOnce) {
		return nil
	}
	bt, err := a.stateBigtable(ctx)
	if err != nil {
		return err
	}
	st := a.cfg.State
	err = state.CheckConditionalWrites(ctx, bt.Open(st.Table), st.Instance, st.AppProfile)
	switch {
	case err == nil:
		return nil
	case status.Code(err) == codes.NotFound:
		return fmt.Errorf("state table %s: %w (does `pubsink setup` need to run?)", st.Table, err)
	}
	return fmt.Errorf("state table %s: %w", st.Table, err)
}

// bigtableKey is what a data client is opened for: requests name one
// instance and one app profile ("": the instance's default).
type bigtableKey struct{ instance, profile string }

// bigtableClient returns the shared client of an instance and app profile.
func (a *App) bigtableClient(ctx context.Context, instance, profile string) (*bigtable.Client, error) {
	key := bigtableKey{instance, profile}
	if c, ok := a.bigtables[key]; ok {
		return c, nil
	}
	open := a.opts.Bigtable
	if open == nil {
		open = func(ctx context.Context, instance string) (*bigtable.Client, error) {
			return openBigtable(ctx, a.cfg.Project, instance, profile, a.metrics)
		}
	}
	c, err := open(ctx, instance)
	if err != nil {
		return nil, err
	}
	a.bigtables[key] = c
	return c, nil
}

// stateBigtable returns the client of every table in state.instance that
// pubsink keeps (the state table, a dead-letter table), through
// state.app_profile.
func (a *App) stateBigtable(ctx context.Context) (*bigtable.Client, error) {
	return a.bigtableClient(ctx, a.cfg.State.Instance, a.cfg.State.AppProfile)
}

// Addr is the address of the HTTP server ("" when there is none).
func (a *App) Addr() string {
	if a.server == nil {
		return ""
	}
	return a.server.Addr()
}

// Pipelines returns the pipelines, in configuration order (none until the
// start-up checks passed).
func (a *App) Pipelines() []*pipeline.Pipeline {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.pipelines
}

// Metrics returns the process's metrics.
func (a *App) Metrics() *metrics.Metrics { return a.metrics }

// Ready returns nil when every pipeline is ready (pipeline.Ready).
func (a *App) Ready(ctx context.Context) error {
	a.mu.RLock()
	starting := a.starting
	a.mu.RUnlock()
	if starting != "" {
		return errors.New(starting)
	}
	var errs []error
	for _, p := range a.Pipelines() {
		errs = append(errs, p.Ready(ctx))
	}
	return errors.Join(errs...)
}

// Live returns nil while the process is healthy: every pipeline's
// subscriptions deliver, or may (pipeline.Stalled). Otherwise the reasons,
// one per stalled pipeline, on one line: /healthz answers 503 with them, so
// that Kubernetes or Cloud Run restarts the process.
func (a *App) Live() error {
	var reasons []string
	for _, p := range a.Pipelines() {
		if err := p.Stalled(); err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return errors.New(strings.Join(reasons, "; "))
}

// watchdogHooks tell the watchdog of a pipeline's source what to count,
// and mark its reopens as breaks of the main subscription's streams, for
// the watermark's startup guard (watermark.Config.MainStreams).
func (a *App) watchdogHooks(m *metrics.Pipeline) source.WatchdogHooks {
	return source.WatchdogHooks{Reopened: m.StreamReopens.Inc, Streams: a.streams}
}

// Status returns the status of every pipeline.
func (a *App) Status() any {
	out := struct {
		Pipelines []pipeline.Status `json:"pipelines"`
		Reprocess *reprocessStatus  `json:"reprocess,omitempty"`
		Audit     *auditStatus      `json:"audit,omitempty"`
	}{}
	for _, p := range a.Pipelines() {
		out.Pipelines = append(out.Pipelines, p.Status())
	}
	if r := a.opts.reprocess; r != nil {
		out.Reprocess = r.status()
	}
	if r := a.opts.audit; r != nil {
		out.Audit = r.status()
	}
	return out
}

// Run runs every pipeline until ctx ends (SIGTERM, SIGINT), then stops them
// gracefully, and returns nil after a clean stop. The order of a stop:
//
//  1. ctx ends: every source stops pulling; messages in flight go on.
//  2. In-flight messages finish (batches flush on their timer) and are
//     acked. Those still unfinished when shutdown_timeout runs out see their
//     work context end and are nacked, for Pub/Sub to redeliver.
//  3. The pipelines close their parts (sink, dedupe catalog, dead-letter
//     output, watermark tracker, then the membership, whose cell goes) within
//     what is left of shutdown_timeout.
//  4. The HTTP server stops last, so that probes and metrics stay visible
//     while draining; then the clients close.
//
// If a pipeline fails, every other one is stopped the same way and Run
// returns the failure.
func (a *App) Run(ctx context.Context) error {
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()

	// The work context outlives runCtx by shutdown_timeout.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var deadline time.Time
	var once sync.Once
	stopWork := func() {
		once.Do(func() {
			deadline = time.Now().Add(a.cfg.ShutdownTimeout)
			time.AfterFunc(a.cfg.ShutdownTimeout, cancelWork)
		})
	}
	go func() { <-runCtx.Done(); stopWork() }()
	a.page.start() // stopped with the server (stopServer), so that the page's charts go on through the drain

	var g errgroup.Group
	for _, p := range a.pipelines {
		g.Go(func() error {
			err := p.Run(runCtx, workCtx)
			if err != nil {
				a.log.Error("pipeline failed; stopping all", zap.String("pipeline", p.Name()), zap.Error(err))
				stopAll()
			}
			return err
		})
	}
	runErr := g.Wait()
	stopWork()
	a.log.Info("pipelines stopped receiving; closing")

	closeCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	for _, p := range a.pipelines {
		// A part cut short here had its messages nacked already (their work
		// context ended first), so nothing is lost: the stop is still clean
		// and exits 0, as docs/reference.md says; the log says what was cut short.
		if err := p.Close(closeCtx); err != nil {
			a.log.Error("closing the pipeline was cut short", zap.String("pipeline", p.Name()), zap.Error(err))
		}
	}
	a.stopServer()
	a.closeClients()
	return runErr
}

func (a *App) closeClients() {
	if a.pubsub != nil && a.ownPubSub {
		a.pubsub.Close()
	}
	if a.schemaClient != nil {
		a.schemaClient.Close()
	}
	for _, c := range a.bigtables {
		c.Close()
	}
}

// listenError is the failure to serve HTTP on addr. A command that ends by
// itself (reprocess, audit: job) often runs on the host of a live process,
// which holds http.addr: its error names the flag that gives it another.
func listenError(addr string, err error, job bool) error {
	if job && errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("http.addr %s: %w: another process serves it (a live pipeline on this host?): "+
			"give this command its own address with --http-addr ADDR, or serve none with --http-addr -", addr, err)
	}
	return fmt.Errorf("http.addr %s: %w", addr, err)
}
