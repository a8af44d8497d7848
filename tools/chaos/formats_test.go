package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/hamba/avro/v2"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// testFmtPlans are the format workloads of a seed, rivals in the
// reprocessed pipeline's too when rivals.
func testFmtPlans(rivals bool) []*FmtPlan {
	return Options{Seed: 5, Messages: 3000, Formats: true, ReprocessRivals: rivals}.fmtPlans("dir")
}

func TestFmtPlansHaveWhatTheBriefAsks(t *testing.T) {
	plans := testFmtPlans(false)
	if len(plans) != 3 {
		t.Fatalf("%d format plans, want 3", len(plans))
	}
	for _, p := range plans {
		var phases [3]int
		dups, rivals, items, big, none := 0, 0, 0, 0, 0
		for _, k := range p.Keys {
			phases[k.Phase]++
			if k.Dup {
				dups++
			}
			if len(k.Payloads) > 1 {
				rivals++
			}
			for _, pl := range k.Payloads {
				items += len(pl.Items)
				if pl.N >= pbBigTotal {
					big++
				}
				if len(pl.Items) == 0 {
					none++
				}
			}
		}
		if phases[0] == 0 || phases[1] == 0 || phases[2] == 0 || dups == 0 {
			t.Errorf("%s: keys by phase %v, %d with a publisher duplicate", p.Summary(), phases, dups)
		}
		if wantRivals := p.Pipe.Name != reprocessed; (rivals > 0) != wantRivals {
			t.Errorf("%s: %d keys with a rival", p.Summary(), rivals)
		}
		if p.Pipe.Format == fmtProto && (items == 0 || big == 0 || big == len(p.Keys) || none == 0) {
			t.Errorf("%s: %d items, %d payloads with total >= %d, %d without items: each and when need both sides", p.Summary(), items, big, pbBigTotal, none)
		}
	}
	for _, k := range testFmtPlans(true)[0].Keys {
		if len(k.Payloads) > 1 {
			return
		}
	}
	t.Error("-reprocess-rivals gives the reprocessed pipeline no rival")
}

// fakeTopicSchemas serves both revisions of the campaign's Avro schema.
type fakeTopicSchemas struct{}

func (fakeTopicSchemas) Get(_ context.Context, name, revision string) (source.Schema, error) {
	def := map[string]string{"r1": avroV1, "r2": avroV2}[revision]
	return source.Schema{Name: name, Revision: revision, Type: "avro", Definition: def}, nil
}

