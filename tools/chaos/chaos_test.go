package main

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/source"
)

// These tests cover the campaign's pure parts: the seeded plan and
// schedule, and the invariant checker against observations made up here.
// The campaign itself runs the emulators and is run by .ci/run (go run
// ./tools/chaos -short), not by go test.

var testWorkload = WorkloadConfig{Messages: 3000, BigPayloads: 2, LateBursts: 3, Band: 5 * time.Second}

func TestPlanIsTheSameForTheSameSeed(t *testing.T) {
	a, b := NewPlan(7, testWorkload), NewPlan(7, testWorkload)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of seed 7 differ")
	}
	if c := NewPlan(8, testWorkload); reflect.DeepEqual(a.Steps, c.Steps) {
		t.Fatal("seeds 7 and 8 give the same steps")
	}
}

func TestPlanHasEveryKindAndVariant(t *testing.T) {
	p := NewPlan(1, testWorkload)
	if len(p.Steps) < testWorkload.Messages {
		t.Fatalf("%d steps, want at least %d", len(p.Steps), testWorkload.Messages)
	}
	kinds := map[Kind]int{}
	for _, r := range p.Records {
		kinds[r.Kind]++
		switch r.Kind {
		case KindBigKey:
			if len(r.ID) != btsink.MaxKeyBytes {
				t.Errorf("big key of %d bytes, want exactly %d", len(r.ID), btsink.MaxKeyBytes)
			}
		case KindTooLarge:
			if len(r.ID) <= btsink.MaxKeyBytes {
				t.Errorf("too-large key of %d bytes, want over %d", len(r.ID), btsink.MaxKeyBytes)
			}
		case KindBigPayload:
			if len(r.Payload) < 1<<20 || len(r.Payload) > 3<<20 {
				t.Errorf("big payload of %d bytes, want 1-3 MB", len(r.Payload))
			}
		}
	}
	for k := range numKinds {
		if kinds[k] == 0 {
			t.Errorf("no record of kind %s", k)
		}
	}
	if kinds[KindBigPayload] != testWorkload.BigPayloads {
		t.Errorf("%d big payloads, want %d", kinds[KindBigPayload], testWorkload.BigPayloads)
	}
	variants := map[Variant]int{}
	first := map[int]int{}
	for i, s := range p.Steps {
		variants[s.Variant]++
		if s.Variant == VariantOriginal {
			if _, dup := first[s.Rec]; dup {
				t.Errorf("record %d has two originals", s.Rec)
			}
			first[s.Rec] = i
			continue
		}
		if at, ok := first[s.Rec]; !ok || at > i {
			t.Errorf("step %d (%s of record %d) comes before its original", i, s.Variant, s.Rec)
		}
		if (s.Variant == VariantDup || s.Variant == VariantRace) && p.Records[s.Rec].Second == nil {
			t.Errorf("step %d (%s) has no second payload", i, s.Variant)
		}
	}
	for v := VariantOriginal; v <= VariantRace; v++ {
		if variants[v] == 0 {
			t.Errorf("no %s message", v)
		}
	}
}

func TestFormatTSIsWhatAutoReads(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	for f, want := range map[TimeFormat]string{
		TimeMillis:  "1778051289123",
		TimeRFC3339: "2026-05-06T07:08:09.123456Z",
		TimeOffset:  "2026-05-06T09:08:09.123456789+02:00",
	} {
		got, et := FormatTS(at, f)
		if got != want {
			t.Errorf("format %d: %q, want %q", f, got, want)
		}
		if bigtable.Time(et).TruncateToMilliseconds() != bigtable.Time(at).TruncateToMilliseconds() {
			t.Errorf("format %d: event time %v, want %v to the millisecond", f, et, at)
		}
	}
}

func TestScheduleHasEveryKindWithinTheWorkload(t *testing.T) {
	fc := FaultConfig{Count: int(numFaultKinds), Duration: time.Minute, MaxStall: 10 * time.Second}
	s := NewSchedule(3, fc)
	if !reflect.DeepEqual(s, NewSchedule(3, fc)) {
		t.Fatal("two schedules of seed 3 differ")
	}
	kinds := map[FaultKind]int{}
	for i, f := range s {
		kinds[f.Kind]++
		if f.At < fc.Duration/10 || f.At > fc.Duration*85/100 {
			t.Errorf("fault %d at %v, outside 10%%..85%% of %v", i, f.At, fc.Duration)
		}
		if i > 0 && f.At < s[i-1].At {
			t.Errorf("fault %d at %v comes before fault %d at %v", i, f.At, i-1, s[i-1].At)
		}
		if (f.Kind == FaultBigtableStall || f.Kind == FaultPubSubStall) && (f.Dur < time.Second || f.Dur > fc.MaxStall) {
			t.Errorf("stall of %v, want 1s..%v", f.Dur, fc.MaxStall)
		}
	}
	for k := range numFaultKinds {
		if kinds[k] != 1 {
			t.Errorf("%d faults of kind %s, want 1", kinds[k], k)
		}
	}
	long := NewSchedule(3, FaultConfig{Count: 24, Duration: 6 * time.Minute, MaxStall: 30 * time.Second})
	if len(long) != 24 {
		t.Fatalf("%d faults, want 24", len(long))
	}
}

// perfect makes the observation of a run where pubsink did everything
// right: a row for every valid record, one copy per poison and late
// message, nothing left, a watermark that only rises, balanced metrics.
func perfect(t *testing.T, seed uint64) *Observed {
	t.Helper()
	return perfectFor(t, seed, PipeSpec{})
}

