package deadletter

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/source"
)

// The columns of a dead-letter row, in family state.FamilyDeadLetter.
const (
	colData        = "data"       // the payload, as is
	colAttributes  = "attributes" // the original attributes, a JSON object
	colReason      = "reason"
	colError       = "error"
	colPipeline    = "pipeline"
	colMessageID   = "message_id"
	colPublishTime = "publish_time" // RFC 3339
	colFailedAt    = "failed_at"    // RFC 3339
	colReprocess   = "reprocess"    // only on a reprocess run's copy
)

// tableBatch bounds one ApplyBulk of dead-letter rows. Dead letters are
// rare; a burst of poison (a bad deploy upstream) is what batching is for.
var tableBatch = batch.Config{MaxItems: 100, MaxBytes: 16 << 20}

// Table writes dead-letter copies as rows of a Bigtable table in the state
// instance, one row per message, batched with ApplyBulk.
//
// The row key is PIPELINE#HHHH#MESSAGE_ID, HHHH being 4 hex digits of a hash
// of the message ID: Pub/Sub message IDs grow with time, so without the hash
// a burst of dead letters would land on one tablet; with it, they spread
// over the pipeline's key range, which replay reads with one prefix scan.
// Every cell's timestamp is the message's publish time truncated to
// milliseconds: a second copy of the same message (a redelivery, or a
// reprocess run's copy) rewrites the same cells instead of adding versions.
// Column reprocess is written only by a reprocess run's output; the live
// output deletes it, so a row always describes the copy written last.
type Table struct {
	log      *zap.Logger
	table    *bigtable.Table
	name     string
	pipeline string
	batcher  *batch.Batcher[tableRow]
	now      func() time.Time

	// reprocess marks every copy (Clients.Reprocess); "" for the live
	// pipeline.
	reprocess string
}

type tableRow struct {
	key string
	mut *bigtable.Mutation
}

// openTable checks that the table exists and returns its output.
func openTable(ctx context.Context, log *zap.Logger, client *bigtable.Client, name, instance, pipeline string) (*Table, error) {
	t := &Table{
		log:      log.With(zap.String("table", name)),
		table:    client.Open(name),
		name:     name,
		pipeline: pipeline,
		now:      time.Now,
	}
	_, err := t.table.ReadRow(ctx, "\x00pubsink-check\x00", bigtable.RowFilter(bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())))
	switch {
	case status.Code(err) == codes.NotFound:
		return nil, fmt.Errorf("dead-letter table %s in instance %s does not exist (run `pubsink setup`): %w", name, instance, err)
	case err != nil:
		return nil, fmt.Errorf("dead-letter table %s in instance %s cannot be read: %w", name, instance, err)
	}
	t.batcher = batch.New(tableBatch, t.flush)
	return t, nil
}

// rowKey is the row of a pipeline's copy of a message.
func rowKey(pipeline, messageID string) string {
	h := fnv.New32a()
	h.Write([]byte(messageID))
	return fmt.Sprintf("%s#%04x#%s", pipeline, h.Sum32()>>16, messageID)
}

// tablePrefix is the key prefix of a pipeline's rows.
func tablePrefix(pipeline string) string { return pipeline + "#" }

// Send writes the copy of m and returns once Bigtable applied it. See
// Output.
func (t *Table) Send(ctx context.Context, m *source.Message, reason Reason, cause error) error {
	c := newCopy(t.pipeline, m, reason, cause, t.now())
	c.Reprocess = t.reprocess
	attrs, err := json.Marshal(c.Attributes)
	if err != nil {
		return fmt.Errorf("dead-letter table %s: encode attributes: %w", t.name, err)
	}
	ts := bigtable.Timestamp(c.PublishTime.UnixMicro()).TruncateToMilliseconds()
	mut := bigtable.NewMutation()
	set := func(col string, v []byte) { mut.Set(state.FamilyDeadLetter, col, ts, v) }
	set(colData, c.Data)
	set(colAttributes, attrs)
	set(colReason, []byte(c.Reason))
	set(colError, []byte(c.Error))
	set(colPipeline, []byte(c.Pipeline))
	set(colMessageID, []byte(c.MessageID))
	set(colPublishTime, []byte(formatTime(c.PublishTime)))
	set(colFailedAt, []byte(formatTime(c.FailedAt)))
	if c.Reprocess != "" {
		set(colReprocess, []byte(c.Reprocess))
	} else {
		// A reprocess run's copy of the same message shares the row
		// (same key, same cells): a live copy written over it takes
		// its marker off, so that the row says whose copy it holds.
		mut.DeleteCellsInColumn(state.FamilyDeadLetter, colReprocess)
	}
	err = t.batcher.Add(ctx, tableRow{key: rowKey(t.pipeline, m.ID), mut: mut}, len(c.Data)+len(attrs)+len(c.Error))
	if err == batch.ErrClosed {
		return fmt.Errorf("dead-letter table %s: %w", t.name, errClosed)
	}
	return err
}

