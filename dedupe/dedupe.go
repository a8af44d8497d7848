package dedupe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/internal/metrics"
)

// Defaults of Config.
const (
	DefaultWindow            = 10 * time.Minute
	DefaultSlices            = 10
	MinSlices                = 6
	DefaultExpectedRate      = 1000
	DefaultFalsePositiveRate = 0.001
)

// minExpectedKeys is the least a slice's first filter is sized for, so that
// a tiny configured rate does not make every slice chain filters at once.
const minExpectedKeys = 1024

// Batching of catalog I/O, at most 4 calls at once, as the sink does.
// Reads are rare (a filter's false positive, or start-up before the
// rebuild): a batch gathers for 2 ms. A write comes with every committed
// message, on the path to its ack, so a write batch does not wait: it goes
// as soon as a call slot is free and gathers only while all 4 are busy,
// which makes batches as large as the load needs (BenchmarkClaimCommit:
// 2 ms of delay costs 4x the throughput for the same handlers).
var (
	readBatch  = batch.Config{MaxItems: 256, MaxDelay: 2 * time.Millisecond, MaxInFlight: 4}
	writeBatch = batch.Config{MaxItems: 1000, MaxBytes: 4 << 20, MaxInFlight: 4}
)

// statsInterval is how often Run refreshes the filter gauges and rotates
// the ring when no message does.
const statsInterval = 10 * time.Second