// perfectFor is perfect for a pipeline of spec (the zero value:
// defaultPipe): what its mode and late-data policy promise. exactly_once
// acks a duplicate unwritten, at_least_once writes it (a dup as a version
// of its own); late_data: dead_letter copies a late message, accept
// writes it, drop drops it.
func perfectFor(t *testing.T, seed uint64, spec PipeSpec) *Observed {
	t.Helper()
	p := NewPlan(seed, WorkloadConfig{Messages: 1500, BigPayloads: 1, LateBursts: 2, Band: 5 * time.Second})
	begin := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	o := &Observed{Begin: begin, Replicas: 1, Pipe: spec, Plan: p, Steps: make([]published, len(p.Steps)), Recs: make([]recRuntime, len(p.Records)),
		Rows: map[string]map[string][]cell{}}
	spec = o.spec()
	var committed, duplicate, dropped, late int64
	dl := map[string]int64{}
	for i, s := range p.Steps {
		rec := &p.Records[s.Rec]
		at := begin.Add(time.Duration(i) * 10 * time.Millisecond)
		o.Steps[i] = published{id: strconv.Itoa(i + 1), at: at}
		if s.Variant == VariantOriginal {
			_, et := FormatTS(at.Add(-rec.EventLag), rec.Format)
			if rec.Kind == KindPre1970 {
				et = time.UnixMilli(-1000)
			}
			o.Recs[s.Rec] = recRuntime{et: et}
		}
		if s.Variant == VariantDup {
			_, o.Recs[s.Rec].dupET = FormatTS(at, rec.Format)
		}
		if rec.Kind == KindLate {
			late++
		}
		switch {
		case rec.Kind.Valid() && s.Variant == VariantOriginal:
			o.Rows[rec.ID] = rowOf(o, rec)
			committed++
		case rec.Kind.Valid() && spec.ExactlyOnce():
			duplicate++
		case rec.Kind.Valid():
			committed++
			if s.Variant == VariantDup {
				addDupVersion(o, rec)
			}
		case rec.Kind == KindLate && spec.Late == lateAccept:
			o.Rows[rec.ID] = rowOf(o, rec)
			committed++
		case rec.Kind == KindLate && spec.Late == lateDrop:
			dropped++
		default:
			reason := rec.Kind.Reason()
			attrs := map[string]string{
				"cid": strconv.Itoa(rec.CID), "v": s.Variant.String(),
				deadletter.AttrReason: string(reason), deadletter.AttrError: "why", deadletter.AttrPipeline: spec.Name,
				deadletter.AttrMessageID:   o.Steps[i].id,
				deadletter.AttrPublishTime: at.Format(time.RFC3339Nano), deadletter.AttrFailedAt: at.Add(time.Second).Format(time.RFC3339Nano),
			}
			if !rec.NoID || rec.EmptyID {
				attrs["id"] = rec.ID
			}
			if !rec.NoTS {
				attrs["ts"] = "x"
			}
			o.Copies = append(o.Copies, dlCopy{attrs: attrs, data: rec.Payload})
			dl[string(reason)]++
		}
	}
	for i := range 20 {
		o.Stored.observe(begin.Add(time.Duration(i)*time.Second).Format(wmFormat), time.Duration(i)*time.Second)
	}
	g := &genRecord{gen: 1}
	g.last = Status{Received: int64(len(p.Steps)), Committed: committed, Duplicate: duplicate, Dropped: dropped, Late: late, DeadLettered: dl}
	o.Gens = []*genRecord{g}
	final := Counters{Received: float64(len(p.Steps)), Committed: float64(committed), Duplicate: float64(duplicate), Dropped: float64(dropped),
		Late: float64(late), DeadLettered: map[string]float64{}}
	for r, n := range dl {
		final.DeadLettered[r] = float64(n)
	}
	o.Final = []procCounters{{proc: "process 1", Counters: final}}
	o.FinalOK = true
	o.Terms = []int{0}
	return o
}

// addDupVersion adds to rec's row the version its dup writes in
// at_least_once mode: the second payload at the dup's event time.
func addDupVersion(o *Observed, rec *Record) {
	ts := bigtable.Time(o.Recs[rec.CID].dupET).TruncateToMilliseconds()
	row := o.Rows[rec.ID]
	row["data"] = append(row["data"], cell{value: rec.Second, ts: ts})
	row["n"] = append(row["n"], cell{value: []byte(strconv.Itoa(rec.CID + 1_000_000_000)), ts: ts})
}

// perfectMix is perfect for the two pipelines of a -mix campaign.
func perfectMix(t *testing.T) []*Observed {
	t.Helper()
	var out []*Observed
	for _, p := range mixPipes(t.TempDir()) {
		out = append(out, perfectFor(t, 11, p))
	}
	return out
}

func failing(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if !r.OK {
			out = append(out, r.Invariant)
		}
	}
	return out
}

// failsExactly fails t unless the failing invariants f are those that
// contain one of want, and each of want is in one: a spoil case breaks
// what it means to and nothing else.
func failsExactly(t *testing.T, f, want []string) {
	t.Helper()
	for _, w := range want {
		if !slices.ContainsFunc(f, func(inv string) bool { return strings.Contains(inv, w) }) {
			t.Errorf("%q holds; want it to fail (failing: %q)", w, f)
		}
	}
	for _, inv := range f {
		if !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(inv, w) }) {
			t.Errorf("%q fails too; want only %q", inv, want)
		}
	}
}

func TestCheckPassesACorrectRun(t *testing.T) {
	o := perfect(t, 11)
	rs := Check(o)
	if f := failing(rs); len(f) > 0 {
		var b strings.Builder
		PrintTable(&b, rs)
		t.Fatalf("a correct run fails %v:\n%s", f, b.String())
	}
}

// rowOf is the row a correct write of rec's original leaves.
func rowOf(o *Observed, rec *Record) map[string][]cell {
	ts := bigtable.Time(o.Recs[rec.CID].et).TruncateToMilliseconds()
	return map[string][]cell{
		"data": {{value: rec.Payload, ts: ts}},
		"n":    {{value: []byte(strconv.Itoa(rec.CID)), ts: ts}},
	}
}

// firstOf returns the first record of kind k.
func firstOf(t *testing.T, o *Observed, k Kind) *Record {
	t.Helper()
	for i := range o.Plan.Records {
		if o.Plan.Records[i].Kind == k {
			return &o.Plan.Records[i]
		}
	}
	t.Fatalf("no record of kind %s", k)
	return nil
}

// dupRecord returns a record that has a VariantDup step.
func dupRecord(t *testing.T, o *Observed) *Record {
	t.Helper()
	for _, s := range o.Plan.Steps {
		if s.Variant == VariantDup {
			return &o.Plan.Records[s.Rec]
		}
	}
	t.Fatal("no dup in the plan")
	return nil
}

// loneRecord returns a record of kind k with no message but its original,
// so that only its own row can be at fault.
func loneRecord(t *testing.T, o *Observed, k Kind) *Record {
	t.Helper()
	msgs := make([]int, len(o.Plan.Records))
	for _, s := range o.Plan.Steps {
		msgs[s.Rec]++
	}
	for i := range o.Plan.Records {
		if o.Plan.Records[i].Kind == k && msgs[i] == 1 {
			return &o.Plan.Records[i]
		}
	}
	t.Fatalf("no lone record of kind %s", k)
	return nil
}

// copyOf returns the index in o.Copies of the first copy of a record of
// kind k.
func copyOf(t *testing.T, o *Observed, k Kind) int {
	t.Helper()
	for i, c := range o.Copies {
		if cid, err := strconv.Atoi(c.attrs["cid"]); err == nil && o.Plan.Records[cid].Kind == k {
			return i
		}
	}
	t.Fatalf("no copy of a record of kind %s", k)
	return 0
}

// unpublish leaves the first step of variant v of a valid record
// unpublished, as a failed or a gated publish does, and takes the
// duplicate it would have been out of the counts.
func unpublish(t *testing.T, o *Observed, v Variant) int {
	t.Helper()
	for i, s := range o.Plan.Steps {
		if s.Variant == v && o.Plan.Records[s.Rec].Kind.Valid() {
			o.Steps[i] = published{}
			o.Gens[0].last.Received--
			o.Gens[0].last.Duplicate--
			o.Final[0].Received--
			o.Final[0].Duplicate--
			return i
		}
	}
	t.Fatalf("no %s of a valid record", v)
	return 0
}

// uncopy removes the first copy of a record of kind k, and its count from
// the process's last /status (a scrape that missed it), so that only the
// missing copy shows. It returns the record.
func uncopy(t *testing.T, o *Observed, k Kind) *Record {
	t.Helper()
	i := copyOf(t, o, k)
	c := o.Copies[i]
	o.Copies = append(o.Copies[:i], o.Copies[i+1:]...)
	o.Gens[0].last.DeadLettered[c.attrs[deadletter.AttrReason]]--
	cid, _ := strconv.Atoi(c.attrs["cid"])
	return &o.Plan.Records[cid]
}

