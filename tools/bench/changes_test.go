package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/source"
)

func TestParseOptionsChanges(t *testing.T) {
	o, err := parseOptions([]string{"-connectors", "changes_upsert,changes_delete,changes_insert,changes_replace,changes_upsert_shuffled,exactly_once_ordered_keys10,naive_ordered_keys3,changes_replace_shuffled_ordered_keys100_avro_each5",
		"-reference", "changes_upsert"})
	if err != nil {
		t.Fatal(err)
	}
	json := shape{format: formatJSON}
	with := func(sh shape, f func(*shape)) shape { f(&sh); return sh }
	want := map[kind]struct {
		base kind
		sh   shape
	}{
		"changes_upsert":              {changesUpsert, with(json, func(s *shape) { s.change = changeUpsert })},
		"changes_delete":              {changesDelete, with(json, func(s *shape) { s.change = changeDelete })},
		"changes_insert":              {changesInsert, with(json, func(s *shape) { s.change = changeInsert })},
		"changes_replace":             {changesReplace, with(json, func(s *shape) { s.change = changeReplace })},
		"changes_upsert_shuffled":     {changesUpsert, with(json, func(s *shape) { s.change, s.shuffled = changeUpsert, true })},
		"exactly_once_ordered_keys10": {exactlyOnce, with(json, func(s *shape) { s.orderingKeys = 10 })},
		"naive_ordered_keys3":         {naive, with(json, func(s *shape) { s.orderingKeys = 3 })},
		"changes_replace_shuffled_ordered_keys100_avro_each5": {changesReplace, shape{format: formatAvro, fields: true, elements: 5, each: true,
			change: changeReplace, shuffled: true, orderingKeys: 100}},
	}
	for _, k := range o.connectors {
		w := want[k]
		if k.base() != w.base || o.shapes[k] != w.sh {
			t.Errorf("%s: base %s, shape %+v; want %s, %+v", k, k.base(), o.shapes[k], w.base, w.sh)
		}
		if k.change() != (w.sh.change != "") {
			t.Errorf("%s: change() %v", k, k.change())
		}
	}
	if len(o.connectors) != len(want) {
		t.Errorf("connectors %v", o.connectors)
	}
	if sh := o.shapes["changes_replace_shuffled_ordered_keys100_avro_each5"]; sh.rowsFor(95) != 50 {
		t.Errorf("95 messages, 5 rows each, over 10 keys: %d rows, want 50", sh.rowsFor(95))
	}
	if sh := o.shapes["changes_upsert"]; sh.rowsFor(95) != 95 {
		t.Errorf("changes_upsert: %d rows for 95 messages", sh.rowsFor(95))
	}

	for _, args := range [][]string{
		{"-connectors", "exactly_once_shuffled"},
		{"-connectors", "naive_shuffled"},
		{"-connectors", "exactly_once_ordered_keys0"},
		{"-connectors", "exactly_once_ordered_keys"},
		{"-connectors", "changes_upsert_ordered_keys10_shuffled"},
		{"-connectors", "exactly_once_baseline_ordered_keys10", "-baseline", "/bin/true"},
		{"-connectors", "reprocess_ordered_keys10"},
		{"-connectors", "changes_upsert_shuffled", "-latency"},
		{"-connectors", "changes_set"},
	} {
		if _, err := parseOptions(args); err == nil {
			t.Errorf("parseOptions(%q) accepted", args)
		}
	}
}

