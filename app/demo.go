package app

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/pipeline"
)

//go:embed demo.yaml
var demoYAML []byte

// DemoOptions tune a demo run.
type DemoOptions struct {
	Messages int           // sensor readings before duplicates and poison; 0 → 3000
	Timeout  time.Duration // give up after this long; 0 → 2 minutes
	Dir      string        // where the dead-letter file goes; "" → a new temp dir
	Seed     uint64
	// LogLevel, if set (debug, info, warn, error), logs the pipeline's
	// work to Logs in the console format; "" logs nothing.
	LogLevel string
	Logs     io.Writer
}

// Demo starts an in-process Pub/Sub fake and Bigtable emulator on loopback,
// sets up the demo pipeline, publishes the sample stream, runs pubsink on it
// until every message reached its outcome, and prints a summary to out.
func Demo(ctx context.Context, out io.Writer, opts DemoOptions) error {
	log := zap.NewNop()
	if opts.LogLevel != "" {
		var err error
		if log, err = logging.New(opts.LogLevel, "console", opts.Logs); err != nil {
			return &ConfigError{fmt.Errorf("demo --log-level: %w", err)}
		}
		defer log.Sync()
	}
	if opts.Messages <= 0 {
		opts.Messages = 3000
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "pubsink-demo-")
		if err != nil {
			return err
		}
		opts.Dir = dir
	}
	cfg, err := config.Parse(demoYAML)
	if err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	cfg.Pipelines[0].DeadLetter.File = filepath.Join(opts.Dir, "dead-letter.jsonl")
	pc := cfg.Pipelines[0]

	// The in-process backends.
	fakes, err := fake.Start()
	if err != nil {
		return err
	}
	defer fakes.Close()
	ps, err := fakes.PubSubClient(ctx, cfg.Project)
	if err != nil {
		return err
	}
	defer ps.Close()
	openBigtable := func(ctx context.Context, instance string) (*bigtable.Client, error) {
		return fakes.BigtableClient(ctx, cfg.Project, instance)
	}
	admin := func(ctx context.Context, instance string) (*bigtable.AdminClient, error) {
		return fakes.BigtableAdmin(ctx, cfg.Project, instance)
	}

	fmt.Fprintf(out, "pubsink demo: an in-process Pub/Sub fake (pstest) and Bigtable emulator (bttest) on loopback\n\n")
	if err := Setup(ctx, cfg, ps, admin, io.Discard); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	stream := sampleStream(opts.Messages, time.Now(), opts.Seed)
	publish(fakes.PubSub, cfg.TopicName(pc.Source.Topic), stream)
	expect := tally(stream)
	fmt.Fprintf(out, "published %d messages to %s: %d readings from 12 sensors, %d duplicates (a publisher's retries), %d heartbeats, %d poison\n",
		len(stream), pc.Source.Topic, expect["reading"], expect["duplicate"], expect["filtered"], len(stream)-expect["reading"]-expect["duplicate"]-expect["filtered"])

	a, err := Open(ctx, log, cfg, Options{PubSub: ps, Bigtable: openBigtable})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pubsink is draining subscription %s into table %s (live: http://%s/status)\n\n", pc.Source.Subscription, pc.Sink.Table, a.Addr())

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- a.Run(runCtx) }()
	p := a.Pipelines()[0]
	st, drainErr := waitDrained(ctx, p, len(stream), opts.Timeout, done)
	elapsed := time.Since(start)
	if drainErr == nil {
		fmt.Fprintf(out, "drained in %v; waiting for the watermark to catch up with the idle topic...\n\n", elapsed.Round(10*time.Millisecond))
		waitWatermark(ctx, p, pc.Watermark.EstimationBand+5*time.Second, 20*time.Second)
	}
	stop()
	if err := <-done; err != nil && drainErr == nil {
		drainErr = fmt.Errorf("pubsink: %w", err)
	}
	if drainErr != nil {
		return drainErr
	}
	st = p.Status() // final, after the stop

	bt, err := openBigtable(ctx, pc.Sink.Instance)
	if err != nil {
		return err
	}
	defer bt.Close()
	return summarize(ctx, out, st, expect, elapsed, bt.Open(pc.Sink.Table), pc, cfg.Pipelines[0].DeadLetter.File)
}

// waitWatermark waits until the watermark is within lag of now, or for at
// most timeout: once the topic is idle it advances to about now - band.
func waitWatermark(ctx context.Context, p *pipeline.Pipeline, lag, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if st := p.Status(); st.WatermarkLagSeconds != nil && *st.WatermarkLagSeconds < lag.Seconds() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitDrained waits until every published message reached an outcome and
// nothing is in flight.
func waitDrained(ctx context.Context, p *pipeline.Pipeline, published int, timeout time.Duration, done <-chan error) (pipeline.Status, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st := p.Status()
		if finished(st) >= int64(published) && st.InFlight == 0 {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case err := <-done:
			return st, fmt.Errorf("pubsink stopped before draining: %v", err)
		case <-deadline.C:
			return st, fmt.Errorf("not drained after %v: %d of %d messages finished", timeout, finished(st), published)
		case <-tick.C:
		}
	}
}

