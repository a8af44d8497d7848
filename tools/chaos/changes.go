package main

// changes.go is the change-stream pipeline of the campaign (doc.go, "Change
// stream"): a workload of changes over a set of keys, fixed by the seed,
// the pipeline that applies them with two change mappings, the model of
// what each table must hold at the end (each key's changes applied in
// event-time order), and what the campaign does to publish them and to
// tell when their outcomes are visible.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"

	"github.com/pubsink/pubsink/deadletter"
)

// The change pipeline's resources. Its topic is its own: the record
// pipelines never see a change, nor it a record.
const (
	changePipeName  = "changes"
	changeTopic     = "chaos-changes"
	changeSub       = "chaos-chg-main"
	chgUpsertTable  = "chaos_chg_upsert"
	chgReplaceTable = "chaos_chg_replace"
	// chgFamily is the data family of both tables, chgTombFamily their
	// tombstone family (sink.tombstone_family; not the default, so that
	// the key is exercised).
	chgFamily     = "d"
	chgTombFamily = "tomb"
)

// changeColumns are the columns of both change mappings: a and c strings,
// b a number ({data.b} renders its digits).
var changeColumns = [3]string{"a", "b", "c"}

// changeMappings are the two mappings of the change pipeline: every change
// message makes one row in each table.
var changeMappings = []struct {
	Table, Mode string
}{
	{chgUpsertTable, "upsert"},
	{chgReplaceTable, "replace_if_newer"},
}

// changeOpExpr is both mappings' op: a CEL map from the Debezium-like code
// in data.op to the operation. A code it lacks ("t", a truncate) fails with
// "no such key", which dead-letters the message as expression_failed.
const changeOpExpr = `{'c': 'set', 'r': 'set', 'u': 'set', 'd': 'delete', 'f': 'delete_family', 'x': 'delete_columns'}[data.op]`

// changePipe is the change pipeline of a campaign whose run directory is
// dir: at_least_once, so that every redelivery and publisher duplicate
// reaches the sink again, no tracking subscription (no watermark: a
// change is never late), a dead-letter file for the changes whose op is no
// operation; with ordered, its subscription has message ordering
// (source.ordering).
func changePipe(dir string, ordered bool) PipeSpec {
	return PipeSpec{Name: changePipeName, Mode: modeAtLeastOnce, Output: deadletter.KindFile, Changes: true, Ordered: ordered,
		Topic: changeTopic, Sub: changeSub, Table: chgUpsertTable, DLFile: filepath.Join(dir, "chg-dlq.jsonl"), Streams: 1}
}

// changePipeYAML is the change pipeline's entry in config.yaml: rows keyed
// by data.key in both tables, the op from data.op, columns a, b, c of
// which a missing a or b is skipped and a missing c deleted (on_missing:
// skip, on_missing_columns c: delete), and delete_columns [b].
func changePipeYAML(p PipeSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, `  - name: %s
    mode: %s
    source:
      topic: %s
      subscription: %s
      timestamp_attribute: ts
      timestamp_format: auto
      streams: %d
      max_outstanding_messages: 1000
      max_outstanding_bytes: 64MiB
      ordering: %t
    sink:
      type: bigtable
      table: %s
      column_family: %s
      timestamp: event_time
      on_missing: skip
      tombstone_family: %s
      tombstone_retention: 48h
      batch: {max_messages: 200, max_bytes: 4MiB, max_delay: 20ms}
      mappings:
`, p.Name, p.Mode, p.Topic, p.Sub, p.Streams, p.Ordered, p.Table, chgFamily, chgTombFamily)
	for _, m := range changeMappings {
		fmt.Fprintf(&b, `        - table: %s
          row_key: "{data.key}"
          op: "%s"
          write_mode: %s
          on_missing_columns: {c: delete}
          delete_columns: [b]
          columns: {a: "{data.a}", b: "{data.b}", c: "{data.c}"}
`, m.Table, changeOpExpr, m.Mode)
	}
	fmt.Fprintf(&b, "    dead_letter: {file: %q}\n", p.DLFile)
	return b.String()
}

// ChangeOp is what a change does, as its data.op names it.
type ChangeOp uint8

