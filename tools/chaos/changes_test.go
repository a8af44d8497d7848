package main

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/pipeline"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

var testChanges = ChangeConfig{Changes: 600}

func TestChangePlanIsTheSameForTheSameSeed(t *testing.T) {
	a, b := NewChangePlan(7, testChanges), NewChangePlan(7, testChanges)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two change plans of seed 7 differ")
	}
	if c := NewChangePlan(8, testChanges); reflect.DeepEqual(a.Steps, c.Steps) {
		t.Fatal("seeds 7 and 8 give the same change steps")
	}
}

// TestChangePlanHasWhatTheBriefAsks: every op, sets with columns absent
// and null, re-inserts after deletes, changes of a key at distinct event
// times (some 1 ms apart), hot keys, publisher duplicates, poison, all
// published in an order that is not event-time order.
func TestChangePlanHasWhatTheBriefAsks(t *testing.T) {
	p := NewChangePlan(1, testChanges)
	ops := map[ChangeOp]int{}
	states := map[uint8]int{}
	reinserts, ticks, hot := 0, 0, 0
	for _, key := range p.Keys {
		ns := p.ByKey[key]
		if len(ns) >= 20 {
			hot++
		}
		seen := map[time.Duration]bool{}
		for j, n := range ns {
			c := &p.Changes[n]
			if c.Key != key || c.Seq != j {
				t.Fatalf("change %d: key %s seq %d, listed as %s #%d", n, c.Key, c.Seq, key, j)
			}
			if seen[c.At] {
				t.Fatalf("key %s: two changes at %v", key, c.At)
			}
			seen[c.At] = true
			if j > 0 {
				prev := &p.Changes[ns[j-1]]
				if c.At <= prev.At {
					t.Fatalf("key %s: change #%d at %v not after #%d at %v", key, j, c.At, j-1, prev.At)
				}
				if c.At-prev.At == time.Millisecond {
					ticks++
				}
				if c.Op == ChangeSet && (prev.Op == ChangeDelete || prev.Op == ChangeDeleteFamily) {
					reinserts++
					if c.Code != "c" {
						t.Errorf("key %s #%d: a re-insert with code %q", key, j, c.Code)
					}
				}
			}
			if c.At%time.Millisecond != 0 {
				t.Fatalf("change %d at %v: not whole milliseconds", n, c.At)
			}
		}
	}
	for i := range p.Changes {
		c := &p.Changes[i]
		ops[c.Op]++
		if c.Op == ChangeSet {
			for j := range changeColumns {
				states[c.State[j]]++
			}
		}
	}
	for op := range numChangeOps {
		if ops[op] == 0 {
			t.Errorf("no %s change", op)
		}
	}
	for st, name := range []string{"present", "absent", "null"} {
		if states[uint8(st)] == 0 {
			t.Errorf("no column %s in a set", name)
		}
	}
	if reinserts == 0 || ticks == 0 || hot == 0 {
		t.Errorf("re-inserts %d, changes 1 ms after the last %d, hot keys %d: want some of each", reinserts, ticks, hot)
	}
	dups, sum := 0, 0
	inOrder := true
	last := map[string]time.Duration{}
	for _, s := range p.Steps {
		if s.Dup {
			dups++
		}
		c := &p.Changes[s.Change]
		if at, ok := last[c.Key]; ok && c.At < at {
			inOrder = false
		}
		last[c.Key] = c.At
	}
	for _, n := range p.Bursts {
		sum += n
	}
	if dups == 0 || sum != len(p.Steps) || inOrder || len(p.keyBursts()) == 0 {
		t.Errorf("%d duplicates, bursts of %d messages for %d steps, published in event-time order %v, %d bursts of a key's every change",
			dups, sum, len(p.Steps), inOrder, len(p.keyBursts()))
	}
	// A key burst holds all of its key's messages.
	for _, b := range p.keyBursts() {
		at := 0
		for _, n := range p.Bursts[:b] {
			at += n
		}
		key := p.Changes[p.Steps[at].Change].Key
		msgs := 0
		for _, s := range p.Steps {
			if c := &p.Changes[s.Change]; c.Key == key && c.Op != ChangePoison {
				msgs++
			}
		}
		if msgs != p.Bursts[b] {
			t.Errorf("burst %d of key %s: %d messages, the key has %d", b, key, p.Bursts[b], msgs)
		}
	}
}