// A _shuffled run's n messages go to n/10 row keys, a key's messages spread
// over the backlog with its event times in a shuffled order (a permutation
// of ten milliseconds, the same in every run), its ordering key the same
// for all of them; the row's winner is the newest, or for insert the
// earliest.
func TestShuffledMessages(t *testing.T) {
	b := &bench{n: 95, epoch: 1_000_000}
	sh := shape{format: formatJSON, change: changeUpsert, shuffled: true, orderingKeys: 3}
	if shuffledKeys(95) != 10 || shuffledKeys(100) != 10 || shuffledKeys(101) != 11 {
		t.Errorf("keys of 95, 100, 101 messages: %d, %d, %d", shuffledKeys(95), shuffledKeys(100), shuffledKeys(101))
	}
	times := map[string][]int64{}
	ordering := map[string]string{}
	outOfOrder := 0
	for i := range 95 {
		m, err := b.message(i, sh)
		if err != nil {
			t.Fatal(err)
		}
		key := m.Attributes["key"]
		if m.Attributes["id"] != messageID(i) || key == "" {
			t.Fatalf("message %d: attributes %v", i, m.Attributes)
		}
		var ts int64
		if _, err := fmt.Sscan(m.Attributes["ts"], &ts); err != nil || ts < b.epoch || ts >= b.epoch+shuffleVersions {
			t.Fatalf("message %d: ts %q", i, m.Attributes["ts"])
		}
		if prev := times[key]; len(prev) > 0 && ts-b.epoch < prev[len(prev)-1] {
			outOfOrder++
		}
		times[key] = append(times[key], ts-b.epoch)
		if o, ok := ordering[key]; ok && o != m.OrderingKey || m.OrderingKey == "" {
			t.Errorf("message %d of row %s: ordering key %q, the row's %q", i, key, m.OrderingKey, o)
		}
		ordering[key] = m.OrderingKey
	}
	if len(times) != 10 {
		t.Fatalf("%d row keys, want 10", len(times))
	}
	for key, ts := range times {
		if len(ts) < 9 || len(ts) > 10 {
			t.Errorf("row %s: %d messages", key, len(ts))
		}
		sorted := slices.Sorted(slices.Values(ts))
		if len(slices.Compact(slices.Clone(sorted))) != len(ts) {
			t.Errorf("row %s: event times %v, not distinct", key, ts)
		}
		var k int
		if _, err := fmt.Sscan(strings.TrimPrefix(key, "k"), &k); err != nil {
			t.Fatal(err)
		}
		if got := shuffledWinner(k, 95, changeUpsert); got != sorted[len(sorted)-1] {
			t.Errorf("row %s (%v): newest %d, want %d", key, ts, got, sorted[len(sorted)-1])
		}
		if got := shuffledWinner(k, 95, changeInsert); got != sorted[0] {
			t.Errorf("row %s (%v): insert's winner %d, want %d", key, ts, got, sorted[0])
		}
	}
	if outOfOrder < 20 {
		t.Errorf("%d of 85 later messages of a row are older than the one before: not shuffled", outOfOrder)
	}
	// Without _shuffled, no key attribute, an event time of now.
	m, _ := b.message(3, shape{format: formatJSON, change: changeUpsert, orderingKeys: 2})
	if _, ok := m.Attributes["key"]; ok || m.OrderingKey != "o1" {
		t.Errorf("changes_upsert_ordered_keys2's message 3: %v, ordering key %q", m.Attributes, m.OrderingKey)
	}
}

