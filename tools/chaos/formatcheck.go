package main

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
)

// FmtObserved is what the campaign collected of one format pipeline, for
// CheckFormats.
type FmtObserved struct {
	Plan *FmtPlan
	// Steps and Writers are by step: what became of its message and the
	// Avro revision it was written with.
	Steps   []published
	Writers []int
	// Base is the event time of offset 0.
	Base time.Time
	// Tables are the pipeline's tables as read after the final stop:
	// table → row key → column → versions.
	Tables    map[string]map[string]map[string][]cell
	Copies    []dlCopy
	Malformed int
	LeftMain  int
	Final     []procCounters
	FinalOK   bool
	// Reprocess is what became of the reprocess, for the reprocessed
	// pipeline (nil for the others).
	Reprocess *ReprocessObserved
}

// ReprocessObserved is what the campaign saw of the reprocess.
type ReprocessObserved struct {
	From, Until time.Time // its range (zero: it never started)
	Exits       []reprocessExit
	// SubLeft and LockLeft: its subscription, and its record and lock in
	// the state table, found after the campaign.
	SubLeft, LockLeft bool
}

// inRange reports whether key k is one the reprocess rewrites.
func (o *FmtObserved) inRange(k *FmtKey) bool { return o.Reprocess != nil && k.Phase == 1 }

// writerOf is the Avro revision that payload i of key k was written with:
// its first step's.
func (o *FmtObserved) writerOf(key, payload int) int {
	for si, s := range o.Plan.Steps {
		if s.Key == key && s.Payload == payload && !s.Dup && si < len(o.Writers) {
			return o.Writers[si]
		}
	}
	return 1
}

// keyRows are the rows of key id in every table: table → row key → row.
func (o *FmtObserved) keyRows(id string) map[string]map[string]map[string][]cell {
	out := map[string]map[string]map[string][]cell{}
	for _, t := range o.Plan.Pipe.Tables {
		out[t] = map[string]map[string][]cell{}
		for rk, row := range o.Tables[t] {
			if rk == id || strings.HasPrefix(rk, id+"#") {
				out[t][rk] = row
			}
		}
	}
	return out
}

// rowsDiffer says how got differs from want ("" if not at all): the same
// rows in every table, each with the same columns, each column one
// version, of the wanted value at the wanted time.
func (o *FmtObserved) rowsDiffer(want map[string]map[string]fmtRow, got map[string]map[string]map[string][]cell) string {
	for _, t := range o.Plan.Pipe.Tables {
		for _, rk := range sortedKeys(want[t]) {
			w := want[t][rk]
			g, ok := got[t][rk]
			if !ok {
				return fmt.Sprintf("%s: no row %s", t, rk)
			}
			ts := bigtable.Time(o.Base.Add(w.ts)).TruncateToMilliseconds()
			for _, col := range sortedKeys(w.cols) {
				cs := g[col]
				switch {
				case len(cs) != 1:
					return fmt.Sprintf("%s row %s column %s: %d versions (%s), want one", t, rk, col, len(cs), cellsText(cs))
				case string(cs[0].value) != w.cols[col] || cs[0].ts != ts:
					return fmt.Sprintf("%s row %s column %s: %q at %d, want %q at %d", t, rk, col, cs[0].value, cs[0].ts, w.cols[col], ts)
				}
			}
			for _, col := range sortedKeys(g) {
				if _, ok := w.cols[col]; !ok {
					return fmt.Sprintf("%s row %s: a column %s (%s)", t, rk, col, cellsText(g[col]))
				}
			}
		}
		for _, rk := range sortedKeys(got[t]) {
			if _, ok := want[t][rk]; !ok {
				return fmt.Sprintf("%s: a row %s of no item of the payload", t, rk)
			}
		}
	}
	return ""
}

func cellsText(cs []cell) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%q@%d", c.value, c.ts))
	}
	return strings.Join(parts, ", ")
}

