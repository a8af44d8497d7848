package dedupe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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

// What a Claim asks for (see Keys.Claim, ClaimOnce and Resume).
type claimKind uint8

const (
	// claimDecides: the first claim of the key decides it for the window;
	// Commit writes nothing.
	claimDecides claimKind = iota
	// claimOnce: a key only winner's message can have: no claim is
	// written; Commit writes a record, which makes later deliveries
	// duplicates.
	claimOnce
	// claimResume: the key is held only if winner claimed it already; a
	// key nobody claimed is left alone, nothing written.
	claimResume
)

// Claim decides which message a key belongs to, for the window. The first
// durable claim of key names winner (the delivery's message ID, the same in
// every redelivery): winner then holds key until the caller ends the hold
// through the returned Claim, Commit once its rows are durable, or
// Release. A key claimed within the window by another message, or
// recorded, is a duplicate (dup): that message was committed, or has not
// been acked and comes back until it is (doc.go, "The claim decides").
// A key that winner itself claimed before (a redelivery: the earlier
// delivery committed, or stopped before it could) is held again with
// Resumed true, and its rows are to be written again: the same cells.
// While another caller in this process holds key, Claim waits for it
// first.
//
// The claim is durable before Claim returns: while this process is alone
// (Config.Members) an unconditional write in a batch, with no read for a
// key that no filter may hold; otherwise one conditional mutation
// (CheckAndMutateRow) that applies only if the row holds nothing within
// the window.
//
// Errors are the catalog's (transient; Claim does not retry them) or
// ctx's when it ends while waiting; the key is not held then.
func (d *Keys) Claim(ctx context.Context, key, winner string) (Claim, bool, error) {
	return d.claim(ctx, key, winner, claimDecides)
}

// ClaimOnce is Claim for a key that only winner's message can have: its
// message ID (a pipeline without id_attribute or id_template), or its
// dead-letter copy's key. No other message can be a rival, so no claim is
// written: a record within the window makes the key a duplicate, and
// otherwise winner holds it in this process; Commit writes the record
// (batched), once the effect is durable. So a redelivery after the record
// is a duplicate and writes nothing (a redelivery of a committed message,
// a seek back), and one before it (a crash between the effect and the
// record) repeats the effect: the same cells, or a second dead-letter copy.
// One state write per key, as Claim's.
func (d *Keys) ClaimOnce(ctx context.Context, key, winner string) (Claim, bool, error) {
	return d.claim(ctx, key, winner, claimOnce)
}

// Resume holds key only if winner claimed it already (Resumed true), and
// reports dup if another message did or it is recorded. A key that nobody
// claimed within the window is neither: the zero Claim and false, and
// nothing is written. The pipeline asks it for a late message, which may
// be written only if an earlier delivery of it was judged on time and
// claimed its key.
func (d *Keys) Resume(ctx context.Context, key, winner string) (Claim, bool, error) {
	return d.claim(ctx, key, winner, claimResume)
}

