package members

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/metrics"
)

// DefaultLease is how long a member's cell may stay unchanged before the
// others judge it lapsed. It is a trade: a newcomer whose predecessor died
// without a clean stop waits up to a lease before it starts, and a member
// that cannot reach Bigtable loses the fast path after three quarters of
// one. Ten seconds is below Cloud Run's and GKE's usual start-up budgets and
// far above a renewal's latency.
const DefaultLease = 10 * time.Second

// Config is what a pipeline's membership needs.
type Config struct {
	// Pipeline names the pipeline: its row is members#PIPELINE.
	Pipeline string
	// Table is the state table (state.table), with family m.
	Table string
	// ID identifies this process among the pipeline's members; "" makes
	// one (NewID). It must be unique per process start.
	ID string
	// Lease is DefaultLease when zero.
	Lease time.Duration
	// Metrics receives the member count, the alone gauge and the renewal
	// counters; nil: a private set.
	Metrics *metrics.Pipeline
	// Now is the clock: renewals stamp their cell with it, and the lease
	// and the lapses of others are measured on it (a clock whose readings
	// keep time.Now's monotonic reading, as time.Now().Add(d) does, keeps
	// those measurements exact). nil: time.Now.
	Now func() time.Time
}

// NewID returns a member ID: the host name and 8 random bytes, so that a
// restarted process never reuses the ID of its predecessor.
func NewID() string {
	host, _ := os.Hostname()
	var b [8]byte
	rand.Read(b[:])
	if host == "" {
		host = "pubsink"
	}
	return host + "-" + hex.EncodeToString(b[:])
}

// View is what a member knows of the others at one moment.
type View struct {
	// Joined: every other live member has acknowledged this one; until
	// then the member must claim nothing.
	Joined bool
	// Alone: no other member is live, and this process's last renewal is
	// recent enough to be sure of it. Fast-path claims are safe only then.
	Alone bool
	// FastUntil is when the fast path ends unless a renewal extends it: a
	// fast-path claim confirmed later than this is not trusted.
	FastUntil time.Time
	// AloneEpoch counts the times this member became alone again after it
	// had seen another member; filters built before the current epoch
	// began may lack keys the others committed.
	AloneEpoch uint64
	// Others: another process has been seen running the pipeline since
	// this one started, renewing its cell or acknowledging this one. A
	// cell that was merely there (a predecessor that died without a clean
	// stop) does not count, though it keeps this member from being alone
	// until it lapses.
	Others bool
}

// Stats are the membership figures, for /status.
type Stats struct {
	ID         string   `json:"id"`
	Members    []string `json:"members"` // the live members, this one included
	Acked      []string `json:"acknowledged"`
	Joined     bool     `json:"joined"`
	Alone      bool     `json:"alone"`
	Renewals   int64    `json:"renewals"`
	Failures   int64    `json:"renewal_failures"`
	AloneEpoch uint64   `json:"alone_epoch"`
}

// peer is what this member observed of another's cell.
type peer struct {
	value   string
	at      bigtable.Timestamp
	changed time.Time // monotonic: when this member saw the cell change
	renewed bool      // the cell changed while this member watched
}

// Members is one process's membership of a pipeline. Its methods are safe
// for concurrent use.
type Members struct {
	cfg    Config
	margin time.Duration
	log    *zap.Logger
	store  store
	now    func() time.Time

	mu       sync.Mutex
	peers    map[string]*peer
	lapsed   map[string]cell // the cells of peers that lapsed, as they were then
	acked    []string        // sorted; what this member's cell says
	ackedBy  map[string]bool
	lastSent time.Time // send time of the last successful write (monotonic)
	observed time.Time // send time of the write before the last successful read
	alone    bool      // from the read after the last successful write
	everSeen bool      // another member was ever live
	others   bool      // another member was seen renewing or acknowledging this one
	epoch    uint64
	joined   bool
	joinedCh chan struct{} // closed while joined
	renewals int64
	failures int64
}

// New returns the membership of cfg.Pipeline in the state table of client.
// It does no I/O until Run.
func New(client *bigtable.Client, log *zap.Logger, cfg Config) *Members {
	return newMembers(btStore{table: client.Open(cfg.Table), row: Row(cfg.Pipeline)}, log, cfg)
}