// relabel gives the first copy of a record of kind k reason r instead,
// and moves the process's counts with it (a process counts the reason it
// gave), so that only the reason shows.
func relabel(t *testing.T, o *Observed, k Kind, r deadletter.Reason) {
	t.Helper()
	c := o.Copies[copyOf(t, o, k)]
	old := c.attrs[deadletter.AttrReason]
	c.attrs[deadletter.AttrReason] = string(r)
	o.Gens[0].last.DeadLettered[old]--
	o.Gens[0].last.DeadLettered[string(r)]++
	o.Final[0].DeadLettered[old]--
	o.Final[0].DeadLettered[string(r)]++
}

// writeLate makes the first late record a row instead of a copy, as a
// process that judged it before it knew a watermark does, and returns the
// index of its message.
func writeLate(t *testing.T, o *Observed) int {
	t.Helper()
	rec := uncopy(t, o, KindLate)
	o.Rows[rec.ID] = rowOf(o, rec)
	for i, s := range o.Plan.Steps {
		if s.Rec == rec.CID {
			return i
		}
	}
	t.Fatal("the late record has no step")
	return 0
}

// copyAgain adds another copy of the first message copied.
func copyAgain(t *testing.T, o *Observed) {
	t.Helper()
	c := o.Copies[0]
	o.Copies = append(o.Copies, dlCopy{attrs: maps.Clone(c.attrs), data: c.data})
}

