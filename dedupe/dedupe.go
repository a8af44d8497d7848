package dedupe

// Keys, the dedupe of one pipeline: its Config, its construction (New),
// the filters-only lookup (Check), Close and the figures of /status (Stats).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/warm"
	"github.com/pubsink/pubsink/members"
)

// Defaults of Config.
const (
	DefaultWindow            = 10 * time.Minute
	DefaultSlices            = 10
	MinSlices                = 6
	DefaultExpectedRate      = 1000
	DefaultFalsePositiveRate = 0.001
	// DefaultClaimDelay is Config.ClaimDelay's default: a quarter of the
	// sink's default batch delay (20 ms), so that the claims of a batch of
	// rows are durable well before the batch goes.
	DefaultClaimDelay = 5 * time.Millisecond
)

// minExpectedKeys is the least a slice's first filter is sized for, so that
// a tiny configured rate does not make every slice chain filters at once.
const minExpectedKeys = 1024

// Batching of catalog I/O, at most 4 calls at once, as the sink does.
// Reads are rare (a filter's false positive, or start-up before the
// rebuild): a batch gathers for 2 ms. A write comes with every new key
// twice (its claim, then its record), on the path to the ack, so a write
// batch gathers for only 1 ms, and then goes as soon as a call slot is
// free, growing while all 4 are busy. Without the millisecond a batch
// went at once, mostly a handful of cells per ApplyBulk: measured with
// BenchmarkClaimCommitOnTheEmulator (1,000 handlers), the millisecond cuts
// the client's CPU per new key from 10.4 to 8.7 µs and raises throughput;
// 2 ms saves no more CPU and costs a third of the throughput.
var (
	readBatch  = batch.Config{MaxItems: 256, MaxDelay: 2 * time.Millisecond, MaxInFlight: 4}
	writeBatch = batch.Config{MaxItems: 1000, MaxBytes: 4 << 20, MaxDelay: time.Millisecond, MaxInFlight: 4}
	// journalBatch carries the journal rows of conditional claims alone
	// (shared mode): one key per claim, at the rate of the conditional
	// mutations, whose batches of a millisecond held a handful of keys
	// each, an ApplyBulk per few keys. 5 ms more before the row is
	// written, in shared mode only, makes them twenty-odd.
	journalBatch = batch.Config{MaxItems: 1000, MaxBytes: 4 << 20, MaxDelay: 5 * time.Millisecond, MaxInFlight: 4}
)

// maxConditional bounds the conditional claims in flight at once per
// pipeline; more wait for one to end. At a few milliseconds each, 128 at
// once carry tens of thousands of claims per second, and each grown stack
// that waits in one costs memory (the flow control allows thousands of
// messages in flight).
const maxConditional = 128

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
	// Members is the pipeline's membership, which says when the fast path
	// is safe (package members); nil: this process is alone for ever (a
	// test, or a tool that owns the catalog).
	Members Membership
	// Metrics receives the lookups and filter gauges; nil: a private set.
	Metrics *metrics.Pipeline
	// NoJournal turns the journal off (journal.go): no journal rows, and
	// every rebuild scans the catalog. For tests and benchmarks that
	// compare the two.
	NoJournal bool
	// ClaimDelay is how long the claims queued by ClaimAhead gather into a
	// batch (DefaultClaimDelay when zero). Their rows wait for them in the
	// sink, which gathers its own batches for longer (sink.batch.max_delay):
	// a claim batch gathered within that costs the message no latency, and
	// a longer one carries more claims per call when traffic is light.
	ClaimDelay time.Duration
	// Now is the processing-time clock; nil: time.Now. Tests set a fake.
	// It must be the clock Members runs on: a fast-path claim is trusted
	// only if it was confirmed before View.FastUntil by this clock.
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
	if c.ClaimDelay <= 0 {
		c.ClaimDelay = DefaultClaimDelay
	}
	return c
}

// Membership is what Keys needs of package members.
type Membership interface {
	// View says whether this process is joined and alone, and until when.
	View() members.View
	// Joined blocks until this process is joined, or ctx ends.
	Joined(ctx context.Context) error
	// Peers returns the IDs of the other live members: those without
	// JournalTag run an earlier version, which does not journal; those
	// without MemberTag one whose rivals wait for a record.
	Peers() []string
}

// alone is the Membership of a process that is alone for ever.
type alone struct{}

func (alone) View() members.View {
	return members.View{Joined: true, Alone: true, FastUntil: time.Now().Add(time.Hour)}
}
func (alone) Joined(context.Context) error { return nil }
func (alone) Peers() []string              { return nil }

