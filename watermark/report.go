package watermark

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/internal/state"
)

// A follower reports to the leader what its pipeline finished, so that the
// leader's exact accounting (the histogram) still holds: one report is one
// column of the follower's row finished#PIPELINE#MEMBER in family m, the
// qualifier the report's sequence number (16 hex digits, so that columns
// sort in order), the value the encoding below. The leader reads every
// such row, applies the reports, and deletes the columns it applied.
//
// A finish is reported before its message is acked (Tracker.Finished
// blocks until the report is durable): a member that dies after the ack
// has reported it, and one that dies before is redelivered the message,
// which finishes it again. Reading a report twice (a leader that died
// before its delete) is harmless: the histogram counts a message once.

// report is one report: the oldest publish second the follower had in
// flight when it wrote the report (none: hasOldest false), and finishes.
type report struct {
	hasOldest bool
	oldest    int64 // unix seconds
	finishes  []finish
}

// finish is one message the follower's pipeline finished.
type finish struct {
	id             string
	publish, event int64 // unix ns
}

const reportVersion = 1

// encode appends r to b: a version byte, the oldest in-flight second (a
// flag byte, then a varint), the number of finishes, then per finish the
// publish time as a varint delta from the previous one, the event time as
// a varint delta from its publish time, and the ID after its length (every
// number a signed varint).
func (r *report) encode(b []byte) []byte {
	b = append(b, reportVersion)
	if r.hasOldest {
		b = append(b, 1)
		b = binary.AppendVarint(b, r.oldest)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendVarint(b, int64(len(r.finishes)))
	var prev int64
	for _, f := range r.finishes {
		b = binary.AppendVarint(b, f.publish-prev)
		b = binary.AppendVarint(b, f.event-f.publish)
		b = binary.AppendVarint(b, int64(len(f.id)))
		b = append(b, f.id...)
		prev = f.publish
	}
	return b
}

var errBadReport = errors.New("malformed report")

// decodeReport reads what encode wrote.
func decodeReport(b []byte) (report, error) {
	var r report
	if len(b) < 2 || b[0] != reportVersion {
		return r, errBadReport
	}
	flag := b[1]
	if flag > 1 {
		return r, errBadReport
	}
	b = b[2:]
	varint := func() int64 { // every number is a varint; nil b marks a bad one
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	if flag == 1 {
		r.hasOldest, r.oldest = true, varint()
	}
	n := varint()
	if b == nil || n < 0 || n > int64(len(b)) { // every finish takes at least 3 bytes
		return r, errBadReport
	}
	r.finishes = make([]finish, 0, n)
	var prev int64
	for range n {
		pub := prev + varint()
		ev := pub + varint()
		l := varint()
		if b == nil || l < 0 || l > int64(len(b)) {
			return r, errBadReport
		}
		r.finishes = append(r.finishes, finish{id: string(b[:l]), publish: pub, event: ev})
		b = b[l:]
		prev = pub
	}
	if len(b) != 0 {
		return r, errBadReport
	}
	return r, nil
}

// reportStore is where reports live: the state table (btReports), or a map
// in tests.
type reportStore interface {
	// write stores one report of member.
	write(ctx context.Context, member string, seq uint64, value []byte) error
	// read returns every report of every member, in sequence order per
	// member.
	read(ctx context.Context) ([]storedReport, error)
	// remove deletes reports that were read.
	remove(ctx context.Context, reports []storedReport) error
}

type storedReport struct {
	member string
	seq    uint64
	value  []byte
}

// btReports keeps the reports of a pipeline in the state table.
type btReports struct {
	table    *bigtable.Table
	pipeline string
}

func qualifier(seq uint64) string { return fmt.Sprintf("%016x", seq) }

func (s btReports) write(ctx context.Context, member string, seq uint64, value []byte) error {
	m := bigtable.NewMutation()
	m.Set(state.FamilyMeta, qualifier(seq), bigtable.Now().TruncateToMilliseconds(), value)
	if err := s.table.Apply(ctx, state.FinishedRow(s.pipeline, member), m); err != nil {
		return fmt.Errorf("report finished messages (row %s): %w", state.FinishedRow(s.pipeline, member), err)
	}
	return nil
}

var reportFilter = bigtable.ChainFilters(
	bigtable.FamilyFilter("^"+regexp.QuoteMeta(state.FamilyMeta)+"$"),
	bigtable.LatestNFilter(1),
)

func (s btReports) read(ctx context.Context) ([]storedReport, error) {
	prefix := state.FinishedPrefix(s.pipeline)
	var out []storedReport
	err := s.table.ReadRows(ctx, bigtable.PrefixRange(prefix), func(row bigtable.Row) bool {
		member := row.Key()[len(prefix):]
		for _, item := range row[state.FamilyMeta] {
			seq, err := strconv.ParseUint(item.Column[len(state.FamilyMeta)+1:], 16, 64)
			if err != nil {
				continue // not a report
			}
			out = append(out, storedReport{member: member, seq: seq, value: item.Value})
		}
		return true
	}, bigtable.RowFilter(reportFilter))
	if err != nil {
		return nil, fmt.Errorf("read the finished messages reported (rows %s*): %w", prefix, err)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].member != out[j].member {
			return out[i].member < out[j].member
		}
		return out[i].seq < out[j].seq
	})
	return out, nil
}

func (s btReports) remove(ctx context.Context, reports []storedReport) error {
	var keys []string
	var muts []*bigtable.Mutation
	for i := 0; i < len(reports); {
		j := i
		m := bigtable.NewMutation()
		for ; j < len(reports) && reports[j].member == reports[i].member; j++ {
			m.DeleteCellsInColumn(state.FamilyMeta, qualifier(reports[j].seq))
		}
		keys = append(keys, state.FinishedRow(s.pipeline, reports[i].member))
		muts = append(muts, m)
		i = j
	}
	errs, err := s.table.ApplyBulk(ctx, keys, muts)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		return fmt.Errorf("delete the finished messages reported: %w", err)
	}
	return nil
}