// failedAt is when the first copy says its message was dead-lettered.
func failedAt(t *testing.T, o *Observed) time.Time {
	t.Helper()
	f, err := time.Parse(time.RFC3339Nano, o.Copies[0].attrs[deadletter.AttrFailedAt])
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// violation is a spoil case of TestCheckCatchesEachViolation: a correct
// run (perfect) changed so that one invariant fails. want names every row
// that must fail then (substrings of their invariants); no other may.
// Where a row cannot fail alone (a row of which another is a part), want
// names both.
type violation struct {
	name  string
	spoil func(t *testing.T, o *Observed)
	want  []string
}

// violations has a case for every row of the table but the figures
// (TestEveryInvariantHasASpoilCase).
var violations = []violation{
	{"a publish that failed", func(t *testing.T, o *Observed) {
		i := unpublish(t, o, VariantEcho)
		o.Steps[i].err = errors.New("rpc error: code = DeadlineExceeded")
	}, []string{"publishes that failed"}},
	{"a gated message never published", func(t *testing.T, o *Observed) {
		o.GatedLeft = []int{unpublish(t, o, VariantReplay)}
	}, []string{"gated messages"}},
	{"a valid record lost", func(t *testing.T, o *Observed) {
		delete(o.Rows, firstOf(t, o, KindBigKey).ID)
		o.Gens[0].last.Committed-- // its commit unseen: only the row is missing
	}, []string{"valid records with a row"}},
	{"a second version of a cell", func(t *testing.T, o *Observed) {
		r := loneRecord(t, o, KindUnique)
		c := o.Rows[r.ID]["data"]
		o.Rows[r.ID]["data"] = append(c, cell{value: []byte("again"), ts: c[0].ts + 1000})
	}, []string{"one version of each cell"}},
	{"a cell stamped with the write time", func(t *testing.T, o *Observed) {
		r := firstOf(t, o, KindInBand)
		o.Rows[r.ID]["n"][0].ts += 1000
	}, []string{"event time truncated"}},
	{"a row holding another payload", func(t *testing.T, o *Observed) {
		o.Rows[loneRecord(t, o, KindUnique).ID]["data"][0].value = []byte(`{"n":0}`)
	}, []string{"first payload"}},
	{"a duplicate's payload written over the first", func(t *testing.T, o *Observed) {
		r := dupRecord(t, o)
		o.Rows[r.ID]["data"][0].value = r.Second
	}, []string{"first payload", "had a duplicate"}},
	{"a race row mixing its two payloads", func(t *testing.T, o *Observed) {
		// One event time, so one cell timestamp: two writes that land
		// cell by cell leave data of one and n of the other.
		r := firstOf(t, o, KindRace)
		o.Rows[r.ID]["data"][0].value = r.Second
	}, []string{"first payload", "raced two payloads"}},
	{"a poison record written", func(t *testing.T, o *Observed) {
		o.Rows[firstOf(t, o, KindMissingField).ID] = map[string][]cell{"data": {{value: []byte("x")}}, "n": {{value: []byte("1")}}}
	}, []string{"rows of no valid or late record"}},
	{"a late record written by the only process", func(t *testing.T, o *Observed) {
		writeLate(t, o)
	}, []string{"late records written"}},
	{"with replicas, a late record written once every process knew a watermark", func(t *testing.T, o *Observed) {
		withReplicas(o, 3)
		writeLate(t, o)
		wm := o.Begin
		o.Gens[0].observeStatus(Status{Watermark: &wm}, 0)
	}, []string{"late records written"}},
	{"with replicas, a late record written after the process that knew no watermark stopped", func(t *testing.T, o *Observed) {
		withReplicas(o, 3)
		writeLate(t, o)
		o.Gens[0].stoppedAt = time.Millisecond
	}, []string{"late records written"}},
	{"with replicas, a late record written by a process started after the first store", func(t *testing.T, o *Observed) {
		// Open loads the stored watermark: a process that started with
		// one stored is never blind, however long it shows none.
		withReplicas(o, 3)
		writeLate(t, o)
		wm := o.Begin
		o.Gens[0].observeStatus(Status{Watermark: &wm}, 0)
		o.Gens = append(o.Gens, &genRecord{gen: 2, storedAtStart: o.Begin})
	}, []string{"late records written"}},
	{"a poison message without a copy", func(t *testing.T, o *Observed) {
		uncopy(t, o, KindInvalidPayload)
	}, []string{"poison messages"}},
	{"a copy with the wrong reason", func(t *testing.T, o *Observed) {
		relabel(t, o, KindTooLarge, deadletter.SinkRejected)
	}, []string{"their kind's reason"}},
	{"a pre-1970 record rejected by the sink", func(t *testing.T, o *Observed) {
		relabel(t, o, KindPre1970, deadletter.SinkRejected)
	}, []string{"their kind's reason"}},
	{"a pre-1970 record judged late", func(t *testing.T, o *Observed) {
		relabel(t, o, KindPre1970, deadletter.Late)
	}, []string{"their kind's reason"}},
	{"a copy of a valid record", func(t *testing.T, o *Observed) {
		c := o.Copies[0]
		attrs := maps.Clone(c.attrs)
		attrs[deadletter.AttrMessageID] = o.Steps[0].id
		o.Copies = append(o.Copies, dlCopy{attrs: attrs, data: c.data})
	}, []string{"copies of anything else"}},
	{"a copy without the original attributes", func(t *testing.T, o *Observed) {
		delete(o.Copies[0].attrs, "cid")
	}, []string{"well-formed"}},
	{"a late message neither dead-lettered nor written", func(t *testing.T, o *Observed) {
		uncopy(t, o, KindLate)
	}, []string{"late messages dead-lettered"}},
	{"a message copied twice with no disruption", copyAgain, []string{"extra copies"}},
	{"a message copied twice, the only disruption a minute before", func(t *testing.T, o *Observed) {
		copyAgain(t, o)
		o.Disruptions = []time.Time{failedAt(t, o).Add(-time.Minute)}
	}, []string{"extra copies"}},
	{"a message copied three times after one disruption", func(t *testing.T, o *Observed) {
		copyAgain(t, o)
		copyAgain(t, o)
		o.Disruptions = []time.Time{failedAt(t, o).Add(time.Second)}
	}, []string{"extra copies"}},
	{"a message left on the main subscription", func(t *testing.T, o *Observed) { o.LeftMain = 1 }, []string{"main subscription"}},
	{"a message left on the tracking subscription", func(t *testing.T, o *Observed) { o.LeftTracking = 2 }, []string{"tracking subscription"}},
	{"the stored watermark going back", func(t *testing.T, o *Observed) {
		o.Stored.observe(o.Begin.Format(wmFormat), time.Minute)
	}, []string{"went backwards (of"}},
	{"a stored watermark without milliseconds", func(t *testing.T, o *Observed) {
		o.Stored.observe(o.Begin.Add(time.Hour).Format(time.RFC3339), time.Minute)
	}, []string{"RFC 3339"}},
	{"a stored watermark that never moved", func(t *testing.T, o *Observed) {
		o.Stored = wmStats{}
		for i := range 20 {
			o.Stored.observe(o.Begin.Format(wmFormat), time.Duration(i)*time.Second)
		}
	}, []string{"advanced during the run"}},
	{"a process's watermark going back", func(t *testing.T, o *Observed) {
		g := o.Gens[0]
		a, b := o.Begin.Add(time.Minute), o.Begin
		g.observeStatus(Status{Watermark: &a}, time.Second)
		g.observeStatus(Status{Watermark: &b}, 2*time.Second)
	}, []string{"within a process"}},
	{"a process's first watermark below the stored one", func(t *testing.T, o *Observed) {
		g := o.Gens[0]
		g.storedAtStart = o.Begin.Add(time.Minute)
		wm := o.Begin
		g.observeStatus(Status{Watermark: &wm}, time.Second)
	}, []string{"below the stored one"}},
	{"the final /metrics not read", func(t *testing.T, o *Observed) { o.FinalOK = false }, []string{"/metrics of every final process read"}},
	{"metrics that do not add up", func(t *testing.T, o *Observed) { o.Final[0].Committed-- }, []string{"received − retried"}},
	{"a message in flight at the end", func(t *testing.T, o *Observed) { o.Final[0].InFlight = 1 }, []string{"in flight once settled"}},
	{"a key committed twice", func(t *testing.T, o *Observed) { o.Gens[0].last.Committed += 1000 }, []string{"no key committed twice"}},
	{"a dead letter counted without its copy", func(t *testing.T, o *Observed) {
		o.Gens[0].last.DeadLettered[string(deadletter.TooLarge)]++
	}, []string{"Σ dead-lettered"}},
	{"a late message dropped", func(t *testing.T, o *Observed) { o.Gens[0].last.Dropped = 1 }, []string{"Σ dropped"}},
	{"a SIGTERM that exits 1", func(t *testing.T, o *Observed) { o.Terms = append(o.Terms, 1) }, []string{"exited 0"}},
	{"a process that died", func(t *testing.T, o *Observed) { o.Unexpected = []string{"process 2 exited"} }, []string{"on their own"}},
	{"a restart that never became ready", func(t *testing.T, o *Observed) {
		o.NotReady = []string{"process 2: not ready after 60s"}
	}, []string{"did not become ready"}},
}

func TestCheckCatchesEachViolation(t *testing.T) {
	for _, c := range violations {
		t.Run(c.name, func(t *testing.T) {
			o := perfect(t, 11)
			c.spoil(t, o)
			f := failing(Check(o))
			failsExactly(t, f, c.want)
		})
	}
}

// TestEveryInvariantHasASpoilCase keeps TestCheckCatchesEachViolation
// and TestCheckCatchesEachMixViolation complete: a row no case makes fail
// could be disabled with the package still green. A row of the mixed
// campaign needs a case of its own unless it is, but for its pipeline's
// name, a row of the default campaign (the same check, with the same
// expectation, spoiled there).
func TestEveryInvariantHasASpoilCase(t *testing.T) {
	covers := func(cases []string, inv string) bool {
		return slices.ContainsFunc(cases, func(w string) bool { return strings.Contains(inv, w) })
	}
	var wants, mixWants []string
	for _, c := range violations {
		wants = append(wants, c.want...)
	}
	for _, c := range mixViolations {
		mixWants = append(mixWants, c.want...)
	}
	defaults := map[string]bool{}
	for _, r := range Check(perfect(t, 11)) {
		if r.Class == Info || r.Class == Known {
			continue
		}
		defaults[r.Invariant] = true
		if !covers(wants, r.Invariant) {
			t.Errorf("no spoil case makes %q fail", r.Invariant)
		}
	}
	for _, r := range CheckAll(perfectMix(t)) {
		if r.Class == Info || r.Class == Known || covers(mixWants, r.Invariant) {
			continue
		}
		plain := r.Invariant // a row of the workload or the processes, not of a pipeline
		if _, p, prefixed := strings.Cut(r.Invariant, "] "); prefixed {
			plain = p
		}
		if !defaults[plain] {
			t.Errorf("no spoil case makes %q fail (a row of its own in the mixed campaign)", r.Invariant)
		}
	}
}

// The pipelines of perfectMix, by their place.
const (
	eo  = 0 // eo_table: exactly_once, a dead-letter table, late_data: accept
	alo = 1 // alo_file: at_least_once, a dead-letter file, late_data: drop
)

// mixViolation is a spoil case of TestCheckCatchesEachMixViolation: a
// correct mixed run (perfectMix) changed so that the rows in want fail,
// and no other.
type mixViolation struct {
	name  string
	spoil func(t *testing.T, obs []*Observed)
	want  []string
}

// mixViolations has a case for every row the mixed campaign has of its
// own (the other rows are the default campaign's: see
// TestEveryInvariantHasASpoilCase), and for the promises at the heart of
// each mode.
var mixViolations = []mixViolation{
	{"late_data accept: a late record not written", func(t *testing.T, obs []*Observed) {
		o := obs[eo]
		delete(o.Rows, firstOf(t, o, KindLate).ID)
		o.Gens[0].last.Committed-- // its commit unseen: only the row is missing
	}, []string{"[eo_table] late records written (late_data: accept)"}},
	{"late_data accept: a late record dead-lettered", func(t *testing.T, obs []*Observed) {
		addLateCopy(t, obs[eo])
	}, []string{"[eo_table] copies of anything else (valid records, late records under late_data: accept"}},
	{"a dead-letter table with a row that is no copy", func(t *testing.T, obs []*Observed) {
		obs[eo].Malformed = 1
	}, []string{"[eo_table] entries of the dead-letter table"}},
	{"a dead letter counted beyond what the table's rows allow", func(t *testing.T, obs []*Observed) {
		obs[eo].Gens[0].last.DeadLettered[string(deadletter.TooLarge)]++
	}, []string{"[eo_table] Σ dead-lettered over processes ≤ what the table's rows allow"}},
	{"late_data accept: a late message dropped", func(t *testing.T, obs []*Observed) {
		obs[eo].Gens[0].last.Dropped = 1
	}, []string{"[eo_table] Σ dropped over processes (late_data: accept never drops)"}},
	{"at_least_once: a valid record lost", func(t *testing.T, obs []*Observed) {
		o := obs[alo]
		delete(o.Rows, loneRecord(t, o, KindUnique).ID)
		o.Gens[0].last.Committed--
	}, []string{"[alo_file] valid records with a row"}},
	{"at_least_once: a duplicate deduped (its version missing)", func(t *testing.T, obs []*Observed) {
		o := obs[alo]
		row := o.Rows[dupRecord(t, o).ID]
		row["data"], row["n"] = row["data"][:1], row["n"][:1]
	}, []string{"[alo_file] rows with one version of each cell per event time", "[alo_file]   of which had a duplicate with another payload, written as a version"}},
	{"at_least_once: a redelivery written as a second version", func(t *testing.T, obs []*Observed) {
		o := obs[alo]
		r := loneRecord(t, o, KindUnique)
		c := o.Rows[r.ID]["data"]
		o.Rows[r.ID]["data"] = append(c, cell{value: c[0].value, ts: c[0].ts + 1000})
	}, []string{"[alo_file] rows with one version of each cell per event time"}},
	{"at_least_once: a duplicate's version stamped with the write time", func(t *testing.T, obs []*Observed) {
		o := obs[alo]
		o.Rows[dupRecord(t, o).ID]["n"][1].ts += 1000
	}, []string{"[alo_file] rows whose cells carry their messages' event times"}},
	{"at_least_once: a row holding another payload", func(t *testing.T, obs []*Observed) {
		o := obs[alo]
		o.Rows[loneRecord(t, o, KindUnique).ID]["data"][0].value = []byte(`{"n":0}`)
	}, []string{"[alo_file] rows holding their first payload at its event time"}},
	{"at_least_once: a duplicate's payload written at the original's event time", func(t *testing.T, obs []*Observed) {
		o := obs[alo]
		r := dupRecord(t, o)
		o.Rows[r.ID]["data"][0].value = r.Second
	}, []string{"[alo_file] rows holding their first payload at its event time", "[alo_file]   of which had a duplicate with another payload, written as a version"}},
	{"late_data drop: a late record dead-lettered", func(t *testing.T, obs []*Observed) {
		addLateCopy(t, obs[alo])
	}, []string{"[alo_file] copies of anything else (valid records, late records under late_data: drop"}},
	{"late_data drop: a late record written by the only process", func(t *testing.T, obs []*Observed) {
		o := obs[alo]
		rec := firstOf(t, o, KindLate)
		o.Rows[rec.ID] = rowOf(o, rec)
	}, []string{"[alo_file] late records written (judged before the watermark was known)"}},
	{"late_data drop: a late message acked uncounted", func(t *testing.T, obs []*Observed) {
		obs[alo].Gens[0].last.Dropped--
		obs[alo].Gens[0].last.Late--
	}, []string{"[alo_file] Σ dropped over processes (late_data: drop)"}},
	{"late_data drop: a late message counted late, not dropped", func(t *testing.T, obs []*Observed) {
		obs[alo].Final[0].Late++
	}, []string{"[alo_file] final process: late = dropped"}},
	{"a dead-letter file with more torn lines than SIGKILLs", func(t *testing.T, obs []*Observed) {
		obs[alo].Malformed = 2
		obs[alo].Kills = []time.Time{obs[alo].Begin}
	}, []string{"[alo_file] entries of the dead-letter file"}},
	{"at_least_once: writes beyond what was received", func(t *testing.T, obs []*Observed) {
		obs[alo].Gens[0].last.Committed += 5
	}, []string{"[alo_file] processes that finished more than received − retried"}},
	{"at_least_once: duplicates deduped and counted", func(t *testing.T, obs []*Observed) {
		g := obs[alo].Gens[0]
		g.last.Committed -= 3
		g.last.Duplicate += 3
	}, []string{"[alo_file] Σ duplicate over processes (at_least_once never dedupes)"}},
}

// addLateCopy adds a late copy of the first late record's message, as a
// pipeline that dead-letters late data makes it.
func addLateCopy(t *testing.T, o *Observed) {
	t.Helper()
	rec := firstOf(t, o, KindLate)
	for i, s := range o.Plan.Steps {
		if s.Rec != rec.CID {
			continue
		}
		attrs := maps.Clone(o.Copies[0].attrs)
		attrs["cid"], attrs["v"], attrs["id"], attrs["ts"] = strconv.Itoa(rec.CID), s.Variant.String(), rec.ID, "x"
		attrs[deadletter.AttrReason], attrs[deadletter.AttrMessageID] = string(deadletter.Late), o.Steps[i].id
		o.Copies = append(o.Copies, dlCopy{attrs: attrs, data: rec.Payload})
		return
	}
	t.Fatal("the late record has no step")
}

func TestCheckCatchesEachMixViolation(t *testing.T) {
	for _, c := range mixViolations {
		t.Run(c.name, func(t *testing.T) {
			obs := perfectMix(t)
			c.spoil(t, obs)
			f := failing(CheckAll(obs))
			failsExactly(t, f, c.want)
		})
	}
}

// TestCheckToleratesWhatTheMixAllows: what a correct mixed run, or any run
// with skewed clocks, may show.
func TestCheckToleratesWhatTheMixAllows(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, obs []*Observed)
	}{
		{"at_least_once: redeliveries written again, and counted", func(t *testing.T, obs []*Observed) {
			g, f := obs[alo].Gens[0], &obs[alo].Final[0]
			g.last.Received += 5
			g.last.Committed += 5
			f.Received += 5
			f.Committed += 5
		}},
		{"late_data drop: a drop unseen, its process stopped right after", func(t *testing.T, obs []*Observed) {
			o := obs[alo]
			o.Gens[0].last.Dropped--
			o.Gens[0].last.Late--
			for i, s := range o.Plan.Steps {
				if o.Plan.Records[s.Rec].Kind == KindLate {
					o.Stops = []time.Time{o.Steps[i].at.Add(time.Second)}
					o.Disruptions = o.Stops
					break
				}
			}
		}},
		{"a table's message dead-lettered twice after a disruption: one row, counted twice", func(t *testing.T, obs []*Observed) {
			o := obs[eo]
			o.Gens[0].last.DeadLettered[string(deadletter.TooLarge)]++
			o.Disruptions = []time.Time{o.Begin.Add(time.Hour)}
		}},
		{"a torn line of the file after a SIGKILL", func(t *testing.T, obs []*Observed) {
			obs[alo].Malformed = 1
			obs[alo].Kills = []time.Time{obs[alo].Begin}
			obs[alo].Disruptions = obs[alo].Kills
		}},
		{"skewed clocks: a copy stamped before its publication", func(t *testing.T, obs []*Observed) {
			for _, o := range obs {
				o.Skew = 2 * time.Second
				c := o.Copies[0]
				pt, _ := time.Parse(time.RFC3339Nano, c.attrs[deadletter.AttrPublishTime])
				c.attrs[deadletter.AttrFailedAt] = pt.Add(-1500 * time.Millisecond).Format(time.RFC3339Nano)
			}
		}},
		{"skewed clocks: a copy again after a disruption a lease before the copy's stamp, by the clock of its process", func(t *testing.T, obs []*Observed) {
			o := obs[alo]
			o.Skew = 2 * time.Second
			copyAgain(t, o)
			o.Disruptions = []time.Time{failedAt(t, o).Add(-source.LeaseExtension - time.Second)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			obs := perfectMix(t)
			c.change(t, obs)
			if f := failing(CheckAll(obs)); len(f) > 0 {
				t.Fatalf("failing %q", f)
			}
		})
	}
}