// TestTheFormatMappingsMakeWhatRowsModels maps every payload of every
// format plan with pubsink's mapper, as the campaign's config (and the
// reprocess's) says, written with each Avro revision, and compares its
// rows with FmtPlan.Rows, which the checks hold the tables to.
func TestTheFormatMappingsMakeWhatRowsModels(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, protoFile), []byte(protoSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	v1, v2 := avro.MustParse(avroV1), avro.MustParse(avroV2)
	base := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	pipes := formatPipes(dir)
	plans := NewFmtPlans(9, pipes, 150, true)
	for _, reprocess := range []bool{false, true} {
		cfg, err := config.Parse([]byte(configYAMLOf("127.0.0.1:1", pipes, dir, reprocess)))
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range plans {
			if reprocess && p.Pipe.Name != reprocessed {
				continue
			}
			m, err := mapping.New(cfg.Pipelines[i], fakeTopicSchemas{}, sinks.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			for ki := range p.Keys {
				k := &p.Keys[ki]
				for pi := range k.Payloads {
					pl := &k.Payloads[pi]
					for _, writer := range []int{1, 2} {
						if p.Pipe.Format == fmtProto && writer == 2 {
							continue
						}
						data, err := p.encode(pl, writer, v1, v2)
						if err != nil {
							t.Fatal(err)
						}
						attrs := map[string]string{"id": k.ID, "ts": strconv.FormatInt(base.Add(pl.At).UnixMilli(), 10)}
						if p.Pipe.Format != fmtProto {
							attrs["googclient_schemaname"] = "projects/" + project + "/schemas/" + avroSchemaID
							attrs["googclient_schemarevisionid"] = "r" + strconv.Itoa(writer)
							attrs["googclient_schemaencoding"] = map[bool]string{true: "JSON", false: "BINARY"}[p.Pipe.Format == fmtAvroJSON]
						}
						var r mapping.Result
						if err := m.Map(context.Background(), &source.Message{ID: k.ID, Data: data, Attributes: attrs, PublishTime: base.Add(2 * time.Hour)}, &r); err != nil {
							t.Fatalf("%s key %s payload %d writer %d: %v", p.Pipe.Name, k.ID, pi, writer, err)
						}
						got := map[string]map[string]fmtRow{}
						for _, t := range p.Pipe.Tables {
							got[t] = map[string]fmtRow{}
						}
						for _, row := range r.Rows {
							table := row.Table
							if table == "" {
								table = p.Pipe.Table
							}
							cols := map[string]string{}
							for _, c := range row.Cells {
								cols[c.Column] = string(c.Value)
							}
							got[table][row.Key] = fmtRow{cols: cols, ts: row.Timestamp.Sub(base)}
						}
						want := p.Rows(k, pl, writer, reprocess)
						if !fmtRowsEqual(got, want) {
							t.Fatalf("%s (reprocess %v) key %s payload %d writer %d:\n got %v\nwant %v", p.Pipe.Name, reprocess, k.ID, pi, writer, got, want)
						}
					}
				}
			}
		}
	}
}

func fmtRowsEqual(a, b map[string]map[string]fmtRow) bool {
	if len(a) != len(b) {
		return false
	}
	for t, rows := range a {
		if len(rows) != len(b[t]) {
			return false
		}
		for k, r := range rows {
			w, ok := b[t][k]
			if !ok || r.ts != w.ts || len(r.cols) != len(w.cols) {
				return false
			}
			for c, v := range r.cols {
				if w.cols[c] != v {
					return false
				}
			}
		}
	}
	return true
}

// perfectFormat is what a correct run of plan p shows: every message
// published, the first payload of every key written (the reprocess's
// mapping in its range), Avro payloads of the second half with revision 2,
// a reprocess SIGTERMed, SIGKILLed, then done.
func perfectFormat(t *testing.T, p *FmtPlan) *FmtObserved {
	t.Helper()
	base := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	t0 := base.Add(time.Hour)
	o := &FmtObserved{Plan: p, Base: base, Steps: make([]published, len(p.Steps)), Writers: make([]int, len(p.Steps)),
		Tables: map[string]map[string]map[string][]cell{}, FinalOK: true}
	for _, tb := range p.Pipe.Tables {
		o.Tables[tb] = map[string]map[string][]cell{}
	}
	if p.Pipe.Name == reprocessed {
		o.Reprocess = &ReprocessObserved{From: t0.Add(10 * time.Second), Until: t0.Add(20 * time.Second), Exits: []reprocessExit{
			{gen: 1, sent: syscall.SIGTERM.String(), code: 3, text: "exit 3"},
			{gen: 2, sent: syscall.SIGKILL.String(), code: -1, text: "signal killed"},
			{gen: 3, code: 0, text: "exit 0"}}}
	}
	for si, s := range p.Steps {
		k := &p.Keys[s.Key]
		// Phase 0 before the range, 1 in it, 2 after, away from its ends.
		o.Steps[si] = published{id: "m" + strconv.Itoa(si), at: t0.Add(time.Duration(2+10*k.Phase)*time.Second + time.Duration(si)*time.Millisecond)}
		o.Writers[si] = 1 + s.Key*2/len(p.Keys)
	}
	for ki := range p.Keys {
		k := &p.Keys[ki]
		for tb, rows := range p.Rows(k, &k.Payloads[0], o.writerOf(ki, 0), o.inRange(k)) {
			for rk, r := range rows {
				ts := bigtable.Time(base.Add(r.ts)).TruncateToMilliseconds()
				row := map[string][]cell{}
				for c, v := range r.cols {
					row[c] = []cell{{value: []byte(v), ts: ts}}
				}
				o.Tables[tb][rk] = row
			}
		}
	}
	n := float64(len(p.Steps))
	o.Final = []procCounters{{proc: "process 1", Counters: Counters{Received: n, Committed: float64(len(p.Keys)), Duplicate: n - float64(len(p.Keys))}}}
	return o
}

// fmtKeyWhere is the index of the first key of o's plan that has.
func fmtKeyWhere(t *testing.T, o *FmtObserved, has func(k *FmtKey) bool) int {
	t.Helper()
	for ki := range o.Plan.Keys {
		if has(&o.Plan.Keys[ki]) {
			return ki
		}
	}
	t.Fatal("no such key in the plan")
	return 0
}

// rivalWins rewrites key ki's rows as its rival's (payload 1), as a run
// whose rival won writes them.
func rivalWins(o *FmtObserved, ki int) {
	k := &o.Plan.Keys[ki]
	for _, tb := range o.Plan.Pipe.Tables {
		for rk := range o.keyRows(k.ID)[tb] {
			delete(o.Tables[tb], rk)
		}
	}
	for tb, rows := range o.Plan.Rows(k, &k.Payloads[1], o.writerOf(ki, 1), o.inRange(k)) {
		for rk, r := range rows {
			row := map[string][]cell{}
			for c, v := range r.cols {
				row[c] = []cell{{value: []byte(v), ts: bigtable.Time(o.Base.Add(r.ts)).TruncateToMilliseconds()}}
			}
			o.Tables[tb][rk] = row
		}
	}
}

// firstCell is a cell of key ki's row in table tb (its first row, its
// first column, by name).
func firstCell(o *FmtObserved, tb string, ki int) *[]cell {
	rows := o.keyRows(o.Plan.Keys[ki].ID)[tb]
	rk := sortedKeys(rows)[0]
	col := sortedKeys(rows[rk])[0]
	cs := o.Tables[tb][rk][col]
	return &cs
}

var fmtPlansForChecks = testFmtPlans(false)

var fmtViolations = []struct {
	name  string
	plan  int // index into fmtPlansForChecks: 0 avro_bin (reprocessed), 1 avro_json, 2 proto_each
	spoil func(t *testing.T, o *FmtObserved)
	want  []string
}{
	{"a publish that failed", 1, func(t *testing.T, o *FmtObserved) {
		o.Steps[0].err = os.ErrDeadlineExceeded
	}, []string{"publishes that failed"}},
	{"Avro: a second version of a cell", 1, func(t *testing.T, o *FmtObserved) {
		rk := o.Plan.Keys[0].ID
		cs := o.Tables[o.Plan.Pipe.Table][rk]["n"]
		o.Tables[o.Plan.Pipe.Table][rk]["n"] = append(cs, cell{value: []byte("1"), ts: cs[0].ts - 1000})
	}, []string{"keys whose row is exactly that of one of its payloads"}},
	{"Avro: a revision-2 payload decoded without its note", 1, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return k.Phase == 2 })
		o.Tables[o.Plan.Pipe.Table][o.Plan.Keys[ki].ID]["note"][0].value = []byte("-")
	}, []string{"keys whose row is exactly that of one of its payloads"}},
	{"Avro: a key with no row", 1, func(t *testing.T, o *FmtObserved) {
		delete(o.Tables[o.Plan.Pipe.Table], o.Plan.Keys[3].ID)
	}, []string{"keys whose row is exactly that of one of its payloads"}},
	{"Avro: cells of both rivals (one payload's n, the other's tag)", 1, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return len(k.Payloads) > 1 })
		k := &o.Plan.Keys[ki]
		o.Tables[o.Plan.Pipe.Table][k.ID]["tag"][0].value = []byte(k.Payloads[1].Tag)
	}, []string{"keys whose row is exactly that of one of its payloads"}},
	{"a row of no key", 1, func(t *testing.T, o *FmtObserved) {
		o.Tables[o.Plan.Pipe.Table]["avro_json-9999"] = map[string][]cell{"n": {{value: []byte("1")}}}
	}, []string{"rows of no key of the workload"}},
	{"proto: an item's row missing (each)", 2, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return len(k.Payloads[0].Items) > 1 })
		rows := o.keyRows(o.Plan.Keys[ki].ID)[o.Plan.Pipe.Tables[0]]
		delete(o.Tables[o.Plan.Pipe.Tables[0]], sortedKeys(rows)[0])
	}, []string{"keys whose rows are exactly those of one of its payloads"}},
	{"proto: a when row where the condition is false", 2, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return k.Payloads[0].N < pbBigTotal && len(k.Payloads) == 1 })
		o.Tables[o.Plan.Pipe.Tables[1]][o.Plan.Keys[ki].ID] = map[string][]cell{"total": {{value: []byte("1")}}}
	}, []string{"keys whose rows are exactly those of one of its payloads"}},
	{"proto: no when row where the condition holds", 2, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return k.Payloads[0].N >= pbBigTotal })
		delete(o.Tables[o.Plan.Pipe.Tables[1]], o.Plan.Keys[ki].ID)
	}, []string{"keys whose rows are exactly those of one of its payloads"}},
	{"proto: the rival's item rows beside the winner's", 2, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool {
			return len(k.Payloads) > 1 && len(k.Payloads[1].Items) > 0 && len(k.Payloads[0].Items) > 0 && k.Payloads[0].Items[0].SKU != k.Payloads[1].Items[0].SKU
		})
		k := &o.Plan.Keys[ki]
		for rk, r := range o.Plan.Rows(k, &k.Payloads[1], 1, false)[o.Plan.Pipe.Tables[0]] {
			if _, ok := o.Tables[o.Plan.Pipe.Tables[0]][rk]; !ok {
				row := map[string][]cell{}
				for c, v := range r.cols {
					row[c] = []cell{{value: []byte(v), ts: bigtable.Time(o.Base.Add(r.ts)).TruncateToMilliseconds()}}
				}
				o.Tables[o.Plan.Pipe.Tables[0]][rk] = row
			}
		}
	}, []string{"keys whose rows are exactly those of one of its payloads"}},
	{"proto: a second version of an item's cell", 2, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return len(k.Payloads[0].Items) > 0 })
		cs := firstCell(o, o.Plan.Pipe.Tables[0], ki)
		rows := o.keyRows(o.Plan.Keys[ki].ID)[o.Plan.Pipe.Tables[0]]
		rk := sortedKeys(rows)[0]
		col := sortedKeys(rows[rk])[0]
		o.Tables[o.Plan.Pipe.Tables[0]][rk][col] = append(*cs, cell{value: (*cs)[0].value, ts: (*cs)[0].ts + 1000})
	}, []string{"keys whose rows are exactly those of one of its payloads"}},
	{"a copy in the dead-letter file", 2, func(t *testing.T, o *FmtObserved) {
		o.Copies = append(o.Copies, dlCopy{attrs: map[string]string{"id": o.Plan.Keys[0].ID}})
	}, []string{"copies in the dead-letter file"}},
	{"a message left on the subscription", 2, func(t *testing.T, o *FmtObserved) { o.LeftMain = 1 }, []string{"messages left unacked"}},
	{"a final process that does not balance", 2, func(t *testing.T, o *FmtObserved) { o.Final[0].Received++ }, []string{"received − retried"}},
	{"a message in flight at the end", 2, func(t *testing.T, o *FmtObserved) { o.Final[0].InFlight = 1 }, []string{"in flight once settled"}},
	{"the final /metrics not read", 2, func(t *testing.T, o *FmtObserved) { o.FinalOK = false }, []string{"/metrics of every final process read"}},
	{"reprocess: a key of its range left with the live mapping", 0, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return k.Phase == 1 })
		row := o.Tables[o.Plan.Pipe.Table][o.Plan.Keys[ki].ID]
		row["n"][0].value = []byte(strconv.FormatInt(o.Plan.Keys[ki].Payloads[0].N, 10))
	}, []string{"keys of the reprocess's range"}},
	{"reprocess: a key of its range with both mappings' versions", 0, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return k.Phase == 1 })
		row := o.Tables[o.Plan.Pipe.Table][o.Plan.Keys[ki].ID]
		row["n"] = append(row["n"], cell{value: []byte(strconv.FormatInt(o.Plan.Keys[ki].Payloads[0].N, 10)), ts: row["n"][0].ts - 1000})
	}, []string{"keys of the reprocess's range"}},
	{"reprocess: a key outside its range rewritten with its mapping", 0, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return k.Phase == 2 })
		row := o.Tables[o.Plan.Pipe.Table][o.Plan.Keys[ki].ID]
		row["n"][0].value = []byte(strconv.FormatInt(o.Plan.Keys[ki].Payloads[0].N*10+7, 10))
	}, []string{"keys outside the reprocess's range"}},
	{"reprocess: a message of the range published at its end", 0, func(t *testing.T, o *FmtObserved) {
		ki := fmtKeyWhere(t, o, func(k *FmtKey) bool { return k.Phase == 1 })
		si := slices.IndexFunc(o.Plan.Steps, func(s FmtStep) bool { return s.Key == ki })
		o.Steps[si].at = o.Reprocess.Until
	}, []string{"messages of the reprocess's range published within it"}},
	{"reprocess: never done", 0, func(t *testing.T, o *FmtObserved) {
		o.Reprocess.Exits = o.Reprocess.Exits[:2]
	}, []string{"the last of its processes exited 0"}},
	{"reprocess: a SIGTERM that exited 1", 0, func(t *testing.T, o *FmtObserved) {
		o.Reprocess.Exits[0].code, o.Reprocess.Exits[0].text = 1, "exit 1"
	}, []string{"SIGTERMs that exited 3"}},
	{"reprocess: a process that failed on its own", 0, func(t *testing.T, o *FmtObserved) {
		o.Reprocess.Exits = slices.Insert(o.Reprocess.Exits, 2, reprocessExit{gen: 3, code: 1, text: "exit 1"})
	}, []string{"exited without a signal and not 0"}},
	{"reprocess: its subscription left", 0, func(t *testing.T, o *FmtObserved) { o.Reprocess.SubLeft = true }, []string{"its subscription and its record left"}},
	{"reprocess: its record left", 0, func(t *testing.T, o *FmtObserved) { o.Reprocess.LockLeft = true }, []string{"its subscription and its record left"}},
}

