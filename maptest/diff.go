package maptest

// Comparing a case's outcome with its expectation, and saying the
// difference: one line per thing that differs, named by its place
// (rows[0].columns.email), expected before got.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
)

// outcome is what the mapping made of a case's message: a dead letter
// (deadLetter set), a failure run would retry (err set: a bug or a schema
// the mapping could not fetch), or the result: filtered, or its rows.
type outcome struct {
	result     mapping.Result
	deadLetter deadletter.Reason
	errText    string // the dead-letter copy's pubsink_error
	err        error
}

// kind names the outcome as an expectation does.
func (o *outcome) kind() string {
	switch {
	case o.err != nil:
		return "error"
	case o.deadLetter != "":
		return "dead_letter"
	case o.result.Filtered:
		return "filtered"
	case len(o.result.Rows) == 0:
		return "no_rows"
	}
	return "rows"
}

// summary says the outcome in one line.
func (o *outcome) summary() string {
	switch o.kind() {
	case "error":
		return fmt.Sprintf("an error run would retry, not dead-letter: %v", o.err)
	case "dead_letter":
		return fmt.Sprintf("dead_letter %s: %s", o.deadLetter, o.errText)
	case "filtered":
		return "filtered"
	case "no_rows":
		return "no rows"
	}
	return plural(len(o.result.Rows), "row")
}

func expectedKind(e *Expect) string {
	switch {
	case e.DeadLetter != nil:
		return "dead_letter"
	case e.Filtered:
		return "filtered"
	case e.NoRows:
		return "no_rows"
	}
	return "rows"
}

func expectedSummary(e *Expect) string {
	switch k := expectedKind(e); k {
	case "dead_letter":
		s := "dead_letter " + e.DeadLetter.Reason
		if e.DeadLetter.Error != nil {
			s += fmt.Sprintf(" with an error containing %s", show(*e.DeadLetter.Error))
		}
		return s
	case "no_rows":
		return "no rows"
	case "filtered":
		return k
	}
	return plural(len(e.Rows), "row")
}

// compare returns the differences of got from what c expects, none when
// the case passes.
func compare(c *Case, pc *config.Pipeline, got *outcome) []string {
	e := &c.Expect
	var diff []string
	if ek, gk := expectedKind(e), got.kind(); ek != gk {
		diff = append(diff, fmt.Sprintf("outcome: expected %s, got %s", expectedSummary(e), got.summary()))
	} else {
		switch ek {
		case "dead_letter":
			if string(got.deadLetter) != e.DeadLetter.Reason {
				diff = append(diff, fmt.Sprintf("dead_letter.reason: expected %s, got %s (%s)", e.DeadLetter.Reason, got.deadLetter, got.errText))
			}
			if want := e.DeadLetter.Error; want != nil && !strings.Contains(got.errText, *want) {
				diff = append(diff, fmt.Sprintf("dead_letter.error: expected it to contain %s, got %s", show(*want), show(got.errText)))
			}
		case "rows":
			diff = compareRows(e.Rows, got.result.Rows, pc)
		}
	}
	if !e.eventTime.IsZero() && !got.result.EventTime.Equal(e.eventTime) {
		diff = append(diff, fmt.Sprintf("event_time: expected %s, got %s", stamp(e.eventTime), stamp(got.result.EventTime)))
	}
	if e.DedupeKey != nil && got.result.Key != *e.DedupeKey {
		diff = append(diff, fmt.Sprintf("dedupe_key: expected %s, got %s", show(*e.DedupeKey), show(got.result.Key)))
	}
	return diff
}

// compareRows compares rows pairwise, in mapping order.
func compareRows(want []Row, got []sinks.Row, pc *config.Pipeline) []string {
	var diff []string
	if len(want) != len(got) {
		diff = append(diff, fmt.Sprintf("rows: expected %s, got %d", plural(len(want), "row"), len(got)))
	}
	for i := 0; i < max(len(want), len(got)); i++ {
		at := fmt.Sprintf("rows[%d]", i)
		switch {
		case i >= len(got):
			diff = append(diff, fmt.Sprintf("%s: expected the row with key %s, got no such row", at, show(*want[i].Key)))
		case i >= len(want):
			diff = append(diff, fmt.Sprintf("%s: not expected, got %s", at, rowLine(&got[i], pc)))
		default:
			diff = append(diff, compareRow(at, &want[i], &got[i], pc)...)
		}
	}
	return diff
}