// TestChangeModel pins the model on the cases of the reference's table
// ("What happens, by arrival order"), in event-time order.
func TestChangeModel(t *testing.T) {
	set := func(seq int, at time.Duration, vals ...string) Change {
		c := Change{Key: "k", Seq: seq, At: at, Op: ChangeSet}
		for i := range changeColumns {
			switch v := vals[i]; v {
			case "":
				c.State[i] = colAbsent
			case "null":
				c.State[i] = colNull
			default:
				c.Value[i] = v
			}
		}
		return c
	}
	op := func(seq int, at time.Duration, o ChangeOp) Change { return Change{Key: "k", Seq: seq, At: at, Op: o} }
	ms := time.Millisecond
	for _, c := range []struct {
		name             string
		changes          []Change
		upsert, replaceW string
	}{
		{"set, set: upsert keeps a column the newer lacks (skip); replace does not", []Change{set(0, 0, "a0", "1", "c0"), set(1, ms, "a1", "", "c1")},
			"a=#1 b=#0 c=#1", "a=#1 c=#1"},
		{"a missing c (on_missing delete) deletes it in upsert", []Change{set(0, 0, "a0", "1", "c0"), set(1, 5*ms, "", "2", "null")},
			"a=#0 b=#1", "b=#1"},
		{"set, delete: nothing", []Change{set(0, 0, "a0", "1", "c0"), op(1, ms, ChangeDelete)}, "", ""},
		{"delete, set: the re-insert", []Change{set(0, 0, "a0", "1", "c0"), op(1, ms, ChangeDeleteFamily), set(2, 2*ms, "", "3", "c2")},
			"b=#2 c=#2", "b=#2 c=#2"},
		{"set, delete_columns b: the other columns", []Change{set(0, 0, "a0", "1", "c0"), op(1, 9*ms, ChangeDeleteColumns)},
			"a=#0 c=#0", "a=#0 c=#0"},
		{"delete_columns b before a set: the set's b", []Change{op(0, 0, ChangeDeleteColumns), set(1, ms, "a1", "1", "")},
			"a=#1 b=#1", "a=#1 b=#1"},
		{"upsert: a b set after a delete_columns survives a newer set that lacks it", []Change{set(0, 0, "a0", "1", "c0"), op(1, ms, ChangeDeleteColumns), set(2, 2*ms, "", "7", ""), set(3, 3*ms, "a3", "", "c3")},
			"a=#3 b=#2 c=#3", "a=#3 c=#3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &ChangePlan{Keys: []string{"k"}, ByKey: map[string][]int{}}
			for i, ch := range c.changes {
				ch.N = i
				for j, v := range ch.Value {
					if v == "" && ch.State[j] == colPresent && ch.Op == ChangeSet {
						t.Fatal("a present column without a value")
					}
				}
				p.Changes = append(p.Changes, ch)
				p.ByKey["k"] = append(p.ByKey["k"], i)
			}
			all := func(int) bool { return true }
			text := func(m map[string]wantCell) string {
				var parts []string
				for _, q := range sortedKeys(m) {
					parts = append(parts, q+"=#"+strconv.Itoa(m[q].seq))
				}
				return strings.Join(parts, " ")
			}
			if got := text(p.Model("k", "upsert", all)); got != c.upsert {
				t.Errorf("upsert: %q, want %q", got, c.upsert)
			}
			if got := text(p.Model("k", "replace_if_newer", all)); got != c.replaceW {
				t.Errorf("replace_if_newer: %q, want %q", got, c.replaceW)
			}
		})
	}
}