func TestCheckFormatsPassesACorrectRun(t *testing.T) {
	for _, p := range fmtPlansForChecks {
		rs := CheckFormats(perfectFormat(t, p))
		if f := failing(rs); len(f) > 0 {
			var b strings.Builder
			PrintTable(&b, rs)
			t.Fatalf("a correct run of %s fails %v:\n%s", p.Pipe.Name, f, b.String())
		}
	}
}

// TestCheckFormatsPassesAReprocessStoppedByAStateTableStall: a reprocess
// that stopped on its own with exit 3 because it could not renew its lock
// in time (a Bigtable stall) is a resumable stop, not a failure; the same
// exit without that reason is one.
func TestCheckFormatsPassesAReprocessStoppedByAStateTableStall(t *testing.T) {
	p := fmtPlansForChecks[0]
	o := perfectFormat(t, p)
	o.Reprocess.Exits = slices.Insert(o.Reprocess.Exits, 1, reprocessExit{gen: 2, code: 3, text: "exit 3", lapsing: true})
	if f := failing(CheckFormats(o)); len(f) > 0 {
		t.Errorf("a reprocess stopped by a state-table stall fails %v", f)
	}
	o.Reprocess.Exits[1].lapsing = false
	if f := failing(CheckFormats(o)); len(f) == 0 {
		t.Error("a reprocess that exited 3 on its own for no reason passes")
	}
}