// Config is the dedupe section of one pipeline. Zero values take the
// defaults above.
type Config struct {
	// Pipeline names the pipeline; its catalog rows start with
	// dedupe#PIPELINE#.
	Pipeline string
	// Table is the state table (state.table), with family k.
	Table string
	// Window is dedupe.window: how long a committed key makes its
	// duplicates duplicates, in processing time.
	Window time.Duration
	// Slices is the number of filters per window (N ≥ MinSlices): a key
	// leaves the filters between Window and Window·(N+1)/N after its
	// commit, and the filters cost (N+1)/N of the window's keys.
	Slices int
	// ExpectedRate is the expected rate of new keys per second, which
	// sizes the first filter of each slice. A slice that takes more chains
	// another filter; the next slice is sized from what the last one took.
	ExpectedRate float64
	// FalsePositiveRate is the target probability that a new key costs a
	// catalog read (all live filters together).
	FalsePositiveRate float64
	// Metrics receives the lookups and filter gauges; nil: a private set.
	Metrics *metrics.Pipeline
	// Now is the processing-time clock; nil: time.Now. Tests set a fake.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	switch {
	case c.Slices == 0:
		c.Slices = DefaultSlices
	case c.Slices < MinSlices:
		c.Slices = MinSlices
	}
	if c.ExpectedRate <= 0 {
		c.ExpectedRate = DefaultExpectedRate
	}
	if c.FalsePositiveRate <= 0 || c.FalsePositiveRate >= 1 {
		c.FalsePositiveRate = DefaultFalsePositiveRate
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New().Pipeline(c.Pipeline)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Keys claims and commits the dedupe keys of one pipeline: a ring of Bloom
// filters in front of the durable catalog. Its methods are safe for
// concurrent use.
type Keys struct {
	cfg    Config
	log    *zap.Logger
	now    func() time.Time
	store  store
	cat    catalog
	reads  *batch.Batcher[string]
	writes *batch.Batcher[record]
	holds  sync.Pool // of *hold: a Claim of a new key allocates nothing

	mu      sync.Mutex
	ring    *ring
	held    map[string]*hold // keys claimed and not yet committed or released
	tokens  uint64           // the last token a hold was given
	rebuilt bool
	rebuild rebuildStats
}

// record is one catalog write.
type record struct {
	id catalogID
	h  hashes
	at bigtable.Timestamp
}

// New returns the dedupe part of a pipeline whose catalog is cfg.Table of
// client's instance. It does no I/O: call Check to verify the table, Run
// to rebuild the filters, and Close to flush. Until Run has rebuilt the
// filters, every Claim reads the catalog.
func New(client *bigtable.Client, log *zap.Logger, cfg Config) *Keys {
	return newKeys(btStore{table: client.Open(cfg.Table)}, log, cfg)
}

func newKeys(s store, log *zap.Logger, cfg Config) *Keys {
	cfg = cfg.withDefaults()
	width := int64(cfg.Window) / int64(cfg.Slices)
	expected := uint(math.Ceil(cfg.ExpectedRate * time.Duration(width).Seconds()))
	d := &Keys{
		cfg:   cfg,
		log:   log.Named("dedupe").With(zap.String("pipeline", cfg.Pipeline)),
		now:   cfg.Now,
		store: s,
		cat:   newCatalog(cfg.Pipeline),
		ring:  newRing(width, cfg.Slices, cfg.FalsePositiveRate, max(expected, minExpectedKeys)),
		held:  make(map[string]*hold),
	}
	d.holds.New = func() any { return new(hold) }
	d.reads = batch.New(readBatch, d.flushReads)
	d.writes = batch.New(writeBatch, d.flushWrites)
	return d
}

// Check returns an error if the catalog's table cannot be read (it does
// not exist: run pubsink setup; or Bigtable is unreachable).
func (d *Keys) Check(ctx context.Context) error {
	if err := d.store.check(ctx); err != nil {
		return fmt.Errorf("dedupe catalog in table %s: %w", d.cfg.Table, err)
	}
	return nil
}

// Claim reports whether key was committed within the window (dup). If it
// was not, the caller holds key until it ends the hold through the returned
// Claim: Commit once the row is durable, or Release. A duplicate or an
// error returns the zero Claim, which holds nothing.
//
// A key that no filter may hold costs no I/O. Otherwise Claim waits for a
// batched catalog read; only a record younger than the window makes dup
// true. While another caller holds key, Claim waits for its outcome: dup if
// it committed, otherwise Claim starts over (and may take the key).
//
// Errors are the catalog's (transient; Claim does not retry them) or
// ctx's when it ends while waiting; the key is not held then.
func (d *Keys) Claim(ctx context.Context, key string) (Claim, bool, error) {
	id := idOf(key)
	h := hashOf(id.id)
	for {
		now := d.now().UnixNano()
		d.mu.Lock()
		if other, ok := d.held[key]; ok {
			w := other.waiters()
			d.mu.Unlock()
			select {
			case <-w.done:
				if w.committed {
					return Claim{}, true, nil
				}
				continue // released: look again
			case <-ctx.Done():
				return Claim{}, false, ctx.Err()
			}
		}
		d.ring.advance(now)
		maybe := !d.rebuilt || d.ring.test(h)
		d.tokens++
		hd := d.holds.Get().(*hold)
		hd.token, hd.id, hd.h = d.tokens, id, h
		d.held[key] = hd
		d.mu.Unlock()
		c := NewClaim(d, key, hd.token)

		if !maybe {
			return c, false, nil
		}
		d.cfg.Metrics.Lookups.Inc()
		err := d.reads.Add(ctx, d.cat.row(id, h), len(d.cat.prefix)+3+len(id.id))
		switch {
		case err == nil:
			return c, false, nil
		case errors.Is(err, errSeen):
			d.end(key, hd.token, true)
			return Claim{}, true, nil
		default:
			d.end(key, hd.token, false)
			if ctx.Err() == nil {
				err = fmt.Errorf("dedupe: read catalog: %w", err)
			}
			return Claim{}, false, err
		}
	}
}

// end ends the hold token on key, if it is still held: its waiters learn
// whether it was committed (then they are duplicates) or released (then
// they look again). It reports whether it ended the hold.
func (d *Keys) end(key string, token uint64, committed bool) bool {
	d.mu.Lock()
	hd, ok := d.held[key]
	if !ok || hd.token != token {
		d.mu.Unlock()
		return false
	}
	delete(d.held, key)
	if w := hd.wait; w != nil {
		w.committed = committed
		close(w.done)
	}
	d.mu.Unlock()
	*hd = hold{}
	d.holds.Put(hd)
	return true
}

// hold is a held key's entry in Keys.held. Holds are recycled once ended:
// a Claim names its hold by key and token, never by pointer, so that a
// Claim used after its hold ended finds nothing instead of another's hold.
type hold struct {
	token uint64
	id    catalogID
	h     hashes
	wait  *waiters // guarded by Keys.mu
}

// waiters is what the Claims waiting for a held key learn of its outcome.
// It is apart from the hold, which is recycled once ended.
type waiters struct {
	done      chan struct{}
	committed bool // set before done is closed
}

// waiters returns hd's waiters, created on first use. Called with Keys.mu.
func (hd *hold) waiters() *waiters {
	if hd.wait == nil {
		hd.wait = &waiters{done: make(chan struct{})}
	}
	return hd.wait
}

// errNotHeld is Commit's error for a hold that had already ended.
var errNotHeld = errors.New("dedupe: commit of a key that is not held (released or committed already)")

// Commit records key in the catalog (a batched write, with the commit time
// as the cell's timestamp), then in the current filter slice, and ends the
// hold token: waiters are duplicates. Call it only once the row is
// durable. If the write fails, the hold stays (waiters keep waiting, so a
// duplicate cannot slip through while the record is missing) and the error
// is returned: call Commit again to retry, or Release to give up. The
// error is the catalog's, or ctx's if it ended first (the record may still
// be written: it is idempotent). A hold that had ended already is an
// error, and nothing is written.
func (d *Keys) Commit(ctx context.Context, key string, token uint64) error {
	d.mu.Lock()
	hd, ok := d.held[key]
	if !ok || hd.token != token {
		d.mu.Unlock()
		return errNotHeld
	}
	id, h := hd.id, hd.h
	d.mu.Unlock()

	now := d.now()
	at := bigtable.Time(now).TruncateToMilliseconds()
	err := d.writes.Add(ctx, record{id: id, h: h, at: at}, len(d.cat.prefix)+3+len(id.id))
	// The filters learn the key even when the write failed: it may have
	// landed (a failed write is ambiguous), and the next Claim of it must
	// then ask the catalog rather than answer new.
	d.mu.Lock()
	d.ring.advance(now.UnixNano())
	d.ring.add(h, now.UnixNano())
	d.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			err = fmt.Errorf("dedupe: record key in catalog: %w", err)
		}
		return err
	}
	d.end(key, token, true)
	return nil
}

