package dedupe

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/pubsink/pubsink/internal/retry"
)

// rebuildScans is the number of bucket ranges a rebuild scans at once.
// Bigtable serves each range from the tablets that hold it, so parallel
// scans use the whole cluster; eight keeps one process's share modest.
const rebuildScans = 8

// rebuildChunk is the number of scanned keys added to the filters per
// acquisition of the lock that Claims take.
const rebuildChunk = 512

// rebuildStats describes the last rebuild (guarded by Keys.mu).
type rebuildStats struct {
	took time.Duration
	keys int64
	from string // "journal" or "catalog"
}

// journalWait bounds how long Claims wait for a rebuild from the journal
// before they read the catalog instead: 1M keys take about a second.
const journalWait = 10 * time.Second

// gate is closed once, when what it waits for is done.
type gate struct {
	done chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{done: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.done) }) }

// waiting reports whether the gate is still closed.
func (g *gate) waiting() bool {
	select {
	case <-g.done:
		return false
	default:
		return true
	}
}

// rebuildFilters adds to the filters every key of the pipeline's catalog
// claimed or committed within the window, and then lets Claims trust the
// filters. When the journal is trusted (journalTrusted) it reads the
// journal rows of the window, and Claims that would use the filters wait
// for it (up to journalWait); otherwise it scans rebuildScans bucket ranges
// of the catalog in parallel, and Claims meanwhile read the catalog. A
// failed read is retried, with backoff, until ctx ends; then the filters
// stay untrusted and every Claim keeps reading the catalog.
//
// Keys committed by this process during the rebuild go into the filters
// through Commit as usual, so the filters miss nothing once it ends. Keys
// committed meanwhile by another process are not seen: the filters answer
// only for the membership epoch in which the rebuild began (a process that
// has seen others since rebuilds again once it is alone), and claims made
// while not alone do not use them at all.
func (d *Keys) rebuildFilters(ctx context.Context) {
	d.mu.Lock()
	d.rebuilt, d.rebuilding = false, true
	d.rebuiltEpoch = d.cfg.Members.View().AloneEpoch
	d.mu.Unlock()
	var g *gate
	defer func() {
		d.mu.Lock()
		d.rebuilding = false
		d.waitRebuild = nil
		d.mu.Unlock()
		if g != nil {
			g.open()
		}
	}()
	start := time.Now()
	since := bigtable.Time(d.now().Add(-d.cfg.Window)).TruncateToMilliseconds()
	var trusted bool
	why := ""
	err := retry.Default.Do(ctx, func(error) bool { return ctx.Err() == nil }, func() (err error) {
		trusted, why, err = d.journalTrusted(ctx)
		return err
	}, nil)
	if err != nil {
		d.log.Warn("filter rebuild stopped; every lookup keeps reading the catalog", zap.Error(err))
		return
	}
	var keys int64
	from := "journal"
	if trusted {
		g = newGate()
		d.mu.Lock()
		d.waitRebuild = g
		d.mu.Unlock()
		t := time.AfterFunc(journalWait, g.open)
		defer t.Stop()
		err = retry.Default.Do(ctx, func(error) bool { return ctx.Err() == nil }, func() (err error) {
			keys, err = d.rebuildFromJournal(ctx, since)
			return err
		}, func(n int, err error) {
			if n == 1 || n%10 == 0 {
				d.log.Warn("journal read failed; retrying", zap.Int("attempt", n), zap.Error(err))
			}
		})
	} else {
		from = "catalog"
		d.log.Info("rebuilding the dedupe filters from a scan of the catalog", zap.String("why", why))
		var n atomic.Int64
		eg, gctx := errgroup.WithContext(ctx)
		for _, rng := range d.cat.ranges(rebuildScans) {
			eg.Go(func() error { return d.scanRange(gctx, rng, since, &n) })
		}
		err = eg.Wait()
		keys = n.Load()
	}
	if err != nil {
		d.log.Warn("filter rebuild stopped; every lookup keeps reading the catalog", zap.Error(err))
		return
	}
	took := time.Since(start)
	d.mu.Lock()
	d.rebuilt = true
	d.rebuild = rebuildStats{took: took, keys: keys, from: from}
	d.mu.Unlock()
	d.log.Info("dedupe filters rebuilt",
		zap.String("from", from), zap.Int64("keys", keys), zap.Duration("took", took), zap.Duration("window", d.cfg.Window))
}

// filterAdder adds rebuilt keys to the filters rebuildChunk at a time,
// so that Claims are not kept from the lock for long. Both rebuilds use
// it: the scan of the catalog and the read of the journal.
type filterAdder struct {
	d       *Keys
	pending []rebuiltKey
	added   int64
}

// rebuiltKey is a key's hashes and the time of its claim or record.
type rebuiltKey struct {
	h  hashes
	ns int64
}

func (d *Keys) newFilterAdder() *filterAdder {
	return &filterAdder{d: d, pending: make([]rebuiltKey, 0, rebuildChunk)}
}

// add queues h at time ns, adding the chunk once full.
func (a *filterAdder) add(h hashes, ns int64) {
	a.pending = append(a.pending, rebuiltKey{h, ns})
	if len(a.pending) == rebuildChunk {
		a.flush()
	}
}

// flush adds what is queued.
func (a *filterAdder) flush() {
	if len(a.pending) == 0 {
		return
	}
	d := a.d
	d.mu.Lock()
	d.ring.advance(d.now().UnixNano())
	for _, e := range a.pending {
		d.ring.add(e.h, e.ns)
	}
	d.mu.Unlock()
	a.added += int64(len(a.pending))
	a.pending = a.pending[:0]
}

// scanRange adds the keys of one bucket range to the filters.
func (d *Keys) scanRange(ctx context.Context, rng keyRange, since bigtable.Timestamp, keys *atomic.Int64) error {
	a := d.newFilterAdder()
	last := ""
	err := retry.Default.Do(ctx, func(error) bool { return ctx.Err() == nil }, func() error {
		r := bigtable.NewRange(rng.start, rng.end)
		if last != "" {
			r = bigtable.NewRange(last+"\x00", rng.end) // the smallest key after last
		}
		return d.store.scan(ctx, r, since, func(row string, at bigtable.Timestamp) bool {
			last = row
			if id, ok := d.cat.parse(row); ok {
				a.add(hashOf(id), at.Time().UnixNano())
			}
			return true
		})
	}, func(n int, err error) {
		if n == 1 || n%10 == 0 {
			d.log.Warn("catalog scan failed; retrying", zap.String("from", last), zap.Int("attempt", n), zap.Error(err))
		}
	})
	a.flush()
	keys.Add(a.added)
	return err
}
