package deadletter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	Reprocess   string            `json:"pubsink_reprocess,omitempty"`
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

	// reprocess marks every copy (Clients.Reprocess); "" for the live
	// pipeline.
	reprocess string

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
	c.Reprocess = o.reprocess
	line, err := json.Marshal(recordOf(c))
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

// recordOf is the line of c.
func recordOf(c *Copy) fileRecord {
	return fileRecord{
		Reason:      c.Reason,
		Error:       c.Error,
		Pipeline:    c.Pipeline,
		MessageID:   c.MessageID,
		PublishTime: formatTime(c.PublishTime),
		FailedAt:    formatTime(c.FailedAt),
		Reprocess:   c.Reprocess,
		Attributes:  c.Attributes,
		Data:        c.Data,
	}
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
	if err := o.reopenIfMoved(); err != nil {
		return err
	}
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

// reopenIfMoved reopens the path when the open file is no longer what the
// path names: a log rotation renamed it (or deleted it) and the copies
// would go to a file nobody reads any more. Two stats per batch, and a
// batch is a group of poison messages: a cost nobody sees.
func (o *File) reopenIfMoved() error {
	open, err := o.f.Stat()
	if err != nil {
		return fmt.Errorf("dead-letter file %s: %w", o.path, err)
	}
	named, err := os.Stat(o.path)
	if err == nil && os.SameFile(open, named) {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("dead-letter file %s: %w", o.path, err)
	}
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("dead-letter file %s: reopen after a rotation: %w", o.path, err)
	}
	if err := syncDir(filepath.Dir(o.path)); err != nil {
		f.Close()
		return fmt.Errorf("dead-letter file %s: %w", o.path, err)
	}
	o.f.Close()
	o.f, o.partial = f, false // the new file starts on a line of its own
	o.log.Info("dead-letter file was moved or removed; writing to a new one at its path")
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
		AttrReprocess:   r.Reprocess,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// The read side, as OpenReader returns it for a file output: a Reader of
// the file and its marker file.

// fileReader reads a file output line by line. Replayed copies are marked in
// a marker file next to it (FILE.replayed, one JSON object per line), not
// removed: the daemon may be appending to the file while replay runs, and
// only appending is safe against that. Delete both files together once
// nothing in them is wanted any more.
type fileReader struct {
	path  string
	f     *os.File
	r     *bufio.Reader
	line  int
	marks map[markKey]bool
	mf    *os.File // the marker file, opened on the first remove
	// torn says the marker file ends mid-line (a failed write): the next
	// marks start on a new line.
	torn bool
}

type markKey struct{ pipeline, messageID string }

type markRecord struct {
	Pipeline   string `json:"pubsink_pipeline"`
	MessageID  string `json:"pubsink_message_id"`
	ReplayedAt string `json:"replayed_at"`
}

// markerPath is the marker file of a dead-letter file.
func markerPath(path string) string { return path + ".replayed" }

func openFileReader(path string) (*fileReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dead-letter file: %w", err)
	}
	s := &fileReader{path: path, f: f, r: bufio.NewReaderSize(f, 1<<20), marks: map[markKey]bool{}}
	if err := s.readMarks(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *fileReader) readMarks() error {
	b, err := os.ReadFile(markerPath(s.path))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay marker file: %w", err)
	}
	s.torn = len(b) > 0 && b[len(b)-1] != '\n'
	for line := range bytes.Lines(b) {
		var m markRecord
		if json.Unmarshal(line, &m) == nil { // a torn last line marks nothing
			s.marks[markKey{m.Pipeline, m.MessageID}] = true
		}
	}
	return nil
}

// Next reads up to n lines not marked replayed. See Reader.
func (s *fileReader) Next(_ context.Context, n int) ([]*Entry, error) {
	var out []*Entry
	for len(out) < n {
		line, err := s.r.ReadBytes('\n')
		if err == io.EOF {
			// A last line without its newline is being written, or was torn
			// by a failed write that the next write fenced off: not a copy
			// yet either way.
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.path, err)
		}
		s.line++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		c, err := copyFromLine(line)
		if err == nil && s.marks[markKey{c.Pipeline, c.MessageID}] {
			continue // replayed before
		}
		out = append(out, &Entry{Copy: c, Err: err, Location: fmt.Sprintf("%s line %d", s.path, s.line)})
	}
	return out, nil
}

// Remove marks es as replayed in the marker file and fsyncs it. See
// Reader.
func (s *fileReader) Remove(_ context.Context, es []*Entry) error {
	if len(es) == 0 {
		return nil
	}
	if s.mf == nil {
		path := markerPath(s.path)
		_, statErr := os.Stat(path)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if errors.Is(statErr, os.ErrNotExist) {
			if err := syncDir(filepath.Dir(path)); err != nil {
				f.Close()
				return err
			}
		}
		s.mf = f
	}
	var buf []byte
	if s.torn {
		buf = append(buf, '\n')
	}
	now := formatTime(time.Now())
	for _, e := range es {
		b, _ := json.Marshal(markRecord{Pipeline: e.Copy.Pipeline, MessageID: e.Copy.MessageID, ReplayedAt: now})
		buf = append(append(buf, b...), '\n')
		s.marks[markKey{e.Copy.Pipeline, e.Copy.MessageID}] = true
	}
	if _, err := s.mf.Write(buf); err != nil {
		s.torn = true
		return err
	}
	s.torn = false
	return s.mf.Sync()
}

// Release has nothing to do: a line stays until it is marked. See Reader.
func (s *fileReader) Release(context.Context, []*Entry) error { return nil }

// Close closes the file and the marker file. See Reader.
func (s *fileReader) Close() error {
	var err error
	if s.mf != nil {
		err = s.mf.Close()
	}
	return errors.Join(s.f.Close(), err)
}

// Check returns nil: a file output cannot tell it would refuse a copy
// before it writes one. See Output.
func (o *File) Check(context.Context) error { return nil }