func (d *Keys) claim(ctx context.Context, key, winner string, kind claimKind) (Claim, bool, error) {
	id := idOf(key)
	h := hashOf(id.id)
	wait := conflictWait
	for {
		now := d.now()
		d.mu.Lock()
		if other, ok := d.held[key]; ok {
			w := other.waiters()
			d.mu.Unlock()
			select {
			case <-w.done:
				if w.committed {
					return d.duplicate(ctx, w.row, winner, "", kind)
				}
				continue // released: look again
			case <-ctx.Done():
				return Claim{}, false, ctx.Err()
			}
		}
		v := d.cfg.Members.View()
		if !v.Joined {
			d.mu.Unlock()
			if err := d.cfg.Members.Joined(ctx); err != nil {
				return Claim{}, false, err
			}
			continue
		}
		if g := d.waitRebuild; g != nil && v.Alone && g.waiting() {
			d.mu.Unlock()
			select {
			case <-g.done:
			case <-ctx.Done():
				return Claim{}, false, ctx.Err()
			}
			continue
		}
		d.ring.advance(now.UnixNano())
		fast := v.Alone && d.rebuilt && d.rebuiltEpoch == v.AloneEpoch && !d.ring.test(h)
		d.tokens++
		hd := d.holds.Get().(*hold)
		hd.token, hd.id, hd.h, hd.winner = d.tokens, id, h, winner
		hd.record = kind == claimOnce
		hd.row = d.cat.row(id, h)
		d.held[key] = hd
		token := hd.token
		row := hd.row
		d.mu.Unlock()

		var by string // the other message whose claim makes this a duplicate
		out, err := d.decide(ctx, row, h, winner, v, fast, kind, &by)
		switch {
		case err != nil:
			// A failed write is ambiguous: the claim may have landed. The
			// filters learn the key, so that the next Claim of it reads
			// the catalog rather than answer "new" and claim beside it.
			d.mu.Lock()
			d.ring.add(h, d.now().UnixNano())
			d.mu.Unlock()
			d.end(key, token, false)
			if ctx.Err() == nil {
				err = fmt.Errorf("dedupe: claim in catalog: %w", err)
			}
			return Claim{}, false, err
		case out == seen:
			// Not "committed" for the deliveries waiting here: the message
			// that won may be one of them (its redelivery), which must
			// resume, not be a duplicate. They look for themselves.
			d.end(key, token, false)
			return d.duplicate(ctx, row, winner, by, kind)
		case out == free: // claimResume, and nobody claimed the key
			d.end(key, token, false)
			return Claim{}, false, nil
		case out == taken:
			d.end(key, token, false)
			d.mu.Lock()
			d.conflicts++
			d.mu.Unlock()
			d.cfg.Metrics.Conflicts.Inc()
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return Claim{}, false, ctx.Err()
			}
			wait = min(2*wait, maxConflictWait)
			continue
		}
		// The claim is durable: the filters learn the key now, so that a
		// later delivery of it in this process asks the catalog.
		at := d.now().UnixNano()
		d.mu.Lock()
		d.ring.advance(at)
		d.ring.add(h, at)
		d.mu.Unlock()
		return Claim{holder: d, key: key, token: token, resumed: out == mine}, false, nil
	}
}

// duplicate answers a delivery of winner that found row's key decided
// (for the message by, when known): a duplicate, once the ruling that
// names the key's winner is durable when winner is a rival (rulings.go). A
// key only one message can have (ClaimOnce) has no rival.
func (d *Keys) duplicate(ctx context.Context, row, winner, by string, kind claimKind) (Claim, bool, error) {
	if kind != claimOnce {
		if err := d.ruleRival(ctx, row, winner, by); err != nil {
			return Claim{}, false, err
		}
	}
	return Claim{}, true, nil
}

// How long a Claim waits between two looks at a key whose row holds a
// claim of winner beside another's: an unconditional claim that was not
// trusted is being withdrawn (decide), within a round trip.
const (
	conflictWait    = 20 * time.Millisecond
	maxConflictWait = time.Second
)

// decide makes winner's claim of row durable, or finds why it need not or
// cannot be: claimed (made now), mine (winner's from an earlier delivery),
// seen (a duplicate), taken (look again), or free (kind claimResume, and
// the row holds nothing). v is the membership view the hold was taken
// under; fast says the filters answered "new" in it. When seen, by is set
// to the other message the row's claim names, if it names one.
func (d *Keys) decide(ctx context.Context, row string, h hashes, winner string, v members.View, fast bool, kind claimKind, by *string) (outcome, error) {
	if !v.Alone && kind == claimDecides {
		return d.claimShared(ctx, row, h, winner, false, by)
	}
	if !fast { // or not alone: this process's filters miss others' keys
		d.cfg.Metrics.Lookups.Inc()
		var st rowState
		if err := d.reads.Add(ctx, lookup{row: row, out: &st}, len(row)); err != nil {
			return free, fmt.Errorf("read: %w", err)
		}
		if out := st.decide(winner); out != free {
			*by, _ = st.rival(winner)
			return out, nil
		}
	}
	switch kind {
	case claimResume:
		return free, nil
	case claimOnce:
		return claimed, nil // no claim: the record at Commit decides
	}
	at := bigtable.Time(d.now()).TruncateToMilliseconds()
	if err := d.writes.Add(ctx, cell{row: row, winner: winner, at: at, h: h}, len(row)+len(winner)); err != nil {
		return free, fmt.Errorf("write claim: %w", err)
	}
	// The unconditional claim is trusted only if the fast path was still
	// open once it was confirmed: then it was durable before this process
	// acknowledged any newcomer (package members). Otherwise another
	// process may have claimed the key meanwhile: ask the catalog, in the
	// one conditional mutation.
	if after := d.cfg.Members.View(); after.Alone && after.AloneEpoch == v.AloneEpoch && d.now().Before(v.FastUntil) {
		return claimed, nil
	}
	d.mu.Lock()
	d.upgrades++
	d.mu.Unlock()
	return d.claimShared(ctx, row, h, winner, true, by)
}

