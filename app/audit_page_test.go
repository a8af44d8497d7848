package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/audit"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/spill"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/reprocess"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// auditFates are the messages of the test audit's range by what becomes
// of them, in publish order: how many have each fate is chosen so that
// every count the page and /status show is distinct, and a count shown in
// another's place is seen.
var auditFates = []struct {
	fate string
	n    int
}{
	{"checked", 8},       // winners whose cell the table holds as mapped
	{"missing", 5},       // winners whose row is not there; the first has 2 cells
	{"different", 7},     // winners whose cell holds other bytes
	{"rival-doubled", 1}, // a rival whose cell is there
	{"rival", 3},         // rivals whose cell is not there, as it should be
	{"filtered", 2},
	{"dead-lettered", 3}, // winners the dead-letter output holds a copy of
}

// wantAuditSummary is what auditing auditFates counts: 29 messages, 20
// winners with a row each and 4 rivals with theirs (24 rows read), 6
// missing cells of 5 messages.
var wantAuditSummary = audit.Summary{Messages: 29, Winners: 20, Rivals: 4, Filtered: 2, DeadLettered: 3,
	Rows: 24, Checked: 8, Counts: audit.Counts{Missing: 6, MissingMessages: 5, Doubled: 1, Different: 7}}

// The test audit's range, and its run's names.
var (
	auditFrom  = time.Date(2026, 12, 3, 6, 15, 0, 0, time.UTC)
	auditUntil = auditFrom.Add(time.Hour)
)

const (
	auditName         = "orders~a20261203t072000z"
	auditSubscription = "projects/p/subscriptions/orders-sub-audit-20261203t072000z"
)

// auditMapper maps a message as its "fate" attribute says: filtered, or
// one row of its own in table orders, with its data in "cells" cells (1
// unless set), at its publish time; its dedupe key starts with its fate.
type auditMapper struct{}

func (auditMapper) Map(_ context.Context, msg *source.Message, r *mapping.Result) error {
	fate := msg.Attributes["fate"]
	if fate == "filtered" {
		r.Filtered = true
		return nil
	}
	r.Key = fate + "/" + msg.ID
	row := sinks.Row{Table: "orders", Family: "cf", Key: "row-" + msg.ID, Timestamp: msg.PublishTime}
	cells, _ := strconv.Atoi(msg.Attributes["cells"])
	for i := range max(cells, 1) {
		row.Cells = append(row.Cells, sinks.Cell{Column: "c" + strconv.Itoa(i), Value: msg.Data})
	}
	r.Rows = []sinks.Row{row}
	return nil
}

// auditCatalog names another message for the keys of rivals, and nothing
// for the others.
type auditCatalog struct{}

func (auditCatalog) LiveWinners(_ context.Context, key string) ([]string, error) {
	if strings.HasPrefix(key, "rival") {
		return []string{"the-winner"}, nil
	}
	return nil, nil
}

// auditTable is the table the compare pass reads: row key → row.
type auditTable map[string]audit.Row

func (t auditTable) ReadRows(_ context.Context, _ string, keys []string) (map[string]audit.Row, error) {
	out := map[string]audit.Row{}
	for _, k := range keys {
		if r, ok := t[k]; ok {
			out[k] = r
		}
	}
	return out, nil
}

// scriptedSource delivers its messages once, in order.
type scriptedSource []*source.Message

func (s scriptedSource) Run(_, workCtx context.Context, h source.Handler) error {
	for _, m := range s {
		if !h(workCtx, m) {
			return fmt.Errorf("message %s was not acked", m.ID)
		}
	}
	return nil
}
func (scriptedSource) Receiving() bool { return true }
func (scriptedSource) Stalled() error  { return nil }