// TestTheConfigurationsAreValid: pubsink accepts what the campaign writes,
// for the default pipeline and for the mix, and each pipeline says what
// its spec does.
func TestTheConfigurationsAreValid(t *testing.T) {
	dir := t.TempDir()
	for _, pipes := range [][]PipeSpec{{defaultPipe}, Options{Mix: true, Changes: true}.pipes(dir), Options{Changes: true}.pipes(dir)} {
		cfg, err := config.Parse([]byte(configYAML("127.0.0.1:1", pipes)))
		if err != nil {
			t.Fatalf("%v:\n%s", err, configYAML("127.0.0.1:1", pipes))
		}
		for i, p := range pipes {
			pc := cfg.Pipelines[i]
			if pc.Name != p.Name || pc.Mode != p.Mode || (!p.Changes && pc.Watermark.LateData != p.Late) || deadletter.Kind(pc.DeadLetter) != p.Output ||
				pc.Source.Subscription != p.Sub || pc.Source.TrackingSubscription != p.Tracking || pc.Sink.Table != p.Table {
				t.Errorf("pipeline %d: %+v, want %s", i, pc, p)
			}
			if p.Changes {
				var tables []string
				for _, m := range changeMappings {
					tables = append(tables, m.Table)
				}
				if got := pc.Sink.ChangeTables(); !slices.Equal(got, tables) || pc.Source.Topic != changeTopic || pc.Sink.TombstoneFamily != chgTombFamily {
					t.Errorf("the change pipeline writes change tables %q (want %q), reads %s, tombstones in %s", got, tables, pc.Source.Topic, pc.Sink.TombstoneFamily)
				}
			}
		}
	}
	// Every pipeline of the mix has resources of its own.
	seen := map[string]bool{}
	for _, p := range (Options{Mix: true, Changes: true}).pipes("dir") {
		for _, r := range []string{p.Sub, p.Tracking, p.Table} {
			if r == "" {
				continue // the change pipeline has no tracking subscription
			}
			if seen[r] {
				t.Errorf("%s is used twice", r)
			}
			seen[r] = true
		}
	}
}