// claimShared claims row for winner with one conditional mutation and,
// when the row holds something already, reads it to say what. untrusted
// says that this delivery wrote an unconditional claim of row just before,
// which the conditional mutation now confirms or withdraws.
func (d *Keys) claimShared(ctx context.Context, row string, h hashes, winner string, untrusted bool, by *string) (outcome, error) {
	out, err := d.claimIf(ctx, row, winner, untrusted, by)
	if out != claimed || err != nil || d.cfg.NoJournal {
		return out, err
	}
	// The journal must know the key before its row is written, as it
	// knows the keys of the batched claims: should this process stop after
	// the row, a successor rebuilt from the journal must ask the catalog
	// about the key, and find the claim.
	if err := d.journals.Add(ctx, cell{at: bigtable.Time(d.now()).TruncateToMilliseconds(), h: h}, journalHashBytes); err != nil {
		return free, fmt.Errorf("journal: %w", err)
	}
	return claimed, nil
}

// claimIf claims row for winner with one conditional mutation, which
// applies only if the row holds no cell within the window. When the row
// makes it a duplicate, by is set to the other message its claim names.
func (d *Keys) claimIf(ctx context.Context, row, winner string, untrusted bool, by *string) (outcome, error) {
	now := d.now()
	at := bigtable.Time(now).TruncateToMilliseconds()
	since := bigtable.Time(now.Add(-d.cfg.Window)).TruncateToMilliseconds()
	d.mu.Lock()
	d.conditional++
	d.mu.Unlock()
	d.cfg.Metrics.Conditional.Inc()
	var blocked bool
	var err error
	// On a goroutine whose stack has grown already: from the Pub/Sub
	// callback's fresh goroutine, the call's depth copied the stack to a
	// larger one once or twice per message (internal/warm).
	d.calls.Do(func() { blocked, err = d.store.claimIf(ctx, row, winner, at, since) })
	if err == nil && !blocked {
		return claimed, nil
	}
	// Blocked, or the reply was lost (the mutation may have been applied):
	// the row says which.
	sts, rerr := d.store.read(ctx, []string{row}, since)
	if rerr != nil {
		if err != nil {
			return free, err
		}
		return free, fmt.Errorf("read back: %w", rerr)
	}
	st := sts[0]
	*by, _ = st.rival(winner)
	if untrusted {
		return d.confirm(ctx, row, winner, st)
	}
	switch out := st.decide(winner); {
	case out == free && err != nil:
		return free, err // the lost mutation was not applied: retry
	case out == free:
		return taken, nil // what blocked it is gone already: look again soon
	case out == mine && err != nil:
		return claimed, nil // the lost mutation was applied
	default:
		return out, nil
	}
}

// confirm decides an unconditional claim of row by winner that was not
// trusted (the fast path closed before it was confirmed), from the row as
// read after it: winner's claim alone is confirmed; beside another's claim
// (made while this one was not trusted: the other process won) or a record
// it is withdrawn, and the key is a duplicate.
func (d *Keys) confirm(ctx context.Context, row, winner string, st rowState) (outcome, error) {
	switch st.decide(winner) {
	case mine:
		return claimed, nil
	case free: // the unconditional write did not land after all
		return taken, nil
	}
	if slices.Contains(st.claimants, winner) {
		if err := d.store.unclaim(ctx, row, winner); err != nil {
			return free, fmt.Errorf("withdraw a claim that was not trusted: %w", err)
		}
	}
	return seen, nil
}