func newMembers(s store, log *zap.Logger, cfg Config) *Members {
	if cfg.ID == "" {
		cfg.ID = NewID()
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New().Pipeline(cfg.Pipeline)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Members{
		cfg:      cfg,
		margin:   cfg.Lease / 4,
		log:      log.Named("members").With(zap.String("pipeline", cfg.Pipeline), zap.String("member", cfg.ID)),
		store:    s,
		now:      now,
		peers:    map[string]*peer{},
		lapsed:   map[string]cell{},
		ackedBy:  map[string]bool{},
		joinedCh: make(chan struct{}),
	}
}

// ID is this member's ID.
func (m *Members) ID() string { return m.cfg.ID }

// Peers returns the other live members, sorted.
func (m *Members) Peers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.peers))
	for id := range m.peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// View returns what this member knows now.
func (m *Members) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.viewLocked(m.now())
}

func (m *Members) viewLocked(now time.Time) View {
	until := m.lastSent.Add(m.cfg.Lease - m.margin)
	fresh := !m.lastSent.IsZero() && now.Before(until)
	v := View{Joined: m.joined && fresh, Alone: m.alone && fresh, AloneEpoch: m.epoch, Others: m.others}
	if v.Alone {
		v.FastUntil = until
	}
	return v
}

// Joined blocks until this member is joined, or ctx ends.
func (m *Members) Joined(ctx context.Context) error {
	for {
		m.mu.Lock()
		v, ch := m.viewLocked(m.now()), m.joinedCh
		m.mu.Unlock()
		if v.Joined {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(m.cfg.Lease / 8):
		}
	}
}

// Run registers this member and renews its cell every lease/4 until ctx
// ends; it returns nil then. Call Close after it returned.
func (m *Members) Run(ctx context.Context) error {
	period := m.cfg.Lease / 4
	for {
		m.renew(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(period):
		}
	}
}

// renew is one period of the protocol (doc.go): write, read, and on a
// newcomer leave the fast path and acknowledge it.
func (m *Members) renew(ctx context.Context) {
	sent, err := m.write(ctx)
	if err != nil {
		m.fail("renew", err)
		return
	}
	cells, err := m.store.read(ctx)
	if err != nil {
		m.fail("read", err)
		return
	}
	live, newcomer := m.observe(cells, sent)
	m.collect(ctx, cells)
	if newcomer {
		m.log.Info("another member is live: claims go conditional", zap.Strings("members", live))
		m.mu.Lock()
		m.acked = live
		m.mu.Unlock()
		if _, err := m.write(ctx); err != nil {
			m.fail("acknowledge", err)
			return
		}
	}
}

// write writes this member's cell and, when it succeeds, notes its send
// time.
func (m *Members) write(ctx context.Context) (time.Time, error) {
	m.mu.Lock()
	value := strings.Join(m.acked, ",")
	m.mu.Unlock()
	sent := m.now()
	at := bigtable.Time(sent).TruncateToMilliseconds()
	if err := m.store.write(ctx, m.cfg.ID, value, at); err != nil {
		return time.Time{}, err
	}
	m.mu.Lock()
	if sent.After(m.lastSent) {
		m.lastSent = sent
	}
	m.renewals++
	m.mu.Unlock()
	m.cfg.Metrics.Renewals.Inc()
	return sent, nil
}

