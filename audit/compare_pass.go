package audit

// The compare pass: the spilled entries in row order, each row read from
// its table once (all its versions, a bounded batch of rows per read), and
// compared with every entry of the range for it.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	cbt "cloud.google.com/go/bigtable"
)

// RowReader reads rows of a table with every version of every cell; a row
// the table does not hold is absent from the answer.
type RowReader interface {
	ReadRows(ctx context.Context, table string, keys []string) (map[string]Row, error)
}

// ReadBatch is how many rows one read asks for: the compare pass holds the
// entries of that many rows, and no more, besides the spill's merge.
const ReadBatch = 100

// Summary is what an audit found, counted: the read pass's messages by
// what became of them, and the compare pass's cells.
type Summary struct {
	// Messages of the range audited; Winners those whose rows the table
	// must hold, Rivals the duplicates of another message of their key
	// (the live catalog names the other), Filtered the filter's,
	// DeadLettered those the dead-letter output holds a copy of.
	Messages     int64 `json:"messages"`
	Winners      int64 `json:"winners"`
	Rivals       int64 `json:"duplicates"`
	Filtered     int64 `json:"filtered"`
	DeadLettered int64 `json:"dead_lettered"`
	// Rows read; Checked the winners' cells found as the mapping gives
	// them; Superseded change cells a newer change outside the range
	// replaced or deleted; LateDropped cells of messages the live pipeline
	// may have dropped as late, absent.
	Rows        int64 `json:"rows"`
	Checked     int64 `json:"cells_checked"`
	Superseded  int64 `json:"superseded"`
	LateDropped int64 `json:"late_dropped"`
	Counts
}

// group is the entries of one row.
type group struct {
	row     string
	entries []Entry
}

// Compare runs the compare pass over what Message spilled, and returns the
// summary. pace is called before each read with its number of rows (the
// --rate); tombstones is the sink's tombstone family.
func (a *Auditor) Compare(ctx context.Context, rows RowReader, tombstones string, pace func(context.Context, int) error) (Summary, error) {
	it, err := a.cfg.Spill.Sorted()
	if err != nil {
		return a.summary(), fmt.Errorf("audit: sort the entries: %w", err)
	}
	span := a.span.Span
	var table string
	var batch []group
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := pace(ctx, len(batch)); err != nil {
			return err
		}
		keys := make([]string, len(batch))
		for i, g := range batch {
			keys[i] = g.row
		}
		found, err := rows.ReadRows(ctx, table, keys)
		if err != nil {
			return fmt.Errorf("audit: read %d rows of table %s: %w", len(keys), table, err)
		}
		for _, g := range batch {
			fs, st := CompareRow(g.entries, found[g.row], tombstones, span)
			for _, f := range fs {
				if err := a.cfg.Report.Add(f); err != nil {
					return fmt.Errorf("audit: write the report: %w", err)
				}
			}
			a.rows.Add(1)
			a.checked.Add(int64(st.Checked))
			a.superseded.Add(int64(st.Superseded))
			a.lateDropped.Add(int64(st.LateDropped))
		}
		batch = batch[:0]
		return nil
	}
	for it.Next() {
		var e Entry
		if err := json.Unmarshal(it.Value(), &e); err != nil {
			return a.summary(), fmt.Errorf("audit: read back an entry: %w", err)
		}
		switch n := len(batch); {
		case n > 0 && e.Table == table && batch[n-1].row == e.Row:
			batch[n-1].entries = append(batch[n-1].entries, e)
			continue
		case e.Table != table || n == ReadBatch:
			if err := flush(); err != nil {
				return a.summary(), err
			}
		}
		table = e.Table
		batch = append(batch, group{row: e.Row, entries: []Entry{e}})
	}
	if err := it.Err(); err != nil {
		return a.summary(), fmt.Errorf("audit: read back the entries: %w", err)
	}
	err = flush()
	return a.summary(), err
}

// summary is the read pass's counts.
func (a *Auditor) summary() Summary {
	return Summary{Messages: a.messages.Load(), Winners: a.winners.Load(), Rivals: a.rivals.Load(),
		Filtered: a.filtered.Load(), DeadLettered: a.deadLettered.Load(),
		Rows: a.rows.Load(), Checked: a.checked.Load(), Superseded: a.superseded.Load(), LateDropped: a.lateDropped.Load(),
		Counts: a.cfg.Report.Counts()}
}

// Summary returns the counts so far (for /status while the audit runs).
func (a *Auditor) Summary() Summary { return a.summary() }

// Tables reads rows from Bigtable: every version of every cell.
type Tables struct{ Client *cbt.Client }

// ReadRows reads keys of table in one request.
func (t Tables) ReadRows(ctx context.Context, table string, keys []string) (map[string]Row, error) {
	out := make(map[string]Row, len(keys))
	err := t.Client.Open(table).ReadRows(ctx, cbt.RowList(keys), func(r cbt.Row) bool {
		row := Row{}
		for family, items := range r {
			cols := row[family]
			if cols == nil {
				cols = map[string][]Version{}
				row[family] = cols
			}
			for _, it := range items {
				col := strings.TrimPrefix(it.Column, family+":")
				cols[col] = append(cols[col], Version{Timestamp: int64(it.Timestamp), Value: it.Value})
			}
		}
		out[r.Key()] = row
		return true
	})
	return out, err
}