// TestTheChangeMappingMakesWhatTheModelReads maps every message of a
// change plan with pubsink's own mapper and checks that its rows are what
// the model assumes: per mapping, the op the code names, the mode, the
// columns the set carries with their values, c deleted when a set lacks
// it, b by a delete_columns, the event time as the timestamp; a poison
// code dead-lettered as expression_failed.
func TestTheChangeMappingMakesWhatTheModelReads(t *testing.T) {
	cfg, err := config.Parse([]byte(configYAML("127.0.0.1:1", []PipeSpec{changePipe(t.TempDir(), false)})))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pipelines[0].Source.Ordering {
		t.Error("the change pipeline asks for message ordering without -ordered")
	}
	ordered, err := config.Parse([]byte(configYAML("127.0.0.1:1", []PipeSpec{changePipe(t.TempDir(), true)})))
	if err != nil || !ordered.Pipelines[0].Source.Ordering {
		t.Fatalf("with -ordered the change pipeline's source.ordering is not true: %v", err)
	}
	m, err := mapping.New(cfg.Pipelines[0], nil, sinks.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	p := NewChangePlan(3, testChanges)
	base := chgBaseOf(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	wantOp := [numChangeOps]sinks.Op{ChangeSet: sinks.OpSet, ChangeDelete: sinks.OpDelete, ChangeDeleteFamily: sinks.OpDeleteFamily, ChangeDeleteColumns: sinks.OpDeleteColumns}
	wantMode := []sinks.Mode{sinks.ModeUpsert, sinks.ModeReplaceIfNewer}
	for i := range p.Changes {
		ch := &p.Changes[i]
		msg := &source.Message{ID: strconv.Itoa(i), Data: ch.Data, PublishTime: base.Add(2 * time.Hour),
			Attributes: map[string]string{"ts": strconv.FormatInt(base.Add(ch.At).UnixMilli(), 10), "cid": strconv.Itoa(i), "key": ch.Key, "v": "original"}}
		var r mapping.Result
		err := m.Map(context.Background(), msg, &r)
		if ch.Op == ChangePoison {
			var bad *mapping.BadInput
			if !errors.As(err, &bad) || bad.Reason != deadletter.ExpressionFailed {
				t.Fatalf("poison change %d (%s): %v, want expression_failed", i, ch.Data, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("change %d (%s): %v", i, ch.Data, err)
		}
		if len(r.Rows) != len(changeMappings) {
			t.Fatalf("change %d: %d rows, want %d", i, len(r.Rows), len(changeMappings))
		}
		for j, row := range r.Rows {
			what := "change " + strconv.Itoa(i) + " " + string(ch.Data) + ", mapping " + changeMappings[j].Mode
			if row.Table != changeMappings[j].Table || row.Family != chgFamily || row.Key != ch.Key {
				t.Fatalf("%s: table %s family %s key %s", what, row.Table, row.Family, row.Key)
			}
			if row.Change.Op != wantOp[ch.Op] || row.Change.Mode != wantMode[j] {
				t.Fatalf("%s: op %s mode %s", what, row.Change.Op, row.Change.Mode)
			}
			if !row.Timestamp.Equal(base.Add(ch.At)) {
				t.Fatalf("%s: timestamp %v, want %v", what, row.Timestamp, base.Add(ch.At))
			}
			cells := map[string]string{}
			for _, c := range row.Cells {
				cells[c.Column] = string(c.Value)
			}
			want := map[string]string{}
			var deletes []string
			switch ch.Op {
			case ChangeSet:
				for k, col := range changeColumns {
					if ch.present(k) {
						want[col] = ch.Value[k]
					} else if col == "c" {
						deletes = []string{"c"}
					}
				}
			case ChangeDeleteColumns:
				deletes = []string{"b"}
			}
			if !maps.Equal(cells, want) {
				t.Fatalf("%s: cells %q, want %q", what, cells, want)
			}
			if !slices.Equal(row.Change.Delete, deletes) {
				t.Fatalf("%s: deletes %q, want %q", what, row.Change.Delete, deletes)
			}
		}
	}
}

// perfectChanges makes the observation of a change pipeline that did
// everything right: each table as the model says (and the tombstones a
// delete leaves), a copy of every poison message, balanced metrics.
func perfectChanges(t *testing.T) *ChangeObserved {
	t.Helper()
	p := NewChangePlan(11, ChangeConfig{Changes: 300})
	begin := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	o := &ChangeObserved{Begin: begin, Pipe: changePipe("dir", false), Plan: p, Base: chgBaseOf(begin), Steps: make([]published, len(p.Steps)),
		Tables: map[string]map[string]chgRow{}}
	var committed, poison int64
	for i, s := range p.Steps {
		at := begin.Add(time.Duration(i) * 10 * time.Millisecond)
		o.Steps[i] = published{id: "m" + strconv.Itoa(i+1), at: at}
		ch := &p.Changes[s.Change]
		if ch.Op != ChangePoison {
			committed++
			continue
		}
		poison++
		v := "original"
		if s.Dup {
			v = "dup"
		}
		o.Copies = append(o.Copies, dlCopy{data: ch.Data, attrs: map[string]string{
			"cid": strconv.Itoa(ch.N), "v": v, "key": ch.Key, "ts": strconv.FormatInt(o.Base.Add(ch.At).UnixMilli(), 10),
			deadletter.AttrReason: string(deadletter.ExpressionFailed), deadletter.AttrError: "op: no such key: t", deadletter.AttrPipeline: changePipeName,
			deadletter.AttrMessageID: o.Steps[i].id, deadletter.AttrPublishTime: at.Format(time.RFC3339Nano), deadletter.AttrFailedAt: at.Add(time.Second).Format(time.RFC3339Nano),
		}})
	}
	all := chgPublished(p, o.Steps)
	for _, m := range changeMappings {
		rows := map[string]chgRow{}
		for _, key := range p.Keys {
			row := chgRow{}
			if want := p.Model(key, m.Mode, all); len(want) > 0 {
				row[chgFamily] = map[string][]cell{}
				for q, w := range want {
					row[chgFamily][q] = []cell{{value: []byte(w.value), ts: o.ts(w.at)}}
				}
			}
			if d := p.lastDelete(key, all); d != nil {
				q := "*"
				if d.Op == ChangeDeleteFamily {
					q = chgFamily
				}
				// And an older tombstone beside it, as a delete arriving
				// after a newer one leaves.
				row[chgTombFamily] = map[string][]cell{q: {{ts: o.ts(d.At)}}, "d:b": {{ts: o.ts(0)}}}
			}
			if len(row) > 0 {
				rows[key] = row
			}
		}
		o.Tables[m.Table] = rows
	}
	rows := committed * int64(len(changeMappings))
	dl := map[string]int64{string(deadletter.ExpressionFailed): poison}
	g := &genRecord{gen: 1}
	g.last = Status{Received: int64(len(p.Steps)), Committed: committed, DeadLettered: dl, Rows: rows,
		Operations:    map[string]pipeline.OperationCounts{"set": {Applied: rows - 10, Superseded: 10}},
		MissingValues: pipeline.MissingValues{Skip: 5, Delete: 3}}
	o.Gens = []*genRecord{g}
	o.Final = []procCounters{{proc: "process 1", Counters: Counters{Received: float64(len(p.Steps)), Committed: float64(committed),
		DeadLettered: map[string]float64{string(deadletter.ExpressionFailed): float64(poison)}, Rows: float64(rows),
		Ops: map[string]float64{"set/applied": float64(rows - 10), "set/superseded": 5, "delete/applied": 5}}}}
	o.FinalOK = true
	return o
}

func TestCheckChangesPassesACorrectRun(t *testing.T) {
	rs := CheckChanges(perfectChanges(t))
	if f := failing(rs); len(f) > 0 {
		var b strings.Builder
		PrintTable(&b, rs)
		t.Fatalf("a correct run fails %v:\n%s", f, b.String())
	}
}

// keyWhere returns a key of o's plan for which pred holds of the upsert
// model.
func keyWhere(t *testing.T, o *ChangeObserved, mode string, pred func(key string, want map[string]wantCell) bool) string {
	t.Helper()
	all := chgPublished(o.Plan, o.Steps)
	for _, key := range o.Plan.Keys {
		if pred(key, o.Plan.Model(key, mode, all)) {
			return key
		}
	}
	t.Fatal("no such key in the plan")
	return ""
}

// poisonCopy returns the index of the first copy in o.Copies.
func stepOfChange(t *testing.T, o *ChangeObserved, pred func(c *Change) bool) int {
	t.Helper()
	for i, s := range o.Plan.Steps {
		if pred(&o.Plan.Changes[s.Change]) {
			return i
		}
	}
	t.Fatal("no such step")
	return 0
}

// changeViolations are the spoil cases of the change pipeline's rows: a
// correct observation (perfectChanges) changed so that the rows in want,
// and no other, fail.
var changeViolations = []struct {
	name  string
	spoil func(t *testing.T, o *ChangeObserved)
	want  []string
}{
	{"a change publish that failed", func(t *testing.T, o *ChangeObserved) {
		o.Steps[0].err = errors.New("rpc error: code = DeadlineExceeded")
	}, []string{"change publishes that failed"}},
	{"upsert: a column holding an older change's value", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "upsert", func(_ string, w map[string]wantCell) bool { return w["a"].seq > 0 })
		o.Tables[chgUpsertTable][key][chgFamily]["a"][0].value = []byte("older")
	}, []string{"chaos_chg_upsert row (upsert) equals the model"}},
	{"upsert: a second version of a cell", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "upsert", func(_ string, w map[string]wantCell) bool { _, ok := w["b"]; return ok })
		cs := o.Tables[chgUpsertTable][key][chgFamily]["b"]
		o.Tables[chgUpsertTable][key][chgFamily]["b"] = append(cs, cell{value: []byte("0"), ts: cs[0].ts - 1000})
	}, []string{"chaos_chg_upsert row (upsert) equals the model"}},
	{"upsert: a cell at another time than its change's", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "upsert", func(_ string, w map[string]wantCell) bool { _, ok := w["c"]; return ok })
		o.Tables[chgUpsertTable][key][chgFamily]["c"][0].ts += 1000
	}, []string{"chaos_chg_upsert row (upsert) equals the model"}},
	{"upsert: a deleted row brought back by an older change", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "upsert", func(k string, w map[string]wantCell) bool {
			return len(w) == 0 && o.Plan.lastDelete(k, func(int) bool { return true }) != nil
		})
		first := &o.Plan.Changes[o.Plan.ByKey[key][0]]
		o.Tables[chgUpsertTable][key][chgFamily] = map[string][]cell{"a": {{value: []byte(first.Value[0]), ts: o.ts(first.At)}}}
	}, []string{"chaos_chg_upsert row (upsert) equals the model"}},
	{"upsert: a column the model holds is gone", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "upsert", func(_ string, w map[string]wantCell) bool { return len(w) == 3 })
		delete(o.Tables[chgUpsertTable][key][chgFamily], "a")
	}, []string{"chaos_chg_upsert row (upsert) equals the model"}},
	{"replace_if_newer: a column the newest set lacked kept", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "replace_if_newer", func(_ string, w map[string]wantCell) bool {
			_, ok := w["a"]
			return len(w) > 0 && !ok
		})
		w := o.Tables[chgReplaceTable][key][chgFamily]
		for _, cs := range w {
			w["a"] = []cell{{value: []byte("stale"), ts: cs[0].ts - 1000}}
			break
		}
	}, []string{"chaos_chg_replace row (replace_if_newer) equals the model"}},
	{"a family that is neither data nor tombstones", func(t *testing.T, o *ChangeObserved) {
		key := o.Plan.Keys[0]
		row := o.Tables[chgReplaceTable][key]
		if row == nil {
			row = chgRow{}
			o.Tables[chgReplaceTable][key] = row
		}
		row["x"] = map[string][]cell{"q": {{value: []byte("v")}}}
	}, []string{"chaos_chg_replace row (replace_if_newer) equals the model"}},
	{"replace_if_newer: a delete that left no tombstone", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "upsert", func(k string, _ map[string]wantCell) bool {
			return o.Plan.lastDelete(k, func(int) bool { return true }) != nil
		})
		delete(o.Tables[chgReplaceTable][key], chgTombFamily)
	}, []string{"keys deleted whose chaos_chg_replace row holds the newest delete's tombstone"}},
	{"upsert: a delete whose tombstone is at another time", func(t *testing.T, o *ChangeObserved) {
		key := keyWhere(t, o, "upsert", func(k string, _ map[string]wantCell) bool {
			d := o.Plan.lastDelete(k, func(int) bool { return true })
			return d != nil && d.Op == ChangeDelete
		})
		o.Tables[chgUpsertTable][key][chgTombFamily]["*"][0].ts -= 1000
	}, []string{"keys deleted whose chaos_chg_upsert row holds the newest delete's tombstone"}},
	{"upsert: a row of a key the workload does not have", func(t *testing.T, o *ChangeObserved) {
		o.Tables[chgUpsertTable]["chg-9999"] = chgRow{chgFamily: {"a": {{value: []byte("x")}}}}
	}, []string{"rows of chaos_chg_upsert of no key"}},
	{"replace_if_newer: a row of tombstones only under a key the workload does not have", func(t *testing.T, o *ChangeObserved) {
		o.Tables[chgReplaceTable]["chg-0000 "] = chgRow{chgTombFamily: {"*": {{}}}}
	}, []string{"rows of chaos_chg_replace of no key"}},
	{"a poison change without a copy", func(t *testing.T, o *ChangeObserved) {
		o.Copies = o.Copies[1:]
		o.Gens[0].last.DeadLettered[string(deadletter.ExpressionFailed)]--
	}, []string{"poison changes (an op that is no operation) with a dead-letter copy"}},
	{"a poison change dead-lettered for another reason", func(t *testing.T, o *ChangeObserved) {
		o.Copies[0].attrs[deadletter.AttrReason] = string(deadletter.MissingField)
		o.Gens[0].last.DeadLettered[string(deadletter.ExpressionFailed)]--
		o.Gens[0].last.DeadLettered[string(deadletter.MissingField)] = 1
	}, []string{"copies with reason expression_failed"}},
	{"a poison change's copy without its attributes", func(t *testing.T, o *ChangeObserved) {
		delete(o.Copies[0].attrs, "ts")
	}, []string{"copies with reason expression_failed"}},
	{"a change that is an operation dead-lettered", func(t *testing.T, o *ChangeObserved) {
		i := stepOfChange(t, o, func(c *Change) bool { return c.Op == ChangeDelete })
		attrs := maps.Clone(o.Copies[0].attrs)
		attrs[deadletter.AttrMessageID] = o.Steps[i].id
		o.Copies = append(o.Copies, dlCopy{attrs: attrs, data: o.Copies[0].data})
	}, []string{"copies of anything else"}},
	{"a poison message copied twice with no disruption", func(t *testing.T, o *ChangeObserved) {
		c := o.Copies[0]
		o.Copies = append(o.Copies, dlCopy{attrs: maps.Clone(c.attrs), data: c.data})
	}, []string{"extra copies"}},
	{"torn lines beyond the SIGKILLs", func(t *testing.T, o *ChangeObserved) { o.Malformed = 1 }, []string{"entries of the dead-letter file"}},
	{"a change left on the subscription", func(t *testing.T, o *ChangeObserved) { o.LeftMain = 3 }, []string{"messages left unacked on the main subscription"}},
	{"the final /metrics not read", func(t *testing.T, o *ChangeObserved) { o.FinalOK = false }, []string{"/metrics of every final process read"}},
	{"a final process that does not balance", func(t *testing.T, o *ChangeObserved) {
		o.Final[0].Received++
	}, []string{"received − retried"}},
	{"a change in flight at the end", func(t *testing.T, o *ChangeObserved) { o.Final[0].InFlight = 1 }, []string{"in flight once settled"}},
	{"row operations that do not sum to the rows", func(t *testing.T, o *ChangeObserved) {
		o.Final[0].Ops["delete/superseded"] = 1
	}, []string{"Σ pubsink_row_operations_total = pubsink_rows_committed_total"}},
	{"rows committed that are not a row per mapping", func(t *testing.T, o *ChangeObserved) {
		o.Final[0].Rows--
		o.Final[0].Ops["set/applied"]--
	}, []string{"rows committed = 2 × messages committed"}},
	{"a change deduped", func(t *testing.T, o *ChangeObserved) { o.Gens[0].last.Duplicate = 1 }, []string{"Σ duplicate + dropped + late"}},
	{"a change counted dead-lettered without a copy", func(t *testing.T, o *ChangeObserved) {
		o.Gens[0].last.DeadLettered[string(deadletter.ExpressionFailed)]++
	}, []string{"Σ dead-lettered"}},
}