// keyProblem is "" when key ki's rows in every table are exactly the rows
// of one of its published payloads (the reprocess's mapping in its range),
// else what differs from each.
func (o *FmtObserved) keyProblem(ki int) string {
	k := &o.Plan.Keys[ki]
	got := o.keyRows(k.ID)
	var why []string
	for pi := range k.Payloads {
		if !o.payloadPublished(ki, pi) {
			continue
		}
		d := o.rowsDiffer(o.Plan.Rows(k, &k.Payloads[pi], o.writerOf(ki, pi), o.inRange(k)), got)
		if d == "" {
			return ""
		}
		why = append(why, fmt.Sprintf("payload %d: %s", pi, d))
	}
	if len(why) == 0 {
		return ""
	}
	return k.ID + ": " + strings.Join(why, "; ")
}

// payloadPublished reports whether payload pi of key ki has a message
// published.
func (o *FmtObserved) payloadPublished(ki, pi int) bool {
	for si, s := range o.Plan.Steps {
		if s.Key == ki && s.Payload == pi && si < len(o.Steps) && o.Steps[si].id != "" {
			return true
		}
	}
	return false
}

// CheckFormats evaluates the invariants of a format pipeline (doc.go,
// "Payload formats and reprocess"), each named [NAME].
func CheckFormats(o *FmtObserved) []Result {
	var out []Result
	var failed examples
	for i, s := range o.Steps {
		if s.err != nil {
			failed.add("message %d (key %s): %v", i, o.Plan.Keys[o.Plan.Steps[i].Key].ID, s.err)
		}
	}
	out = append(out, exact("publishes that failed", 0, failed.n, &failed))
	out = append(out, checkFmtRows(o)...)
	var copies examples
	for _, c := range o.Copies {
		copies.add("a copy of key %s (reason %s)", c.attrs["id"], c.attrs["pubsink_reason"])
	}
	out = append(out,
		exact("copies in the dead-letter file (every message is valid)", 0, copies.n+o.Malformed, &copies),
		exact("messages left unacked on the main subscription after the final stop", 0, o.LeftMain, nil))
	out = append(out, checkFinal(&Observed{Pipe: o.Plan.Pipe, Final: o.Final, FinalOK: o.FinalOK})...)
	if o.Reprocess != nil {
		out = append(out, checkReprocess(o)...)
	}
	for i := range out {
		out[i].Invariant = "[" + o.Plan.Pipe.Name + "] " + out[i].Invariant
	}
	return out
}

// checkFmtRows: every key's rows in every table exactly once from one
// payload, one version per cell (split, for the reprocessed pipeline, into
// the reprocess's range, which holds the new mapping, and the rest, which
// the reprocess left alone); no row of another key.
func checkFmtRows(o *FmtObserved) []Result {
	var in, rest examples
	nIn, nRest := 0, 0
	known := map[string]bool{}
	revs := [3]int{}
	for ki := range o.Plan.Keys {
		k := &o.Plan.Keys[ki]
		known[k.ID] = true
		if !o.payloadPublished(ki, 0) {
			continue
		}
		for pi := range k.Payloads {
			revs[o.writerOf(ki, pi)]++
		}
		ex, n := &rest, &nRest
		if o.inRange(k) {
			ex, n = &in, &nIn
		}
		*n++
		if p := o.keyProblem(ki); p != "" {
			ex.add("%s", p)
		}
	}
	var others examples
	rows := map[string]int{}
	for _, t := range o.Plan.Pipe.Tables {
		for _, rk := range sortedKeys(o.Tables[t]) {
			rows[t]++
			id, _, _ := strings.Cut(rk, "#")
			if !known[id] {
				others.add("%s row %s", t, short(rk))
			}
		}
	}
	what := "keys whose rows in every table are exactly the rows of one of its payloads, one version per cell"
	switch o.Plan.Pipe.Format {
	case fmtProto:
		what = fmt.Sprintf("keys whose rows are exactly those of one of its payloads: a %s row per item (each), a %s row where total >= %d (when); one version per cell", o.Plan.Pipe.Tables[0], o.Plan.Pipe.Tables[1], pbBigTotal)
	case fmtAvroBinary, fmtAvroJSON:
		what = "keys whose row is exactly that of one of its payloads, decoded with the revision it was written with (revision 2: its note); one version per cell"
	}
	var out []Result
	if o.Reprocess != nil {
		out = append(out,
			exact("keys of the reprocess's range: "+what+", with the reprocess's mapping (n = "+reprocessNColumn+")", nIn, nIn-in.n, &in),
			exact("keys outside the reprocess's range: "+what+", as the live mapping wrote it (nothing else changed)", nRest, nRest-rest.n, &rest))
	} else {
		out = append(out, exact(what, nRest, nRest-rest.n, &rest))
	}
	var tables []string
	for _, t := range o.Plan.Pipe.Tables {
		tables = append(tables, fmt.Sprintf("%s %d", t, rows[t]))
	}
	info := Result{Invariant: "rows by table", Class: Info, OK: true, Found: strings.Join(tables, ", ")}
	if o.Plan.Pipe.Format != fmtProto {
		info.Invariant += "; payloads by the Avro revision they were written with"
		info.Found += fmt.Sprintf("; revision 1 %d, revision 2 %d", revs[1], revs[2])
	}
	return append(out, exact("rows of no key of the workload", 0, others.n, &others), info)
}