// observe updates what this member knows from one read of the row, made
// after a write sent at sent. It returns the live others and whether one of
// them is not acknowledged yet (then the fast path is already off).
func (m *Members) observe(cells map[string]cell, sent time.Time) (live []string, newcomer bool) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, c := range cells {
		if id == m.cfg.ID {
			continue
		}
		if l, ok := m.lapsed[id]; ok {
			if l == c {
				continue // the very cell that lapsed: its writer is still gone
			}
			delete(m.lapsed, id) // it changed: its writer is back
			m.peers[id] = &peer{value: c.value, at: c.at, changed: now, renewed: true}
			continue
		}
		p, ok := m.peers[id]
		if !ok || p.value != c.value || p.at != c.at {
			m.peers[id] = &peer{value: c.value, at: c.at, changed: now, renewed: ok}
		}
	}
	for id, p := range m.peers {
		if _, ok := cells[id]; !ok {
			delete(m.peers, id) // gone: a clean stop deletes its cell
		} else if now.Sub(p.changed) >= m.cfg.Lease {
			// Lapsed. Its cell stays in the row until collect removes it
			// (deadAfter): remember it, or the next read would take it for
			// a cell seen for the first time, live for another lease.
			m.lapsed[id] = cell{value: p.value, at: p.at}
			delete(m.peers, id)
		}
	}
	for id := range m.lapsed {
		if _, ok := cells[id]; !ok {
			delete(m.lapsed, id)
		}
	}
	// A member that has stayed joined and fresh since its last read is
	// not unjoined by a newcomer that has not acknowledged it yet: the
	// newcomer claims nothing before its own cell acknowledges this member
	// (it does so in the same round in which it first reads it), and it is
	// not alone while this member renews. Only a peer that acknowledged
	// this member and no longer does (it judged it lapsed, and may have
	// gone on alone) unjoins it, as does a gap in its own renewals.
	continuous := m.joined && !m.observed.IsZero() && sent.Sub(m.observed) < m.cfg.Lease-m.margin
	m.observed = sent
	ackedBy := map[string]bool{}
	joined := true
	for id, p := range m.peers {
		live = append(live, id)
		if p.renewed {
			m.others = true
		}
		switch {
		case acks(p.value, m.cfg.ID):
			ackedBy[id] = true
			m.others = true
		case continuous && !m.ackedBy[id]:
			// a newcomer, not yet acknowledging this member
		default:
			joined = false
		}
	}
	sort.Strings(live)
	m.ackedBy = ackedBy
	m.cfg.Metrics.Members.Set(float64(len(live) + 1))
	for _, id := range live {
		if !slices.Contains(m.acked, id) {
			newcomer = true
		}
	}
	alone := len(live) == 0
	if len(live) > 0 {
		m.everSeen = true
	}
	if alone && !m.alone && m.everSeen {
		m.epoch++
	}
	m.alone = alone
	if alone {
		m.cfg.Metrics.Alone.Set(1)
	} else {
		m.cfg.Metrics.Alone.Set(0)
	}
	if !alone && !newcomer && !slices.Equal(live, m.acked) {
		// Some acknowledged member lapsed or left: the cell says so at the
		// next renewal. Nobody new is live, so nothing waits on it.
		m.acked = live
	}
	if alone {
		m.acked = nil
	}
	if joined != m.joined {
		m.joined = joined
		if joined {
			close(m.joinedCh)
			m.log.Info("joined", zap.Strings("members", live))
		} else {
			m.joinedCh = make(chan struct{})
		}
	}
	return live, newcomer
}

// deadAfter is how old a cell must be, by its own timestamp, before any
// member deletes it: the cells of processes that died without a clean stop.
// Only the cells older than that go, so a live member's renewal survives;
// and a member wrongly removed only reappears as a newcomer, which costs a
// handshake, never a claim.
const deadAfter = 30 * DefaultLease

// collect deletes the cells that were left behind long ago.
func (m *Members) collect(ctx context.Context, cells map[string]cell) {
	cutoff := bigtable.Time(m.now().Add(-max(deadAfter, 30*m.cfg.Lease))).TruncateToMilliseconds()
	for id, c := range cells {
		if id != m.cfg.ID && c.at < cutoff {
			if err := m.store.remove(ctx, id, cutoff); err == nil {
				m.log.Info("removed the cell of a member gone long ago", zap.String("gone", id), zap.Time("last_renewed", c.at.Time()))
			}
		}
	}
}

// acks reports whether a cell value acknowledges id.
func acks(value, id string) bool {
	for a := range strings.SplitSeq(value, ",") {
		if a == id {
			return true
		}
	}
	return false
}

func (m *Members) fail(step string, err error) {
	m.mu.Lock()
	m.failures++
	n := m.failures
	m.mu.Unlock()
	m.cfg.Metrics.RenewFailures.Inc()
	if n == 1 || n%10 == 0 {
		m.log.Warn("membership renewal failed; retrying", zap.String("step", step), zap.Int64("failures", n), zap.Error(err))
	}
}

// Close removes this member's cell, so that the others and a successor
// need not wait a lease for it to lapse. It is bounded by ctx.
func (m *Members) Close(ctx context.Context) error {
	if err := m.store.remove(ctx, m.cfg.ID, 0); err != nil {
		return fmt.Errorf("members: remove %s: %w", m.cfg.ID, err)
	}
	return nil
}

// Stats returns the membership figures.
func (m *Members) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.viewLocked(m.now())
	s := Stats{
		ID: m.cfg.ID, Members: []string{m.cfg.ID}, Acked: slices.Clone(m.acked),
		Joined: v.Joined, Alone: v.Alone, Renewals: m.renewals, Failures: m.failures, AloneEpoch: m.epoch,
	}
	for id := range m.peers {
		s.Members = append(s.Members, id)
	}
	sort.Strings(s.Members)
	return s
}
