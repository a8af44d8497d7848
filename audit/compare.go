package audit

// compare.go compares one row's entries with what the table holds, with no
// I/O: the plain mappings' cells here (rules R1–R3), the change mappings'
// in compare_change.go.

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
)

// RowStats counts what CompareRow accounted for without a finding.
type RowStats struct {
	// Checked: winner cells found as the current mapping gives them.
	Checked int
	// Superseded: change cells that a newer change outside the range
	// replaced or deleted.
	Superseded int
	// LateDropped: MayBeLate winners' cells that are absent.
	LateDropped int
}

// CompareRow compares the entries of the range for one row (all with the
// same Table and Row, sorted by Family, Column, Timestamp, MessageID;
// possibly listing one message's cell twice, a redelivery, counted once)
// with what the table holds. tombstones is the sink's tombstone family
// (sink.tombstone_family). Families and columns that no entry names are
// not looked at, but for a change mapping's family, whose every column the
// changes decide. The findings are sorted by family, column, timestamp,
// kind and message.
func CompareRow(entries []Entry, actual Row, tombstones string, span Span) ([]Finding, RowStats) {
	entries = distinct(entries)
	if len(entries) == 0 {
		return nil, RowStats{}
	}
	c := &comparison{actual: actual, tombstones: tombstones, span: span,
		at: map[place][]*Entry{}, reported: map[place]bool{}}
	var plain, changes []*Entry
	for i := range entries {
		e := &entries[i]
		if e.Column != "" {
			p := placeOf(e)
			c.at[p] = append(c.at[p], e)
		}
		if e.IsChange() {
			changes = append(changes, e)
		} else {
			plain = append(plain, e)
		}
	}
	for _, e := range plain {
		if e.Role == Winner {
			c.checkWinner(e)
		}
	}
	cc := c.changeComparison(changes, plain)
	cc.checkExpectations()
	for i := range entries {
		if e := &entries[i]; e.Role == Rival && e.Column != "" && e.Op == OpSet {
			c.checkRival(e)
		}
	}
	c.checkUnexplained(plain)
	cc.checkExtraVersions()

	for i := range c.findings {
		c.findings[i].Table, c.findings[i].Row = entries[0].Table, entries[0].Row
	}
	slices.SortStableFunc(c.findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Family, b.Family), cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Timestamp, b.Timestamp), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.MessageID, b.MessageID))
	})
	return c.findings, c.stats
}

// comparison is the state of one CompareRow.
type comparison struct {
	actual     Row
	tombstones string
	span       Span
	// at indexes the entries with a cell by where the cell goes.
	at map[place][]*Entry
	// reported holds the versions a doubling was reported for, so that
	// one version makes one such finding whichever rule meets it first.
	reported map[place]bool
	findings []Finding
	stats    RowStats
}

// place is one version's address in the row.
type place struct {
	family, column string
	ts             int64
}

func placeOf(e *Entry) place { return place{e.Family, e.Column, e.Timestamp} }

// distinct drops the repeats of an entry (a redelivery maps the same
// message to the same cells): sorted entries put them next to each other.
func distinct(entries []Entry) []Entry {
	return slices.CompactFunc(slices.Clone(entries), func(a, b Entry) bool {
		return a.Family == b.Family && a.Column == b.Column && a.Timestamp == b.Timestamp && a.MessageID == b.MessageID
	})
}

// version is the version of a cell at ts, if the table holds one.
func (c *comparison) version(p place) (Version, bool) {
	for _, v := range c.actual[p.family][p.column] {
		if v.Timestamp == p.ts {
			return v, true
		}
	}
	return Version{}, false
}

// add records a finding about e's message (none when e is nil).
func (c *comparison) add(k Kind, e *Entry, p place, expected, found []byte, detail string) {
	f := Finding{Kind: k, Family: p.family, Column: p.column, Timestamp: p.ts,
		Expected: expected, Found: found, Detail: detail}
	if e != nil {
		f.MessageID, f.PublishTime, f.Key = e.MessageID, e.PublishTime, e.Key
	}
	c.findings = append(c.findings, f)
}

// R1: a plain winner's cell is there at its timestamp, with its bytes.
func (c *comparison) checkWinner(w *Entry) {
	p := placeOf(w)
	v, ok := c.version(p)
	switch {
	case !ok && w.MayBeLate:
		c.stats.LateDropped++
	case !ok:
		c.add(Missing, w, p, w.Value, nil, "the cell is not in the table")
	case bytes.Equal(v.Value, w.Value):
		c.stats.Checked++
	default:
		c.wrongBytes(w, p, v)
	}
}

// wrongBytes reports a winner's cell found with other bytes: a rival's
// (doubled: the rival's write overwrote the winner's), another winner's of
// the same millisecond (two messages that overwrite each other), or bytes
// the current mapping does not give (different).
func (c *comparison) wrongBytes(w *Entry, p place, v Version) {
	for _, o := range c.at[p] {
		if o.Role == Rival && bytes.Equal(o.Value, v.Value) {
			if !c.reported[p] {
				c.reported[p] = true
				c.add(Doubled, o, p, w.Value, v.Value, rivalDetail(o, "over the winner's"))
			}
			return
		}
	}
	for _, o := range c.at[p] {
		if o.Role == Winner && o != w && bytes.Equal(o.Value, v.Value) {
			c.add(Different, w, p, w.Value, v.Value, fmt.Sprintf(
				"message %s writes the same cell at the same millisecond and its value is there: the two overwrite each other", o.MessageID))
			return
		}
	}
	c.add(Different, w, p, w.Value, v.Value, "the table holds other bytes at the cell's timestamp than the current mapping gives")
}

func rivalDetail(r *Entry, where string) string {
	return fmt.Sprintf("a rival's value, %s: the live pipeline's catalog names another message for key %q", where, r.Key)
}

// R2: a rival's bytes at its place, where no winner writes the same bytes
// (a publisher's duplicate that maps to the same cell is harmless).
func (c *comparison) checkRival(r *Entry) {
	p := placeOf(r)
	v, ok := c.version(p)
	if !ok || !bytes.Equal(v.Value, r.Value) || c.reported[p] {
		return
	}
	for _, o := range c.at[p] {
		if o.Role == Winner && bytes.Equal(o.Value, r.Value) {
			return
		}
	}
	c.reported[p] = true
	c.add(Doubled, r, p, nil, v.Value, rivalDetail(r, "where no winner writes it"))
}

// R3: a version of a plain winner's cell, within the span, that no entry
// of the range explains. Outside the span, messages outside the range
// wrote it.
func (c *comparison) checkUnexplained(plain []*Entry) {
	seen := map[place]bool{}
	for _, e := range plain {
		cell := place{e.Family, e.Column, 0}
		if e.Role != Winner || seen[cell] {
			continue
		}
		seen[cell] = true
		for _, v := range c.actual[e.Family][e.Column] {
			p := place{e.Family, e.Column, v.Timestamp}
			if len(c.at[p]) > 0 || c.reported[p] || v.Timestamp < c.span.From || v.Timestamp > c.span.Until {
				continue
			}
			c.reported[p] = true
			c.add(Doubled, nil, p, nil, v.Value, "a version no message of the range wrote")
		}
	}
}