// end ends the hold token on key, if it is still held: its waiters learn
// whether it was committed (then they are duplicates) or released (then
// they look again, and find the claim). It reports whether it ended the
// hold.
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
	token  uint64
	id     catalogID
	h      hashes
	row    string
	winner string
	record bool     // Commit writes a record (ClaimOnce)
	wait   *waiters // guarded by Keys.mu
}

// waiters is what the Claims waiting for a held key learn of its outcome.
// It is apart from the hold, which is recycled once ended.
type waiters struct {
	done      chan struct{}
	committed bool   // set before done is closed
	row       string // the key's catalog row, for a rival's ruling
}

// waiters returns hd's waiters, created on first use. Called with Keys.mu.
func (hd *hold) waiters() *waiters {
	if hd.wait == nil {
		hd.wait = &waiters{done: make(chan struct{}), row: hd.row}
	}
	return hd.wait
}

// errNotHeld is Commit's error for a hold that had already ended.
var errNotHeld = errors.New("dedupe: commit of a key that is not held (released or committed already)")

// Commit ends the hold token on key once the caller's effect is durable:
// waiters are duplicates. The claim already decided the key, so a Claim's
// Commit writes nothing; a ClaimOnce's writes the record first (batched,
// with the commit time as the cell's timestamp). If that write fails, the
// hold stays (waiters keep waiting) and the error is returned: call Commit
// again to retry, or Release to give up. The error is the catalog's, or
// ctx's if it ended first (the record may still be written: it is
// idempotent). A hold that had ended already is an error, and nothing is
// written.
func (d *Keys) Commit(ctx context.Context, key string, token uint64) error {
	d.mu.Lock()
	hd, ok := d.held[key]
	if !ok || hd.token != token {
		d.mu.Unlock()
		return errNotHeld
	}
	h, row, record := hd.h, hd.row, hd.record || d.compat.Load()
	d.mu.Unlock()

	if record {
		at := bigtable.Time(d.now()).TruncateToMilliseconds()
		if err := d.writes.Add(ctx, cell{row: row, at: at, h: h}, len(row)); err != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("dedupe: record key in catalog: %w", err)
			}
			return err
		}
	}
	d.end(key, token, true)
	return nil
}

// Release ends the hold token on key without a commit: a waiter looks
// again, and finds the claim, which stays (it decided the key: the
// message is redelivered and finishes its work). A hold that had ended
// already (committed, or released) is left alone, so Release is safe to
// call more than once and after Commit.
func (d *Keys) Release(key string, token uint64) {
	d.end(key, token, false)
}

// flushReads reads one batch of catalog rows into their lookups.
func (d *Keys) flushReads(ctx context.Context, ls []lookup) []error {
	since := bigtable.Time(d.now().Add(-d.cfg.Window)).TruncateToMilliseconds()
	rows := make([]string, len(ls))
	for i, l := range ls {
		rows[i] = l.row
	}
	states, err := d.store.read(ctx, rows, since)
	errs := make([]error, len(ls))
	for i, l := range ls {
		if err != nil {
			errs[i] = err
			continue
		}
		*l.out = states[i]
	}
	return errs
}

// flushWrites writes one batch of claims and records, and its journal row
// (journal.go). A cell's write succeeds only if its journal row did too:
// the journal must never miss a key whose claim or record is durable.
func (d *Keys) flushWrites(ctx context.Context, cells []cell) []error {
	out := make([]cell, 0, len(cells)+1)
	for _, c := range cells {
		if c.row != "" { // not a key for the journal row alone
			out = append(out, c)
		}
	}
	if !d.cfg.NoJournal {
		out = append(out, d.jrn.entry(cells))
	}
	errs, err := d.store.put(ctx, out)
	if err == nil && errs == nil {
		return nil
	}
	res := make([]error, len(cells))
	var jerr error
	if err == nil && !d.cfg.NoJournal && errs[len(out)-1] != nil {
		jerr = fmt.Errorf("journal: %w", errs[len(out)-1])
	}
	k := 0 // index in out of the next cell with a row
	for i, c := range cells {
		switch {
		case err != nil:
			res[i] = err
		case c.row != "" && errs[k] != nil:
			res[i] = errs[k]
		default:
			res[i] = jerr
		}
		if c.row != "" {
			k++
		}
	}
	return res
}