func TestReplicaOffsets(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		n    int
		skew time.Duration
		want []time.Duration
	}{
		{3, 0, nil},
		{1, 2 * s, []time.Duration{2 * s}},
		{2, 2 * s, []time.Duration{2 * s, -2 * s}},
		{3, 2 * s, []time.Duration{2 * s, 0, -2 * s}},
		{5, 2 * s, []time.Duration{2 * s, s, 0, -s, -2 * s}},
	} {
		if got := replicaOffsets(c.n, c.skew); !slices.Equal(got, c.want) {
			t.Errorf("replicaOffsets(%d, %v) = %v, want %v", c.n, c.skew, got, c.want)
		}
	}
	if got := offsetsText(replicaOffsets(3, 2*s)); got != "clock offsets: replica 1 +2s, replica 2 0s, replica 3 -2s" {
		t.Errorf("offsetsText = %q", got)
	}
}

// TestDryRunOfTheMix: -mix names both pipelines and the replicas' clocks,
// and changes neither the workload nor the faults of the seed.
func TestDryRunOfTheMix(t *testing.T) {
	dry := func(args ...string) string {
		var out, errs strings.Builder
		if code := run(append([]string{"-dry-run", "-short", "-seed", "77", "-replicas", "3"}, args...), &out, &errs); code != exitOK {
			t.Fatalf("%v: exit %d:\n%s%s", args, code, out.String(), errs.String())
		}
		return out.String()
	}
	plain, mix := dry(), dry("-mix")
	for _, want := range []string{"eo_table (exactly_once, late_data: accept, dead-letter bigtable_table", "alo_file (at_least_once, late_data: drop, dead-letter file",
		"changes (at_least_once, change mappings: upsert chaos_chg_upsert, replace_if_newer chaos_chg_replace; no watermark; dead-letter file chg-dlq.jsonl)",
		"\nchanges: 98 keys", "clock offsets: replica 1 +2s, replica 2 0s, replica 3 -2s"} {
		if !strings.Contains(mix, want) {
			t.Errorf("the -mix plan does not say %q:\n%s", want, mix)
		}
	}
	if strings.Contains(plain, "clock offsets") || strings.Contains(plain, "changes") || !strings.Contains(plain, "chaos (exactly_once, late_data: dead_letter, dead-letter topic") {
		t.Errorf("the default plan:\n%s", plain)
	}
	if !strings.Contains(dry("-mix", "-skew", "0"), "pipelines:") || strings.Contains(dry("-mix", "-skew", "0"), "clock offsets") {
		t.Error("-skew 0 still skews the clocks")
	}
	after := func(s string) string { return s[strings.Index(s, "faults:"):] }
	if after(plain) != after(mix) {
		t.Errorf("-mix changed the faults:\n%s\n%s", after(plain), after(mix))
	}
	workload := func(s string) string {
		i := strings.Index(s, "workload:")
		return s[i : i+strings.IndexByte(s[i:], '\n')]
	}
	if workload(plain) != workload(mix) {
		t.Errorf("-mix (and its change workload) changed the workload:\n%s\n%s", workload(plain), workload(mix))
	}
	if !strings.Contains(plain, "pubsub-stall for ") {
		t.Errorf("no Pub/Sub stall in the -short plan:\n%s", plain)
	}
}

// TestCheckToleratesWhatTimingAllows: the bounded rows accept what a
// correct run may show.
func TestCheckToleratesWhatTimingAllows(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, o *Observed)
	}{
		{"a message copied again after a disruption that came after its copy", func(t *testing.T, o *Observed) {
			copyAgain(t, o)
			o.Disruptions = []time.Time{failedAt(t, o).Add(100 * time.Millisecond)}
		}},
		{"a message held across a disruption and copied twice soon after it", func(t *testing.T, o *Observed) {
			copyAgain(t, o)
			o.Disruptions = []time.Time{failedAt(t, o).Add(-5 * time.Second)}
		}},
		{"with replicas, a late record written before a process started with none stored knew a watermark", func(t *testing.T, o *Observed) {
			withReplicas(o, 3)
			i := writeLate(t, o)
			wm := o.Begin
			o.Gens[0].observeStatus(Status{Watermark: &wm}, o.Steps[i].at.Sub(o.Begin)+time.Millisecond)
		}},
		{"with replicas, a late record written by a process that never knew a watermark", func(t *testing.T, o *Observed) {
			withReplicas(o, 3)
			writeLate(t, o)
		}},
		// Issue 21, item 5 (seed 20261202 -n 20000 -duration 3m -replicas 3
		// -mix): a winner's redelivery (its ack lost, or its process paused
		// past its leases) writes its key's cells again and counts as
		// committed, and as resumed; committed − resumed counts the key once.
		{"a winner's redelivery resumed and committed again", func(t *testing.T, o *Observed) {
			st := &o.Gens[0].last
			st.Received++
			st.Committed++
			st.Resumed++
			o.Final[0].Received++
			o.Final[0].Committed++
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := perfect(t, 11)
			c.change(t, o)
			if f := failing(Check(o)); len(f) > 0 {
				t.Fatalf("failing %q", f)
			}
		})
	}
}

