// Package sinktest is the conformance test every sinks.Sink implementation
// runs, so that the pipeline can rely on the same behaviour from all of them
// (as gocloud.dev/pubsub/drivertest does for pubsub drivers).
package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pubsink/pubsink/sinks"
)

// ReadBack returns what the store behind a sink holds for key: the latest
// value of each column (nil when the row does not exist), and the largest
// number of distinct versions (timestamps) any one column holds.
type ReadBack func(key string) (values map[string][]byte, versions int)

// NewSink returns a fresh sink, over an empty store, and how to read that
// store. RunConformance closes the sink; the store is the caller's to clean
// up (t.Cleanup).
type NewSink func(t *testing.T) (sinks.Sink, ReadBack)

// RunConformance runs the behaviours every sink must have, each as a subtest
// with its own sink.
func RunConformance(t *testing.T, newSink NewSink) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s sinks.Sink, read ReadBack)
	}{
		{"concurrent writes all land", testConcurrentWrites},
		{"writing the same row twice leaves one version", testIdempotentRewrite},
		{"a row is not retained after Write returns", testNotRetained},
		{"Write with an ended ctx returns its error", testEndedCtx},
		{"Close is idempotent and Write after Close fails with ErrClosed", testClose},
		{"Close lets the writes in progress finish", testCloseDuringWrites},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, read := newSink(t)
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := s.Close(ctx); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			c.run(t, s, read)
		})
	}
}

// ts is a timestamp with digits below the millisecond, which sinks that
// keep versions must truncate.
var ts = time.Date(2026, 3, 4, 5, 6, 7, 123_456_789, time.UTC)

func row(key string, n int) *sinks.Row {
	return &sinks.Row{
		Key: key,
		Cells: []sinks.Cell{
			{Column: "data", Value: fmt.Appendf(nil, `{"n":%d}`, n)},
			{Column: "n", Value: fmt.Append(nil, n)},
		},
		Timestamp: ts,
	}
}

// checkRow fails t unless read(want.Key) holds exactly want's cells in one
// version.
func checkRow(t *testing.T, read ReadBack, want *sinks.Row) {
	t.Helper()
	got, versions := read(want.Key)
	if got == nil {
		t.Errorf("row %q: not found", want.Key)
		return
	}
	if len(got) != len(want.Cells) {
		t.Errorf("row %q: %d columns, want %d", want.Key, len(got), len(want.Cells))
	}
	for _, c := range want.Cells {
		if !bytes.Equal(got[c.Column], c.Value) {
			t.Errorf("row %q column %q = %q, want %q", want.Key, c.Column, got[c.Column], c.Value)
		}
	}
	if versions != 1 {
		t.Errorf("row %q: %d versions, want 1", want.Key, versions)
	}
}

func testConcurrentWrites(t *testing.T, s sinks.Sink, read ReadBack) {
	const writers, perWriter = 32, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				n := w*perWriter + i
				if err := s.Write(t.Context(), row(fmt.Sprintf("row-%04d", n), n)); err != nil {
					t.Errorf("Write row %d: %v", n, err)
				}
			}
		})
	}
	wg.Wait()
	for n := range writers * perWriter {
		checkRow(t, read, row(fmt.Sprintf("row-%04d", n), n))
	}
}

func testIdempotentRewrite(t *testing.T, s sinks.Sink, read ReadBack) {
	r := row("again", 1)
	for range 2 {
		if err := s.Write(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	// The same message delivered again may carry the same timestamp at a
	// coarser or finer precision; below the millisecond it is the same
	// version.
	r.Timestamp = ts.Truncate(time.Millisecond).Add(999 * time.Microsecond)
	if err := s.Write(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	checkRow(t, read, row("again", 1))
}

func testNotRetained(t *testing.T, s sinks.Sink, read ReadBack) {
	r := row("retained", 1)
	if err := s.Write(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Cells {
		for i := range c.Value {
			c.Value[i] = 'X'
		}
	}
	r.Cells[0].Column = "changed"
	checkRow(t, read, row("retained", 1))
}

func testEndedCtx(t *testing.T, s sinks.Sink, _ ReadBack) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Write(ctx, row("cancelled", 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Write = %v, want context.Canceled", err)
	}
}

func testClose(t *testing.T, s sinks.Sink, read ReadBack) {
	if err := s.Write(t.Context(), row("before-close", 1)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	err := s.Write(t.Context(), row("after-close", 1))
	if !errors.Is(err, sinks.ErrClosed) {
		t.Errorf("Write after Close = %v, want an error wrapping sinks.ErrClosed", err)
	}
	if sinks.IsRejected(err) {
		t.Errorf("Write after Close = %v, a RejectedError: the row would be dead-lettered", err)
	}
	checkRow(t, read, row("before-close", 1))
	if got, _ := read("after-close"); got != nil {
		t.Errorf("a row written after Close landed: %q", got)
	}
}

func testCloseDuringWrites(t *testing.T, s sinks.Sink, read ReadBack) {
	const writers = 32
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for n := range writers {
		wg.Go(func() { errs[n] = s.Write(t.Context(), row(fmt.Sprintf("closing-%02d", n), n)) })
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	for n, err := range errs {
		key := fmt.Sprintf("closing-%02d", n)
		switch {
		case err == nil:
			checkRow(t, read, row(key, n))
		case errors.Is(err, sinks.ErrClosed):
			if got, _ := read(key); got != nil {
				t.Errorf("row %q: Write returned ErrClosed but the row landed", key)
			}
		default:
			t.Errorf("row %q: Write during Close = %v, want nil or ErrClosed", key, err)
		}
	}
}
