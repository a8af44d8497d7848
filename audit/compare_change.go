package audit

// compare_change.go compares a row's change-mapping entries with the table:
// each column a winner change sets or deletes must hold the range's newest
// state of it, unless a newer change outside the range superseded it; and
// each column of a change mapping's family keeps one version (insert: the
// earliest insert's row). docs/reference.md ("Changes") says what the sink
// writes; sinks/bigtable/change.go is how.

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"time"
)

// change is one winner's change of one family of the row: its entries
// grouped (a set has an entry per cell).
type change struct {
	msg     *Entry // the first of its entries: the message, op, mode
	family  string
	ts      int64
	cells   map[string]*Entry // column → its entry; a delete has none
	deletes []string
}

func (ch *change) op() Op     { return ch.msg.Op }
func (ch *change) mode() Mode { return ch.msg.Mode }

// changeComparison is the change part of one CompareRow.
type changeComparison struct {
	*comparison
	changes []*change
	// families: every data family the winners' changes decide, with
	// whether a change mapping writes it (then its versions are checked
	// too); a row delete also decides the families no plain entry names.
	families map[string]bool
}

func (c *comparison) changeComparison(entries, plain []*Entry) *changeComparison {
	cc := &changeComparison{comparison: c, families: map[string]bool{}}
	byKey := map[place]*change{} // (family, message ID, timestamp)
	rowDelete := false
	for _, e := range entries {
		if e.Role != Winner {
			continue
		}
		k := place{e.Family, e.MessageID, e.Timestamp}
		ch := byKey[k]
		if ch == nil {
			ch = &change{msg: e, family: e.Family, ts: e.Timestamp, cells: map[string]*Entry{}, deletes: e.Delete}
			byKey[k] = ch
			cc.changes = append(cc.changes, ch)
		}
		if e.Column != "" && e.Op == OpSet {
			ch.cells[e.Column] = e
		}
		cc.families[e.Family] = true
		rowDelete = rowDelete || e.Op == OpDelete
	}
	if rowDelete {
		plainFamily := map[string]bool{}
		for _, e := range plain {
			plainFamily[e.Family] = true
		}
		for f := range c.actual {
			if f != c.tombstones && !plainFamily[f] && !cc.families[f] {
				cc.families[f] = false
			}
		}
	}
	return cc
}

// expectation is the range's newest state of one column: set (at setTs,
// to one of sets' values: changes of one millisecond tie) or deleted at
// delTs by del.
type expectation struct {
	sets    []*Entry
	setTs   int64
	insert  bool // the set is the row's winning insert
	del     *change
	delTs   int64
	replace bool // the delete is a replace_if_newer that lacks the column
}

// checkExpectations compares each column the winners' changes decide with
// the range's newest state of it.
func (cc *changeComparison) checkExpectations() {
	for _, f := range slices.Sorted(maps.Keys(cc.families)) {
		for _, col := range cc.columns(f) {
			x := cc.expect(f, col)
			switch {
			case len(x.sets) > 0 && (x.del == nil || x.setTs > x.delTs || x.setTs == x.delTs && x.replace):
				// A replace at T that lacks the column ties with a set at
				// T: the one applied last won (delivery order).
				cc.expectSet(f, col, x, x.del != nil && x.setTs == x.delTs)
			case x.del != nil:
				cc.expectDeleted(f, col, x)
			}
		}
	}
}

// columns are the columns of family f the winners' changes decide: those
// they set or delete by name, and every column the table holds in f when
// one deletes or replaces the family or the row.
func (cc *changeComparison) columns(f string) []string {
	cols := map[string]bool{}
	for _, ch := range cc.changes {
		whole := ch.op() == OpDelete || ch.family == f && (ch.op() == OpDeleteFamily || ch.op() == OpSet && ch.mode() == ModeReplaceIfNewer)
		if whole {
			for col := range cc.actual[f] {
				cols[col] = true
			}
		}
		if ch.family != f {
			continue
		}
		for col := range ch.cells {
			cols[col] = true
		}
		for _, col := range ch.deletes {
			cols[col] = true
		}
	}
	return slices.Sorted(maps.Keys(cols))
}

// expect is the range's newest state of column col of family f.
func (cc *changeComparison) expect(f, col string) expectation {
	var x expectation
	for _, ch := range cc.changes {
		deletes, replace := removes(ch, f, col)
		if !deletes {
			continue
		}
		// The newest delete; at a tie, a true delete (a tombstone at T
		// covers T) over a replace (its tombstone is at T − 1 ms).
		if x.del == nil || ch.ts > x.delTs || ch.ts == x.delTs && x.replace && !replace {
			x.del, x.delTs, x.replace = ch, ch.ts, replace
		}
	}
	if inserts := cc.winningInserts(f); len(inserts) > 0 {
		x.insert = true
		for _, ch := range inserts {
			if e := ch.cells[col]; e != nil {
				x.sets, x.setTs = append(x.sets, e), ch.ts
			}
		}
		return x
	}
	for _, ch := range cc.changes {
		e := ch.cells[col]
		if ch.family != f || e == nil {
			continue
		}
		if len(x.sets) == 0 || ch.ts > x.setTs {
			x.sets, x.setTs = nil, ch.ts
		}
		if ch.ts == x.setTs {
			x.sets = append(x.sets, e)
		}
	}
	return x
}

// removes reports whether ch deletes column col of family f, and whether
// it is a replace_if_newer that lacks the column (its deletion at T does not
// cover a set of the same T: its tombstone is at T − 1 ms).
func removes(ch *change, f, col string) (deletes, replace bool) {
	switch {
	case ch.op() == OpDelete:
		return true, false
	case ch.family != f:
		return false, false
	case ch.op() == OpDeleteFamily:
		return true, false
	case ch.op() == OpDeleteColumns:
		return slices.Contains(ch.deletes, col), false
	case ch.mode() == ModeInsert:
		return false, false // an insert leaves its missing values out
	case slices.Contains(ch.deletes, col):
		return true, false
	}
	return ch.mode() == ModeReplaceIfNewer && ch.cells[col] == nil, true
}