// withLateCopy is a perfect run but for one unique record, whose original
// was dead-lettered as late failedAfter after it was published (its
// publish time is returned).
func withLateCopy(t *testing.T, failedAfter time.Duration) (*Observed, time.Time) {
	t.Helper()
	o := perfect(t, 11)
	r := firstOf(t, o, KindUnique)
	var si int
	for i, s := range o.Plan.Steps {
		if s.Rec == r.CID && s.Variant == VariantOriginal {
			si = i
		}
	}
	delete(o.Rows, r.ID)
	o.Gens[0].last.Committed--
	o.Gens[0].last.DeadLettered["late"]++
	o.Final[0].Committed--
	o.Final[0].DeadLettered["late"]++
	pub := o.Steps[si].at
	o.Copies = append(o.Copies, dlCopy{data: r.Payload, attrs: map[string]string{
		"cid": strconv.Itoa(r.CID), "v": "original", "id": r.ID, "ts": "x",
		deadletter.AttrReason: string(deadletter.Late), deadletter.AttrError: "behind the watermark", deadletter.AttrPipeline: pipelineName,
		deadletter.AttrMessageID: o.Steps[si].id, deadletter.AttrPublishTime: pub.Format(time.RFC3339Nano),
		deadletter.AttrFailedAt: pub.Add(failedAfter).Format(time.RFC3339Nano),
	}})
	return o, pub
}

// knownRow is the Found of the known-bug row whose invariant begins with
// prefix; it fails the test if there is none.
func knownRow(t *testing.T, rs []Result, prefix string) string {
	t.Helper()
	for _, res := range rs {
		if res.Class == Known && strings.HasPrefix(res.Invariant, prefix) {
			return res.Found
		}
	}
	t.Fatalf("no known-bug row %q in %v", prefix, rs)
	return ""
}

func TestLateAfterFaultIsAViolationUnlessTolerated(t *testing.T) {
	o, pub := withLateCopy(t, 20*time.Second)
	o.Disruptions = []time.Time{pub.Add(30 * time.Millisecond)}
	if f := failing(Check(o)); len(f) != 2 {
		t.Fatalf("strict: failing %q; want the missing row and the foreign copy", f)
	}
	o.TolerateLateAfterFault = true
	rs := Check(o)
	if f := failing(rs); len(f) > 0 {
		t.Fatalf("tolerated: failing %q", f)
	}
	if found := knownRow(t, rs, "valid records dead-lettered late"); !strings.HasPrefix(found, "1 record") {
		t.Fatalf("known-bug row found %q, want 1 record", found)
	}
	// A late copy far from any disruption is not the known bug.
	o.Disruptions = []time.Time{pub.Add(-time.Hour)}
	if f := failing(Check(o)); len(f) != 2 {
		t.Fatalf("no disruption near: failing %q; want the missing row and the foreign copy", f)
	}
}

// TestTheEmulatorsStrandedDeliveriesAreKnown: a record judged late as it
// came back with a Pub/Sub reset, more than any lease after it was
// published, is the emulator's stranded delivery (doc.go, "Late after a
// fault"), excused without -tolerate-late-after-fault; one judged late
// within a lease of a reset, or long after one, is a violation.
func TestTheEmulatorsStrandedDeliveriesAreKnown(t *testing.T) {
	o, pub := withLateCopy(t, 50*time.Second)
	reset := pub.Add(48 * time.Second)
	o.Disruptions = []time.Time{reset}
	o.Resets = []time.Time{reset}
	rs := Check(o)
	if f := failing(rs); len(f) > 0 {
		t.Fatalf("stranded: failing %q", f)
	}
	if found := knownRow(t, rs, "copies of valid records judged late as they came back with a Pub/Sub reset"); found != "1" {
		t.Fatalf("stranded row found %q, want 1", found)
	}
	for name, at := range map[string]time.Duration{
		"published within a lease of the reset": 20 * time.Second,
		"judged long after the reset":           40 * time.Second,
	} {
		o, pub := withLateCopy(t, 50*time.Second)
		reset := pub.Add(at)
		o.Disruptions = []time.Time{reset}
		o.Resets = []time.Time{reset}
		if f := failing(Check(o)); len(f) != 2 {
			t.Errorf("%s: failing %q; want the missing row and the foreign copy", name, f)
		}
	}
}

func TestParseCounters(t *testing.T) {
	text := `# HELP pubsink_messages_received_total Messages delivered.
# TYPE pubsink_messages_received_total counter
pubsink_messages_received_total{pipeline="chaos"} 120
pubsink_messages_received_total{pipeline="other"} 7
pubsink_messages_committed_total{pipeline="chaos"} 100
pubsink_messages_duplicate_total{pipeline="chaos"} 9
pubsink_messages_dead_lettered_total{pipeline="chaos",reason="late"} 3
pubsink_messages_dead_lettered_total{pipeline="chaos",reason="too_large"} 1
pubsink_messages_retried_total{pipeline="chaos"} 7
pubsink_messages_in_flight{pipeline="chaos"} 0
pubsink_sink_write_seconds_bucket{pipeline="chaos",le="0.001"} 5
go_goroutines 42
`
	c, err := parseCounters(text, "chaos")
	if err != nil {
		t.Fatal(err)
	}
	if c.Received != 120 || c.Committed != 100 || c.Duplicate != 9 || c.Retried != 7 || c.DeadLetteredTotal() != 4 || c.DeadLettered["late"] != 3 {
		t.Fatalf("parsed %+v", c)
	}
	if _, err := parseCounters("go_goroutines 1\n", "chaos"); err == nil {
		t.Fatal("no error for a page without the pipeline's counters")
	}
}

func ExampleFault_String() {
	fmt.Println(Fault{Kind: FaultBigtableStall, Dur: 12500 * time.Millisecond})
	fmt.Println(Fault{Kind: FaultLatency, Latency: 250 * time.Millisecond, Target: "pubsub", Dur: 8 * time.Second})
	fmt.Println(Fault{Kind: FaultKill, Dur: 1500 * time.Millisecond})
	fmt.Println(Fault{Kind: FaultTerm, Dur: 700 * time.Millisecond, Replica: 2})
	// Output:
	// bigtable-stall for 12.5s
	// latency 250ms on pubsub for 8s
	// sigkill, restart after 1.5s
	// sigterm of replica 2, restart after 700ms
}

// isProcessFault says whether f stops and restarts a process.
func isProcessFault(f Fault) bool { return f.Kind == FaultKill || f.Kind == FaultTerm }