// reporter is a follower's side: Finished adds to a batch, and the batch
// is written as one report. Idle, it writes an empty report every period
// so that the leader knows what it holds in flight (the startup guard).
type reporter struct {
	store  reportStore
	member string
	oldest func() (time.Time, bool)
	b      *batch.Batcher[finish]

	mu      sync.Mutex
	seq     uint64
	written time.Time // when the last report was written
}

// Bounds of a report: a batch waits at most reportDelay for company, which
// is what a follower's ack waits for in the worst case.
const (
	reportDelay    = 5 * time.Millisecond
	reportMaxItems = 2000
)

func newReporter(s reportStore, member string, oldest func() (time.Time, bool)) *reporter {
	r := &reporter{store: s, member: member, oldest: oldest}
	r.b = batch.New(batch.Config{MaxItems: reportMaxItems, MaxDelay: reportDelay, MaxInFlight: 4}, r.flush)
	// Sequence numbers start at the clock so that a member ID reused by
	// mistake does not overwrite its predecessor's reports.
	r.seq = uint64(time.Now().UnixNano())
	return r
}

// add reports f and returns once the report holding it is durable.
func (r *reporter) add(ctx context.Context, f finish) error {
	return r.b.Add(ctx, f, len(f.id)+16)
}

func (r *reporter) flush(ctx context.Context, items []finish) []error {
	if err := r.write(ctx, items); err != nil {
		errs := make([]error, len(items))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return nil
}

// write writes one report of finishes, with the oldest publish second in
// flight as of now.
func (r *reporter) write(ctx context.Context, finishes []finish) error {
	rep := report{finishes: finishes}
	if r.oldest != nil {
		if t, ok := r.oldest(); ok {
			rep.hasOldest, rep.oldest = true, t.Unix()
		}
	} else {
		rep.hasOldest, rep.oldest = true, 0 // never told: held since 1970
	}
	r.mu.Lock()
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	if err := r.store.write(ctx, r.member, seq, rep.encode(nil)); err != nil {
		return err
	}
	r.mu.Lock()
	r.written = time.Now()
	r.mu.Unlock()
	return nil
}

// heartbeat writes an empty report unless one was written within every.
func (r *reporter) heartbeat(ctx context.Context, every time.Duration) error {
	r.mu.Lock()
	recent := time.Since(r.written) < every
	r.mu.Unlock()
	if recent {
		return nil
	}
	return r.write(ctx, nil)
}

func (r *reporter) close(ctx context.Context) error { return r.b.Close(ctx) }

// peerReports is a leader's side of reports, for one leading term: it
// applies them to the term's estimator and remembers, per member, what the
// member held in flight when it last wrote.
type peerReports struct {
	store reportStore
	self  string
	peers func() []string
	stale time.Duration
	log   *zap.Logger

	mu    sync.Mutex
	heard map[string]*heardFrom
	bad   int64 // malformed reports skipped
}

type heardFrom struct {
	seq    uint64
	oldest int64 // unix ns of the oldest publish second in flight; noEvent for none
	at     time.Time
}

func newPeerReports(s reportStore, self string, peers func() []string, stale time.Duration, log *zap.Logger) *peerReports {
	return &peerReports{store: s, self: self, peers: peers, stale: stale, log: log, heard: map[string]*heardFrom{}}
}

// collect reads every report, applies its finishes to e, and deletes what
// it applied. A failure is logged at debug level and retried at the next
// tick: until then the finishes only hold the watermark back.
func (p *peerReports) collect(ctx context.Context, e *estimator, now time.Time) {
	reports, err := p.store.read(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Debug("cannot read the members' reports; retrying", zap.Error(err))
		}
		return
	}
	if len(reports) == 0 {
		return
	}
	p.mu.Lock()
	for _, sr := range reports {
		r, err := decodeReport(sr.value)
		if err != nil {
			p.bad++
			p.log.Warn("skipping a malformed report", zap.String("member", sr.member), zap.Uint64("seq", sr.seq))
			continue
		}
		for _, f := range r.finishes {
			e.finished(f.id, time.Unix(0, f.publish), time.Unix(0, f.event))
		}
		if sr.member == p.self {
			continue // what this member holds is read directly
		}
		h := p.heard[sr.member]
		if h == nil {
			h = &heardFrom{}
			p.heard[sr.member] = h
		}
		if sr.seq >= h.seq {
			h.seq, h.at, h.oldest = sr.seq, now, noEvent
			if r.hasOldest {
				h.oldest = r.oldest * 1e9
			}
		}
	}
	p.mu.Unlock()
	if err := p.store.remove(ctx, reports); err != nil && ctx.Err() == nil {
		p.log.Debug("cannot delete the members' reports read; they will be read again", zap.Error(err))
	}
}

// oldest returns the oldest publish time (unix ns) the other members hold
// in flight as far as their reports say: noEvent when none holds anything,
// never when a live member has not been heard from within stale (it may
// hold anything).
func (p *peerReports) oldest(now time.Time) int64 {
	var live []string
	if p.peers != nil {
		live = p.peers()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := int64(noEvent)
	for _, id := range live {
		if h := p.heard[id]; h == nil || now.Sub(h.at) > p.stale {
			return never
		}
	}
	for id, h := range p.heard {
		if now.Sub(h.at) > p.stale {
			if !slices.Contains(live, id) {
				delete(p.heard, id) // gone: its membership lapsed
			}
			continue
		}
		out = min(out, h.oldest)
	}
	return out
}