func TestCheckChangesCatchesEachViolation(t *testing.T) {
	for _, c := range changeViolations {
		t.Run(c.name, func(t *testing.T) {
			o := perfectChanges(t)
			c.spoil(t, o)
			rs := CheckChanges(o)
			f := failing(rs)
			failsExactly(t, f, c.want)
		})
	}
}

// TestEveryChangeInvariantHasASpoilCase keeps the cases complete.
func TestEveryChangeInvariantHasASpoilCase(t *testing.T) {
	var wants []string
	for _, c := range changeViolations {
		wants = append(wants, c.want...)
	}
	for _, r := range CheckChanges(perfectChanges(t)) {
		if r.Class == Info || r.Class == Known {
			continue
		}
		if !slices.ContainsFunc(wants, func(w string) bool { return strings.Contains(r.Invariant, w) }) {
			t.Errorf("no spoil case makes %q fail", r.Invariant)
		}
	}
}

// TestARowProblemNamesTheKeyAndBothStates: what a failure prints.
func TestARowProblemNamesTheKeyAndBothStates(t *testing.T) {
	o := perfectChanges(t)
	key := keyWhere(t, o, "upsert", func(_ string, w map[string]wantCell) bool { return w["a"].seq > 0 })
	o.Tables[chgUpsertTable][key][chgFamily]["a"][0].value = []byte("older")
	var ex []string
	for _, r := range CheckChanges(o) {
		if !r.OK {
			ex = r.Examples
		}
	}
	if len(ex) != 1 {
		t.Fatalf("examples %q, want one", ex)
	}
	for _, want := range []string{key + " (the value of a)", "model {", "table {d:a=[#", `"older"`, "; changes ", " set(a,"} {
		if !strings.Contains(ex[0], want) {
			t.Errorf("%q does not say %q", ex[0], want)
		}
	}
}

func TestParseChangeCounters(t *testing.T) {
	text := `pubsink_messages_received_total{pipeline="changes"} 12
pubsink_rows_committed_total{pipeline="changes"} 20
pubsink_row_operations_total{operation="set",pipeline="changes",result="applied"} 15
pubsink_row_operations_total{operation="delete",pipeline="changes",result="superseded"} 5
pubsink_row_operations_total{operation="set",pipeline="other",result="applied"} 7
`
	c, err := parseCounters(text, "changes")
	if err != nil {
		t.Fatal(err)
	}
	if c.Rows != 20 || !maps.Equal(c.Ops, map[string]float64{"set/applied": 15, "delete/superseded": 5}) {
		t.Fatalf("parsed rows %v ops %v", c.Rows, c.Ops)
	}
}
