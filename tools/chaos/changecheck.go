package main

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/deadletter"
)

// ChangeObserved is what the campaign collected of the change pipeline,
// for CheckChanges.
type ChangeObserved struct {
	Begin time.Time
	Pipe  PipeSpec
	Plan  *ChangePlan
	// Base is the base event time: change n's event time is Base +
	// Plan.Changes[n].At.
	Base  time.Time
	Steps []published // by change step
	// Tables are both tables as read after the final stop: table → row
	// key → row.
	Tables    map[string]map[string]chgRow
	Copies    []dlCopy
	Malformed int
	LeftMain  int
	Gens      []*genRecord
	Final     []procCounters
	FinalOK   bool
	Skew      time.Duration
	// Disruptions and Kills as in Observed.
	Disruptions, Kills []time.Time
}

// ts is the cell timestamp of an event time offset from the base.
func (o *ChangeObserved) ts(at time.Duration) bigtable.Timestamp {
	return bigtable.Time(o.Base.Add(at)).TruncateToMilliseconds()
}

// rowProblem compares key's row of table (write mode mode) with the model:
// "" when they agree (every data cell the model's value at its change's
// event time, one version each, no other data cell or family), else what
// each holds and the key's changes.
func (o *ChangeObserved) rowProblem(table, mode, key string, pub func(int) bool) string {
	want := o.Plan.Model(key, mode, pub)
	row := o.Tables[table][key]
	var bad []string
	for _, fam := range sortedKeys(row) {
		if fam != chgFamily && fam != chgTombFamily {
			bad = append(bad, "a family "+fam)
		}
	}
	data := row[chgFamily]
	for _, q := range sortedKeys(data) {
		cs := data[q]
		w, ok := want[q]
		switch {
		case !ok:
			bad = append(bad, "a cell of "+q)
		case len(cs) != 1:
			bad = append(bad, fmt.Sprintf("%d versions of %s", len(cs), q))
		case cs[0].ts != o.ts(w.at):
			bad = append(bad, "the time of "+q)
		case string(cs[0].value) != w.value:
			bad = append(bad, "the value of "+q)
		}
	}
	for _, q := range sortedKeys(want) {
		if len(data[q]) == 0 {
			bad = append(bad, "no cell of "+q)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("%s (%s): model %s; table %s; changes %s", key, strings.Join(bad, ", "), o.modelText(want), o.tableText(key, row), o.history(key, pub))
}

// modelText writes what the model says a row holds: each column's value
// and the change (#seq) whose event time it carries.
func (o *ChangeObserved) modelText(want map[string]wantCell) string {
	if len(want) == 0 {
		return "{} (no data cell)"
	}
	var parts []string
	for _, q := range sortedKeys(want) {
		w := want[q]
		parts = append(parts, fmt.Sprintf("%s=#%d %q", q, w.seq, w.value))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// tableText writes what a row holds: every cell of every family, its time
// named by the key's change at that time (#seq) when there is one, else
// as an offset from the base.
func (o *ChangeObserved) tableText(key string, row chgRow) string {
	if len(row) == 0 {
		return "{} (no row)"
	}
	at := func(ts bigtable.Timestamp) string {
		for _, n := range o.Plan.ByKey[key] {
			if o.ts(o.Plan.Changes[n].At) == ts {
				return fmt.Sprintf("#%d", o.Plan.Changes[n].Seq)
			}
		}
		return fmt.Sprintf("@%+.3fs", ts.Time().Sub(o.Base).Seconds())
	}
	var parts []string
	for _, fam := range sortedKeys(row) {
		for _, q := range sortedKeys(row[fam]) {
			var vs []string
			for _, c := range row[fam][q] {
				if fam == chgTombFamily && len(c.value) == 0 {
					vs = append(vs, at(c.ts))
					continue
				}
				vs = append(vs, fmt.Sprintf("%s %s", at(c.ts), abbrev(c.value)))
			}
			parts = append(parts, fmt.Sprintf("%s:%s=[%s]", fam, q, strings.Join(vs, ", ")))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// maxHistory bounds the changes a problem lists: the newest.
const maxHistory = 12

// history writes key's published changes in event-time order: #seq, the
// op (a set with its columns, -col for one missing) and the event time's
// offset from the base.
func (o *ChangeObserved) history(key string, pub func(int) bool) string {
	var parts []string
	for _, n := range o.Plan.ByKey[key] {
		c := &o.Plan.Changes[n]
		if !pub(n) {
			continue
		}
		op := c.Op.String()
		if c.Op == ChangeSet {
			var cols []string
			for i, col := range changeColumns {
				if c.present(i) {
					cols = append(cols, col)
				} else {
					cols = append(cols, "-"+col)
				}
			}
			op = fmt.Sprintf("set(%s)", strings.Join(cols, ","))
		}
		parts = append(parts, fmt.Sprintf("#%d %s@%+.3fs", c.Seq, op, c.At.Seconds()))
	}
	if len(parts) > maxHistory {
		parts = append([]string{fmt.Sprintf("…%d earlier", len(parts)-maxHistory)}, parts[len(parts)-maxHistory:]...)
	}
	return strings.Join(parts, "; ")
}

// CheckChanges evaluates the change pipeline's invariants (doc.go, "Change
// stream"), each named [NAME].
func CheckChanges(o *ChangeObserved) []Result {
	var out []Result
	out = append(out, checkChangeWorkload(o)...)
	out = append(out, checkChangeTables(o)...)
	out = append(out, checkChangeDeadLetters(o)...)
	out = append(out, exact("messages left unacked on the main subscription after the final stop", 0, o.LeftMain, nil))
	out = append(out, checkChangeMetrics(o)...)
	for i := range out {
		out[i].Invariant = "[" + o.Pipe.Name + "] " + out[i].Invariant
	}
	return out
}

func checkChangeWorkload(o *ChangeObserved) []Result {
	var failed examples
	for i, s := range o.Steps {
		if s.err != nil {
			failed.add("change message %d (change %d): %v", i, o.Plan.Steps[i].Change, s.err)
		}
	}
	return []Result{exact("change publishes that failed", 0, failed.n, &failed)}
}

// checkChangeTables holds each table to the model: every key's row as the
// model says, the newest delete's tombstone in it, no row of another key.
func checkChangeTables(o *ChangeObserved) []Result {
	pub := chgPublished(o.Plan, o.Steps)
	var out []Result
	known := map[string]bool{}
	for _, k := range o.Plan.Keys {
		known[k] = true
	}
	for _, m := range changeMappings {
		var rows, tombs, others examples
		deleted, tombed := 0, 0
		for _, key := range o.Plan.Keys {
			if p := o.rowProblem(m.Table, m.Mode, key, pub); p != "" {
				rows.add("%s", p)
			}
			d := o.Plan.lastDelete(key, pub)
			if d == nil {
				continue
			}
			deleted++
			q := "*"
			if d.Op == ChangeDeleteFamily {
				q = chgFamily
			}
			ok := slices.ContainsFunc(o.Tables[m.Table][key][chgTombFamily][q], func(c cell) bool { return c.ts == o.ts(d.At) && len(c.value) == 0 })
			if ok {
				tombed++
			} else {
				tombs.add("%s: newest delete #%d (%s) at %+.3fs left no empty %s:%s cell at its time; table %s", key, d.Seq, d.Op, d.At.Seconds(), chgTombFamily, q,
					o.tableText(key, o.Tables[m.Table][key]))
			}
		}
		for _, key := range sortedKeys(o.Tables[m.Table]) {
			if !known[key] {
				others.add("row %s: %s", short(key), o.tableText(key, o.Tables[m.Table][key]))
			}
		}
		n := len(o.Plan.Keys)
		out = append(out,
			exact(fmt.Sprintf("keys whose %s row (%s) equals the model: each change applied in event-time order (every data cell's value and time, one version, nothing the model deleted)", m.Table, m.Mode), n, n-rows.n, &rows),
			exact(fmt.Sprintf("keys deleted whose %s row holds the newest delete's tombstone at its time", m.Table), deleted, tombed, &tombs),
			exact(fmt.Sprintf("rows of %s of no key of the workload", m.Table), 0, others.n, &others))
	}
	return out
}

// checkChangeDeadLetters: every poison message (an op that is no
// operation) copied as expression_failed, with its data and attributes;
// nothing else copied.
func checkChangeDeadLetters(o *ChangeObserved) []Result {
	byMsg := map[string]int{}
	for i, s := range o.Steps {
		if s.id != "" {
			byMsg[s.id] = i
		}
	}
	copies := map[string][]dlCopy{}
	var foreign, wrong examples
	for _, c := range o.Copies {
		id, reason := c.attrs[deadletter.AttrMessageID], c.attrs[deadletter.AttrReason]
		si, ok := byMsg[id]
		if !ok {
			foreign.add("copy of message %q (reason %s), which the campaign did not publish", id, reason)
			continue
		}
		ch := &o.Plan.Changes[o.Plan.Steps[si].Change]
		if ch.Op != ChangePoison {
			foreign.add("copy of message %s, change %d of %s (#%d %s), reason %s: %s", id, ch.N, ch.Key, ch.Seq, ch.Op, reason, c.attrs[deadletter.AttrError])
			continue
		}
		if p := changeCopyProblem(o, c, ch); p != "" {
			wrong.add("message %s, change %d of %s: %s", id, ch.N, ch.Key, p)
		}
		copies[id] = append(copies[id], c)
	}
	var msgs, copied int
	var uncopied examples
	for i, s := range o.Plan.Steps {
		ch := &o.Plan.Changes[s.Change]
		if ch.Op != ChangePoison || o.Steps[i].id == "" {
			continue
		}
		msgs++
		if len(copies[o.Steps[i].id]) > 0 {
			copied++
		} else {
			uncopied.add("message %s, change %d of %s (op %q)", o.Steps[i].id, ch.N, ch.Key, ch.Code)
		}
	}
	ours := len(o.Copies) - foreign.n
	extra := extraCopies(&Observed{Begin: o.Begin, Disruptions: o.Disruptions, Skew: o.Skew}, copies)
	return []Result{
		exact("poison changes (an op that is no operation) with a dead-letter copy", msgs, copied, &uncopied),
		exact("copies with reason expression_failed, their data and attributes", ours, ours-wrong.n, &wrong),
		exact("copies of anything else (changes that are operations, unknown messages)", 0, foreign.n, &foreign),
		extra,
		{Invariant: "entries of the dead-letter file that are no copy (a write a SIGKILL cut short)", Class: Bounded,
			Expected: fmt.Sprintf("≤ %d SIGKILLs", len(o.Kills)), Found: strconv.Itoa(o.Malformed), OK: o.Malformed <= len(o.Kills)},
	}
}

// changeCopyProblem checks a copy of a poison change.
func changeCopyProblem(o *ChangeObserved, c dlCopy, ch *Change) string {
	a := c.attrs
	switch {
	case a[deadletter.AttrReason] != string(deadletter.ExpressionFailed):
		return fmt.Sprintf("reason %s, want %s (%s)", a[deadletter.AttrReason], deadletter.ExpressionFailed, a[deadletter.AttrError])
	case a[deadletter.AttrPipeline] != o.Pipe.Name:
		return fmt.Sprintf("pubsink_pipeline %q", a[deadletter.AttrPipeline])
	case a["cid"] != strconv.Itoa(ch.N) || a["key"] != ch.Key || a["ts"] != strconv.FormatInt(o.Base.Add(ch.At).UnixMilli(), 10):
		return fmt.Sprintf("attributes cid %q key %q ts %q", a["cid"], a["key"], a["ts"])
	case !bytes.Equal(c.data, ch.Data):
		return fmt.Sprintf("data %s, want %s", abbrev(c.data), abbrev(ch.Data))
	}
	return ""
}

// checkChangeMetrics: each final process balances, and its row operations
// sum to its rows committed, two per message committed (one per mapping);
// the pipeline never dedupes, drops or judges late; what its processes
// counted dead-lettered is in the file.
func checkChangeMetrics(o *ChangeObserved) []Result {
	out := checkFinal(&Observed{Pipe: o.Pipe, Final: o.Final, FinalOK: o.FinalOK})
	if o.FinalOK && len(o.Final) > 0 {
		var opsOff, rowsOff examples
		var ops, rows, committed float64
		for _, f := range o.Final {
			sum := 0.0
			for _, v := range f.Ops {
				sum += v
			}
			if sum != f.Rows {
				opsOff.add("%s: Σ operations %.0f (%s), rows committed %.0f", f.proc, sum, opsText(f.Ops), f.Rows)
			}
			if f.Rows != float64(len(changeMappings))*f.Committed {
				rowsOff.add("%s: rows committed %.0f, messages committed %.0f", f.proc, f.Rows, f.Committed)
			}
			ops += sum
			rows += f.Rows
			committed += f.Committed
		}
		name := finalName(len(o.Final))
		out = append(out,
			Result{Invariant: name + ": Σ pubsink_row_operations_total = pubsink_rows_committed_total", Class: Exact,
				Expected: fmt.Sprintf("%.0f", rows), Found: fmt.Sprintf("%.0f", ops), OK: opsOff.n == 0, Examples: opsOff.lines},
			Result{Invariant: fmt.Sprintf("%s: rows committed = %d × messages committed (a row per mapping)", name, len(changeMappings)), Class: Exact,
				Expected: fmt.Sprintf("%.0f", float64(len(changeMappings))*committed), Found: fmt.Sprintf("%.0f", rows), OK: rowsOff.n == 0, Examples: rowsOff.lines})
	}
	var other int64
	dl := map[string]int64{}
	ops := map[string]int64{}
	var missing [3]int64
	var cells int64
	for _, g := range o.Gens {
		st := g.last
		other += st.Duplicate + st.Dropped + st.Late
		for r, n := range st.DeadLettered {
			dl[r] += n
		}
		for op, c := range st.Operations {
			ops[op+" applied"] += c.Applied
			ops[op+" superseded"] += c.Superseded
		}
		missing[0] += st.MissingValues.Skip
		missing[1] += st.MissingValues.Empty
		missing[2] += st.MissingValues.Delete
		cells += st.CellsSuperseded
	}
	var opParts []string
	for _, k := range slices.Sorted(maps.Keys(ops)) {
		opParts = append(opParts, fmt.Sprintf("%s %d", k, ops[k]))
	}
	out = append(out,
		exact("Σ duplicate + dropped + late over processes (at_least_once, no watermark)", 0, int(other), nil),
		deadLetteredWithin(&Observed{Pipe: o.Pipe, Copies: o.Copies, Disruptions: o.Disruptions}, dl),
		Result{Invariant: "rows by operation and result (Σ over processes' last /status)", Class: Info, Found: strings.Join(opParts, ", "), OK: true},
		Result{Invariant: "missing values by policy, cells superseded (Σ over processes' last /status)", Class: Info,
			Found: fmt.Sprintf("skip %d, empty %d, delete %d; superseded %d", missing[0], missing[1], missing[2], cells), OK: true})
	return out
}

// opsText writes pubsink_row_operations_total's samples of a process.
func opsText(ops map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(ops)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, ops[k]))
	}
	return strings.Join(parts, ", ")
}
