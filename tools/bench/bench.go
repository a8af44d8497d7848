package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

const (
	project  = "bench"
	instance = "bench"
	// pipelineName is the pipeline of every connector: the label the bench
	// scrapes.
	pipelineName = "bench"
)

// kind is a connector under test.
type kind string

const (
	// minimal is the honest baseline: the simplest at-least-once connector
	// on the Google client libraries, nothing of pubsink (minimal.go).
	minimal kind = "minimal"
	// naive is minimal with what it keeps of pubsink to be scraped like
	// it: the metrics registry and server, the Bigtable interceptor
	// (naive.go).
	naive       kind = "naive"
	atLeastOnce kind = "at_least_once"
	exactlyOnce kind = "exactly_once"
	// exactlyOnceNoTracking is exactly_once without the tracking
	// subscription (no watermark): it separates the cost of dedupe from
	// the cost of reading every message a second time.
	exactlyOnceNoTracking kind = "exactly_once_no_tracking"
	// exactlyOnceShared is exactly_once_no_tracking run by -replicas
	// processes at once on one subscription and state table: dedupe in
	// shared mode, a conditional claim per new key.
	exactlyOnceShared kind = "exactly_once_shared"
	// exactlyOnceSharedTracking is exactlyOnceShared with the tracking
	// subscription: one process leads the watermark, the others report
	// every message they finish to it.
	exactlyOnceSharedTracking kind = "exactly_once_shared_tracking"
	// exactlyOnceBaseline is exactly_once run by the -baseline binary: an
	// earlier version, measured in the same rounds as this one.
	exactlyOnceBaseline kind = "exactly_once_baseline"
	// reprocessRun drains the backlog with `pubsink reprocess`: the
	// pipeline of exactly_once_no_tracking on a subscription of its own,
	// seeked back over the backlog, behind its gate, in its own dedupe
	// scope.
	reprocessRun kind = "reprocess"
	// besideReprocess is exactly_once (the live pipeline, with its
	// tracking subscription) draining the backlog while a reprocess of the
	// same backlog runs beside it, on the same emulators: the measured
	// commits and rate are the live process's.
	besideReprocess kind = "exactly_once_beside_reprocess"
	// The changes_* connectors are exactly_once (with its tracking
	// subscription) whose mapping is a change mapping: each row applied
	// by its event time with a conditional mutation (CheckAndMutateRow)
	// that checks the row's tombstones, not batched.
	changesUpsert  kind = "changes_upsert"  // op: set (write_mode upsert)
	changesDelete  kind = "changes_delete"  // op: delete, every message its row's delete
	changesInsert  kind = "changes_insert"  // write_mode: insert
	changesReplace kind = "changes_replace" // write_mode: replace_if_newer
)

// own reports whether connector k is one of this binary's (minimal, naive),
// not pubsink: it writes one row of the raw payload, whatever the payload.
func (k kind) own() bool {
	b := k.base()
	return b == minimal || b == naive
}

// change reports whether connector k writes through a change mapping.
func (k kind) change() bool {
	switch k.base() {
	case changesUpsert, changesDelete, changesInsert, changesReplace:
		return true
	}
	return false
}

// reprocessIdle is the bench's reprocess --idle: the run ends that long
// after its last message.
const reprocessIdle = "3s"

// shared reports whether connector k runs as -replicas processes.
func (k kind) shared() bool {
	b := k.base()
	return b == exactlyOnceShared || b == exactlyOnceSharedTracking
}

// procs is how many processes run connector k at once.
func (b *bench) procs(k kind) int {
	if k.shared() {
		return b.o.replicas
	}
	if k.base() == besideReprocess {
		return 2 // the live process, then the reprocess
	}
	return 1
}

// procTag tells apart the files of process i of procs: "" for a process
// alone, else ".p1", ".p2", ...
func procTag(i, procs int) string {
	if procs == 1 {
		return ""
	}
	return fmt.Sprintf(".p%d", i+1)
}