const (
	ChangeSet           ChangeOp = iota // c (an insert, or a re-insert after a delete), u, r
	ChangeDelete                        // d: the row
	ChangeDeleteFamily                  // f: the family d
	ChangeDeleteColumns                 // x: the columns of delete_columns, b
	ChangePoison                        // t: no operation; dead-lettered expression_failed
	numChangeOps
)

var changeOpNames = [numChangeOps]string{"set", "delete", "delete_family", "delete_columns", "poison"}

func (o ChangeOp) String() string { return changeOpNames[o] }

// Column states of a set.
const (
	colPresent = iota
	colAbsent  // the member is left out
	colNull    // the member is null
)

// Change is one change of the workload: its key, its place among the key's
// changes by event time, its op and, for a set, its columns.
type Change struct {
	N    int // its number, attribute cid
	Key  string
	Seq  int // its place among its key's changes (event-time order); -1 for a poison
	Op   ChangeOp
	Code string // data.op
	// At is its event time's offset from the campaign's base event time
	// (whole milliseconds; distinct among a key's changes).
	At time.Duration
	// State and Value of each of changeColumns, for a set.
	State [3]uint8
	Value [3]string
	Data  []byte // the payload
}

// present reports whether the set carries column i.
func (c *Change) present(i int) bool { return c.Op == ChangeSet && c.State[i] == colPresent }

// ChangeStep is one message of the change workload.
type ChangeStep struct {
	Change int  // index into ChangePlan.Changes
	Dup    bool // a publisher duplicate: the same data and attributes, a new message ID
}

// ChangePlan is the change workload of a seed: keys, their changes, the
// messages shuffled into publish order and cut into bursts published at
// once.
type ChangePlan struct {
	Keys    []string
	Changes []Change
	ByKey   map[string][]int // a key's changes (not its poison), by event time
	Steps   []ChangeStep
	Bursts  []int // the sizes of the bursts, in order; they sum to len(Steps)
}

// ChangeConfig sizes a change plan.
type ChangeConfig struct {
	Changes int // about how many changes (poison and duplicates aside)
}

// The change workload's shares.
const (
	chgShareHot    = 0.05 // keys with 20-40 changes instead of 2-8
	chgShareDup    = 0.10 // changes published twice
	chgSharePoison = 0.02 // poison changes, per change
	chgShareTick   = 0.20 // gaps of exactly 1 ms between a key's changes
	chgShareBurst  = 0.20 // keys whose changes are all published at once
)

// chgWords make the string values varied: escapes, quotes, non-ASCII.
var chgWords = []string{"alpha", "δέλτα", "数据", "🚀", `quo"te`, `back\slash`, "tab\tbed", "x"}

