package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pubsink/pubsink/pipeline"
)

// misspeltYAML mirrors a Debezium customers table with issue 38's mistake:
// last_name reads data.after.lastname (the field is last_name), under
// on_missing: skip, which the Debezium example suggests.
const misspeltYAML = `
project: p
http: {addr: "127.0.0.1:0"}
shutdown_timeout: 5s
state: {instance: i}
pipelines:
  - name: customers
    mode: at_least_once
    source: {topic: customers, subscription: customers-sub, streams: 1}
    sink:
      table: customers
      row_key: "{data.after.id}"
      on_missing: skip
      columns: {first_name: "{data.after.first_name}", last_name: "{data.after.lastname}"}
      batch: {max_delay: 1ms}
`

// TestARunWithAMisspeltColumnUnderSkipWarns: the run of issue 38's point 1
// (every message committed, last_name in none) logs the column's warning
// once, with its key and template, and shows it on /status and in
// /metrics; first_name, filled, is no warning.
func TestARunWithAMisspeltColumnUnderSkipWarns(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	cfg := parse(t, misspeltYAML)
	if err := Setup(ctx, cfg, f.ps, f.admin, io.Discard); err != nil {
		t.Fatal(err)
	}
	opts := f.opts
	opts.columnWarnAfter = 200 * time.Millisecond
	core, logs := observer.New(zapcore.InfoLevel)
	a := runApp(t, zap.New(core), cfg, opts)
	const key = "sink.columns.last_name"
	publishUntil(t, a, 0, `{"op":"u","after":{"id":1,"first_name":"Ada","last_name":"Lovelace"}}`,
		func(st pipeline.Status) bool { return st.ColumnsNeverFilled != nil })
	base := "http://" + a.Addr()

	lines := logs.FilterMessageSnippet("has been missing in every committed message").AllUntimed()
	if len(lines) != 1 || lines[0].Level != zapcore.WarnLevel ||
		!strings.HasPrefix(lines[0].Message, "column sink.columns.last_name has been missing in every committed message for ") ||
		lines[0].ContextMap()["column"] != key || lines[0].ContextMap()["template"] != "{data.after.lastname}" || lines[0].ContextMap()["pipeline"] != "customers" {
		t.Errorf("logged %+v, want one warning naming the column, its template and the pipeline", lines)
	}

	resp, err := http.Get(base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Pipelines []struct {
			Committed          int64                    `json:"committed"`
			ColumnsNeverFilled []pipeline.ColumnWarning `json:"columns_never_filled"`
		} `json:"pipelines"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Pipelines) != 1 {
		t.Fatalf("/status: %v %+v", err, st)
	}
	if w := st.Pipelines[0].ColumnsNeverFilled; len(w) != 1 || w[0].Column != key || w[0].Template != "{data.after.lastname}" ||
		w[0].OnMissing != "skip" || w[0].Messages < 2 || w[0].Messages > st.Pipelines[0].Committed {
		t.Errorf("/status columns_never_filled %+v (committed %d), want last_name's alone", w, st.Pipelines[0].Committed)
	}

	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`pubsink_column_never_filled{column="sink.columns.last_name",pipeline="customers"} 1`,
		`pubsink_column_never_filled{column="sink.columns.first_name",pipeline="customers"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