// Batching and flow control that every connector gets: pubsink's defaults.
const (
	batchMessages   = 500
	batchBytes      = 4 << 20
	batchDelayMS    = 20
	flushesInFlight = 4 // internal/batch's DefaultMaxInFlight
	maxOutstanding  = 1000
)

// bench is one invocation: the emulators, clients on them, the binaries.
type bench struct {
	o       options
	dir     string // configs and logs
	tempDir bool   // dir is ours to remove
	self    string // this binary, for `bench minimal`, `bench naive` and `bench inproc`
	pubsink string // the pubsink binary

	ps     *emulator.PubSub
	bt     *emulator.Bigtable
	pubsub *pubsub.Client
	data   *bigtable.Client
	admin  *bigtable.AdminClient
	seq    int // runs so far, for fresh names
	codecs *codecs
	// n is how many messages the run being published has, and epoch
	// (Unix ms) its start: what a _shuffled run's keys and event times
	// are computed from (message).
	n     int
	epoch int64
}

// newBench builds pubsink and starts the emulators. Call close.
func newBench(ctx context.Context, o options) (_ *bench, err error) {
	b := &bench{o: o, dir: o.logDir}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "pubsink-bench-"); err != nil {
			return nil, err
		}
		b.tempDir = true
	} else if err = os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, err
	}
	if b.codecs, err = newCodecs(ctx, b.dir); err != nil {
		return nil, err
	}
	for _, k := range o.connectors {
		if _, err := b.message(0, o.shapes[k]); err != nil {
			return nil, err
		}
	}
	if b.self, err = os.Executable(); err != nil {
		return nil, err
	}
	b.pubsink = o.pubsink
	if b.pubsink == "" {
		b.pubsink = filepath.Join(b.dir, "pubsink")
		build := exec.CommandContext(ctx, "go", "build", "-o", b.pubsink, "github.com/pubsink/pubsink")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building pubsink (run the bench from the module, or pass -pubsink): %w", err)
		}
	}
	eo := emulator.Options{}
	if !b.tempDir {
		eo.LogDir = b.dir
	}
	if b.ps, err = emulator.StartPubSub(ctx, eo); err != nil {
		return nil, err
	}
	if b.bt, err = emulator.StartBigtable(ctx, eo); err != nil {
		return nil, err
	}
	if b.pubsub, err = b.ps.Client(ctx, project); err != nil {
		return nil, err
	}
	if b.data, b.admin, err = b.bt.Clients(ctx, project, instance); err != nil {
		return nil, err
	}
	return b, nil
}

// close stops the emulators and removes what the bench created.
func (b *bench) close() {
	if b.pubsub != nil {
		b.pubsub.Close()
	}
	if b.data != nil {
		b.data.Close()
	}
	if b.admin != nil {
		b.admin.Close()
	}
	if b.ps != nil {
		b.ps.Stop()
	}
	if b.bt != nil {
		b.bt.Stop()
	}
	if b.tempDir {
		os.RemoveAll(b.dir)
	}
}

// env is the environment of a child: this one's, pointed at the emulators.
func (b *bench) env() []string {
	env := append(os.Environ(), b.ps.Env()...)
	return append(env, b.bt.Env()...)
}

// names are the fresh resources of one run.
type names struct {
	suffix                             string
	topic, sub, tracking, table, state string
}

func (b *bench) names(k kind, round int) names {
	b.seq++
	s := fmt.Sprintf("%s-r%d-%d", strings.ReplaceAll(string(k), "_", "-"), round, b.seq)
	if len("state-"+s) > 50 { // a Bigtable table ID's limit
		s = strings.NewReplacer("exactly-once", "eo", "at-least-once", "alo", "tracking", "tr", "protobuf", "pb",
			"changes", "ch", "shuffled", "sh", "ordered-keys", "ok").Replace(s)
	}
	n := names{suffix: s, topic: "t-" + s, sub: "s-" + s, table: "rows-" + s, state: "state-" + s}
	if base := k.base(); base == exactlyOnce || base == exactlyOnceSharedTracking || base == exactlyOnceBaseline || base == besideReprocess || k.change() {
		n.tracking = "tr-" + s
	}
	return n
}