// Run rebuilds the filters from the catalog, then rotates them and
// refreshes the gauges until ctx ends; it returns nil then. Claims are
// answered meanwhile, from the catalog until the rebuild is done. A failed
// scan is retried (with backoff, from where it stopped) until ctx ends.
// Call Run once.
func (d *Keys) Run(ctx context.Context) error {
	d.mark(ctx)
	d.rebuildFilters(ctx)
	d.refresh()
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	epoch := time.NewTicker(epochCheck)
	defer epoch.Stop()
	marker := time.NewTicker(sinceRefresh)
	defer marker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.refresh()
		case <-marker.C:
			d.mark(ctx)
		case <-epoch.C:
			older, compat := d.peerVersions()
			d.compat.Store(compat)
			if older {
				d.mark(ctx)
			}
			// Alone again after others ran: their commits are not in the
			// filters, which must be rebuilt before they answer "new".
			v := d.cfg.Members.View()
			d.mu.Lock()
			stale := v.Alone && v.AloneEpoch != d.rebuiltEpoch && !d.rebuilding
			d.mu.Unlock()
			if stale {
				d.log.Info("alone again: rebuilding the filters", zap.Uint64("epoch", v.AloneEpoch))
				d.rebuildFilters(ctx)
			}
		}
	}
}

// mark writes the journal marker (markJournal), logging a failure: the
// next refresh tries again, and until then the marker may only be older
// than it should, which costs a scan at a restart, never a missed key.
func (d *Keys) mark(ctx context.Context) {
	if err := d.markJournal(ctx); err != nil && ctx.Err() == nil {
		d.log.Warn("the journal marker could not be written", zap.Error(err))
	}
}

// olderPeer reports whether a live peer runs a version without the
// journal.
func (d *Keys) olderPeer() bool {
	older, _ := d.peerVersions()
	return older
}

// peerVersions looks at the live peers' member IDs: older, one runs a
// version without the journal (its ID lacks JournalTag); compat, one runs
// a version whose rivals wait for a record (its ID lacks MemberTag).
func (d *Keys) peerVersions() (older, compat bool) {
	for _, p := range d.cfg.Members.Peers() {
		older = older || !strings.HasSuffix(p, JournalTag)
		compat = compat || !strings.HasSuffix(p, MemberTag)
	}
	return older, compat
}

// epochCheck is how often Run looks whether the filters must be rebuilt
// for a new membership epoch.
const epochCheck = time.Second

// refresh rotates the ring to the current time, counts the filters' bits
// (about a millisecond per 10 MB of filters, under the lock Claims take:
// once per statsInterval, never per request) and updates the gauges and
// the figures Stats serves.
func (d *Keys) refresh() {
	d.mu.Lock()
	d.ring.advance(d.now().UnixNano())
	st := d.ring.stats()
	d.mu.Unlock()
	d.ringStats.Store(&st)
	d.cfg.Metrics.FilterFill.Set(st.fill)
	d.cfg.Metrics.FilterFPRate.Set(st.fpRate)
}

// Close waits for the catalog reads and writes in flight and flushes the
// writes still queued. Like net/http's Server.Shutdown it is idempotent
// and bounded by ctx, whose error it returns if cut short (the flushes
// then fail with context.Canceled). Claims after Close fail.
func (d *Keys) Close(ctx context.Context) error {
	return errors.Join(d.writes.Close(ctx), d.journals.Close(ctx), d.rulings.Close(ctx), d.reads.Close(ctx))
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
