package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/batch"
	"github.com/pubsink/pubsink/source"
)

// fileRecord is one line of a dead-letter file: the pubsink_* fields under
// their attribute names, the original attributes, and the data in base64.
type fileRecord struct {
	Reason      Reason            `json:"pubsink_reason"`
	Error       string            `json:"pubsink_error"`
	Pipeline    string            `json:"pubsink_pipeline"`
	MessageID   string            `json:"pubsink_message_id"`
	PublishTime string            `json:"pubsink_publish_time"`
	FailedAt    string            `json:"pubsink_failed_at"`
	Attributes  map[string]string `json:"attributes"`
	Data        []byte            `json:"data"`
}

// fileBatch makes the File output a group commit: a batch is written as soon
// as the one writer is free (MaxDelay 0, MaxInFlight 1), so while one write
// and fsync are under way the sends that arrive meanwhile gather into the
// next, and a burst of poison costs a few fsyncs, not one per message.
var fileBatch = batch.Config{MaxItems: 1000, MaxBytes: 16 << 20, MaxInFlight: 1}

// File appends dead-letter copies to a local JSON-lines file, one object
// per message, and fsyncs before Send returns. It is meant for local runs.
//
// The file is opened with O_APPEND and each batch is one write, so several
// outputs (pipelines) may share a file on a local file system. A write that
// fails part-way leaves a partial line; the next write starts on a new
// line, so the damage stays one malformed line, which replay reports and
// skips, while the failed Send is retried and the copy written whole.
type File struct {
	log      *zap.Logger
	path     string
	pipeline string
	f        *os.File
	batcher  *batch.Batcher[[]byte]
	now      func() time.Time

	// Owned by the one flush at a time (MaxInFlight 1).
	buf     []byte
	partial bool // the last write failed: the file may end mid-line

	syncs atomic.Int64 // fsyncs done, for tests
}

// openFile opens path for appending, creating it (and making its directory
// entry durable) if needed.
func openFile(log *zap.Logger, path, pipeline string) (*File, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dead-letter file: %w", err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// A new file's name is durable only once its directory is synced.
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("dead-letter file %s: %w", path, err)
		}
	}
	o := &File{log: log.With(zap.String("file", path)), path: path, pipeline: pipeline, f: f, now: time.Now}
	o.batcher = batch.New(fileBatch, o.flush)
	return o, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Send appends the copy of m and returns once it is fsynced. See Output.
func (o *File) Send(ctx context.Context, m *source.Message, reason Reason, cause error) error {
	c := newCopy(o.pipeline, m, reason, cause, o.now())
	line, err := json.Marshal(fileRecord{
		Reason:      c.Reason,
		Error:       c.Error,
		Pipeline:    c.Pipeline,
		MessageID:   c.MessageID,
		PublishTime: formatTime(c.PublishTime),
		FailedAt:    formatTime(c.FailedAt),
		Attributes:  c.Attributes,
		Data:        c.Data,
	})
	if err != nil {
		return fmt.Errorf("dead-letter file %s: encode: %w", o.path, err)
	}
	line = append(line, '\n')
	err = o.batcher.Add(ctx, line, len(line))
	if err == batch.ErrClosed {
		return fmt.Errorf("dead-letter file %s: %w", o.path, errClosed)
	}
	return err
}

// flush writes a batch of lines with one write and one fsync.
func (o *File) flush(_ context.Context, lines [][]byte) []error {
	o.buf = o.buf[:0]
	if o.partial {
		o.buf = append(o.buf, '\n')
	}
	for _, l := range lines {
		o.buf = append(o.buf, l...)
	}
	err := o.write()
	if cap(o.buf) > 1<<20 {
		o.buf = nil // do not keep a burst's buffer for good
	}
	if err == nil {
		return nil
	}
	errs := make([]error, len(lines))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (o *File) write() error {
	if _, err := o.f.Write(o.buf); err != nil {
		o.partial = true
		return fmt.Errorf("dead-letter file %s: write: %w", o.path, err)
	}
	o.partial = false
	if err := o.f.Sync(); err != nil {
		// What reached the disk is unknown: the senders retry, and a copy
		// may then appear twice, never zero times.
		return fmt.Errorf("dead-letter file %s: fsync: %w", o.path, err)
	}
	o.syncs.Add(1)
	return nil
}

// Close waits for the lines queued and in flight, then closes the file. See
// Output.
func (o *File) Close(ctx context.Context) error {
	if err := o.batcher.Close(ctx); err != nil {
		return err
	}
	if err := o.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("dead-letter file %s: %w", o.path, err)
	}
	return nil
}

// copyFromLine rebuilds a Copy from one line of a dead-letter file.
func copyFromLine(line []byte) (*Copy, error) {
	var r fileRecord
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	c := &Copy{Attributes: r.Attributes, Data: r.Data}
	maps.DeleteFunc(c.Attributes, reserved) // written by hand or another tool: replay republishes originals only
	if c.Data == nil {
		c.Data = []byte{}
	}
	err := c.setFields(map[string]string{
		AttrReason:      string(r.Reason),
		AttrError:       r.Error,
		AttrPipeline:    r.Pipeline,
		AttrMessageID:   r.MessageID,
		AttrPublishTime: r.PublishTime,
		AttrFailedAt:    r.FailedAt,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}