// Each change connector's configuration loads as run loads it, makes a
// change mapping of the op and mode its name says, in a table whose
// tombstone family setup creates, and maps a bench message to its row.
func TestConfigOfChanges(t *testing.T) {
	dir := t.TempDir()
	c, err := newCodecs(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseOptions([]string{"-streams", "4", "-connectors",
		"changes_upsert,changes_delete,changes_insert,changes_replace,changes_upsert_shuffled,changes_upsert_shuffled_avro,changes_delete_shuffled_json_each3,exactly_once_ordered_keys10,changes_upsert_shuffled_ordered_keys100"})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{o: o, dir: dir, codecs: c, n: 1000, epoch: time.Now().UnixMilli()}
	want := map[string]struct {
		op   sinks.Op
		mode sinks.Mode
	}{
		changeUpsert:  {sinks.OpSet, sinks.ModeUpsert},
		changeDelete:  {sinks.OpDelete, sinks.ModeUpsert},
		changeInsert:  {sinks.OpSet, sinks.ModeInsert},
		changeReplace: {sinks.OpSet, sinks.ModeReplaceIfNewer},
		"":            {sinks.OpSet, sinks.ModePlain},
	}
	for _, k := range o.connectors {
		sh := o.shapes[k]
		n := b.names(k, 3)
		if len("state-"+n.suffix) > 50 {
			t.Errorf("%s: table ID state-%s is over 50 characters", k, n.suffix)
		}
		y := b.configYAML(k, n, "127.0.0.1:1")
		path := filepath.Join(dir, string(k)+".yaml")
		if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := app.LoadConfig(path)
		if err != nil {
			t.Errorf("%s: %v\n%s", k, err, y)
			continue
		}
		p := cfg.Pipelines[0]
		if got := p.Sink.ChangeTables(); (sh.change != "") != slices.Equal(got, []string{n.table}) {
			t.Errorf("%s: change tables %v", k, got)
		}
		if p.Source.Ordering != (sh.orderingKeys > 0) {
			t.Errorf("%s: source.ordering %v", k, p.Source.Ordering)
		}
		if sh.change != "" && (p.Sink.TombstoneFamily != tombstoneFamily || p.Source.TrackingSubscription == "") {
			t.Errorf("%s: tombstone family %q, tracking subscription %q", k, p.Sink.TombstoneFamily, p.Source.TrackingSubscription)
		}
		m, err := mapping.New(p, nil, btsink.Limits)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		msg, err := b.message(123, sh)
		if err != nil {
			t.Fatal(err)
		}
		var res mapping.Result
		if err := m.Map(context.Background(), &source.Message{ID: "x", Data: msg.Data, Attributes: msg.Attributes, PublishTime: time.Now()}, &res); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		wantKey := messageID(123)
		if sh.shuffled {
			wantKey = msg.Attributes["key"]
			if wantKey != "k000000023" { // 1,000 messages over 100 keys
				t.Errorf("%s: message 123's row key %q", k, wantKey)
			}
		}
		if sh.each {
			wantKey += "#" + "2"
		}
		if len(res.Rows) != sh.rowsPerMessage() || res.Rows[len(res.Rows)-1].Key != wantKey {
			t.Errorf("%s: %d rows, the last %q; want %d, %q", k, len(res.Rows), res.Rows[len(res.Rows)-1].Key, sh.rowsPerMessage(), wantKey)
		}
		w := want[sh.change]
		if ch := res.Rows[0].Change; ch.Op != w.op || ch.Mode != w.mode {
			t.Errorf("%s: row op %v mode %v; want %v %v", k, ch.Op, ch.Mode, w.op, w.mode)
		}
	}
}

// The sink's calls, the sink table's mutations by call and the superseded
// rows are read from the Prometheus text.
func TestParseMetricsChanges(t *testing.T) {
	text := `pubsink_bigtable_mutations_total{call="check_and_mutate",table="rows-ch"} 1000
pubsink_bigtable_mutations_total{call="mutate_row",table="rows-ch"} 20
pubsink_bigtable_mutations_total{call="mutate_rows",table="state-ch"} 1010
pubsink_messages_committed_total{pipeline="bench"} 1000
pubsink_row_operations_total{operation="set",pipeline="bench",result="applied"} 300
pubsink_row_operations_total{operation="set",pipeline="bench",result="superseded"} 690
pubsink_row_operations_total{operation="delete",pipeline="bench",result="superseded"} 10
pubsink_row_operations_total{operation="set",pipeline="other",result="superseded"} 5
pubsink_sink_write_seconds_bucket{pipeline="bench",le="+Inf"} 1720
pubsink_sink_write_seconds_sum{pipeline="bench"} 3.2
pubsink_sink_write_seconds_count{pipeline="bench"} 1720
`
	c, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !c.sinkCallsSeen || c.sinkCalls != 1720 || c.superseded != 700 {
		t.Errorf("sink calls %v (seen %v), superseded %v", c.sinkCalls, c.sinkCallsSeen, c.superseded)
	}
	if c.byCall[tableCall{"rows-ch", callCheckAndMutate}] != 1000 || c.byCall[tableCall{"rows-ch", callMutateRow}] != 20 || c.mutations["rows-ch"] != 1020 {
		t.Errorf("by call %v, by table %v", c.byCall, c.mutations)
	}
	r := result{kind: changesUpsert, msgs: 1000, perMsg: 1, writes: writes{known: true, committed: 1000, callsKnown: true,
		sinkCalls: c.sinkCalls, sinkConditional: 1000, sinkMutateRow: 20, superseded: c.superseded}}
	if r.writes.sinkCallSeconds = 3.44; r.callMillis() != 2 || math.Abs(r.callBound()-changeCallsInFlight/(1.72*0.002)) > 1e-6 {
		t.Errorf("call time %v ms, bound %v msg/s", r.callMillis(), r.callBound())
	}
	if r.sinkCallsPerMsg() != 1.72 || r.conditionalPerMsg() != 1 || r.mutateRowPerMsg() != 0.02 || r.readsPerMsg() != 0.7 || r.supersededShare() != 0.7 {
		t.Errorf("per message: calls %v, conditional %v, mutate %v, reads %v, superseded %v",
			r.sinkCallsPerMsg(), r.conditionalPerMsg(), r.mutateRowPerMsg(), r.readsPerMsg(), r.supersededShare())
	}
	r.kind = exactlyOnce // its calls are ApplyBulk's: no reads
	if v := r.readsPerMsg(); v == v {
		t.Errorf("exactly_once's reads %v, want NaN", v)
	}
}

// With a change connector the table has the sink's calls per message, the
// change block their calls by kind, and an ordered connector a line of its
// rate per key and over its unordered counterpart.
func TestPrintTableChanges(t *testing.T) {
	o, err := parseOptions([]string{"-connectors", "exactly_once,exactly_once_ordered_keys10,changes_upsert,changes_upsert_shuffled", "-reference", "changes_upsert"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(k kind, round int, rate, calls, conditional, superseded float64) result {
		r := result{kind: k, round: round, msgs: 10_000, perMsg: 1, rate: rate, cpu: 3 * time.Second, samples: 100,
			writes: writes{known: true, sink: 10_000, committed: 10_000, callsKnown: true, sinkCalls: calls * 10_000, sinkCallSeconds: calls * 10_000 * 0.02,
				sinkConditional: conditional * 10_000, superseded: superseded * 10_000}}
		if k == "changes_upsert_shuffled" {
			r.samples = 0
		}
		return r
	}
	var rs []result
	for round := 1; round <= 2; round++ {
		rs = append(rs, run(exactlyOnce, round, 8000, 0.011, 0, 0), run("exactly_once_ordered_keys10", round, 400*float64(round), 0.1, 0, 0),
			run(changesUpsert, round, 4000, 1, 1, 0), run("changes_upsert_shuffled", round, 3000, 1.7, 1, 0.7))
	}
	var b strings.Builder
	printTable(&b, o, rs)
	out := b.String()
	header := strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " ")
	if !strings.HasPrefix(header, "round connector msg/s CPU s/M msg state writes/msg sink writes/msg sink calls/msg peak RSS MB p50 s") {
		t.Errorf("columns %q", header)
	}
	_, block, _ := strings.Cut(out, "\nchange rows")
	block, _, _ = strings.Cut(block, "\n\n")
	lines := strings.Split(block, "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[3]), " ") != "changes_upsert_shuffled 1.700 [1.700–1.700] 1.000 [1.000–1.000] 0.000 [0.000–0.000] 0.700 [0.700–0.700] 70.000 [70.000–70.000] 20.000 [20.000–20.000] 7529 [7529–7529] 3000 [3000–3000]" ||
		!strings.HasPrefix(strings.TrimSpace(lines[2]), "changes_upsert ") {
		t.Errorf("the change block (a heading, a header, the two change connectors):\n%s", block)
	}
	for _, want := range []string{
		"exactly_once_ordered_keys10: 600 msg/s over 10 keys, 60.00 msg/s per key (one every 16.7 ms); / exactly_once (unordered) msg/s in the same rounds: 0.075 [0.050–0.100]",
		"changes_upsert_shuffled / changes_upsert",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 8 && f[0] == "1" && f[1] == "changes_upsert_shuffled" && (f[8] != "-" || f[9] != "-") {
			t.Errorf("a run without samples has latencies: %q", line)
		}
	}
}
