package audit

// read_test.go checks the read pass's judgement of each message (filtered,
// dead-lettered, winner, rival, maybe late) with a real mapping, and the
// report's lines.

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/spill"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

const readYAML = `
project: p
state: {instance: inst, table: state}
pipelines:
  - name: orders
    mode: exactly_once
    source: {subscription: subs, tracking_subscription: subs-tracking, id_attribute: id}
    filter: "data.n >= 0"
    watermark: {late_data: drop}
    sink: {table: tbl, column_family: d, row_key: "{attributes.id}", columns: {n: "{data.n}"}}
`

// names is a live catalog: key → the messages it names.
type names map[string][]string

func (n names) LiveWinners(_ context.Context, key string) ([]string, error) { return n[key], nil }

func TestTheReadPassJudgesEachMessage(t *testing.T) {
	cfg, err := config.Parse([]byte(readYAML))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pipelines[0]
	m, err := mapping.New(p, nil, sinks.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sorter := spill.New(t.TempDir(), 0)
	defer sorter.Close()
	at := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	a := New(Config{Pipeline: p, ClaimsSince: at, Mapper: m, Report: NewReport(&out), Spill: sorter,
		Catalog:     names{"k1": {"m1"}, "k2": {"m1"}},
		DeadLetters: map[string]deadletter.Reason{"bad1": deadletter.InvalidPayload, "rej": deadletter.SinkRejected, "rej3": deadletter.SinkRejected}})
	msg := func(id, key, data string) *source.Message {
		return &source.Message{ID: id, Data: []byte(data), Attributes: map[string]string{"id": key}, PublishTime: at}
	}
	for _, m := range []*source.Message{
		msg("m1", "k1", `{"n":1}`),    // named: a winner
		msg("m2", "k1", `{"n":2}`),    // another message named for k1: a rival
		msg("m3", "k3", `{"n":3}`),    // nothing named: a winner that may have been dropped late
		msg("f1", "k4", `{"n":-1}`),   // filtered
		msg("bad1", "k5", `not json`), // dead-lettered, with a copy
		msg("bad2", "k6", `not json`), // dead-lettered, no copy: missing
		msg("rej", "k2", `{"n":9}`),   // a rival (k2 names m1), whatever its copy
		msg("rej2", "k7", `{"n":9}`),  // nothing named
		{ID: "old", Data: []byte(`{"n":5}`), Attributes: map[string]string{"id": "k9"}, PublishTime: at.Add(-time.Second)}, // its claim may be collected: not late
		msg("rej3", "k8", `{"n":9}`), // a winner the output holds a copy of: dead-lettered
	} {
		if err := a.Message(context.Background(), m); err != nil {
			t.Fatalf("%s: %v", m.ID, err)
		}
	}
	s := a.Summary()
	if s.Messages != 10 || s.Winners != 4 || s.Rivals != 2 || s.Filtered != 1 || s.DeadLettered != 2 || s.Missing != 1 || s.MissingMessages != 1 {
		t.Errorf("summary %+v, want 10 messages: 4 winners, 2 rivals, 1 filtered, 2 dead-lettered, 1 missing", s)
	}
	var f struct {
		Kind, MessageID, Detail string
	}
	if err := json.Unmarshal(out.Bytes(), &f); err != nil || f.Kind != "missing" || !strings.Contains(f.Detail, "no copy") {
		t.Errorf("report %q (%v), want bad2's missing copy", out.String(), err)
	}

	it, err := sorter.Sorted()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for it.Next() {
		var e Entry
		if err := json.Unmarshal(it.Value(), &e); err != nil {
			t.Fatal(err)
		}
		role := "winner"
		if e.Role == Rival {
			role = "rival"
		}
		if e.MayBeLate {
			role += ",late?"
		}
		if e.Table != "tbl" || e.Family != "d" || e.Column != "n" || e.Timestamp != e.PublishTime {
			t.Errorf("entry %+v: want table tbl, family d, column n at the publish time", e)
		}
		got = append(got, e.MessageID+":"+role+":"+string(e.Value))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{"m1:winner:1", "m2:rival:2", "m3:winner,late?:3", "rej2:winner,late?:9", "rej:rival:9", "old:winner:5"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("spilled %v, want %v", got, want)
	}
}

func TestAReportLineShowsBytesThatAreNotText(t *testing.T) {
	var out bytes.Buffer
	r := NewReport(&out)
	if err := r.Add(Finding{Kind: Different, Table: "t", Row: "r", Family: "d", Column: "c", Timestamp: 1_000, Expected: []byte{0xff}, Found: []byte("x"), MessageID: "m", Detail: "d"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(Summary{Messages: 1, Counts: r.Counts()}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		`{"kind":"different","table":"t","row":"r","family":"d","column":"c","timestamp":"1970-01-01T00:00:00.001Z","expected":"/w==","found":"eA==","base64":["expected","found"],"message_id":"m","detail":"d"}`,
		`{"summary":{"messages":1,"winners":0,"duplicates":0,"filtered":0,"dead_lettered":0,"rows":0,"cells_checked":0,"superseded":0,"late_dropped":0,"missing":0,"missing_messages":0,"doubled":0,"different":1}}`,
	}
	if !slices.Equal(lines, want) {
		t.Errorf("report:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if c := r.Counts(); c.Clean() != true || c.Different != 1 {
		t.Errorf("counts %+v: a different cell alone is clean", c)
	}
}