// NewChangePlan makes the change plan of seed. It draws from its own PCG
// stream: the record workload and the fault schedule of the seed are the
// same with or without it.
func NewChangePlan(seed uint64, cc ChangeConfig) *ChangePlan {
	r := rand.New(rand.NewPCG(seed, 0x6368616e676573)) // "changes"
	p := &ChangePlan{ByKey: map[string][]int{}}
	add := func(c Change) int {
		c.N = len(p.Changes)
		p.Changes = append(p.Changes, c)
		return c.N
	}
	total := 0
	for total < cc.Changes || len(p.Keys) < 4 {
		key := fmt.Sprintf("chg-%04d", len(p.Keys))
		p.Keys = append(p.Keys, key)
		n := 2 + r.IntN(7)
		if r.Float64() < chgShareHot || len(p.Keys) == 1 {
			n = 20 + r.IntN(21)
		}
		at := time.Duration(r.IntN(60_000)) * time.Millisecond
		prev := ChangeSet
		for seq := range n {
			if seq > 0 {
				gap := time.Millisecond
				if r.Float64() >= chgShareTick {
					gap = time.Duration(2+r.IntN(2999)) * time.Millisecond
				}
				at += gap
			}
			c := Change{Key: key, Seq: seq, At: at}
			switch x := r.Float64(); {
			case seq == 0 || x < 0.5:
				c.Op, c.Code = ChangeSet, []string{"u", "u", "u", "r"}[r.IntN(4)]
				if seq == 0 || prev == ChangeDelete || prev == ChangeDeleteFamily {
					c.Code = "c" // an insert, or a re-insert after a delete
				}
			case x < 0.7:
				c.Op, c.Code = ChangeDelete, "d"
			case x < 0.8:
				c.Op, c.Code = ChangeDeleteFamily, "f"
			default:
				c.Op, c.Code = ChangeDeleteColumns, "x"
			}
			if c.Op == ChangeSet {
				for i := range changeColumns {
					switch y := r.Float64(); {
					case y < 0.15:
						c.State[i] = colAbsent
					case y < 0.25:
						c.State[i] = colNull
					}
				}
				c.Value[0] = fmt.Sprintf("%s/%d/a %s", key, seq, chgWords[r.IntN(len(chgWords))])
				c.Value[1] = strconv.Itoa(seq*1000 + r.IntN(1000))
				c.Value[2] = fmt.Sprintf("%s/%d/c", key, seq)
			}
			c.Data = changeData(&c)
			p.ByKey[key] = append(p.ByKey[key], add(c))
			prev = c.Op
			total++
		}
	}
	// Poison: a code that is no operation, at a key of the workload (it
	// must change nothing there), at an event time of its own.
	for range max(1, int(float64(total)*chgSharePoison)) {
		key := p.Keys[r.IntN(len(p.Keys))]
		c := Change{Key: key, Seq: -1, Op: ChangePoison, Code: "t", At: time.Duration(r.IntN(120_000)) * time.Millisecond}
		c.Data = changeData(&c)
		add(c)
	}
	// The messages: each change once, some twice. A burst key's messages
	// go out together, shuffled, as one burst of their own, so that the
	// processes apply its changes to one row at the same moment; the
	// others are shuffled over the run, in bursts of 1 to 12.
	burstKey := map[string]bool{}
	for _, key := range p.Keys {
		burstKey[key] = r.Float64() < chgShareBurst
	}
	type unit []ChangeStep // one message, or a burst key's messages
	var units []unit
	groups := map[string]int{} // burst key → its unit
	for i := range p.Changes {
		msgs := []ChangeStep{{Change: i}}
		if r.Float64() < chgShareDup {
			msgs = append(msgs, ChangeStep{Change: i, Dup: true})
		}
		key := p.Changes[i].Key
		if !burstKey[key] || p.Changes[i].Op == ChangePoison {
			for _, m := range msgs {
				units = append(units, unit{m})
			}
			continue
		}
		g, ok := groups[key]
		if !ok {
			g = len(units)
			groups[key] = g
			units = append(units, nil)
		}
		units[g] = append(units[g], msgs...)
	}
	r.Shuffle(len(units), func(i, j int) { units[i], units[j] = units[j], units[i] })
	room := 0 // what the burst of single messages being filled takes more
	for _, u := range units {
		if c := &p.Changes[u[0].Change]; burstKey[c.Key] && c.Op != ChangePoison {
			r.Shuffle(len(u), func(i, j int) { u[i], u[j] = u[j], u[i] })
			p.Steps = append(p.Steps, u...)
			p.Bursts = append(p.Bursts, len(u))
			room = 0
			continue
		}
		if room == 0 {
			p.Bursts = append(p.Bursts, 0)
			room = 1 + r.IntN(12)
		}
		p.Steps = append(p.Steps, u[0])
		p.Bursts[len(p.Bursts)-1]++
		room--
	}
	return p
}

