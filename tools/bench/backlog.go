package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
)

// messageID is the id attribute (and row key) of message i of a run.
func messageID(i int) string { return fmt.Sprintf("m%09d", i) }

// payload is the JSON payload of message i, padded to about size bytes.
func payload(i int, id string, size int) []byte {
	b := fmt.Appendf(nil, `{"id":%q,"seq":%d,"customer":"c-%05d","amount":%d.%02d,"currency":"EUR","items":%d,"note":"`,
		id, i, i%50_000, i%1000, i%100, 1+i%7)
	for len(b) < size-2 {
		b = append(b, byte('a'+i%26))
	}
	return append(b, `"}`...)
}

// message is message i of a run of a connector of shape sh, as every
// connector reads it: the payload (today's JSON, or the bench's record in
// sh's format), the id attribute (the dedupe key and, but with each or
// _shuffled, the row key) and the event-time attribute ts (now). A
// _shuffled run's messages (of b.n) also carry the row key, attribute key,
// and their event time is the run's epoch (b.epoch) plus shuffledTime;
// with _ordered_keysK they carry an ordering key.
func (b *bench) message(i int, sh shape) (*pubsub.Message, error) {
	id := messageID(i)
	var data []byte
	if sh.fields {
		var err error
		if data, err = b.codecs.encode(newOrder(i, id, b.o.size, sh.elements), sh.format); err != nil {
			return nil, fmt.Errorf("encoding message %d as %s: %w", i, sh.format, err)
		}
	} else {
		data = payload(i, id, b.o.size)
	}
	m := &pubsub.Message{
		Data:        data,
		Attributes:  map[string]string{"id": id, "ts": strconv.FormatInt(time.Now().UnixMilli(), 10)},
		OrderingKey: sh.orderingKey(i, max(1, b.n)),
	}
	if sh.shuffled {
		n := max(1, b.n)
		m.Attributes["key"] = fmt.Sprintf("k%09d", sh.rowKeyIndex(i, n))
		m.Attributes["ts"] = strconv.FormatInt(b.epoch+shuffledTime(i, n), 10)
	}
	return m, nil
}

// mustMessage is message i of shape sh, which newBench checked that it can
// encode.
func (b *bench) mustMessage(i int, sh shape) *pubsub.Message {
	m, err := b.message(i, sh)
	if err != nil {
		panic(err)
	}
	return m
}

// keysOnly reads rows as cheaply as the emulator allows: one cell, no value.
var keysOnly = bigtable.RowFilter(bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter()))

// preload publishes n messages of shape sh to topic and returns, for every
// every-th message, the time its publish call returned (a bound on its
// publish time within a few milliseconds), by the key of its sampled row.
// A _shuffled run samples none: its rows are not a message's each.
func (b *bench) preload(ctx context.Context, topic string, sh shape, n, every int) (map[string]time.Time, error) {
	b.n, b.epoch = n, time.Now().UnixMilli()
	pub := b.pubsub.Publisher(topic)
	pub.EnableMessageOrdering = sh.orderingKeys > 0
	pub.PublishSettings.CountThreshold = 1000
	pub.PublishSettings.ByteThreshold = 2 << 20
	pub.PublishSettings.DelayThreshold = 10 * time.Millisecond
	pub.PublishSettings.FlowControlSettings = pubsub.FlowControlSettings{
		MaxOutstandingMessages: 50_000,
		LimitExceededBehavior:  pubsub.FlowControlBlock,
	}
	defer pub.Stop()

	results := make(chan *pubsub.PublishResult, 50_000)
	errc := make(chan error, 1)
	go func() {
		var first error
		for r := range results {
			if _, err := r.Get(ctx); err != nil && first == nil {
				first = err
			}
		}
		errc <- first
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	published := make(map[string]time.Time, n/every+1)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		m, err := b.message(i, sh)
		if err != nil {
			close(results)
			<-errc
			wg.Wait()
			return nil, err
		}
		r := pub.Publish(ctx, m)
		if i%every == 0 && !sh.shuffled {
			id := sh.rowKey(m.Attributes["id"])
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-r.Ready():
				case <-ctx.Done():
					return
				}
				t := time.Now()
				mu.Lock()
				published[id] = t
				mu.Unlock()
			}()
		}
		results <- r
	}
	close(results)
	wg.Wait()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return published, ctx.Err()
}

// sampler finds when sampled rows appear in the sink table.
type sampler struct {
	table     *bigtable.Table
	published map[string]time.Time // read-only

	mu      sync.Mutex
	latency map[string]time.Duration
	done    chan struct{} // closed once every sampled row was seen
}

func newSampler(table *bigtable.Table, published map[string]time.Time) *sampler {
	return &sampler{table: table, published: published, latency: make(map[string]time.Duration, len(published)), done: make(chan struct{})}
}

// run reads the rows not yet seen every interval until all were seen or
// ctx ends. A row found by a read is taken to have been written halfway
// between the start of the previous read and the start of this one.
func (s *sampler) run(ctx context.Context, interval time.Duration) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	pending := make([]string, 0, len(s.published))
	for k := range s.published {
		pending = append(pending, k)
	}
	slices.Sort(pending)
	var prev time.Time
	for len(pending) > 0 {
		start := time.Now()
		seen := map[string]bool{}
		err := s.table.ReadRows(ctx, bigtable.RowList(pending), func(r bigtable.Row) bool {
			seen[r.Key()] = true
			return true
		}, keysOnly)
		if err == nil && len(seen) > 0 {
			at := start
			if !prev.IsZero() {
				at = prev.Add(start.Sub(prev) / 2)
			}
			s.mu.Lock()
			for k := range seen {
				s.latency[k] = at.Sub(s.published[k])
			}
			s.mu.Unlock()
			pending = slices.DeleteFunc(pending, func(k string) bool { return seen[k] })
		}
		prev = start
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
	close(s.done)
}

// quantiles returns the p50 and p99 of the latencies seen, and how many.
func (s *sampler) quantiles() (p50, p99 time.Duration, n int) {
	s.mu.Lock()
	ls := make([]time.Duration, 0, len(s.latency))
	for _, l := range s.latency {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	p50, p99 = quantiles(ls)
	return p50, p99, len(ls)
}

// quantiles returns the p50 and p99 of ls (which it sorts) by nearest
// rank: the smallest value that at least that share of ls is at or below.
// Both are 0 if ls is empty.
func quantiles(ls []time.Duration) (p50, p99 time.Duration) {
	if len(ls) == 0 {
		return 0, 0
	}
	slices.Sort(ls)
	q := func(pct int) time.Duration {
		rank := (pct*len(ls) + 99) / 100 // ⌈pct% of len(ls)⌉, at least 1
		return ls[rank-1]
	}
	return q(50), q(99)
}