// Release ends the hold token on key without a record: a waiter takes the
// key. A hold that had ended already (committed, or released) is left
// alone, so Release is safe to call more than once and after Commit.
func (d *Keys) Release(key string, token uint64) {
	d.end(key, token, false)
}

// flushReads reads one batch of catalog rows. An item's result is nil
// (not committed within the window), errSeen, or the read's error.
func (d *Keys) flushReads(ctx context.Context, rows []string) []error {
	since := bigtable.Time(d.now().Add(-d.cfg.Window)).TruncateToMilliseconds()
	found, err := d.store.read(ctx, rows, since)
	errs := make([]error, len(rows))
	for i := range errs {
		switch {
		case err != nil:
			errs[i] = err
		case found[i]:
			errs[i] = errSeen
		}
	}
	return errs
}

// flushWrites records one batch of committed keys.
func (d *Keys) flushWrites(ctx context.Context, recs []record) []error {
	rows := make([]string, len(recs))
	at := make([]bigtable.Timestamp, len(recs))
	for i, r := range recs {
		rows[i] = d.cat.row(r.id, r.h)
		at[i] = r.at
	}
	errs, err := d.store.write(ctx, rows, at)
	if err != nil {
		errs = make([]error, len(recs))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// Run rebuilds the filters from the catalog, then rotates them and
// refreshes the gauges until ctx ends; it returns nil then. Claims are
// answered meanwhile, from the catalog until the rebuild is done. A failed
// scan is retried (with backoff, from where it stopped) until ctx ends.
// Call Run once.
func (d *Keys) Run(ctx context.Context) error {
	d.rebuildFilters(ctx)
	d.refresh()
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.refresh()
		}
	}
}

