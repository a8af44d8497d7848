package stdout

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
)

// timeFormat is RFC 3339 in UTC with milliseconds, the precision cells
// keep in Bigtable.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// Sink writes each row as one JSON line to an io.Writer, the lines of one
// message together.
type Sink struct {
	w   io.Writer
	log *zap.Logger

	// lock is a one-slot semaphore rather than a mutex, so that a Write or
	// Close waiting behind a blocked writer (a full pipe) can give up with
	// its ctx. It guards everything below.
	lock   chan struct{}
	buf    bytes.Buffer
	enc    *json.Encoder
	closed bool
}

// line is the JSON shape of one row.
type line struct {
	Key string `json:"key"`
	// Table and Family are the row's, when it names them (Row.Table,
	// Row.Family); absent, the row goes to the configured ones.
	Table  string `json:"table,omitempty"`
	Family string `json:"family,omitempty"`
	// Op, Mode and Delete are a change row's (sinks.Change: its operation,
	// its write mode for a set, the columns it deletes); absent for a
	// plain row. The stdout sink prints a change; it cannot apply one.
	Op        string            `json:"op,omitempty"`
	Mode      string            `json:"mode,omitempty"`
	Delete    []string          `json:"delete,omitempty"`
	Timestamp string            `json:"timestamp"`
	Cells     map[string]string `json:"cells"`
	// Base64 lists the columns whose values are not valid UTF-8 and so are
	// written base64-encoded (standard encoding, padded).
	Base64 []string `json:"base64,omitempty"`
}

// New returns a sink writing to w, which stays the caller's (Close does not
// close it). If w has a Flush() error method (a *bufio.Writer), it is
// flushed after every line. cfg is accepted for symmetry with the other
// sinks; the column family and batching do not apply.
func New(w io.Writer, log *zap.Logger, cfg config.Sink) *Sink {
	s := &Sink{w: w, log: log.Named("stdout"), lock: make(chan struct{}, 1)}
	s.enc = json.NewEncoder(&s.buf)
	s.enc.SetEscapeHTML(false)
	return s
}

// Write writes each of rows, the rows of one message, as one line:
//
//	{"key":"k","timestamp":"2026-03-04T05:06:07.123Z","cells":{"data":"..."}}
//
// with "table" and "family" after "key" when the row names them. The
// timestamp is truncated to whole milliseconds, in UTC. A value that is
// valid UTF-8 is written as a string, any other base64-encoded and its
// column named in "base64". A key that is not valid UTF-8 has its invalid
// bytes replaced by U+FFFD. When a column appears twice, the last value wins,
// as in Bigtable.
//
// Write returns after the lines were handed to w together in a single Write
// call (and flushed), so the lines of a message stay together and lines
// from concurrent calls never interleave. With no rows it writes nothing. It
// returns ctx.Err() if ctx ends while it waits for another call, an error
// wrapping sinks.ErrClosed after Close, and w's error otherwise (transient:
// it is never a row's fault; some of the lines may have been written). It
// never rejects a row, and does not retain rows.
func (s *Sink) Write(ctx context.Context, rows []sinks.Row) error {
	if len(rows) == 0 {
		return nil
	}
	if after := rows[0].After; after != nil {
		if err := after.Wait(ctx); err != nil {
			return err
		}
	}
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	if s.closed {
		return fmt.Errorf("stdout: %w", sinks.ErrClosed)
	}

	s.buf.Reset()
	for i := range rows {
		if err := s.encode(&rows[i]); err != nil {
			return err
		}
	}
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return fmt.Errorf("stdout: write rows: %w", err)
	}
	return s.flush()
}

// encode appends row's line to s.buf. Called with the lock.
func (s *Sink) encode(row *sinks.Row) error {
	l := line{
		Key:       row.Key,
		Table:     row.Table,
		Family:    row.Family,
		Timestamp: row.Timestamp.UTC().Truncate(time.Millisecond).Format(timeFormat),
		Cells:     make(map[string]string, len(row.Cells)),
	}
	if c := &row.Change; c.IsChange() {
		l.Op, l.Delete = c.Op.String(), c.Delete
		if c.Op == sinks.OpSet {
			l.Mode = c.Mode.String()
		}
	}
	binary := map[string]bool{}
	for _, c := range row.Cells {
		if utf8.Valid(c.Value) {
			l.Cells[c.Column] = string(c.Value)
			delete(binary, c.Column)
		} else {
			l.Cells[c.Column] = base64.StdEncoding.EncodeToString(c.Value)
			binary[c.Column] = true
		}
	}
	for col := range binary {
		l.Base64 = append(l.Base64, col)
	}
	slices.Sort(l.Base64)

	if err := s.enc.Encode(l); err != nil { // appends the newline
		return fmt.Errorf("stdout: encode row: %w", err)
	}
	return nil
}

// Close flushes w if it is buffered and makes later writes fail with
// ErrClosed. It is idempotent, and bounded by ctx while a Write holds w.
func (s *Sink) Close(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.flush()
}

// Check returns nil: a local writer has no backend to ask.
func (s *Sink) Check(context.Context) error { return nil }

func (s *Sink) flush() error {
	if f, ok := s.w.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			return fmt.Errorf("stdout: flush: %w", err)
		}
	}
	return nil
}

func (s *Sink) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Sink) release() { <-s.lock }