func TestScheduleTargetsReplicasFromTheSeed(t *testing.T) {
	fc := FaultConfig{Count: 24, Duration: 6 * time.Minute, MaxStall: 30 * time.Second}
	one := NewSchedule(5, fc)
	for _, f := range one {
		if f.Replica != 0 {
			t.Fatalf("one process: %s targets replica %d, want 0 (today's schedule)", f, f.Replica)
		}
	}
	fc.Replicas = 3
	three := NewSchedule(5, fc)
	if !reflect.DeepEqual(three, NewSchedule(5, fc)) {
		t.Fatal("two schedules of seed 5 with 3 replicas differ")
	}
	var targets []int
	for i, f := range three {
		// Replicas change whom a fault hits, never what or when.
		g := f
		g.Replica = 0
		if g != one[i] {
			t.Errorf("fault %d is %s with 3 replicas, %s with one", i, f, one[i])
		}
		switch {
		case !isProcessFault(f) && f.Replica != 0:
			t.Errorf("fault %d (%s) targets replica %d: proxy faults hit every replica", i, f, f.Replica)
		case isProcessFault(f) && (f.Replica < 1 || f.Replica > 3):
			t.Errorf("fault %d (%s) targets replica %d, want 1..3", i, f, f.Replica)
		case isProcessFault(f):
			targets = append(targets, f.Replica)
		}
	}
	if len(targets) < 6 {
		t.Fatalf("%d process faults in 24, want at least 6 for this test", len(targets))
	}
	// Dealt in rounds: every 3 process faults in a row from the start of a
	// round hit 3 different replicas.
	for i := 0; i+3 <= len(targets); i += 3 {
		if seen := map[int]bool{targets[i]: true, targets[i+1]: true, targets[i+2]: true}; len(seen) != 3 {
			t.Errorf("process faults %d..%d hit replicas %v, want each of 1..3 once", i, i+2, targets[i:i+3])
		}
	}
	// The choice follows the seed: some seed hits another replica first.
	differs := false
	for seed := uint64(6); seed < 40 && !differs; seed++ {
		for _, f := range NewSchedule(seed, fc) {
			if isProcessFault(f) {
				differs = f.Replica != targets[0]
				break
			}
		}
	}
	if !differs {
		t.Error("seeds 6..39 all hit the same replica first as seed 5")
	}
}

func TestDryRunNamesEachFaultsReplica(t *testing.T) {
	dry := func(args ...string) (string, int) {
		var out, errs strings.Builder
		code := run(append([]string{"-dry-run", "-short", "-seed", "77"}, args...), &out, &errs)
		return out.String() + errs.String(), code
	}
	one, code := dry()
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, one)
	}
	three, code := dry("-replicas", "3")
	if code != exitOK {
		t.Fatalf("-replicas 3: exit %d:\n%s", code, three)
	}
	if strings.Contains(one, "replica") {
		t.Errorf("one process, yet the plan names replicas:\n%s", one)
	}
	if !strings.Contains(three, "3 replicas") {
		t.Errorf("the plan does not say 3 replicas:\n%s", three)
	}
	kills := 0
	for line := range strings.Lines(three) {
		if strings.Contains(line, "sigkill") || strings.Contains(line, "sigterm") {
			kills++
			if !strings.Contains(line, "of replica ") {
				t.Errorf("no replica in %q", line)
			}
		}
	}
	if kills != 2 {
		t.Errorf("%d kills and terms in the -short plan, want 2:\n%s", kills, three)
	}
	if _, code := dry("-replicas", "0"); code != exitUsage {
		t.Errorf("-replicas 0: exit %d, want %d", code, exitUsage)
	}
}

func TestLogNames(t *testing.T) {
	for _, c := range []struct {
		replica, nth, gen int
		want              string
	}{
		{0, 1, 1, "pubsink-01.log"}, // one process: the names of before replicas
		{0, 3, 3, "pubsink-03.log"},
		{1, 1, 1, "pubsink-r1-01.log"},
		{3, 2, 5, "pubsink-r3-02.log"}, // replica 3's second process, the fifth started
	} {
		if got := logName(c.replica, c.nth, c.gen); got != c.want {
			t.Errorf("logName(%d, %d, %d) = %q, want %q", c.replica, c.nth, c.gen, got, c.want)
		}
	}
}

// withReplicas splits the final counters of perfect's one process over n
// processes, each balanced, as n replicas would report them.
func withReplicas(o *Observed, n int) {
	f := o.Final[0]
	o.Final = nil
	for i := range n {
		part := Counters{DeadLettered: map[string]float64{}}
		share := func(v float64) float64 { return float64(int(v)/n + min(1, max(0, int(v)%n-i))) }
		part.Committed, part.Duplicate = share(f.Committed), share(f.Duplicate)
		for r, v := range f.DeadLettered {
			part.DeadLettered[r] = share(v)
		}
		part.Received = finished(part)
		o.Final = append(o.Final, procCounters{proc: fmt.Sprintf("process %d (replica %d)", i+1, i+1), Counters: part})
	}
	o.Terms = make([]int, n)
	o.Replicas = n
}

func TestEveryFinalProcessMustBalanceOnItsOwn(t *testing.T) {
	o := perfect(t, 11)
	withReplicas(o, 3)
	if f := failing(Check(o)); len(f) > 0 {
		t.Fatalf("three balanced processes fail %q", f)
	}
	var total float64
	for _, f := range o.Final {
		total += f.Received
	}
	if total != float64(len(o.Plan.Steps)) {
		t.Fatalf("the split received %v, want %d", total, len(o.Plan.Steps))
	}
	// One process's shortfall hidden by another's excess: the sums
	// balance, the processes do not.
	o.Final[0].Committed++
	o.Final[2].Committed--
	rs := Check(o)
	f := failing(rs)
	if len(f) != 1 || !strings.Contains(f[0], "each of the 3 final processes") {
		t.Fatalf("failing %q; want only the balance of each final process", f)
	}
	for _, r := range rs {
		if r.Invariant == f[0] && (len(r.Examples) != 2 || !strings.Contains(r.Examples[0], "replica 1")) {
			t.Errorf("examples %q, want replicas 1 and 3", r.Examples)
		}
	}
	o.Final[0].Committed--
	o.Final[2].Committed++
	o.Final[1].InFlight = 1
	if f := failing(Check(o)); len(f) != 1 || !strings.Contains(f[0], "in flight") {
		t.Fatalf("a message in flight in replica 2: failing %q", f)
	}
}

func TestStillness(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	snap := func(ps ...procStatus) []procStatus { return ps }
	var s stillness
	s.observe(at(0), snap(procStatus{1, 10, 0}, procStatus{2, 20, 0}))
	s.observe(at(3), snap(procStatus{1, 10, 0}, procStatus{2, 20, 0}))
	if d := s.stillFor(at(5)); d != 5*time.Second {
		t.Fatalf("still for %v, want 5s", d)
	}
	for _, c := range []struct {
		name string
		snap []procStatus
	}{
		{"one receives", snap(procStatus{1, 10, 0}, procStatus{2, 21, 0})},
		{"one has a message in flight", snap(procStatus{1, 10, 1}, procStatus{2, 20, 0})},
		{"a replica's process was replaced", snap(procStatus{3, 10, 0}, procStatus{2, 20, 0})},
	} {
		s := stillness{last: s.last, since: s.since}
		s.observe(at(6), c.snap)
		if d := s.stillFor(at(7)); d != time.Second {
			t.Errorf("%s: still for %v, want 1s (since the change)", c.name, d)
		}
	}
	// A message in flight keeps it busy even with the counts unchanged.
	s.observe(at(6), snap(procStatus{1, 10, 1}, procStatus{2, 20, 0}))
	s.observe(at(8), snap(procStatus{1, 10, 1}, procStatus{2, 20, 0}))
	if d := s.stillFor(at(9)); d != time.Second {
		t.Errorf("in flight: still for %v, want 1s", d)
	}
}