func finished(st pipeline.Status) int64 {
	n := st.Committed + st.Duplicate + st.Dropped + st.Filtered
	for _, c := range st.DeadLettered {
		n += c
	}
	return n
}

func tally(stream []reading) map[string]int {
	t := map[string]int{}
	for _, r := range stream {
		t[r.kind]++
	}
	return t
}

// publish puts the stream on the fake topic, each message with its own
// publish time, as if it had been published live over the last minutes.
func publish(srv *pstest.Server, topic string, stream []reading) {
	var at time.Time
	srv.SetTimeNowFunc(func() time.Time { return at })
	for _, r := range stream {
		at = r.publishAt
		srv.Publish(topic, r.data, r.attrs)
	}
	srv.SetTimeNowFunc(time.Now)
}

func summarize(ctx context.Context, out io.Writer, st pipeline.Status, expect map[string]int, elapsed time.Duration, tbl *bigtable.Table, pc config.Pipeline, dlFile string) error {
	var rows []bigtable.Row
	count := 0
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		if count%400 == 0 && len(rows) < 6 {
			rows = append(rows, r)
		}
		count++
		return true
	})
	if err != nil {
		return fmt.Errorf("read table %s: %w", pc.Sink.Table, err)
	}

	var dl []string
	for _, reason := range slices.Sorted(maps.Keys(st.DeadLettered)) {
		if c := st.DeadLettered[reason]; c > 0 {
			dl = append(dl, fmt.Sprintf("%s %d", reason, c))
		}
	}
	var deadLettered int64
	for _, c := range st.DeadLettered {
		deadLettered += c
	}

	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "outcome\tmessages\t\n")
	fmt.Fprintf(w, "received\t%d\t(redeliveries included)\n", st.Received)
	fmt.Fprintf(w, "committed\t%d\trows in table %s: %d\n", st.Committed, pc.Sink.Table, count)
	fmt.Fprintf(w, "duplicate\t%d\tsame reading_id, new message ID: acked, not written\n", st.Duplicate)
	fmt.Fprintf(w, "filtered\t%d\theartbeats: the filter said no, acked, not written\n", st.Filtered)
	fmt.Fprintf(w, "dead-lettered\t%d\t%s\n", deadLettered, strings.Join(dl, ", "))
	if st.Late > 0 {
		fmt.Fprintf(w, "late\t%d\t\n", st.Late)
	}
	fmt.Fprintf(w, "retried\t%d\tnacked for redelivery\n", st.Retried)
	w.Flush()
	fmt.Fprintln(out)
	if st.Watermark != nil {
		fmt.Fprintf(out, "watermark     %s (%.1fs behind now; estimation band %v)\n", st.Watermark.Format("2006-01-02T15:04:05.000Z07:00"), *st.WatermarkLagSeconds, pc.Watermark.EstimationBand)
	}
	fmt.Fprintf(out, "dead letters  %s\n", dlFile)
	fmt.Fprintf(out, "throughput    %.0f msg/s (the in-process Pub/Sub fake hands out ~100 msg/s per stream: it is the bottleneck)\n\n", float64(st.Received)/elapsed.Seconds())

	fmt.Fprintf(out, "sample rows of %s (row key %s):\n", pc.Sink.Table, pc.Sink.RowKey)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "row key\ttemperature_c\ttemperature_f\thumidity_pct\tcell time\t\n")
	for _, r := range rows {
		cells := map[string]bigtable.ReadItem{}
		for _, items := range r {
			for _, it := range items {
				cells[it.Column[strings.IndexByte(it.Column, ':')+1:]] = it
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t\n", r.Key(), cells["temperature_c"].Value, cells["temperature_f"].Value, cells["humidity_pct"].Value,
			cells["temperature_c"].Timestamp.Time().UTC().Format("2006-01-02 15:04:05.000"))
	}
	w.Flush()

	// The demo checks itself: the summary is only worth printing if true.
	var problems []string
	if int(st.Committed) < expect["reading"] || count != expect["reading"] {
		problems = append(problems, fmt.Sprintf("%d readings published, %d committed, %d rows", expect["reading"], st.Committed, count))
	}
	if st.Filtered != int64(expect["filtered"]) {
		problems = append(problems, fmt.Sprintf("%d heartbeats published, %d filtered", expect["filtered"], st.Filtered))
	}
	for _, reason := range []string{"invalid_payload", "missing_field", "bad_event_time"} {
		if st.DeadLettered[reason] != int64(expect[reason]) {
			problems = append(problems, fmt.Sprintf("%s: %d published, %d dead-lettered", reason, expect[reason], st.DeadLettered[reason]))
		}
	}
	if len(problems) > 0 {
		return errors.New("demo outcome does not match the stream: " + strings.Join(problems, "; "))
	}
	return nil
}