func compareRow(at string, w *Row, g *sinks.Row, pc *config.Pipeline) []string {
	var diff []string
	differ := func(key, want, got string) {
		if want != got {
			diff = append(diff, fmt.Sprintf("%s.%s: expected %s, got %s", at, key, want, got))
		}
	}
	wantTable := w.Table
	if wantTable == "" {
		wantTable = pc.Sink.Table
	}
	differ("table", wantTable, table(g, pc))
	if w.Family != "" {
		differ("family", w.Family, family(g, pc))
	}
	differ("key", show(*w.Key), show(g.Key))
	differ("op", w.op.String(), g.Change.Op.String())
	if w.Mode != "" {
		differ("mode", w.mode.String(), g.Change.Mode.String())
	}
	if !w.timestamp.IsZero() {
		differ("timestamp", stamp(w.timestamp), stamp(g.Timestamp))
	}
	gotCols := make(map[string][]byte, len(g.Cells))
	for _, c := range g.Cells {
		gotCols[c.Column] = c.Value
	}
	for _, q := range slices.Sorted(maps.Keys(w.Columns)) {
		v, ok := gotCols[q]
		switch {
		case !ok:
			diff = append(diff, fmt.Sprintf("%s.columns.%s: expected %s, got no such column", at, q, show(w.Columns[q])))
		case string(v) != w.Columns[q]:
			diff = append(diff, fmt.Sprintf("%s.columns.%s: expected %s, got %s", at, q, show(w.Columns[q]), show(string(v))))
		}
	}
	if w.Only == nil || *w.Only {
		for _, c := range g.Cells {
			if _, ok := w.Columns[c.Column]; !ok {
				diff = append(diff, fmt.Sprintf("%s.columns.%s: not expected (only: true), got %s", at, c.Column, show(string(c.Value))))
			}
		}
	}
	wantDel, gotDel := slices.Sorted(slices.Values(w.Delete)), slices.Sorted(slices.Values(g.Change.Delete))
	if !slices.Equal(wantDel, gotDel) {
		diff = append(diff, fmt.Sprintf("%s.delete: expected %s, got %s", at, list(wantDel), list(gotDel)))
	}
	return diff
}

// lines describes the outcome in full, for -v.
func (o *outcome) lines(pc *config.Pipeline) []string {
	if o.kind() != "rows" {
		return []string{o.summary()}
	}
	var ls []string
	for i := range o.result.Rows {
		r := &o.result.Rows[i]
		ls = append(ls, fmt.Sprintf("rows[%d]: %s", i, rowLine(r, pc)))
		for _, c := range r.Cells {
			ls = append(ls, fmt.Sprintf("  %s: %s", c.Column, show(string(c.Value))))
		}
	}
	return append(ls, fmt.Sprintf("event_time: %s, dedupe_key: %s", stamp(o.result.EventTime), show(o.result.Key)))
}

// rowLine says what a row is, but its cells.
func rowLine(r *sinks.Row, pc *config.Pipeline) string {
	s := fmt.Sprintf("table %s, family %s, key %s, op %s, mode %s, timestamp %s", table(r, pc), family(r, pc),
		show(r.Key), r.Change.Op, r.Change.Mode, stamp(r.Timestamp))
	if len(r.Change.Delete) > 0 {
		s += ", delete " + list(r.Change.Delete)
	}
	return s
}

func table(r *sinks.Row, pc *config.Pipeline) string {
	if r.Table == "" {
		return pc.Sink.Table
	}
	return r.Table
}

func family(r *sinks.Row, pc *config.Pipeline) string {
	if r.Family == "" {
		return pc.Sink.ColumnFamily
	}
	return r.Family
}

// stamp is a time as the file writes it, in whole milliseconds as sinks
// write cell timestamps.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)
}

// show quotes a value so that its ends are plain: in backquotes when it
// holds double quotes (JSON text), as Go quotes it otherwise.
func show(s string) string {
	if strings.Contains(s, `"`) && utf8.ValidString(s) && strconv.CanBackquote(s) {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return "[" + strings.Join(names, ", ") + "]"
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
