package reprocess

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
)

// Record is what a run keeps in the state table, so that a restart with the
// same arguments finds it again.
type Record struct {
	// Name is the run's name, PIPELINE~rYYYYMMDDtHHMMSSz: its dedupe scope
	// and membership in the state table, and its metrics' pipeline label.
	Name     string `json:"name"`
	Pipeline string `json:"pipeline"`
	// From and Snapshot are what the run was asked to replay (one of them).
	From     time.Time `json:"from,omitzero"`
	Snapshot string    `json:"snapshot,omitempty"`
	// Until is the end of the range: messages published after it are not
	// the run's.
	Until time.Time `json:"until"`
	// Subscription is the run's own subscription (full name); Ready says
	// it was created and seeked, so that a restart reads it as it is.
	Subscription string `json:"subscription"`
	Ready        bool   `json:"ready"`
	// Done says the range was done and the run's end began: a restart
	// only finishes the end (the subscription may be gone already).
	Done bool `json:"done,omitempty"`
	// RestorePoint is the snapshot of the live subscription taken first
	// (full name), "" with --no-restore-point.
	RestorePoint string    `json:"restore_point,omitempty"`
	Started      time.Time `json:"started"`
}

// Range is what a command line asks to replay: From (RFC 3339, or
// relative: a duration before the start) or Snapshot, and Until (zero: the
// first start).
type Range struct {
	From                        time.Time
	Snapshot                    string
	Until                       time.Time
	FromRelative, UntilRelative bool
}

// Same reports whether a restart's command line asks for r's range. A
// relative time is relative to the first start, so it means the recorded
// one: a Job restarted with --from 2h resumes the run it began.
func (r *Record) Same(q Range) bool {
	if r.Snapshot != q.Snapshot {
		return false
	}
	if q.Snapshot == "" && !q.FromRelative && !r.From.Equal(q.From) {
		return false
	}
	return q.Until.IsZero() || q.UntilRelative || r.Until.Equal(q.Until)
}

// Row is the row key of a pipeline's reprocess record and lock.
func Row(pipeline string) string { return "reprocess#" + pipeline }

// Stamp names a run started at t: the time to the second, readable, and
// six random characters (30 bits), "20261203t053012z-k3xq7a", so that two
// runs started in the same millisecond, on two hosts, get different names
// (and a name that exists anyway is retried with a new stamp, never
// joined).
func Stamp(t time.Time) string {
	return strings.ToLower(t.UTC().Format("20060102t150405z") + "-" + rand.Text()[:6])
}

// NameFor is the name of a run of pipeline with stamp: PIPELINE~rSTAMP.
func NameFor(pipeline, stamp string) string {
	return pipeline + "~r" + stamp
}

const (
	runColumn  = "run"
	lockColumn = "lock"
)

// Lock timing: the lock lasts LockLease past its last renewal, renewed
// every LockRenew (each renewal given LockRenew to land). A killed run's
// successor waits at most LockLease. A run that could not renew its lock
// stops StopMargin before it would lapse, so that it has stopped writing
// when a successor may take over: a state table that stalls for less than
// LockLease-StopMargin costs the run nothing.
const (
	LockLease  = 15 * time.Second
	LockRenew  = 3 * time.Second
	StopMargin = 2 * LockRenew
)

// ErrLocked is the answer to a run of a pipeline another run holds.
var ErrLocked = errors.New("another reprocess of this pipeline is running")

// ErrLostLock says the run's lock was taken over: it must stop.
var ErrLostLock = errors.New("the reprocess lock was taken over by another run")

// ErrLapsing says the run could not renew its lock and it would lapse
// within StopMargin: the run stops (it may resume), before another run can
// take over.
var ErrLapsing = errors.New("the reprocess lock could not be renewed in time")

// Store is a pipeline's reprocess row.
type Store struct {
	table *bigtable.Table
	row   string
	now   func() time.Time
}

// NewStore returns the store of pipeline's row in table; now is the wall
// clock (nil: time.Now).
func NewStore(table *bigtable.Table, pipeline string, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{table: table, row: Row(pipeline), now: now}
}

var metaFamily = "^" + regexp.QuoteMeta(state.FamilyMeta) + "$"

func columnIs(col string) bigtable.Filter {
	return bigtable.ChainFilters(bigtable.FamilyFilter(metaFamily), bigtable.ColumnFilter("^"+regexp.QuoteMeta(col)+"$"))
}

