package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/source"
)

// Class says how exact an invariant is.
type Class string

const (
	// Exact invariants hold whatever the timing: expected equals found.
	Exact Class = "exact"
	// Bounded invariants depend on timing that the campaign does not
	// control (which process saw what before it died, whether a
	// watermark was known): found must lie within the expected bound.
	Bounded Class = "bounded"
	// Info rows are figures without a pass or fail.
	Info Class = "info"
	// Known rows count the effects of a known, unfixed bug that the run
	// was told to tolerate (-tolerate-late-after-fault); they do not fail.
	Known Class = "known bug"
)

// Result is one row of the invariant table.
type Result struct {
	Invariant string
	Class     Class
	Expected  string
	Found     string
	OK        bool
	// Examples are a few of the violations, for the report.
	Examples []string
}

// cell is one version of a cell as read back from the sink table.
type cell struct {
	value []byte
	ts    bigtable.Timestamp
}

// published is what became of one step: its Pub/Sub message ID, when
// it was published, or the publish error.
type published struct {
	id  string
	at  time.Time
	err error
}

// recRuntime is what the publisher fixed for a record at run time.
type recRuntime struct {
	ts string    // the ts attribute of the original, as sent
	et time.Time // the event time it denotes
	// dupET is the event time of the record's VariantDup, once published:
	// an at_least_once pipeline writes it as a version of its own.
	dupET time.Time
}

// dlCopy is one message read from the dead-letter topic's subscription.
type dlCopy struct {
	attrs map[string]string
	data  []byte
}

// wmStats are the samples of the stored watermark (the state table's row
// watermark#PIPELINE, column m:watermark).
type wmStats struct {
	samples   int
	first     time.Time
	last      time.Time
	decreases []string
	malformed []string
}

// observe records one sample of the stored watermark, raw as read.
func (w *wmStats) observe(raw string, at time.Duration) {
	t, err := time.Parse(wmFormat, raw)
	if err != nil || !strings.HasSuffix(raw, "Z") || len(raw) != len("2006-01-02T15:04:05.000Z") {
		w.malformed = append(w.malformed, fmt.Sprintf("%q at +%v", raw, at.Round(time.Millisecond)))
		return
	}
	if w.samples > 0 && t.Before(w.last) {
		w.decreases = append(w.decreases, fmt.Sprintf("%s -> %s at +%v", w.last.Format(wmFormat), raw, at.Round(time.Millisecond)))
	}
	if w.samples == 0 {
		w.first = t
	}
	w.samples++
	if t.After(w.last) {
		w.last = t
	}
}

// procCounters are the counters of one process, named as in the report.
type procCounters struct {
	proc string
	Counters
}

// genRecord is what the campaign saw of one pubsink process.
type genRecord struct {
	gen    int
	child  *child
	how    string        // how it ended: "SIGKILL", "SIGTERM: exit 0", "final: exit 0", ...
	offset time.Duration // its clock offset (PUBSINK_CLOCK_OFFSET)
	// others are the same process's records of the campaign's other
	// pipelines (-mix), in their order from the second: this record is
	// the first pipeline's.
	others []*genRecord

	// last is the last /status read from it: a lower bound of its counts,
	// since its last moments are not seen (a stopped process's HTTP server
	// goes within milliseconds of its last message).
	last Status
	// The /status watermark: samples, decreases, and the stored value
	// sampled before the process started, which its first known value must
	// not be below.
	wmSamples     int
	wmLast        time.Time
	wmDecreases   []string
	storedAtStart time.Time
	startBelow    string

	// startedAt is when the process started, guardOff when /status first
	// showed its watermark tracker's startup guard off, wmFrom when it
	// first showed a watermark, stoppedAt when it was seen to have stopped
	// (offsets from the campaign's start; guardOff and wmFrom 0 while
	// unknown, stoppedAt 0 for a process alive until the final stop).
	startedAt, guardOff, wmFrom, stoppedAt time.Duration
}

// observeStatus records one /status of the process.
func (g *genRecord) observeStatus(st Status, at time.Duration) {
	if st.Tracker != nil && !st.Tracker.StartupGuard && g.guardOff == 0 {
		g.guardOff = at
	}
	if st.Watermark != nil {
		wm := *st.Watermark
		if g.wmSamples == 0 {
			g.wmFrom = at
			if !g.storedAtStart.IsZero() && wm.Before(g.storedAtStart) {
				g.startBelow = fmt.Sprintf("process %d: first watermark %s is below the stored %s read before it started", g.gen, wm.Format(wmFormat), g.storedAtStart.Format(wmFormat))
			}
		}
		if g.wmSamples > 0 && wm.Before(g.wmLast) {
			g.wmDecreases = append(g.wmDecreases, fmt.Sprintf("process %d: %s -> %s at +%v", g.gen, g.wmLast.Format(wmFormat), wm.Format(wmFormat), at.Round(time.Millisecond)))
		}
		g.wmSamples++
		if wm.After(g.wmLast) {
			g.wmLast = wm
		}
	}
	g.last = st
}