// configYAML is the pubsink configuration of a run. For the bench's own
// connectors (minimal, naive) it only serves setup.
func (b *bench) configYAML(k kind, n names, httpAddr string) string {
	mode := "exactly_once"
	if k.own() || k.base() == atLeastOnce {
		mode = "at_least_once"
	}
	var extra strings.Builder
	if n.tracking != "" {
		fmt.Fprintf(&extra, "      tracking_subscription: %s\n", n.tracking)
	}
	if b.o.streams > 0 {
		fmt.Fprintf(&extra, "      streams: %d\n", b.o.streams)
	}
	if b.o.shapes[k].orderingKeys > 0 {
		// setup creates the subscription with message ordering.
		extra.WriteString("      ordering: true\n")
	}
	if base := k.base(); base == reprocessRun || base == besideReprocess {
		// setup creates the topic retaining its messages, so that the
		// reprocess can seek back over the backlog.
		extra.WriteString("      topic_message_retention: 1h\n")
	}
	// Every other setting is pubsink's default: max_outstanding_messages
	// 1000, batch 500 rows / 4 MiB / 20 ms, row key {attributes.id}, one
	// column data: {data} (but with the four-field mapping of -fields, a
	// change mapping's op or write mode, _shuffled's row key), cell
	// timestamp = event time; a change mapping's tombstone family and
	// retention too (setup creates the family).
	payload, mapping := b.o.shapes[k].pipelineYAML(b.codecs)
	return fmt.Sprintf(`project: %s
log: {level: info, format: json}
http: {addr: %q}
state: {instance: %s, table: %s}
pipelines:
  - name: %s
    mode: %s
    source:
      topic: %s
      subscription: %s
      id_attribute: id
      timestamp_attribute: ts
%s%s    sink:
      table: %s
%s`, project, httpAddr, instance, n.state, pipelineName, mode, n.topic, n.sub, extra.String(), payload, n.table, mapping)
}

// setUp writes the configuration of each process of a run, one per
// address (identical but for http.addr), and creates the run's topic,
// subscriptions and tables, once.
func (b *bench) setUp(ctx context.Context, k kind, n names, addrs []string) ([]string, error) {
	paths := make([]string, len(addrs))
	for i, addr := range addrs {
		paths[i] = filepath.Join(b.dir, n.suffix+procTag(i, len(addrs))+".yaml")
		if err := os.WriteFile(paths[i], []byte(b.configYAML(k, n, addr)), 0o644); err != nil {
			return nil, err
		}
	}
	cfg, err := config.Load(paths[0])
	if err != nil {
		return nil, err
	}
	admin := func(ctx context.Context, inst string) (*bigtable.AdminClient, error) {
		data, admin, err := b.bt.Clients(ctx, project, inst)
		if data != nil {
			data.Close()
		}
		return admin, err
	}
	if err := app.Setup(ctx, cfg, b.pubsub, admin, io.Discard); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	return paths, nil
}

// tearDown deletes what setUp created, so the emulators do not grow from
// run to run.
func (b *bench) tearDown(ctx context.Context, n names) error {
	var errs []error
	for _, s := range []string{n.sub, n.tracking} {
		if s == "" {
			continue
		}
		err := b.pubsub.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{
			Subscription: "projects/" + project + "/subscriptions/" + s})
		errs = append(errs, err)
	}
	err := b.pubsub.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: "projects/" + project + "/topics/" + n.topic})
	errs = append(errs, err)
	tables, err := b.admin.Tables(ctx)
	errs = append(errs, err)
	for _, t := range tables {
		if t == n.table || t == n.state {
			errs = append(errs, b.admin.DeleteTable(ctx, t))
		}
	}
	return errors.Join(errs...)
}

// countRows counts the rows of a table.
func (b *bench) countRows(ctx context.Context, table string) (int, error) {
	n := 0
	err := b.data.Open(table).ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool {
		n++
		return true
	}, keysOnly)
	return n, err
}

// freeAddrs picks n free local addresses, distinct: each is held until all
// are picked.
func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs, nil
}