// flush is the batcher's FlushFunc: one ApplyBulk, bounded by sendTimeout.
// Every error is returned as is: the pipeline retries a failed Send, and an
// entry rewritten after it landed is harmless (same cells, same
// timestamps).
func (t *Table) flush(ctx context.Context, rows []tableRow) []error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	keys := make([]string, len(rows))
	muts := make([]*bigtable.Mutation, len(rows))
	for i, r := range rows {
		keys[i], muts[i] = r.key, r.mut
	}
	errs, err := t.table.ApplyBulk(ctx, keys, muts)
	if err != nil {
		err = fmt.Errorf("dead-letter table %s: ApplyBulk of %d rows: %w", t.name, len(rows), err)
		errs = make([]error, len(rows))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, e := range errs {
		if e != nil {
			errs[i] = fmt.Errorf("dead-letter table %s: %w", t.name, e)
		}
	}
	return errs
}

// Close waits for the rows queued and in flight. See Output.
func (t *Table) Close(ctx context.Context) error {
	return t.batcher.Close(ctx)
}

// copyFromRow rebuilds a Copy from a dead-letter row.
func copyFromRow(r bigtable.Row) (*Copy, error) {
	cols := map[string][]byte{}
	for _, items := range r {
		for _, it := range items {
			col := it.Column[len(state.FamilyDeadLetter)+1:]
			if _, ok := cols[col]; !ok { // the latest version comes first
				cols[col] = it.Value
			}
		}
	}
	c := &Copy{Data: cols[colData]}
	if c.Data == nil {
		c.Data = []byte{}
	}
	if err := json.Unmarshal(cols[colAttributes], &c.Attributes); err != nil {
		return nil, fmt.Errorf("row %q: column %s: %w", r.Key(), colAttributes, err)
	}
	maps.DeleteFunc(c.Attributes, reserved) // written by hand or another tool: replay republishes originals only
	err := c.setFields(map[string]string{
		AttrReason:      string(cols[colReason]),
		AttrError:       string(cols[colError]),
		AttrPipeline:    string(cols[colPipeline]),
		AttrMessageID:   string(cols[colMessageID]),
		AttrPublishTime: string(cols[colPublishTime]),
		AttrFailedAt:    string(cols[colFailedAt]),
		AttrReprocess:   string(cols[colReprocess]),
	})
	if err != nil {
		return nil, fmt.Errorf("row %q: %w", r.Key(), err)
	}
	return c, nil
}

// The read side, as OpenReader returns it for a table output: a Reader of
// the pipeline's rows.

// tableReader reads a pipeline's rows of a table output in key order.
type tableReader struct {
	table    *bigtable.Table
	name     string
	start    string // the next read starts here
	end      string // and the reads end before this key
	finished bool
}

// openTableReader reads the rows of pipeline, or, with messageID, the one
// row of that message.
func openTableReader(ctx context.Context, client *bigtable.Client, name, pipeline, messageID string) (*tableReader, error) {
	prefix := tablePrefix(pipeline)
	// '$' follows '#': the range is every key with the prefix.
	s := &tableReader{table: client.Open(name), name: name, start: prefix, end: prefix[:len(prefix)-1] + "$"}
	if messageID != "" {
		s.start = rowKey(pipeline, messageID)
		s.end = s.start + "\x00"
	}
	_, err := s.table.ReadRow(ctx, "\x00pubsink-check\x00")
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("dead-letter table %s does not exist: %w", name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("dead-letter table %s: %w", name, err)
	}
	return s, nil
}

// Next reads the next n of the pipeline's rows. See Reader.
func (s *tableReader) Next(ctx context.Context, n int) ([]*Entry, error) {
	if s.finished {
		return nil, nil
	}
	var out []*Entry
	err := s.table.ReadRows(ctx, bigtable.NewRange(s.start, s.end), func(r bigtable.Row) bool {
		c, err := copyFromRow(r)
		out = append(out, &Entry{Copy: c, Err: err, Location: "row " + r.Key(), ref: r.Key()})
		s.start = r.Key() + "\x00"
		return true
	}, bigtable.LimitRows(int64(n)), bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		return nil, fmt.Errorf("read table %s: %w", s.name, err)
	}
	if len(out) < n {
		s.finished = true
	}
	return out, nil
}

// Remove deletes the rows of es. See Reader.
func (s *tableReader) Remove(ctx context.Context, es []*Entry) error {
	if len(es) == 0 {
		return nil
	}
	keys := make([]string, len(es))
	muts := make([]*bigtable.Mutation, len(es))
	for i, e := range es {
		keys[i] = e.ref
		muts[i] = bigtable.NewMutation()
		muts[i].DeleteRow()
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	errs, err := s.table.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return fmt.Errorf("delete rows from %s: %w", s.name, err)
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("delete row %q from %s: %w", keys[i], s.name, e)
		}
	}
	return nil
}

// Release and Close have nothing to do for a table. See Reader.
func (s *tableReader) Release(context.Context, []*Entry) error { return nil }
func (s *tableReader) Close() error                            { return nil }

// Check returns nil: a table output cannot tell it would refuse a copy
// before it writes one. See Output.
func (t *Table) Check(context.Context) error { return nil }