// Keys claims and commits the dedupe keys of one pipeline: a ring of Bloom
// filters in front of the durable catalog. Its methods are safe for
// concurrent use.
type Keys struct {
	cfg Config
	log *zap.Logger
	now func() time.Time
	// ringStats are the filters' figures of the last refresh.
	ringStats atomic.Pointer[ringStats]
	store     store
	cat       catalog
	jrn       *journal
	reads     *batch.Batcher[lookup]
	// writes carries the unconditional cells, claims and records alike:
	// one ApplyBulk holds the claims of new keys and the records of
	// committed ones, half the calls of a batcher each.
	writes *batch.Batcher[cell]
	// claims carries the claims queued by ClaimAhead, whose rows wait for
	// them in the sink: gathered for Config.ClaimDelay.
	claims *batch.Batcher[cell]
	// journals carries the keys of conditional claims to the journal.
	journals *batch.Batcher[cell]
	// rulings carries the rulings of rivals' keys (rulings.go), ruled
	// counts them.
	rulings *batch.Batcher[ruling]
	ruled   atomic.Int64
	// calls runs the conditional claims.
	calls *warm.Pool
	holds sync.Pool // of *hold

	// compat: a live peer runs a version whose rivals wait for a record
	// (its member ID lacks MemberTag): Commit writes records for every
	// key while one is seen. Set by Run.
	compat atomic.Bool

	mu      sync.Mutex
	ring    *ring
	held    map[string]*hold // keys claimed and not yet committed or released
	tokens  uint64           // the last token a hold was given
	rebuilt bool
	// rebuiltEpoch is the membership's alone epoch when the last rebuild
	// began: the filters answer for the fast path only in that epoch.
	rebuiltEpoch uint64
	rebuilding   bool
	rebuild      rebuildStats
	// waitRebuild, while a rebuild from the journal runs, makes the Claims
	// that would use the filters wait for it (a few seconds) instead of
	// reading the catalog for every key; nil otherwise.
	waitRebuild *gate
	conflicts   int64 // claims that waited for another delivery's claim
	conditional int64 // conditional claims made
	upgrades    int64 // fast-path claims confirmed too late, made conditional
}

// lookup is one batched catalog read; out receives the row's state.
type lookup struct {
	row string
	out *rowState
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
		jrn:   newJournal(newCatalog(cfg.Pipeline).prefix),
		ring:  newRing(width, cfg.Slices, cfg.FalsePositiveRate, max(expected, minExpectedKeys)),
		held:  make(map[string]*hold),
		calls: warm.New(maxConditional, 0),
	}
	if d.cfg.Members == nil {
		d.cfg.Members = alone{}
	}
	d.holds.New = func() any { return new(hold) }
	d.reads = batch.New(readBatch, d.flushReads)
	d.writes = batch.New(writeBatch, d.flushWrites)
	claimBatch := writeBatch
	claimBatch.MaxDelay = cfg.ClaimDelay
	d.claims = batch.New(claimBatch, d.flushWrites)
	d.journals = batch.New(journalBatch, d.flushWrites)
	d.rulings = batch.New(rulingBatch, d.flushRulings)
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

// Close waits for the catalog reads and writes in flight and flushes the
// writes still queued. Like net/http's Server.Shutdown it is idempotent
// and bounded by ctx, whose error it returns if cut short (the flushes
// then fail with context.Canceled). Claims after Close fail.
func (d *Keys) Close(ctx context.Context) error {
	return errors.Join(d.claims.Close(ctx), d.writes.Close(ctx), d.journals.Close(ctx), d.rulings.Close(ctx), d.reads.Close(ctx))
}

// Stats is the dedupe state shown in /status.
type Stats struct {
	// Rebuilt is false until the filters hold the catalog's keys; until
	// then every lookup reads the catalog.
	Rebuilt bool `json:"rebuilt"`
	// RebuildSeconds and RebuildKeys describe the start-up rebuild, and
	// RebuildFrom what it read: "journal", or "catalog" (a full scan).
	// From the journal, RebuildKeys counts its entries: a key's claim and
	// its record are two.
	RebuildSeconds float64 `json:"rebuild_seconds,omitempty"`
	RebuildKeys    int64   `json:"rebuild_keys,omitempty"`
	RebuildFrom    string  `json:"rebuild_from,omitempty"`
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
	// ConditionalClaims counts the claims made by a conditional mutation
	// (while not alone), Conflicts the times a claim found the key claimed
	// by its own message and another at once and looked again, Upgrades
	// the fast-path claims
	// confirmed after the fast path closed, made again conditionally.
	ConditionalClaims int64 `json:"conditional_claims"`
	Conflicts         int64 `json:"claim_conflicts"`
	Upgrades          int64 `json:"fast_path_upgrades"`
	// Rulings counts the rulings written: rivals found duplicates of
	// another message's claim (rulings.go).
	Rulings int64 `json:"rulings"`
}

// Stats returns the state of the filters as of the last refresh (Run's,
// every statsInterval: /status must not count bits under the lock that
// Claims take at every request), and the counters as of now.
func (d *Keys) Stats() Stats {
	st := d.ringStats.Load()
	if st == nil {
		d.refresh() // before Run's first refresh
		st = d.ringStats.Load()
	}
	d.mu.Lock()
	s := Stats{
		Rebuilt:                    d.rebuilt,
		RebuildSeconds:             d.rebuild.took.Seconds(),
		RebuildKeys:                d.rebuild.keys,
		RebuildFrom:                d.rebuild.from,
		WindowSeconds:              d.cfg.Window.Seconds(),
		Slices:                     st.slices,
		Filters:                    st.filters,
		Keys:                       st.keys,
		FilterBytes:                st.bits / 8,
		FillRatio:                  st.fill,
		EstimatedFalsePositiveRate: st.fpRate,
		TargetFalsePositiveRate:    d.cfg.FalsePositiveRate,
		KeysInFlight:               len(d.held),
		ConditionalClaims:          d.conditional,
		Conflicts:                  d.conflicts,
		Upgrades:                   d.upgrades,
	}
	d.mu.Unlock()
	if st.keys > 0 {
		s.BitsPerKey = float64(st.bits) / float64(st.keys)
	}
	s.CatalogLookups = int64(metrics.Value(d.cfg.Metrics.Lookups))
	s.Rulings = d.ruled.Load()
	return s
}