// Observed is everything the campaign collected, for Check.
type Observed struct {
	Begin time.Time // the campaign's start: offsets in the report count from it
	// Replicas is how many processes ran the pipeline at once (0 or 1:
	// one).
	Replicas int
	// Pipe is the pipeline observed, whose mode, late-data policy and
	// output decide what it must show; the zero value is defaultPipe.
	Pipe PipeSpec
	// Skew is the largest clock offset of a process (0: none): the times a
	// process stamped (a copy's pubsink_failed_at) may be off by it.
	Skew   time.Duration
	Plan   *Plan
	Steps  []published
	Recs   []recRuntime
	Rows   map[string]map[string][]cell // row key → column → versions
	Copies []dlCopy
	// Malformed are the entries of a table or file output that are no
	// copy: a write that a SIGKILL cut short.
	Malformed int
	// LeftMain and LeftTracking are the messages a Pull found on the main
	// and the tracking subscription after the final stop and the lease.
	LeftMain, LeftTracking int
	Stored                 wmStats
	Gens                   []*genRecord
	// Final is /metrics of each process alive at the end (one per
	// replica) once they had settled, and FinalOK whether every one was
	// read.
	Final   []procCounters
	FinalOK bool
	// Terms are the exit codes after SIGTERM (the final stop included);
	// -1 is a process that had to be killed.
	Terms      []int
	Unexpected []string // processes that exited on their own
	NotReady   []string // restarts that did not become ready
	// GatedLeft are the gated steps never published: their condition (the
	// original's commit, a known watermark) never came.
	GatedLeft []int
	// Orphaned are the gated duplicates and replays dropped because their
	// original was dead-lettered: it will never be committed.
	Orphaned []int
	// Disruptions are when a process was stopped (killed, terminated,
	// exited), the Pub/Sub connections were reset, or a Pub/Sub stall
	// ended.
	Disruptions []time.Time
	// Kills are when a process was killed (SIGKILL) or exited on its own,
	// which may cut a write short; Stops when any process but the final
	// ones stopped (Kills and SIGTERMs): what it did after its last
	// /status is unseen.
	Kills, Stops []time.Time
	// TolerateLateAfterFault counts a valid record dead-lettered as late
	// as a known bug, not a violation, when its message was published
	// before a disruption and judged after it (see lateAfterFault).
	TolerateLateAfterFault bool
	// Resets are when the Pub/Sub connections were reset (also in
	// Disruptions): what the emulator strands comes back then (see
	// strandedByEmulator).
	Resets []time.Time
}

// The emulator's stranded deliveries (doc.go, "Late after a fault"): a
// message that comes back within strandBack after a Pub/Sub reset though
// it was published more than strandAge before it was out of sight far
// longer than any lease (20 s with setup's subscriptions, app's
// message_lease_seconds) and the transit allow.
const (
	strandAge  = 30 * time.Second
	strandBack = 5 * time.Second
)

// isStranded reports whether a message published at p and dead-lettered
// at f came back with a Pub/Sub reset in resets, after being out of sight
// for longer than any lease: stranded by the emulator, not by pubsink.
func isStranded(p, f time.Time, resets []time.Time) bool {
	for _, r := range resets {
		if !f.Before(r) && f.Sub(r) <= strandBack && r.Sub(p) > strandAge {
			return true
		}
	}
	return false
}

// lateAfterFault returns the valid records (by index) and the message IDs
// whose copy says late although the record was on time, and that are
// excused: always those the emulator stranded (isStranded), and with
// o.TolerateLateAfterFault also those published at most a minute before a
// disruption and dead-lettered after it. That was the gap of the
// watermark: a message delivered to a process that died (or to a stream
// that was reset) comes back only when its lease expires; a restarted
// tracker never saw it (the dead process's tracker acked it) and its
// startup guard dropped before the lease expired, so the watermark passed
// the message's event time. stranded counts the first kind.
func lateAfterFault(o *Observed) (recs map[int]bool, msgs map[string]bool, stranded int) {
	recs, msgs = map[int]bool{}, map[string]bool{}
	byMsg := map[string]int{}
	for i, s := range o.Steps {
		if s.id != "" {
			byMsg[s.id] = i
		}
	}
	for _, c := range o.Copies {
		if c.attrs[deadletter.AttrReason] != string(deadletter.Late) {
			continue
		}
		id := c.attrs[deadletter.AttrMessageID]
		si, ok := byMsg[id]
		if !ok || !o.Plan.Records[o.Plan.Steps[si].Rec].Kind.Valid() {
			continue
		}
		p, err1 := time.Parse(time.RFC3339Nano, c.attrs[deadletter.AttrPublishTime])
		f, err2 := time.Parse(time.RFC3339Nano, c.attrs[deadletter.AttrFailedAt])
		if err1 != nil || err2 != nil {
			continue
		}
		if isStranded(p, f, o.Resets) {
			stranded++
			recs[o.Plan.Steps[si].Rec] = true
			msgs[id] = true
			continue
		}
		if !o.TolerateLateAfterFault {
			continue
		}
		for _, d := range o.Disruptions {
			if !p.After(d.Add(time.Second)) && !f.Before(d) && d.Sub(p) <= time.Minute {
				recs[o.Plan.Steps[si].Rec] = true
				msgs[id] = true
				break
			}
		}
	}
	return recs, msgs, stranded
}

// offset writes an RFC 3339 time as an offset from the campaign's start.
func (o *Observed) offset(rfc3339 string) string {
	t, err := time.Parse(time.RFC3339Nano, rfc3339)
	if err != nil || o.Begin.IsZero() {
		return rfc3339
	}
	return fmt.Sprintf("+%.2fs", t.Sub(o.Begin).Seconds())
}

// spec is the pipeline observed.
func (o *Observed) spec() PipeSpec {
	if o.Pipe.Name == "" {
		return defaultPipe
	}
	return o.Pipe
}

// Check evaluates every invariant over o, the one pipeline of a campaign.
func Check(o *Observed) []Result { return CheckAll([]*Observed{o}) }

// CheckAll evaluates every invariant over the observations of a
// campaign's pipelines, one each (they share the workload and the
// processes): the workload's and the processes' rows once, every other
// row for each pipeline, prefixed with "[NAME] " when there are several.
// What a row expects follows the pipeline's mode, late-data policy and
// output (doc.go, "Invariants" and "Mixed campaign"). The change
// pipeline's rows, if it ran (chg), come before the processes' rows.
func CheckAll(obs []*Observed, chg ...*ChangeObserved) []Result {
	var out []Result
	out = append(out, checkWorkload(obs[0])...)
	for _, o := range obs {
		var rs []Result
		rs = append(rs, checkRows(o)...)
		rs = append(rs, checkDeadLetters(o)...)
		rs = append(rs, checkUnacked(o)...)
		rs = append(rs, checkWatermark(o)...)
		rs = append(rs, checkMetrics(o)...)
		if len(obs) > 1 {
			for i := range rs {
				rs[i].Invariant = "[" + o.spec().Name + "] " + rs[i].Invariant
			}
		}
		out = append(out, rs...)
	}
	for _, o := range chg {
		out = append(out, CheckChanges(o)...)
	}
	out = append(out, checkProcesses(obs[0])...)
	return out
}

