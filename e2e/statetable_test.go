package e2e

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
)

// documentedCell is a row of the reference's State table as patterns:
// row keys (the row key and its alternatives) and cells (family:column).
type documentedCell struct {
	text        string
	rows, cells []*regexp.Regexp
}

var (
	backticked  = regexp.MustCompile("`([^`]+)`")
	placeholder = regexp.MustCompile(`[A-Z][A-Z0-9_]+|…`)
)

// documentedPattern turns a documented name (`dedupe#PIPELINE#HH#KEY`,
// `k:w/MESSAGE_ID`) into a regexp: each placeholder (upper case, or …) is
// any non-empty text (KEY: one that does not start with 0xff). The reference writes the byte 0xff as `\xff`, and
// so does readable.
func documentedPattern(s string) *regexp.Regexp {
	var b strings.Builder
	last := 0
	for _, m := range placeholder.FindAllStringIndex(s, -1) {
		b.WriteString(regexp.QuoteMeta(s[last:m[0]]))
		if s[m[0]:m[1]] == "KEY" {
			// No dedupe key has the byte 0xff (never in UTF-8; the
			// reference on dead-letter copies): rows that do are documented
			// apart.
			b.WriteString(`(?:[^\\]|\\[^x])(?s:.*)`)
		} else {
			b.WriteString(`(?s:.+)`)
		}
		last = m[1]
	}
	b.WriteString(regexp.QuoteMeta(s[last:]))
	return regexp.MustCompile("^" + b.String() + "$")
}

// stateTableReference reads the State table's rows from docs/reference.md.
func stateTableReference(t *testing.T) []documentedCell {
	t.Helper()
	doc, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "| row key | cell | value | cell timestamp |")
	if !ok {
		t.Fatal("docs/reference.md has no State table of row keys")
	}
	var out []documentedCell
	for _, line := range strings.Split(rest, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cols := strings.Split(line, " | ")
		if len(cols) < 2 {
			continue
		}
		d := documentedCell{text: cols[0] + " | " + cols[1]}
		for _, m := range backticked.FindAllStringSubmatch(cols[0], -1) {
			d.rows = append(d.rows, documentedPattern(m[1]))
		}
		for _, m := range backticked.FindAllStringSubmatch(cols[1], -1) {
			d.cells = append(d.cells, documentedPattern(m[1]))
		}
		out = append(out, d)
	}
	if len(out) < 10 {
		t.Fatalf("read %d rows of the State table, expected more", len(out))
	}
	return out
}

// requireStateRowsDocumented fails the test for every cell of the state
// table that no row of the reference's State table describes: a reader of
// the state table (or an acceptance test) must be able to tell what each
// one is.
func (e *env) requireStateRowsDocumented() {
	t := e.t
	t.Helper()
	docs := stateTableReference(t)
	var undocumented []string
	cells := 0
	err := e.bigtable.Open(e.stateTable).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				cells++
				if !describedBy(docs, r.Key(), it.Column) {
					undocumented = append(undocumented, readable(r.Key())+" "+it.Column)
				}
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if cells == 0 {
		t.Fatal("the state table is empty: nothing to hold to the reference")
	}
	if len(undocumented) > 0 {
		t.Errorf("%d of %d state-table cells are in no row of the reference's State table, first: %q", len(undocumented), cells, undocumented[:min(5, len(undocumented))])
	}
}

// readable is a row key as the reference writes it: a byte that is not
// UTF-8 (0xff) as \xff.
func readable(key string) string { return strings.ToValidUTF8(key, `\xff`) }

func describedBy(docs []documentedCell, row, column string) bool {
	for _, d := range docs {
		rowOK, cellOK := false, false
		for _, p := range d.rows {
			rowOK = rowOK || p.MatchString(readable(row))
		}
		for _, p := range d.cells {
			cellOK = cellOK || p.MatchString(column)
		}
		if rowOK && cellOK {
			return true
		}
	}
	return false
}

// TestTheStateTableReferenceReadsAsPatterns holds the reader above to a few
// rows it must accept and refuse, so that a lax pattern cannot pass every
// state table.
func TestTheStateTableReferenceReadsAsPatterns(t *testing.T) {
	docs := stateTableReference(t)
	for _, c := range []struct {
		row, column string
		want        bool
	}{
		{"dedupe#orders#0a#k17", "k:w/123", true},
		{"dedupe#orders~r20261207t183000z-abcdef#0a#\xffnamed\xff123", "k:c", true},
		{"reprocess#orders", "m:lock", true},
		{"watermark#orders", "m:watermark", true},
		{"reprocess#orders", "m:other", false},
		{"somethingelse#orders", "m:run", false},
		{"dedupe#orders#0a#k17", "m:watermark", false},
		{"dedupe#orders#0a#\xffunknown\xff123", "k:c", false},
	} {
		if got := describedBy(docs, c.row, c.column); got != c.want {
			t.Errorf("%q %q described: %v, want %v", c.row, c.column, got, c.want)
		}
	}
}