// winningInserts are the inserts of family f that the range says win its
// row: the earliest after the newest delete of the row or the family (an
// insert at or before it was deleted), with cells (an insert of none
// writes nothing). Several when they tie.
func (cc *changeComparison) winningInserts(f string) []*change {
	var after int64 = -1
	for _, ch := range cc.changes {
		if ch.op() == OpDelete || ch.family == f && ch.op() == OpDeleteFamily {
			after = max(after, ch.ts)
		}
	}
	var won []*change
	for _, ch := range cc.changes {
		if ch.family != f || ch.op() != OpSet || ch.mode() != ModeInsert || len(ch.cells) == 0 || ch.ts <= after {
			continue
		}
		if len(won) > 0 && ch.ts < won[0].ts {
			won = won[:0]
		}
		if len(won) == 0 || ch.ts == won[0].ts {
			won = append(won, ch)
		}
	}
	return won
}

// expectSet checks a column the range's newest change sets. tied: a replace
// of the same millisecond that lacks the column may have been applied last.
func (cc *changeComparison) expectSet(f, col string, x expectation, tied bool) {
	w, p := x.sets[0], place{f, col, x.setTs}
	versions := cc.actual[f][col]
	switch v, ok := cc.version(p); {
	case x.insert && cc.holdsBefore(f, x.setTs):
		// An earlier insert, outside the range, won the row (a cell of
		// this one still there is a later insert's: checkExtraVersions).
		cc.stats.Superseded++
		return
	case ok && (x.insert || versions[0].Timestamp == x.setTs):
		for _, e := range x.sets {
			if bytes.Equal(e.Value, v.Value) {
				cc.stats.Checked++
				return
			}
		}
		cc.wrongBytes(w, p, v)
		return
	case !x.insert && len(versions) > 0 && versions[0].Timestamp > x.setTs:
		cc.stats.Superseded++ // a newer change replaced it
		return
	}
	if tied || cc.tombstoned(f, col, x.setTs) {
		cc.stats.Superseded++ // deleted later
		return
	}
	if w.MayBeLate {
		cc.stats.LateDropped++
		return
	}
	cc.add(Missing, w, p, w.Value, nil, "the cell is not in the table")
}

// holdsBefore reports whether family f holds a version older than ts.
func (cc *changeComparison) holdsBefore(f string, ts int64) bool {
	for _, versions := range cc.actual[f] {
		if len(versions) > 0 && versions[len(versions)-1].Timestamp < ts {
			return true
		}
	}
	return false
}

// tombstoned reports whether a tombstone covers column col of family f at
// ts: the row's, the family's or the column's, at ts or later.
func (cc *changeComparison) tombstoned(f, col string, ts int64) bool {
	tombs := cc.actual[cc.tombstones]
	for _, q := range []string{"*", f, f + ":" + col} {
		if v := tombs[q]; len(v) > 0 && v[0].Timestamp >= ts {
			return true
		}
	}
	return false
}

// expectDeleted checks a column the range's newest change deletes at D:
// no version of D or before may be left.
func (cc *changeComparison) expectDeleted(f, col string, x expectation) {
	what := "delete"
	if x.replace {
		what = "replace_if_newer, which lacks the column,"
	}
	for _, v := range cc.actual[f][col] {
		if v.Timestamp > x.delTs {
			continue // a newer change's, outside the range
		}
		p := place{f, col, v.Timestamp}
		cc.reported[p] = true
		cc.add(Different, x.del.msg, p, nil, v.Value,
			fmt.Sprintf("a cell the %s at %s removes is still there", what, micros(x.delTs)))
	}
}

// checkExtraVersions reports the versions a change mapping's family should
// not hold: a column keeps one version (upsert and replace_if_newer delete
// the older ones), and an inserted row is its earliest insert's.
func (cc *changeComparison) checkExtraVersions() {
	for _, f := range slices.Sorted(maps.Keys(cc.families)) {
		if !cc.families[f] {
			continue // a family only a row delete names: no mapping of the range writes it
		}
		if len(cc.winningInserts(f)) > 0 {
			earliest := int64(-1)
			for _, versions := range cc.actual[f] {
				if n := len(versions); n > 0 && (earliest < 0 || versions[n-1].Timestamp < earliest) {
					earliest = versions[n-1].Timestamp
				}
			}
			for col, versions := range cc.actual[f] {
				for _, v := range versions {
					if v.Timestamp > earliest {
						cc.extra(place{f, col, v.Timestamp}, v, "a later insert's cell: the row's earliest insert wins")
					}
				}
			}
			continue
		}
		for col, versions := range cc.actual[f] {
			for _, v := range versions[min(1, len(versions)):] {
				cc.extra(place{f, col, v.Timestamp}, v,
					fmt.Sprintf("%d versions of a change mapping's cell, which keeps one", len(versions)))
			}
		}
	}
}

// extra reports a version that should not be there, as the message of the
// range that wrote it, if any, unless another rule already reported it.
func (cc *changeComparison) extra(p place, v Version, detail string) {
	if cc.reported[p] {
		return
	}
	cc.reported[p] = true
	var by *Entry
	if es := cc.at[p]; len(es) > 0 {
		by = es[0]
	}
	cc.add(Doubled, by, p, nil, v.Value, detail)
}

// micros formats a cell timestamp for a finding's detail.
func micros(ts int64) string { return time.UnixMicro(ts).UTC().Format("2006-01-02T15:04:05.000Z") }