// checkReprocess: the reprocess ended with exit 0 after its interruptions,
// each SIGTERM exited 3 (or 0, done), it failed on its own never (it may
// stop on its own, exit 3, when a Bigtable stall kept it from renewing its
// lock in time: reprocess.ErrLapsing, resumable), and it
// left neither its subscription nor its record; the range's messages were
// all published within it, and no other.
func checkReprocess(o *FmtObserved) []Result {
	r := o.Reprocess
	if r.From.IsZero() {
		return []Result{{Invariant: "reprocess started", Class: Exact, Expected: "started", Found: "never (its range was not published)"}}
	}
	var badTerm, own examples
	terms, kills, done, lapsing := 0, 0, 0, 0
	var how []string
	for i, e := range r.Exits {
		how = append(how, fmt.Sprintf("%d: %s %s", e.gen, e.sent, e.text))
		switch {
		case e.sent == syscall.SIGTERM.String():
			terms++
			if e.code != 3 && e.code != 0 {
				badTerm.add("reprocess %d: %s after SIGTERM (%s interruption)", e.gen, e.text, e.why)
			}
		case e.sent != "":
			kills++
		case e.lapsing:
			lapsing++
		case e.code != 0 || i != len(r.Exits)-1:
			own.add("reprocess %d: %s", e.gen, e.text)
		}
		if e.code == 0 {
			done++
		}
	}
	last := "none"
	if len(r.Exits) > 0 {
		last = r.Exits[len(r.Exits)-1].text
	}
	var edge examples
	margin := fmtGap / 4
	for si, s := range o.Plan.Steps {
		at := o.Steps[si].at
		if o.Steps[si].id == "" {
			continue
		}
		inside := at.After(r.From.Add(margin)) && at.Before(r.Until.Add(-margin))
		outside := at.Before(r.From.Add(-margin)) || at.After(r.Until.Add(margin))
		if k := &o.Plan.Keys[s.Key]; (k.Phase == 1 && !inside) || (k.Phase != 1 && !outside) {
			edge.add("key %s (phase %d) published at %s; range %s .. %s", k.ID, k.Phase, fmtTime(at), fmtTime(r.From), fmtTime(r.Until))
		}
	}
	left := 0
	if r.SubLeft {
		left++
	}
	if r.LockLeft {
		left++
	}
	return []Result{
		exact("messages of the reprocess's range published within it and no other (a quiet "+fmtGap.String()+" about each end)", 0, edge.n, &edge),
		{Invariant: "reprocess: the last of its processes exited 0 (done)", Class: Exact, Expected: "exit 0", Found: last, OK: done == 1 && len(r.Exits) > 0 && r.Exits[len(r.Exits)-1].code == 0},
		exact("reprocess: SIGTERMs that exited 3 (stopped, resumable) or 0", terms, terms-badTerm.n, &badTerm),
		exact("reprocess: processes that exited without a signal and not 0", 0, own.n, &own),
		exact("reprocess: its subscription and its record left after it ended", 0, left, nil),
		{Invariant: "reprocess: processes run (SIGKILLs, SIGTERMs, stopped by a state-table stall)", Class: Info, OK: true,
			Found: fmt.Sprintf("%d (%d, %d, %d): %s", len(r.Exits), kills, terms, lapsing, strings.Join(how, "; "))},
	}
}