// TestCheckFormatsPassesWhenTheRivalWon: exactly once from one payload,
// whichever; the reprocess's range too, when the reprocess's winner is the
// live one's.
func TestCheckFormatsPassesWhenTheRivalWon(t *testing.T) {
	for _, p := range append(fmtPlansForChecks[1:], testFmtPlans(true)[0]) {
		o := perfectFormat(t, p)
		n := 0
		for ki := range p.Keys {
			if len(p.Keys[ki].Payloads) > 1 {
				rivalWins(o, ki)
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s: no rival", p.Pipe.Name)
		}
		if f := failing(CheckFormats(o)); len(f) > 0 {
			t.Errorf("%s with %d rivals winning fails %v", p.Pipe.Name, n, f)
		}
	}
}

func TestCheckFormatsCatchesEachViolation(t *testing.T) {
	for _, c := range fmtViolations {
		t.Run(c.name, func(t *testing.T) {
			o := perfectFormat(t, fmtPlansForChecks[c.plan])
			c.spoil(t, o)
			f := failing(CheckFormats(o))
			failsExactly(t, f, c.want)
		})
	}
}

// TestEveryFormatInvariantHasASpoilCase keeps the cases complete.
func TestEveryFormatInvariantHasASpoilCase(t *testing.T) {
	var wants []string
	for _, c := range fmtViolations {
		wants = append(wants, c.want...)
	}
	for _, p := range fmtPlansForChecks {
		for _, r := range CheckFormats(perfectFormat(t, p)) {
			if r.Class == Info || r.Class == Known {
				continue
			}
			if !slices.ContainsFunc(wants, func(w string) bool { return strings.Contains(r.Invariant, w) }) {
				t.Errorf("no spoil case makes %q fail", r.Invariant)
			}
		}
	}
}

// TestTheFormatConfigurationsAreValid: config.yaml and the reprocess's
// differ in the reprocessed pipeline's n column only.
func TestTheFormatConfigurationsAreValid(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, protoFile), []byte(protoSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	pipes := Options{Mix: true, Changes: true, Formats: true}.pipes(dir)
	live, rp := configYAMLOf("127.0.0.1:1", pipes, dir, false), configYAMLOf("127.0.0.1:1", pipes, dir, true)
	for _, y := range []string{live, rp} {
		if _, err := config.Parse([]byte(y)); err != nil {
			t.Fatalf("%v:\n%s", err, y)
		}
	}
	if strings.Replace(live, `{n: "`+avroNColumn+`", tag`, `{n: "`+reprocessNColumn+`", tag`, 1) != rp {
		t.Errorf("the reprocess's config differs from config.yaml in more than the reprocessed pipeline's n column")
	}
	seen := map[string]bool{}
	for _, p := range pipes {
		for _, r := range append([]string{p.Sub, p.Tracking, p.Topic, p.DLFile}, p.Tables...) {
			if r != "" && seen[r] {
				t.Errorf("%s is used twice", r)
			}
			seen[r] = true
		}
	}
}