func valueIs(col, value string) bigtable.Filter {
	return bigtable.ChainFilters(columnIs(col), bigtable.ValueFilter("^"+regexp.QuoteMeta(value)+"$"))
}

// read returns the row's run and lock cells ("" when absent).
func (s *Store) read(ctx context.Context) (run, lock string, err error) {
	row, err := s.table.ReadRow(ctx, s.row, bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter(metaFamily), bigtable.LatestNFilter(1))))
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", s.row, err)
	}
	for _, it := range row[state.FamilyMeta] {
		switch it.Column {
		case state.FamilyMeta + ":" + runColumn:
			run = string(it.Value)
		case state.FamilyMeta + ":" + lockColumn:
			lock = string(it.Value)
		}
	}
	return run, lock, nil
}

// Load returns the pipeline's unfinished run, nil if there is none.
func (s *Store) Load(ctx context.Context) (*Record, error) {
	run, _, err := s.read(ctx)
	if err != nil || run == "" {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal([]byte(run), &r); err != nil {
		return nil, fmt.Errorf("%s: the run record is not pubsink's: %w", s.row, err)
	}
	return &r, nil
}

// Holder is who holds a lock and until when.
type Holder struct {
	ID    string
	Until time.Time
}

func parseLock(v string) (Holder, bool) {
	i := strings.LastIndexByte(v, '@')
	if i < 0 {
		return Holder{}, false
	}
	ms, err := strconv.ParseInt(v[i+1:], 10, 64)
	if err != nil {
		return Holder{}, false
	}
	return Holder{ID: v[:i], Until: time.UnixMilli(ms).UTC()}, true
}

// Held returns who holds the lock, nil when nobody does (no cell, or one
// that lapsed).
func (s *Store) Held(ctx context.Context) (*Holder, error) {
	_, cur, err := s.read(ctx)
	if err != nil || cur == "" {
		return nil, err
	}
	if h, ok := parseLock(cur); ok && h.Until.After(s.now()) {
		return &h, nil
	}
	return nil, nil
}

// Lock is a run's hold of its pipeline's row. Each of its conditional
// writes expects the lock cell to name this run's holder id (unique per
// process), whatever expiry it carries: a renewal that Bigtable applied but
// whose answer was lost (its context cancelled as the run stopped, a
// deadline under load) leaves a later expiry than the run knows of, and the
// run still holds the lock. Another holder's value (a takeover) fails
// every write.
type Lock struct {
	s  *Store
	id string

	mu    sync.Mutex // serializes the run's own writes
	until time.Time  // the expiry of the last lock write known to have landed
}

// Acquire takes the lock for holder id. A lock held and renewed by another
// run is ErrLocked (wrapped with who holds it); a lock that is not renewed
// (its holder was killed) is waited for until it lapses, at most
// LockLease, and taken. Between its checks it calls wait (nil: none) with
// what it waits for.
func (s *Store) Acquire(ctx context.Context, id string, wait func(Holder)) (*Lock, error) {
	l := &Lock{s: s, id: id}
	_, cur, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	if cur != "" {
		h, ok := parseLock(cur)
		if ok && h.Until.After(s.now()) {
			if wait != nil {
				wait(h)
			}
			// Watch it for its expiry: a live holder renews it (the
			// value changes) within LockRenew.
			for h.Until.After(s.now()) {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(min(LockRenew/3, time.Until(h.Until)+10*time.Millisecond)):
				}
				_, again, err := s.read(ctx)
				if err != nil {
					return nil, err
				}
				if again != cur {
					if h2, ok := parseLock(again); ok {
						h = h2
					}
					return nil, fmt.Errorf("%w (%s, its lock renewed until %s)", ErrLocked, h.ID, h.Until.Format(time.RFC3339))
				}
			}
		}
	}
	ok, err := l.swap(ctx, cur)
	if err != nil {
		return nil, err
	}
	if !ok {
		_, now, _ := s.read(ctx)
		h, _ := parseLock(now)
		return nil, fmt.Errorf("%w (%s took the lock first)", ErrLocked, h.ID)
	}
	return l, nil
}