// examples collects up to maxExamples lines.
type examples struct {
	n     int
	lines []string
}

const maxExamples = 8

func (e *examples) add(format string, args ...any) {
	e.n++
	if len(e.lines) < maxExamples {
		e.lines = append(e.lines, fmt.Sprintf(format, args...))
	}
}

func exact(name string, want, got int, ex *examples) Result {
	r := Result{Invariant: name, Class: Exact, Expected: strconv.Itoa(want), Found: strconv.Itoa(got), OK: want == got}
	if ex != nil {
		r.Examples = ex.lines
	}
	return r
}

func checkWorkload(o *Observed) []Result {
	var failed examples
	for i, s := range o.Steps {
		if s.err != nil {
			failed.add("step %d (%s): %v", i, o.Plan.Steps[i].Variant, s.err)
		}
	}
	// A duplicate of a record judged late after a fault (the known bug)
	// waits for a commit that never comes: that is the bug's effect, not
	// another violation.
	knownLate, _, _ := lateAfterFault(o)
	var gated examples
	for _, i := range o.GatedLeft {
		s := o.Plan.Steps[i]
		if knownLate[s.Rec] {
			continue
		}
		rec := &o.Plan.Records[s.Rec]
		gated.add("step %d, %s of record %d (%s, id %s): its original never showed a dedupe record, or no watermark was stored", i, s.Variant, rec.CID, rec.Kind, short(rec.ID))
	}
	for _, i := range o.Orphaned {
		s := o.Plan.Steps[i]
		if knownLate[s.Rec] {
			continue
		}
		rec := &o.Plan.Records[s.Rec]
		gated.add("step %d, %s of record %d (%s, id %s): its original was dead-lettered", i, s.Variant, rec.CID, rec.Kind, short(rec.ID))
	}
	return []Result{
		exact("publishes that failed", 0, failed.n, &failed),
		exact("gated messages (duplicates, replays, late) left unpublished", 0, gated.n, &gated),
	}
}

// stepsOf groups the published steps by record.
func stepsOf(o *Observed) [][]int {
	by := make([][]int, len(o.Plan.Records))
	for i, s := range o.Plan.Steps {
		if i < len(o.Steps) && o.Steps[i].id != "" {
			by[s.Rec] = append(by[s.Rec], i)
		}
	}
	return by
}

// version is one version a row must hold in each of its columns: at cell
// timestamp ts, data one of payloads and n the matching one of ns.
type version struct {
	ts       bigtable.Timestamp
	payloads [][]byte
	ns       []string
}

// rowCheck checks one row against the versions its record must leave:
// exactly the columns data and n, one version of each per wanted version
// (one per event time among the record's messages written), each cell
// stamped with its event time truncated to milliseconds, and each
// version one of its allowed payloads.
func rowCheck(cols map[string][]cell, wants []version) (versions, stamp, value string) {
	for col, vs := range cols {
		if col != "data" && col != "n" {
			versions = fmt.Sprintf("unexpected column %s", col)
		} else if len(vs) != len(wants) {
			versions = fmt.Sprintf("%d versions of %s, want %d", len(vs), col, len(wants))
		}
	}
	if len(cols["data"]) == 0 || len(cols["n"]) == 0 {
		versions = fmt.Sprintf("columns %v, want data and n", slices.Sorted(mapKeys(cols)))
		return
	}
	if versions != "" {
		return
	}
	at := func(col string, ts bigtable.Timestamp) (cell, bool) {
		for _, c := range cols[col] {
			if c.ts == ts {
				return c, true
			}
		}
		return cell{}, false
	}
	for _, w := range wants {
		d, okd := at("data", w.ts)
		n, okn := at("n", w.ts)
		if !okd || !okn {
			var got []string
			for _, c := range cols["data"] {
				got = append(got, strconv.FormatInt(int64(c.ts), 10))
			}
			stamp = fmt.Sprintf("cell timestamps %s, want one at %d", strings.Join(got, "/"), w.ts)
			if len(cols["n"]) == 1 && len(wants) == 1 {
				stamp = fmt.Sprintf("cell timestamps %d/%d, want %d", cols["data"][0].ts, cols["n"][0].ts, w.ts)
			}
			return
		}
		ok := false
		for i, p := range w.payloads {
			if bytes.Equal(d.value, p) && string(n.value) == w.ns[i] {
				ok = true
			}
		}
		if !ok {
			value = fmt.Sprintf("data %s, n %q at %d; want %s", abbrev(d.value), n.value, w.ts, abbrev(w.payloads[0]))
			return
		}
	}
	return
}