// refresh rotates the ring to the current time and updates the gauges.
func (d *Keys) refresh() {
	d.mu.Lock()
	d.ring.advance(d.now().UnixNano())
	st := d.ring.stats()
	d.mu.Unlock()
	d.cfg.Metrics.FilterFill.Set(st.fill)
	d.cfg.Metrics.FilterFPRate.Set(st.fpRate)
}

// Close waits for the catalog reads and writes in flight and flushes the
// writes still queued. Like net/http's Server.Shutdown it is idempotent
// and bounded by ctx, whose error it returns if cut short (the flushes
// then fail with context.Canceled). Claims after Close fail.
func (d *Keys) Close(ctx context.Context) error {
	return errors.Join(d.writes.Close(ctx), d.reads.Close(ctx))
}

// Stats is the dedupe state shown in /status.
type Stats struct {
	// Rebuilt is false until the filters hold the catalog's keys; until
	// then every lookup reads the catalog.
	Rebuilt bool `json:"rebuilt"`
	// RebuildSeconds and RebuildKeys describe the start-up rebuild.
	RebuildSeconds float64 `json:"rebuild_seconds,omitempty"`
	RebuildKeys    int64   `json:"rebuild_keys,omitempty"`
	WindowSeconds  float64 `json:"window_seconds"`
	// Slices and Filters are the live filter slices and their filters
	// (more than one per slice when a slice took more keys than sized for).
	Slices      int     `json:"slices"`
	Filters     int     `json:"filters"`
	Keys        uint64  `json:"keys"`
	FilterBytes uint64  `json:"filter_bytes"`
	BitsPerKey  float64 `json:"bits_per_key"`
	// FillRatio is the mean fraction of bits set per filter.
	FillRatio float64 `json:"fill_ratio"`
	// EstimatedFalsePositiveRate is the probability, from the filters'
	// fill, that a new key costs a catalog read; at most
	// TargetFalsePositiveRate while the filters are within their sizing.
	EstimatedFalsePositiveRate float64 `json:"estimated_false_positive_rate"`
	TargetFalsePositiveRate    float64 `json:"target_false_positive_rate"`
	// CatalogLookups counts the keys read from the catalog.
	CatalogLookups int64 `json:"catalog_lookups"`
	// KeysInFlight are held by a Claim not yet committed or released.
	KeysInFlight int `json:"keys_in_flight"`
}

// Stats returns the state of the filters. It counts their set bits, about
// a millisecond per 10 MB of filters, holding the lock that Claims take.
func (d *Keys) Stats() Stats {
	d.mu.Lock()
	d.ring.advance(d.now().UnixNano())
	st := d.ring.stats()
	s := Stats{
		Rebuilt:                    d.rebuilt,
		RebuildSeconds:             d.rebuild.took.Seconds(),
		RebuildKeys:                d.rebuild.keys,
		WindowSeconds:              d.cfg.Window.Seconds(),
		Slices:                     st.slices,
		Filters:                    st.filters,
		Keys:                       st.keys,
		FilterBytes:                st.bits / 8,
		FillRatio:                  st.fill,
		EstimatedFalsePositiveRate: st.fpRate,
		TargetFalsePositiveRate:    d.cfg.FalsePositiveRate,
		KeysInFlight:               len(d.held),
	}
	d.mu.Unlock()
	if st.keys > 0 {
		s.BitsPerKey = float64(st.bits) / float64(st.keys)
	}
	s.CatalogLookups = int64(metrics.Value(d.cfg.Metrics.Lookups))
	return s
}