// write sets a fresh lock value for this run if the cell matches when
// (nil: the cell is absent).
func (l *Lock) write(ctx context.Context, when bigtable.Filter) (bool, error) {
	until := l.s.now().Add(LockLease)
	next := l.id + "@" + strconv.FormatInt(until.UnixMilli(), 10)
	set := bigtable.NewMutation()
	set.DeleteCellsInColumn(state.FamilyMeta, lockColumn)
	set.Set(state.FamilyMeta, lockColumn, bigtable.Now().TruncateToMilliseconds(), []byte(next))
	var cm *bigtable.Mutation
	if when == nil {
		cm = bigtable.NewCondMutation(columnIs(lockColumn), nil, set)
	} else {
		cm = bigtable.NewCondMutation(when, set, nil)
	}
	var matched bool
	if err := l.s.table.Apply(ctx, l.s.row, cm, bigtable.GetCondMutationResult(&matched)); err != nil {
		return false, fmt.Errorf("write the reprocess lock (%s): %w", l.s.row, err)
	}
	if matched != (when != nil) {
		return false, nil
	}
	l.until = until
	return true, nil
}

// swap takes the lock if the cell still holds expect ("": absent).
func (l *Lock) swap(ctx context.Context, expect string) (bool, error) {
	if expect == "" {
		return l.write(ctx, nil)
	}
	return l.write(ctx, valueIs(lockColumn, expect))
}

// mine matches the lock cell while it names this run's holder.
func (l *Lock) mine() bigtable.Filter {
	return bigtable.ChainFilters(columnIs(lockColumn), bigtable.ValueFilter("^"+regexp.QuoteMeta(l.id)+"@[0-9]+$"))
}

// Renew extends the lock; ErrLostLock when another run took it.
func (l *Lock) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok, err := l.write(ctx, l.mine())
	if err != nil {
		return err
	}
	if !ok {
		return ErrLostLock
	}
	return nil
}

// Keep renews the lock every LockRenew until ctx ends, and returns
// ErrLostLock as soon as the lock was taken over. A failed renewal (given
// LockRenew to land) is reported to failed and retried at the next tick;
// once the lock would lapse within StopMargin, Keep returns ErrLapsing.
func (l *Lock) Keep(ctx context.Context, failed func(error)) error {
	t := time.NewTicker(LockRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, LockRenew)
		err := l.Renew(rctx)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, ErrLostLock):
			return err
		case ctx.Err() != nil:
			return nil
		default:
			if failed != nil {
				failed(err)
			}
			if until := l.held(); !l.s.now().Before(until.Add(-StopMargin)) {
				return fmt.Errorf("%w (it lapses at %s; the last renewal: %v)", ErrLapsing, until.UTC().Format(time.RFC3339), err)
			}
		}
	}
}

// held is the expiry of the last lock write known to have landed.
func (l *Lock) held() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Save writes the run's record, if this run still holds the lock.
func (l *Lock) Save(ctx context.Context, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	m := bigtable.NewMutation()
	m.DeleteCellsInColumn(state.FamilyMeta, runColumn)
	m.Set(state.FamilyMeta, runColumn, bigtable.Now().TruncateToMilliseconds(), b)
	return l.fenced(ctx, m, "save the run record")
}

// Finish deletes the record and the lock: the run is over.
func (l *Lock) Finish(ctx context.Context) error {
	m := bigtable.NewMutation()
	m.DeleteCellsInColumn(state.FamilyMeta, runColumn)
	m.DeleteCellsInColumn(state.FamilyMeta, lockColumn)
	return l.fenced(ctx, m, "delete the run record")
}

// Release deletes the lock only, so that a restart need not wait for it to
// lapse: the run stopped and will resume.
func (l *Lock) Release(ctx context.Context) error {
	m := bigtable.NewMutation()
	m.DeleteCellsInColumn(state.FamilyMeta, lockColumn)
	return l.fenced(ctx, m, "release the lock")
}

// fenced applies m if the lock cell still names this run's holder.
func (l *Lock) fenced(ctx context.Context, m *bigtable.Mutation, what string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var matched bool
	if err := l.s.table.Apply(ctx, l.s.row, bigtable.NewCondMutation(l.mine(), m, nil), bigtable.GetCondMutationResult(&matched)); err != nil {
		return fmt.Errorf("%s (%s): %w", what, l.s.row, err)
	}
	if !matched {
		return fmt.Errorf("%s: %w", what, ErrLostLock)
	}
	return nil
}