func mapKeys[M ~map[string]V, V any](m M) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func abbrev(b []byte) string {
	if len(b) > 60 {
		return fmt.Sprintf("%q…(%d bytes)", b[:60], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// lateWritten is the row of the late records written (recs, by index)
// instead of dead-lettered: nothing is late to a process that knows no
// watermark. A process reads the stored one before its pipeline runs, and
// late records are published only once one is stored, so only a process
// started before the first store can be blind, and only as a follower (a
// leader knows each watermark before it stores it). So with one process
// the row is exact, 0; with replicas a written late record must have been
// published in a blind span (doc.go, "Late records written").
func lateWritten(o *Observed, steps [][]int, recs []int) Result {
	const name = "late records written (judged before the watermark was known)"
	var ex examples
	if o.Replicas <= 1 {
		for _, i := range recs {
			rec := &o.Plan.Records[i]
			ex.add("late record %d id %s: written, published at %s", rec.CID, short(rec.ID), o.at(steps[i][0]))
		}
		return exact(name, 0, len(recs), &ex)
	}
	// A blind span runs from the start of a process that started with no
	// watermark stored to its first /status showing one or, if it never
	// showed one, to its stop (or the end).
	var blind [][2]time.Duration
	for _, g := range o.Gens {
		if !g.storedAtStart.IsZero() {
			continue
		}
		end := g.wmFrom
		if g.wmSamples == 0 {
			end = g.stoppedAt
			if end == 0 {
				end = math.MaxInt64
			}
		}
		blind = append(blind, [2]time.Duration{g.startedAt, end})
	}
	for _, i := range recs {
		if !o.publishedIn(steps[i], blind) {
			rec := &o.Plan.Records[i]
			ex.add("late record %d id %s: written, published at %s while every process knew a watermark", rec.CID, short(rec.ID), o.at(steps[i][0]))
		}
	}
	return Result{Invariant: name, Class: Bounded,
		Expected: fmt.Sprintf("only those published while a process started before the first store knew no watermark (%d such processes)", len(blind)),
		Found:    fmt.Sprintf("%d, %d of them outside", len(recs), ex.n), OK: ex.n == 0, Examples: ex.lines}
}

// publishedIn reports whether one of the steps was published within one
// of the spans (offsets from the campaign's start).
func (o *Observed) publishedIn(steps []int, spans [][2]time.Duration) bool {
	for _, si := range steps {
		at := o.Steps[si].at.Sub(o.Begin)
		for _, w := range spans {
			if at >= w[0] && at < w[1] {
				return true
			}
		}
	}
	return false
}

// at is when step si was published, as an offset from the campaign's
// start.
func (o *Observed) at(si int) string {
	return fmt.Sprintf("+%.2fs", o.Steps[si].at.Sub(o.Begin).Seconds())
}

func checkRows(o *Observed) []Result {
	spec := o.spec()
	steps := stepsOf(o)
	knownLate, _, _ := lateAfterFault(o)
	var (
		valid, present, dupFirst, raceOne, dupTotal, raceTotal, lateTotal int
		missing, versions, stamps, values, others, lateMissing            examples
		lateRows                                                          []int
	)
	known := map[string]bool{}
	for i := range o.Plan.Records {
		rec := &o.Plan.Records[i]
		if len(steps[i]) == 0 || o.Plan.Steps[steps[i][0]].Variant != VariantOriginal {
			continue // the original was not published
		}
		switch {
		case rec.Kind.Valid():
			valid++
		case rec.Kind == KindLate:
			lateTotal++
		default:
			continue
		}
		known[rec.ID] = true
		cols, ok := o.Rows[rec.ID]
		if !ok {
			switch {
			case knownLate[i]:
				valid-- // judged late: counted by checkDeadLetters
			case rec.Kind.Valid():
				missing.add("record %d (%s) id %s: no row", rec.CID, rec.Kind, short(rec.ID))
			case spec.Late == lateAccept:
				lateMissing.add("late record %d id %s: no row", rec.CID, short(rec.ID))
			}
			continue
		}
		if rec.Kind == KindLate {
			lateRows = append(lateRows, i)
		} else {
			present++
		}
		first := version{ts: bigtable.Time(o.Recs[i].et).TruncateToMilliseconds(), payloads: [][]byte{rec.Payload}, ns: []string{strconv.Itoa(rec.CID)}}
		if rec.Kind == KindRace {
			first.payloads, first.ns = append(first.payloads, rec.Second), append(first.ns, strconv.Itoa(rec.CID+1_000_000_000))
			raceTotal++
		}
		wants := []version{first}
		hasDup := false
		for _, si := range steps[i] {
			hasDup = hasDup || o.Plan.Steps[si].Variant == VariantDup
		}
		if hasDup {
			dupTotal++
			if !spec.ExactlyOnce() {
				// Nothing dedupes: the duplicate is written too, at its own
				// event time, beside the first payload.
				wants = append(wants, version{ts: bigtable.Time(o.Recs[i].dupET).TruncateToMilliseconds(),
					payloads: [][]byte{rec.Second}, ns: []string{strconv.Itoa(rec.CID + 1_000_000_000)}})
			}
		}
		v, s, val := rowCheck(cols, wants)
		if v != "" {
			versions.add("record %d (%s) id %s: %s", rec.CID, rec.Kind, short(rec.ID), v)
			continue
		}
		if s != "" {
			stamps.add("record %d (%s) id %s: %s", rec.CID, rec.Kind, short(rec.ID), s)
		}
		if val != "" {
			values.add("record %d (%s) id %s: %s", rec.CID, rec.Kind, short(rec.ID), val)
			continue
		}
		if hasDup {
			dupFirst++
		}
		if rec.Kind == KindRace {
			raceOne++
		}
	}
	for key := range o.Rows {
		if !known[key] {
			others.add("row %s", short(key))
		}
	}
	checked := present + len(lateRows)
	rowsOK := checked - versions.n
	out := []Result{exact("valid records with a row (less those judged late after a fault, if tolerated)", valid, present, &missing)}
	if spec.ExactlyOnce() {
		out = append(out,
			exact("rows with one version of each cell (data, n)", checked, checked-versions.n, &versions),
			exact("rows whose cells carry the event time truncated to ms", rowsOK, rowsOK-stamps.n, &stamps),
			exact("rows holding their first payload", rowsOK, rowsOK-values.n, &values),
			exact("  of which had a duplicate with another payload (acked unwritten)", dupTotal, dupFirst, nil))
	} else {
		out = append(out,
			exact("rows with one version of each cell per event time of their messages (at_least_once: a duplicate's too)", checked, checked-versions.n, &versions),
			exact("rows whose cells carry their messages' event times truncated to ms", rowsOK, rowsOK-stamps.n, &stamps),
			exact("rows holding their first payload at its event time", rowsOK, rowsOK-values.n, &values),
			exact("  of which had a duplicate with another payload, written as a version of its own (not deduped)", dupTotal, dupFirst, nil))
	}
	out = append(out,
		Result{Invariant: "  of which raced two payloads at one event time: one of them, one version", Class: Bounded,
			Expected: fmt.Sprintf("%d with either payload", raceTotal), Found: strconv.Itoa(raceOne), OK: raceOne == raceTotal},
		exact("rows of no valid or late record (poison, unknown keys)", 0, others.n, &others))
	if spec.Late == lateAccept {
		out = append(out, exact("late records written (late_data: accept)", lateTotal, len(lateRows), &lateMissing))
	} else {
		out = append(out, lateWritten(o, steps, lateRows))
	}
	return out
}

func short(s string) string {
	if len(s) > 24 {
		return fmt.Sprintf("%s…(%d bytes)", s[:16], len(s))
	}
	return s
}

// wantsCopy says whether every message of a record of kind k must be
// dead-lettered by the pipeline: poison and pre-1970 always, late ones
// under late_data: dead_letter only (accept writes them, drop drops them).
func wantsCopy(k Kind, spec PipeSpec) bool {
	return k.Poison() || k == KindPre1970 || (k == KindLate && spec.Late == lateDeadLetter)
}

func checkDeadLetters(o *Observed) []Result {
	spec := o.spec()
	steps := stepsOf(o)
	byMsg := map[string]int{} // message ID → step
	for i, s := range o.Steps {
		if s.id != "" {
			byMsg[s.id] = i
		}
	}
	copies := map[string][]dlCopy{} // by message ID
	knownRecs, knownMsgs, stranded := lateAfterFault(o)
	knownCopies := 0
	var foreign, wrongReason, badAttrs examples
	reasons := map[string]int{}
	for _, c := range o.Copies {
		id := c.attrs[deadletter.AttrMessageID]
		reason := c.attrs[deadletter.AttrReason]
		reasons[reason]++
		si, ok := byMsg[id]
		if !ok {
			foreign.add("copy of message %q (reason %s), which the campaign did not publish", id, reason)
			continue
		}
		step := o.Plan.Steps[si]
		rec := &o.Plan.Records[step.Rec]
		if knownMsgs[id] {
			knownCopies++
			continue
		}
		if !wantsCopy(rec.Kind, spec) {
			foreign.add("copy of message %s, %s of record %d (%s, id %s), reason %s: %s; published %s, dead-lettered %s", id, step.Variant, rec.CID, rec.Kind, short(rec.ID), reason, c.attrs[deadletter.AttrError],
				o.offset(c.attrs[deadletter.AttrPublishTime]), o.offset(c.attrs[deadletter.AttrFailedAt]))
			continue
		}
		if want := rec.Kind.Reason(); deadletter.Reason(reason) != want {
			wrongReason.add("message %s of record %d (%s): reason %s, want %s (%s)", id, rec.CID, rec.Kind, reason, want, c.attrs[deadletter.AttrError])
		}
		if p := copyProblem(c, rec, step, o.Steps[si], spec.Name, o.Skew); p != "" {
			badAttrs.add("message %s of record %d (%s): %s", id, rec.CID, rec.Kind, p)
		}
		copies[id] = append(copies[id], c)
	}

	var poisonMsgs, poisonCopied, lateMsgs, lateCopied, lateWritten int
	var uncopied, lateNowhere examples
	for i := range o.Plan.Records {
		rec := &o.Plan.Records[i]
		switch {
		case rec.Kind.Poison() || rec.Kind == KindPre1970:
			for _, si := range steps[i] {
				poisonMsgs++
				id := o.Steps[si].id
				if len(copies[id]) > 0 {
					poisonCopied++
				} else {
					uncopied.add("message %s, %s of record %d (%s)", id, o.Plan.Steps[si].Variant, rec.CID, rec.Kind)
				}
			}
		case rec.Kind == KindLate && spec.Late == lateDeadLetter:
			_, written := o.Rows[rec.ID]
			for _, si := range steps[i] {
				lateMsgs++
				id := o.Steps[si].id
				switch {
				case len(copies[id]) > 0:
					lateCopied++
				case written:
					lateWritten++
				default:
					lateNowhere.add("message %s of late record %d: neither dead-lettered nor written", id, rec.CID)
				}
			}
		}
	}
	var byReason []string
	for _, r := range deadletter.Reasons {
		byReason = append(byReason, fmt.Sprintf("%s %d", r, reasons[string(r)]))
	}
	ours := len(o.Copies) - foreign.n - knownCopies
	foreignName := "copies of anything else (valid records, unknown messages)"
	if spec.Late != lateDeadLetter {
		foreignName = fmt.Sprintf("copies of anything else (valid records, late records under late_data: %s, unknown messages)", spec.Late)
	}
	out := []Result{
		exact("poison messages (every bad-input kind, pre-1970) with a dead-letter copy", poisonMsgs, poisonCopied, &uncopied),
		exact("copies with their kind's reason", ours, ours-wrongReason.n, &wrongReason),
		exact(foreignName, 0, foreign.n, &foreign),
		exact("copies keeping data, attributes and well-formed pubsink_* attributes", ours, ours-badAttrs.n, &badAttrs),
	}
	if spec.Late == lateDeadLetter {
		out = append(out, Result{Invariant: "late messages dead-lettered (late) or, if judged before the watermark was known, written", Class: Bounded,
			Expected: fmt.Sprintf("%d in one or the other", lateMsgs), Found: fmt.Sprintf("%d + %d", lateCopied, lateWritten),
			OK: lateNowhere.n == 0, Examples: lateNowhere.lines})
	}
	out = append(out, extraCopies(o, copies))
	if spec.Output != deadletter.KindTopic {
		out = append(out, Result{Invariant: fmt.Sprintf("entries of the dead-letter %s that are no copy (a write a SIGKILL cut short)", map[string]string{deadletter.KindTable: "table", deadletter.KindFile: "file"}[spec.Output]),
			Class: Bounded, Expected: fmt.Sprintf("≤ %d SIGKILLs", len(o.Kills)), Found: strconv.Itoa(o.Malformed), OK: o.Malformed <= len(o.Kills)})
	}
	out = append(out, Result{Invariant: "copies by reason", Class: Info, Found: strings.Join(byReason, ", "), OK: true})
	out = append(out, Result{Invariant: fmt.Sprintf("copies of valid records judged late as they came back with a Pub/Sub reset, published over %v before it (the emulator's stranded deliveries)", strandAge), Class: Known,
		Expected: "0 on Pub/Sub", Found: strconv.Itoa(stranded), OK: true})
	if o.TolerateLateAfterFault {
		out = append(out, Result{Invariant: "valid records dead-lettered late, published before a restart or Pub/Sub reset and judged after it", Class: Known,
			Expected: "0 once fixed", Found: fmt.Sprintf("%d records (%d copies)", len(knownRecs), knownCopies), OK: true})
	}
	return out
}

// extraCopies bounds the copies of a message beyond its first. A message
// is copied again only if it comes back after its copy was made (an ack
// lost, a send retried), which takes a disruption: a process stopped or
// exiting, or a Pub/Sub reset. Each does that at most once to a message,
// and only to one unacked at that moment: copied before it, or held across
// it and copied within a lease after. So a message may have as many extra
// copies as there were disruptions from a lease before its first copy on,
// and none more (doc.go, "Extra copies").
func extraCopies(o *Observed, copies map[string][]dlCopy) Result {
	extra := 0
	var over examples
	for _, id := range slices.Sorted(maps.Keys(copies)) { // sorted: the same examples each time
		cs := copies[id]
		if len(cs) < 2 {
			continue
		}
		extra += len(cs) - 1
		var first time.Time
		for _, c := range cs {
			if f, err := time.Parse(time.RFC3339Nano, c.attrs[deadletter.AttrFailedAt]); err == nil && (first.IsZero() || f.Before(first)) {
				first = f
			}
		}
		allowed := 0
		for _, d := range o.Disruptions {
			if !d.Before(first.Add(-source.LeaseExtension - o.Skew)) { // failed_at is the copier's clock
				allowed++
			}
		}
		if len(cs)-1 > allowed {
			over.add("message %s: %d copies, first dead-lettered %s; %d disruptions from a lease before it on", id, len(cs), o.offset(first.Format(time.RFC3339Nano)), allowed)
		}
	}
	return Result{Invariant: "extra copies of one message (redelivered before its ack, or a send retried)", Class: Bounded,
		Expected: fmt.Sprintf("each ≤ disruptions from a lease before its first copy on (%d disruptions)", len(o.Disruptions)),
		Found:    strconv.Itoa(extra), OK: over.n == 0, Examples: over.lines}
}

// copyProblem checks a copy against the message it copies, made by
// pipeline on a clock off by at most skew.
func copyProblem(c dlCopy, rec *Record, step Step, pub published, pipeline string, skew time.Duration) string {
	a := c.attrs
	if a[deadletter.AttrPipeline] != pipeline {
		return fmt.Sprintf("pubsink_pipeline %q", a[deadletter.AttrPipeline])
	}
	if n := len(a[deadletter.AttrError]); n == 0 || n > deadletter.MaxErrorBytes {
		return fmt.Sprintf("pubsink_error of %d bytes", n)
	}
	pt, err1 := time.Parse(time.RFC3339Nano, a[deadletter.AttrPublishTime])
	ft, err2 := time.Parse(time.RFC3339Nano, a[deadletter.AttrFailedAt])
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("times not RFC 3339: %q %q", a[deadletter.AttrPublishTime], a[deadletter.AttrFailedAt])
	}
	if pt.Before(pub.at.Add(-5*time.Second)) || pt.After(pub.at.Add(time.Minute)) {
		return fmt.Sprintf("pubsink_publish_time %s, published at about %s", pt, pub.at.UTC())
	}
	if ft.Before(pt.Add(-time.Second - skew)) {
		return fmt.Sprintf("pubsink_failed_at %s before the publish time %s", ft, pt)
	}
	if a["cid"] != strconv.Itoa(rec.CID) || a["v"] != step.Variant.String() {
		return fmt.Sprintf("attributes cid %q v %q, want %d %s", a["cid"], a["v"], rec.CID, step.Variant)
	}
	if id, ok := a["id"]; ok != (!rec.NoID || rec.EmptyID) || id != rec.ID {
		return fmt.Sprintf("attribute id %q (present %v), want %q", short(id), ok, short(rec.ID))
	}
	if _, ok := a["ts"]; ok == rec.NoTS {
		return fmt.Sprintf("attribute ts present %v", ok)
	}
	want := rec.Payload
	if step.Variant == VariantDup || step.Variant == VariantRace {
		want = rec.Second
	}
	if !bytes.Equal(c.data, want) {
		return fmt.Sprintf("data %s, want %s", abbrev(c.data), abbrev(want))
	}
	return ""
}

func checkUnacked(o *Observed) []Result {
	return []Result{
		exact("messages left unacked on the main subscription after the final stop", 0, o.LeftMain, nil),
		exact("messages left unacked on the tracking subscription after the final stop", 0, o.LeftTracking, nil),
	}
}

func checkWatermark(o *Observed) []Result {
	s := o.Stored
	dec := examples{n: len(s.decreases), lines: head(s.decreases)}
	bad := examples{n: len(s.malformed), lines: head(s.malformed)}
	var gdec, below examples
	samples := 0
	for _, g := range o.Gens {
		samples += g.wmSamples
		for _, d := range g.wmDecreases {
			gdec.add("%s", d)
		}
		if g.startBelow != "" {
			below.add("%s", g.startBelow)
		}
	}
	advanced := s.samples > 0 && s.last.After(s.first)
	return []Result{
		exact(fmt.Sprintf("stored watermark samples that went backwards (of %d)", s.samples), 0, dec.n, &dec),
		exact("stored watermark samples not RFC 3339 UTC with ms", 0, bad.n, &bad),
		{Invariant: "stored watermark advanced during the run", Class: Bounded, Expected: "> first sample",
			Found: fmt.Sprintf("%s -> %s", fmtTime(s.first), fmtTime(s.last)), OK: advanced},
		exact(fmt.Sprintf("/status watermark samples that went backwards within a process (of %d)", samples), 0, gdec.n, &gdec),
		exact("processes whose first watermark was below the stored one", 0, below.n, &below),
	}
}

func head(s []string) []string {
	if len(s) > maxExamples {
		return s[:maxExamples]
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(wmFormat)
}

// finalName names the processes alive at the end in an invariant.
func finalName(n int) string {
	if n == 1 {
		return "final process"
	}
	return fmt.Sprintf("each of the %d final processes (Σ shown)", n)
}

// finished is what a process's counters say it finished.
func finished(f Counters) float64 {
	return f.Committed + f.Duplicate + f.DeadLetteredTotal() + f.Dropped
}

// checkFinal checks the balance of the counters of every process alive at
// the end. Each process must balance on its own: a sum over them could
// hide one process's excess behind another's shortfall. The row shows the
// sums.
func checkFinal(o *Observed) []Result {
	if !o.FinalOK || len(o.Final) == 0 {
		return []Result{{Invariant: "/metrics of every final process read once they settled", Class: Exact, Expected: "read", Found: "not read"}}
	}
	sum := Counters{DeadLettered: map[string]float64{}}
	var unbalanced, undropped examples
	for _, f := range o.Final {
		if f.Received-f.Retried != finished(f.Counters) {
			unbalanced.add("%s: %.0f − %.0f ≠ %.0f + %.0f + %.0f + %.0f", f.proc, f.Received, f.Retried, f.Committed, f.Duplicate, f.DeadLetteredTotal(), f.Dropped)
		}
		if f.Late != f.Dropped {
			undropped.add("%s: late %.0f, dropped %.0f", f.proc, f.Late, f.Dropped)
		}
		sum.add(f.Counters)
	}
	name := finalName(len(o.Final))
	var drop []Result
	if o.spec().Late == lateDrop {
		drop = append(drop, Result{Invariant: name + ": late = dropped (late_data: drop drops every late message)", Class: Exact,
			Expected: fmt.Sprintf("late %.0f", sum.Late), Found: fmt.Sprintf("dropped %.0f", sum.Dropped), OK: undropped.n == 0, Examples: undropped.lines})
	}
	return append([]Result{
		{Invariant: name + ": received − retried = committed + duplicate + dead-lettered + dropped", Class: Exact,
			Expected: fmt.Sprintf("%.0f − %.0f = %.0f", sum.Received, sum.Retried, sum.Received-sum.Retried),
			Found:    fmt.Sprintf("%.0f + %.0f + %.0f + %.0f = %.0f", sum.Committed, sum.Duplicate, sum.DeadLetteredTotal(), sum.Dropped, finished(sum)),
			OK:       unbalanced.n == 0, Examples: unbalanced.lines},
		// In-flight gauges are never negative: a sum of 0 is 0 in each.
		exact(name+": messages in flight once settled", 0, int(sum.InFlight), nil),
	}, drop...)
}

func checkMetrics(o *Observed) []Result {
	spec := o.spec()
	out := checkFinal(o)

	var committed, resumed, dropped, duplicate, late, received int64
	dl := map[string]int64{}
	var overcounted examples
	for _, g := range o.Gens {
		st := g.last
		committed += st.Committed
		resumed += st.Resumed
		dropped += st.Dropped
		duplicate += st.Duplicate
		late += st.Late
		received += st.Received
		var dlg int64
		for r, n := range st.DeadLettered {
			dl[r] += n
			dlg += n
		}
		if done := st.Committed + st.Duplicate + dlg + st.Dropped; done > st.Received-st.Retried {
			overcounted.add("process %d: %d + %d + %d + %d > %d − %d", g.gen, st.Committed, st.Duplicate, dlg, st.Dropped, st.Received, st.Retried)
		}
	}

	// Across processes: the last counts read of each (a killed process's
	// last moments are not seen, so these are lower bounds of what it did).
	rows := 0
	for i := range o.Plan.Records {
		if _, ok := o.Rows[o.Plan.Records[i].ID]; ok && (o.Plan.Records[i].Kind.Valid() || o.Plan.Records[i].Kind == KindLate) {
			rows++
		}
	}
	if spec.ExactlyOnce() {
		// A resumed delivery finished the work of an earlier delivery of its
		// message, whose claim decided the key: that one may have committed
		// too (its ack was lost, or it was paused and finished late).
		first := committed - resumed
		out = append(out, Result{Invariant: "Σ (committed − resumed) over processes ≤ rows written (no key committed twice)", Class: Bounded,
			Expected: fmt.Sprintf("≤ %d", rows), Found: fmt.Sprintf("%d (%d − %d)", first, committed, resumed), OK: first <= int64(rows)})
	} else {
		out = append(out,
			exact("processes that finished more than received − retried (a write again must be a redelivery, counted)", 0, overcounted.n, &overcounted),
			exact("Σ duplicate over processes (at_least_once never dedupes)", 0, int(duplicate), nil))
	}
	out = append(out, deadLetteredWithin(o, dl))
	if spec.Late == lateDrop {
		out = append(out, droppedLate(o, dropped))
	} else {
		out = append(out, exact(fmt.Sprintf("Σ dropped over processes (late_data: %s never drops)", spec.Late), 0, int(dropped), nil))
	}
	if spec.ExactlyOnce() {
		out = append(out, Result{Invariant: "commits not seen by a scrape (killed processes' last moments)", Class: Info, Found: strconv.FormatInt(int64(rows)-committed, 10), OK: true})
	} else {
		// Duplicates are allowed here, and counted: every delivery is, and
		// each written one is a commit. What the counts show of them (lower
		// bounds: a killed process's last moments are unseen).
		valid, published := 0, 0
		for i, s := range o.Plan.Steps {
			if i < len(o.Steps) && o.Steps[i].id != "" {
				published++
				if o.Plan.Records[s.Rec].Kind.Valid() {
					valid++
				}
			}
		}
		out = append(out,
			Result{Invariant: "valid messages written more than once (Σ committed − valid messages published; below 0: commits of stopped processes unseen)", Class: Info,
				Found: fmt.Sprintf("%d (%d − %d)", committed-int64(valid), committed, valid), OK: true},
			Result{Invariant: "redeliveries (Σ received − messages published; below 0: deliveries of stopped processes unseen)", Class: Info,
				Found: fmt.Sprintf("%d (%d − %d)", received-int64(published), received, published), OK: true})
	}
	if spec.Late == lateAccept {
		out = append(out, Result{Invariant: "late messages accepted (Σ late over processes)", Class: Info, Found: strconv.FormatInt(late, 10), OK: true})
	}
	return out
}

// deadLetteredWithin bounds what the processes counted dead-lettered, per
// reason, by what the output holds: a topic or a file keeps every copy;
// a table keeps one row per message, which a second copy rewrites, so
// each row allows a count of one more per disruption from a lease before
// its message's publication on (doc.go, "Extra copies").
func deadLetteredWithin(o *Observed, dl map[string]int64) Result {
	allowed := map[string]int64{}
	var total int64
	for _, c := range o.Copies {
		n := int64(1)
		if o.spec().Output == deadletter.KindTable {
			if pt, err := time.Parse(time.RFC3339Nano, c.attrs[deadletter.AttrPublishTime]); err == nil {
				for _, d := range o.Disruptions {
					if !d.Before(pt.Add(-source.LeaseExtension)) {
						n++
					}
				}
			}
		}
		allowed[c.attrs[deadletter.AttrReason]] += n
		total += n
	}
	var over examples
	var sum int64
	for _, r := range deadletter.Reasons {
		sum += dl[string(r)]
		if dl[string(r)] > allowed[string(r)] {
			over.add("%s: counted %d, the output allows %d", r, dl[string(r)], allowed[string(r)])
		}
	}
	name := "Σ dead-lettered over processes ≤ copies in the output, per reason"
	if o.spec().Output == deadletter.KindTable {
		name = "Σ dead-lettered over processes ≤ what the table's rows allow, per reason (one row per message; a copy again rewrites it)"
	}
	return Result{Invariant: name, Class: Bounded, Expected: fmt.Sprintf("≤ %d", total), Found: strconv.FormatInt(sum, 10), OK: over.n == 0, Examples: over.lines}
}

// droppedLate bounds the drops counted over processes under late_data:
// drop: every late message neither written (by a process that knew no
// watermark) nor copied was dropped, and counted, by some process; only a
// process that stopped soon after (within two leases of the publication,
// a redelivery included), after its last /status, can have done so
// unseen. Each drop acks, so a message is dropped again only after a
// disruption.
func droppedLate(o *Observed, dropped int64) Result {
	copied := map[string]bool{}
	for _, c := range o.Copies {
		copied[c.attrs[deadletter.AttrMessageID]] = true
	}
	msgs, need, excused := 0, 0, 0
	for i, s := range o.Plan.Steps {
		if i >= len(o.Steps) || o.Steps[i].id == "" || o.Plan.Records[s.Rec].Kind != KindLate {
			continue
		}
		msgs++
		if _, written := o.Rows[o.Plan.Records[s.Rec].ID]; written || copied[o.Steps[i].id] {
			continue
		}
		need++
		p := o.Steps[i].at
		for _, k := range o.Stops {
			if !k.Before(p) && k.Sub(p) <= 2*lease {
				excused++
				break
			}
		}
	}
	lo, hi := int64(need-excused), int64(msgs)*int64(1+len(o.Disruptions))
	return Result{Invariant: "Σ dropped over processes (late_data: drop): every late message neither written nor copied, counted", Class: Bounded,
		Expected: fmt.Sprintf("%d..%d (%d to drop, %d of them shortly before a process stopped)", lo, hi, need, excused),
		Found:    strconv.FormatInt(dropped, 10), OK: dropped >= lo && dropped <= hi}
}

func checkProcesses(o *Observed) []Result {
	zero := 0
	var bad examples
	for i, code := range o.Terms {
		if code == 0 {
			zero++
		} else {
			bad.add("SIGTERM %d: exit %d", i+1, code)
		}
	}
	un := examples{n: len(o.Unexpected), lines: head(o.Unexpected)}
	nr := examples{n: len(o.NotReady), lines: head(o.NotReady)}
	return []Result{
		exact("SIGTERMs (the final stop included) that exited 0", len(o.Terms), zero, &bad),
		exact("processes that exited on their own", 0, un.n, &un),
		exact("restarts that did not become ready", 0, nr.n, &nr),
		{Invariant: "pubsink processes run", Class: Info, Found: strconv.Itoa(len(o.Gens)), OK: true},
	}
}

// Passed reports whether every result holds.
func Passed(rs []Result) bool {
	for _, r := range rs {
		if !r.OK {
			return false
		}
	}
	return true
}

// PrintTable writes the results as a table, then the examples of every
// violation.
func PrintTable(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "invariant\tclass\texpected\tfound\tok")
	for _, r := range rs {
		ok := "ok"
		switch {
		case r.Class == Info || r.Class == Known:
			ok = "-"
		case !r.OK:
			ok = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Invariant, r.Class, r.Expected, r.Found, ok)
	}
	tw.Flush()
	for _, r := range rs {
		if r.OK || len(r.Examples) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nFAIL %s:\n", r.Invariant)
		for _, e := range r.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}