// startAuditApp opens an App as Audit does (no pipeline, Options.audit
// set) on the fakes, its audit part way through its compare pass: the
// messages of auditFates (and one after the range) read through the gate
// into an audit.Auditor, as Audit's read pass does, and compared with a
// table made for them. It returns the run and the App's base URL.
func startAuditApp(t *testing.T) (*auditRun, string) {
	t.Helper()
	ctx := context.Background()
	at := auditUntil.Add(5 * time.Minute) // the gate's clock: the audit starts after its range
	run := &auditRun{name: auditName, pipeline: "orders", subscription: auditSubscription, phase: "reading",
		gate: reprocess.NewGate(auditFrom, auditUntil, func() time.Time { return at })}

	var msgs scriptedSource
	table := auditTable{}
	deadLetters := map[string]deadletter.Reason{}
	for _, f := range auditFates {
		for i := range f.n {
			m := &source.Message{ID: fmt.Sprintf("m%02d", len(msgs)), Data: []byte(`{"n":` + strconv.Itoa(len(msgs)) + `}`),
				Attributes: map[string]string{"fate": f.fate}, PublishTime: auditFrom.Add(time.Duration(len(msgs)) * time.Minute)}
			if f.fate == "missing" && i == 0 {
				m.Attributes["cells"] = "2"
			}
			ts := m.PublishTime.UnixMicro()
			switch f.fate {
			case "checked", "rival-doubled":
				table["row-"+m.ID] = audit.Row{"cf": {"c0": {{Timestamp: ts, Value: m.Data}}}}
			case "different":
				table["row-"+m.ID] = audit.Row{"cf": {"c0": {{Timestamp: ts, Value: []byte("written by an older mapping")}}}}
			case "dead-lettered":
				deadLetters[m.ID] = deadletter.InvalidPayload
			}
			msgs = append(msgs, m)
		}
	}
	msgs = append(msgs, &source.Message{ID: "after", Attributes: map[string]string{"fate": "checked"}, PublishTime: auditUntil.Add(time.Minute)})

	sorter := spill.New(t.TempDir(), 0)
	t.Cleanup(func() { sorter.Close() })
	run.auditor = audit.New(audit.Config{Pipeline: config.Pipeline{Name: "orders"}, Mapper: auditMapper{}, Catalog: auditCatalog{},
		DeadLetters: deadLetters, Spill: sorter, Report: audit.NewReport(nil)})
	read := func(ctx context.Context, m *source.Message) bool {
		if err := run.auditor.Message(ctx, m); err != nil {
			t.Errorf("message %s: %v", m.ID, err)
			return false
		}
		return true
	}
	if err := run.gate.Wrap(msgs).Run(ctx, ctx, read); err != nil {
		t.Fatal(err)
	}
	run.setPhase("comparing")
	if _, err := run.auditor.Compare(ctx, table, "", func(context.Context, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := run.auditor.Summary(); got != wantAuditSummary {
		t.Fatalf("the audit counted %+v, want %+v", got, wantAuditSummary)
	}
	at = at.Add(10 * time.Second) // the progress line's rate, time left and quiet

	f := newFakes(t)
	cfg := parse(t, pageYAML)
	cfg.Pipelines = nil
	opts := f.opts
	opts.audit = run
	a, err := Open(ctx, zap.NewNop(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.stopServer()
		a.closeClients()
	})
	return run, "http://" + a.Addr()
}

// TestAuditStatusPageInChromium loads an audit's status page in headless
// Chromium: it has the audit's section (its name, the live pipeline, the
// phase, the subscription, the progress bar and line, each count with its
// value) and no pipeline.
func TestAuditStatusPageInChromium(t *testing.T) {
	chrome := headlessChromium(t)
	run, base := startAuditApp(t)
	dom := string(chrome("--dump-dom", base+"/"))
	sec := sectionByID(dom, "audit")
	if sec == "" {
		t.Fatalf("Chromium's DOM has no audit section:\n%s", dom)
	}
	line := run.gate.Progress().Line()
	if !strings.HasPrefix(line, "29 messages done (47% of the range, up to 2026-12-03T06:43:00Z), 3/s") || !strings.Contains(line, "1 after the range skipped") {
		t.Errorf("the progress line %q is not the range's (29 done, 47%%, 3/s, 1 after it)", line)
	}
	for _, want := range []string{
		"audit " + auditName, `<span class="state running">of orders: comparing</span>`,
		`<div class="meta">subscription ` + auditSubscription + `</div>`,
		`<progress max="1000" value="466"></progress> ` + line,
		`<td>messages</td><td class="n">29</td>`, `<td>duplicates</td><td class="n">4</td>`,
		`<td>filtered</td><td class="n">2</td>`, `<td>dead-lettered</td><td class="n">3</td>`,
		`<td>rows read</td><td class="n">24</td>`, `<td>missing</td><td class="n">6</td>`,
		`<td>doubled</td><td class="n">1</td>`, `<td>different</td><td class="n">7</td>`,
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("the audit's section lacks %q:\n%s", want, sec)
		}
	}
	for _, unwanted := range []string{`id="pipeline-`, `id="reprocess"`, "No pipeline is running"} {
		if strings.Contains(dom, unwanted) {
			t.Errorf("an audit's page has %q: it shows only its audit:\n%s", unwanted, dom)
		}
	}
}

// TestAuditStatus: an audit's /status has no pipeline ("pipelines": null)
// and its "audit": name, live pipeline, subscription, phase, progress, and
// the summary under the names of the report's summary line.
func TestAuditStatus(t *testing.T) {
	run, base := startAuditApp(t)
	resp, err := http.Get(base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/status: %v", err)
	}
	if p, ok := st["pipelines"]; !ok || string(p) != "null" {
		t.Errorf(`/status "pipelines": %s (present: %v), want null`, p, ok)
	}
	var got struct {
		Name, Pipeline, Subscription, Phase string
		Progress                            map[string]any
		Summary                             map[string]int64
	}
	if st["audit"] == nil {
		t.Fatalf(`/status has no "audit": %v`, st)
	}
	if err := json.Unmarshal(st["audit"], &got); err != nil {
		t.Fatalf(`/status "audit" %s: %v`, st["audit"], err)
	}
	if got.Name != auditName || got.Pipeline != "orders" || got.Subscription != auditSubscription || got.Phase != "comparing" {
		t.Errorf(`/status "audit": name %q, pipeline %q, subscription %q, phase %q; want %q, "orders", %q, "comparing"`,
			got.Name, got.Pipeline, got.Subscription, got.Phase, auditName, auditSubscription)
	}
	p := run.gate.Progress()
	if got.Progress["done"] != 29.0 || got.Progress["beyond"] != 1.0 || got.Progress["until"] != auditUntil.Format(time.RFC3339) ||
		!fractionIs(got.Progress["fraction"], p.Fraction) || got.Progress["messages_per_second"] != p.Rate {
		t.Errorf(`/status "audit" "progress": %v, want the gate's %+v`, got.Progress, p)
	}
	// The summary line's fields, as docs/reference.md ("Audit") lists them.
	s := wantAuditSummary
	want := map[string]int64{"messages": s.Messages, "winners": s.Winners, "duplicates": s.Rivals, "filtered": s.Filtered,
		"dead_lettered": s.DeadLettered, "rows": s.Rows, "cells_checked": s.Checked, "superseded": 0, "late_dropped": 0,
		"missing": s.Missing, "missing_messages": s.MissingMessages, "doubled": s.Doubled, "different": s.Different}
	if fmt.Sprint(got.Summary) != fmt.Sprint(want) {
		t.Errorf(`/status "audit" "summary": %v, want %v`, got.Summary, want)
	}
}

// fractionIs says whether a JSON number decoded as v is f.
func fractionIs(v any, f float64) bool {
	n, ok := v.(float64)
	return ok && math.Abs(n-f) < 1e-9
}