// changeData is the payload of c: {"op", "key"} and, for a set, its
// columns, each present, absent or null.
func changeData(c *Change) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"op":%q,"key":%q`, c.Code, c.Key)
	if c.Op == ChangeSet {
		for i, col := range changeColumns {
			switch c.State[i] {
			case colNull:
				fmt.Fprintf(&b, `,%q:null`, col)
			case colPresent:
				if col == "b" {
					fmt.Fprintf(&b, `,%q:%s`, col, c.Value[i])
					continue
				}
				v, _ := json.Marshal(c.Value[i])
				fmt.Fprintf(&b, `,%q:%s`, col, v)
			}
		}
	}
	b.WriteString("}")
	return []byte(b.String())
}

// Summary counts the plan's keys, changes by op and messages.
func (p *ChangePlan) Summary() string {
	var ops [numChangeOps]int
	missing := 0
	for i := range p.Changes {
		c := &p.Changes[i]
		ops[c.Op]++
		for j := range changeColumns {
			if c.Op == ChangeSet && c.State[j] != colPresent {
				missing++
			}
		}
	}
	dups := 0
	for _, s := range p.Steps {
		if s.Dup {
			dups++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d keys, %d changes:", len(p.Keys), len(p.Changes))
	for op, n := range ops {
		fmt.Fprintf(&b, " %s %d", ChangeOp(op), n)
	}
	fmt.Fprintf(&b, " (%d missing values); %d messages: %d publisher duplicates, in %d bursts, %d of them a key's every change",
		missing, len(p.Steps), dups, len(p.Bursts), len(p.keyBursts()))
	return b.String()
}

// keyBursts are the indexes of the bursts that hold every message of one
// key's changes (its poison aside), and nothing else.
func (p *ChangePlan) keyBursts() []int {
	msgs := map[string]int{}
	for _, s := range p.Steps {
		if c := &p.Changes[s.Change]; c.Op != ChangePoison {
			msgs[c.Key]++
		}
	}
	var out []int
	at := 0
	for b, n := range p.Bursts {
		key := p.Changes[p.Steps[at].Change].Key
		one := n == msgs[key]
		for _, s := range p.Steps[at : at+n] {
			one = one && p.Changes[s.Change].Key == key && p.Changes[s.Change].Op != ChangePoison
		}
		if one {
			out = append(out, b)
		}
		at += n
	}
	return out
}

// wantCell is a cell the model says a column holds: the value of change
// seq, at its event time.
type wantCell struct {
	value string
	seq   int
	at    time.Duration
}

// Model is what the table of mode ("upsert" or "replace_if_newer") holds
// for key once its changes (those for which published is true) are
// applied in event-time order: column → cell, empty when the row holds
// nothing. upsert: each column holds the value of the newest change that
// touched it, if that was a set carrying it (a set touches the columns it
// carries, and c when it lacks it, under on_missing_columns c: delete; a
// delete or delete_family every column; a delete_columns b).
// replace_if_newer: the newest set's columns, unless a delete or
// delete_family is newer, less b if a delete_columns is newer.
func (p *ChangePlan) Model(key, mode string, published func(change int) bool) map[string]wantCell {
	out := map[string]wantCell{}
	var last *Change // replace_if_newer: the newest set
	var removed, bGone time.Duration = -1, -1
	for _, n := range p.ByKey[key] {
		c := &p.Changes[n]
		if !published(n) {
			continue
		}
		switch c.Op {
		case ChangeSet:
			last = c
			for i, col := range changeColumns {
				switch {
				case c.present(i):
					out[col] = wantCell{value: c.Value[i], seq: c.Seq, at: c.At}
				case col == "c":
					delete(out, col)
				}
			}
		case ChangeDelete, ChangeDeleteFamily:
			clear(out)
			removed = c.At
		case ChangeDeleteColumns:
			delete(out, "b")
			bGone = c.At
		}
	}
	if mode == "upsert" {
		return out
	}
	clear(out)
	if last == nil || removed > last.At {
		return out
	}
	for i, col := range changeColumns {
		if last.present(i) && !(col == "b" && bGone > last.At) {
			out[col] = wantCell{value: last.Value[i], seq: last.Seq, at: last.At}
		}
	}
	return out
}

// lastDelete is key's newest delete or delete_family among the published
// changes, which must have left its tombstone (nil if none).
func (p *ChangePlan) lastDelete(key string, published func(change int) bool) *Change {
	var out *Change
	for _, n := range p.ByKey[key] {
		c := &p.Changes[n]
		if published(n) && (c.Op == ChangeDelete || c.Op == ChangeDeleteFamily) {
			out = c
		}
	}
	return out
}

// chgRow is a row of a change table as read back: family → qualifier →
// versions.
type chgRow map[string]map[string][]cell

// changeMessage builds the message of change step i and records when it
// was published. The caller holds c.mu.
func (c *campaign) changeMessage(i int) *pubsub.Message {
	s := c.chg.Steps[i]
	ch := &c.chg.Changes[s.Change]
	v := "original"
	if s.Dup {
		v = "dup"
	}
	c.chgSteps[i].at = time.Now()
	m := &pubsub.Message{Data: ch.Data, Attributes: map[string]string{
		"cid": strconv.Itoa(ch.N), "v": v, "key": ch.Key,
		"ts": strconv.FormatInt(c.chgBase.Add(ch.At).UnixMilli(), 10),
	}}
	if c.opts.Ordered {
		m.OrderingKey = ch.Key
	}
	return m
}

// publishChanges publishes the change plan's bursts paced evenly over the
// workload's duration, each burst at once.
func (c *campaign) publishChanges(ctx context.Context, t0 time.Time) error {
	pub := c.pubsub.Publisher(changeTopic)
	pub.EnableMessageOrdering = c.opts.Ordered
	defer pub.Stop()
	var wg sync.WaitGroup
	interval := c.opts.Duration / time.Duration(max(len(c.chg.Bursts), 1))
	i := 0
	for b, n := range c.chg.Bursts {
		if !sleepUntil(ctx, t0.Add(time.Duration(b)*interval)) {
			break
		}
		for range n {
			c.mu.Lock()
			m := c.changeMessage(i)
			c.mu.Unlock()
			res, at := pub.Publish(ctx, m), i
			wg.Go(func() {
				id, err := res.Get(context.WithoutCancel(ctx))
				if err != nil && m.OrderingKey != "" {
					pub.ResumePublish(m.OrderingKey) // the key's later changes are published still (and fail as unpublished if they do)
				}
				c.mu.Lock()
				c.chgSteps[at].id, c.chgSteps[at].err = id, err
				c.mu.Unlock()
			})
			i++
		}
		if b%max(len(c.chg.Bursts)/10, 1) == 0 {
			c.logf("published %d of %d change messages", i, len(c.chg.Steps))
		}
	}
	wg.Wait()
	c.logf("publishing changes done")
	return nil
}

// chgPublished says which changes of p have a message published, by
// steps (the caller holds whatever guards steps).
func chgPublished(p *ChangePlan, steps []published) func(int) bool {
	pub := make([]bool, len(p.Changes))
	for i, s := range p.Steps {
		if i < len(steps) && steps[i].id != "" {
			pub[s.Change] = true
		}
	}
	return func(n int) bool { return pub[n] }
}

// readChangeTables reads both tables of the change pipeline whole: table →
// row key → row.
func (c *campaign) readChangeTables(ctx context.Context) (map[string]map[string]chgRow, error) {
	out := map[string]map[string]chgRow{}
	for _, m := range changeMappings {
		rows := map[string]chgRow{}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := c.bigtable.Open(m.Table).ReadRows(rctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			row := chgRow{}
			for fam, items := range r {
				cols := map[string][]cell{}
				for _, it := range items {
					q := strings.TrimPrefix(it.Column, fam+":")
					cols[q] = append(cols[q], cell{value: it.Value, ts: it.Timestamp})
				}
				row[fam] = cols
			}
			rows[r.Key()] = row
			return true
		})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", m.Table, err)
		}
		out[m.Table] = rows
	}
	return out, nil
}

// missingChanges counts the outcomes of the change pipeline not visible
// yet: keys of a table that differ from the model, poison messages without
// a copy.
func (c *campaign) missingChanges(ctx context.Context, p *pipeState) (int, error) {
	tables, err := c.readChangeTables(ctx)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o := &ChangeObserved{Plan: c.chg, Base: c.chgBase, Steps: c.chgSteps, Tables: tables, Copies: p.copies}
	pub := chgPublished(c.chg, c.chgSteps)
	missing := 0
	for _, m := range changeMappings {
		for _, key := range c.chg.Keys {
			if o.rowProblem(m.Table, m.Mode, key, pub) != "" {
				missing++
			}
		}
	}
	copied := map[string]bool{}
	for _, cp := range p.copies {
		copied[cp.attrs[deadletter.AttrMessageID]] = true
	}
	for i, s := range c.chg.Steps {
		if c.chg.Changes[s.Change].Op == ChangePoison && c.chgSteps[i].id != "" && !copied[c.chgSteps[i].id] {
			missing++
		}
	}
	return missing, nil
}

// chgBaseOf is the base event time of the change workload published from
// t0: an hour before, in whole milliseconds, so that every change's event
// time is in the past and well within the tombstones' retention.
func chgBaseOf(t0 time.Time) time.Time { return t0.Add(-time.Hour).Truncate(time.Millisecond) }

// sortedKeys is the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(mapKeys(m))
}
