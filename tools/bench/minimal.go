package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
)

// runMinimal is `bench minimal`: the honest baseline, the simplest correct
// at-least-once connector one would write with the Google client libraries
// and nothing of pubsink. A Pub/Sub v2 subscriber (the same streams and
// flow control as the naive connector) hands each message's row to the
// writer that naive uses (500 rows, 4 MiB or 20 ms a call, at most four
// ApplyBulk calls in flight); the callback waits for its row's batch and
// acks the message, or nacks it if the batch failed. Its Bigtable client is
// a plain bigtable.NewClient: no interceptor. No metrics registry: the
// bench reads it from one hand-written handler (minimalCounts).
//
// What it has less than naive is what the naive connector keeps of pubsink
// to be scraped like it: internal/metrics' registry (with the Go and
// process collectors, served gzipped by promhttp through internal/server),
// the commit-latency histogram observed per message, and the gRPC
// interceptor that counts the writes.
func runMinimal(args []string) int { return runBaseline("minimal", args, minimalRun) }

func minimalRun(ctx context.Context, proj, sub, inst, table, family string, streams int, addr string) error {
	ps, err := pubsub.NewClient(context.WithoutCancel(ctx), proj)
	if err != nil {
		return err
	}
	defer ps.Close()
	bt, err := bigtable.NewClient(context.WithoutCancel(ctx), proj, inst)
	if err != nil {
		return err
	}
	defer bt.Close()

	counts := &minimalCounts{table: table}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: counts.mux(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	w := &writer{table: bt.Open(table), in: make(chan *row), slots: make(chan struct{}, flushesInFlight),
		sent: func(rows int) { counts.mutations.Add(int64(rows)) }}
	return receiveRows(ctx, ps.Subscriber(sub), streams, family, w, func(msg *pubsub.Message) {
		msg.Ack()
		counts.committed.Add(1)
	})
}

// minimalCounts are the minimal connector's two counters, served as the
// Prometheus text of the two series the bench reads: the messages acked
// after their write (pubsink_messages_committed_total of the bench's
// pipeline) and the rows sent to ApplyBulk, counted as each call is made
// (pubsink_bigtable_mutations_total of the sink table, call mutate_rows;
// unlike pubsink's interceptor, a call the client retries counts its rows
// once).
type minimalCounts struct {
	table     string // the sink table's ID
	committed atomic.Int64
	mutations atomic.Int64
}

// mux serves the counters at GET /metrics, and nothing else.
func (c *minimalCounts) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "pubsink_messages_committed_total{pipeline=\"%s\"} %d\n", pipelineName, c.committed.Load())
		fmt.Fprintf(w, "pubsink_bigtable_mutations_total{table=\"%s\",call=\"mutate_rows\"} %d\n", c.table, c.mutations.Load())
	})
	return mux
}
