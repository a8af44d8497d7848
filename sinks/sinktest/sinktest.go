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

// ReadBack returns what the store behind a sink holds for key in table
// ("": the sink's configured table; the family is the one the sink is
// configured with for that table): the latest value of each column (nil
// when the row does not exist), and the largest number of distinct versions
// (timestamps) any one column holds.
type ReadBack func(table, key string) (values map[string][]byte, versions int)

// NewSink returns a fresh sink, over an empty store, and how to read that
// store. RunConformance closes the sink; the store is the caller's to clean
// up (t.Cleanup).
type NewSink func(t *testing.T) (sinks.Sink, ReadBack)

// Options is what RunConformance needs to know of the sinks NewSink makes,
// beyond their configured table.
type Options struct {
	// OtherTable and OtherFamily are a second table and its column family
	// that the sink is configured to write to, besides its own (a row
	// names them in Row.Table and Row.Family). An empty OtherTable skips
	// the case of rows in two tables.
	OtherTable, OtherFamily string
	// Refused returns a row with the given key that the sink can never
	// write (one over a limit of its store, or one its store refuses), or
	// is nil for a sink that refuses no row, which skips the case of a row
	// refused among several.
	Refused func(key string) sinks.Row
}

// RunConformance runs the behaviours every sink must have, each as a subtest
// with its own sink.
func RunConformance(t *testing.T, newSink NewSink, opts Options) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s sinks.Sink, read ReadBack, opts Options)
	}{
		{"concurrent writes all land", testConcurrentWrites},
		{"writing the same row twice leaves one version", testIdempotentRewrite},
		{"the rows of one Write all land", testSeveralRows},
		{"rows in two tables in one Write all land", testTwoTables},
		{"a row refused among several rejects the Write, naming its index", testOneRowRefused},
		{"a Write of no rows writes nothing and returns nil", testNoRows},
		{"rows are not retained after Write returns", testNotRetained},
		{"Write with an ended ctx returns its error", testEndedCtx},
		{"Close is idempotent and Write after Close fails with ErrClosed", testClose},
		{"Close lets the writes in progress finish", testCloseDuringWrites},
		{"rows wait for their After before they are written", testAfterWaited},
		{"rows whose After fails are not written, beside rows that are", testAfterFailed},
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
			c.run(t, s, read, opts)
		})
	}
}

// ts is a timestamp with digits below the millisecond, which sinks that
// keep versions must truncate.
var ts = time.Date(2026, 3, 4, 5, 6, 7, 123_456_789, time.UTC)

func row(key string, n int) sinks.Row {
	return sinks.Row{
		Key: key,
		Cells: []sinks.Cell{
			{Column: "data", Value: fmt.Appendf(nil, `{"n":%d}`, n)},
			{Column: "n", Value: fmt.Append(nil, n)},
		},
		Timestamp: ts,
	}
}

// one is the rows of a message of one row.
func one(r sinks.Row) []sinks.Row { return []sinks.Row{r} }

// checkRow fails t unless read holds exactly want's cells in one version,
// in want's table.
func checkRow(t *testing.T, read ReadBack, want sinks.Row) {
	t.Helper()
	got, versions := read(want.Table, want.Key)
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

// message is the rows of message n of the concurrent writes: one to three
// rows, as messages of one mapping and one array element each.
func message(n int) []sinks.Row {
	rows := make([]sinks.Row, 1+n%3)
	for i := range rows {
		rows[i] = row(fmt.Sprintf("row-%04d-%d", n, i), n*10+i)
	}
	return rows
}

func testConcurrentWrites(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	const writers, perWriter = 32, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				n := w*perWriter + i
				if err := s.Write(t.Context(), message(n)); err != nil {
					t.Errorf("Write message %d: %v", n, err)
				}
			}
		})
	}
	wg.Wait()
	for n := range writers * perWriter {
		for _, r := range message(n) {
			checkRow(t, read, r)
		}
	}
}

func testIdempotentRewrite(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	r := row("again", 1)
	for range 2 {
		if err := s.Write(t.Context(), one(r)); err != nil {
			t.Fatal(err)
		}
	}
	// The same message delivered again may carry the same timestamp at a
	// coarser or finer precision; below the millisecond it is the same
	// version.
	r.Timestamp = ts.Truncate(time.Millisecond).Add(999 * time.Microsecond)
	if err := s.Write(t.Context(), one(r)); err != nil {
		t.Fatal(err)
	}
	checkRow(t, read, row("again", 1))
}

func testSeveralRows(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	rows := []sinks.Row{row("several-0", 0), row("several-1", 1), row("several-2", 2)}
	rows[1].Cells = rows[1].Cells[:1] // rows of different shapes
	if err := s.Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		checkRow(t, read, r)
	}
	// The message again, as a redelivery: the same cells.
	if err := s.Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		checkRow(t, read, r)
	}
}

func testTwoTables(t *testing.T, s sinks.Sink, read ReadBack, opts Options) {
	if opts.OtherTable == "" {
		t.Skip("the sink writes to one table")
	}
	other := func(key string, n int) sinks.Row {
		r := row(key, n)
		r.Table, r.Family = opts.OtherTable, opts.OtherFamily
		return r
	}
	// A main row and an index row by another key, and a row of the same key
	// in both tables, which stay apart.
	rows := []sinks.Row{row("main-1", 1), other("index-1", 2), row("both", 3), other("both", 4)}
	if err := s.Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		checkRow(t, read, r)
	}
	if got, _ := read("", "index-1"); got != nil {
		t.Errorf("the row of the other table landed in the sink's own: %q", got)
	}
	if got, _ := read(opts.OtherTable, "main-1"); got != nil {
		t.Errorf("the row of the sink's own table landed in the other: %q", got)
	}
}

// testOneRowRefused: a message whose second row can never be written. The
// Write is rejected, naming that row, so that the whole message is
// dead-lettered once. Its other rows may have been written, or not (a sink
// that checks rows before any I/O writes none; Bigtable applies each row on
// its own); if written, they are whole, and writing the message's good rows
// again, as a replay would, leaves the same cells.
func testOneRowRefused(t *testing.T, s sinks.Sink, read ReadBack, opts Options) {
	if opts.Refused == nil {
		t.Skip("the sink refuses no row")
	}
	rows := []sinks.Row{row("partly-0", 0), opts.Refused("partly-refused"), row("partly-2", 2)}
	err := s.Write(t.Context(), rows)
	var rej *sinks.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("Write = %v, want a *sinks.RejectedError", err)
	}
	if rej.Row != 1 {
		t.Errorf("RejectedError.Row = %d, want 1, the refused row's index", rej.Row)
	}
	for _, r := range []sinks.Row{rows[0], rows[2]} {
		if got, _ := read("", r.Key); got != nil {
			checkRow(t, read, r) // written: whole, one version
		}
	}
	if err := s.Write(t.Context(), []sinks.Row{rows[0], rows[2]}); err != nil {
		t.Fatal(err)
	}
	checkRow(t, read, rows[0])
	checkRow(t, read, rows[2])
}

func testNoRows(t *testing.T, s sinks.Sink, _ ReadBack, _ Options) {
	if err := s.Write(t.Context(), nil); err != nil {
		t.Errorf("Write(nil) = %v", err)
	}
	if err := s.Write(t.Context(), []sinks.Row{}); err != nil {
		t.Errorf("Write of no rows = %v", err)
	}
}

func testNotRetained(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	rows := []sinks.Row{row("retained-0", 0), row("retained-1", 1)}
	if err := s.Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		for _, c := range r.Cells {
			for i := range c.Value {
				c.Value[i] = 'X'
			}
		}
		r.Cells[0].Column = "changed"
	}
	rows[0].Key = "changed"
	checkRow(t, read, row("retained-0", 0))
	checkRow(t, read, row("retained-1", 1))
}

func testEndedCtx(t *testing.T, s sinks.Sink, _ ReadBack, _ Options) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Write(ctx, one(row("cancelled", 1))); !errors.Is(err, context.Canceled) {
		t.Errorf("Write = %v, want context.Canceled", err)
	}
}

func testClose(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	if err := s.Write(t.Context(), one(row("before-close", 1))); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	err := s.Write(t.Context(), []sinks.Row{row("after-close-0", 1), row("after-close-1", 1)})
	if !errors.Is(err, sinks.ErrClosed) {
		t.Errorf("Write after Close = %v, want an error wrapping sinks.ErrClosed", err)
	}
	if sinks.IsRejected(err) {
		t.Errorf("Write after Close = %v, a RejectedError: the message would be dead-lettered", err)
	}
	checkRow(t, read, row("before-close", 1))
	for _, key := range []string{"after-close-0", "after-close-1"} {
		if got, _ := read("", key); got != nil {
			t.Errorf("a row written after Close landed: %q", got)
		}
	}
}

func testCloseDuringWrites(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	const writers = 32
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for n := range writers {
		wg.Go(func() { errs[n] = s.Write(t.Context(), one(row(fmt.Sprintf("closing-%02d", n), n))) })
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
			if got, _ := read("", key); got != nil {
				t.Errorf("row %q: Write returned ErrClosed but the row landed", key)
			}
		default:
			t.Errorf("row %q: Write during Close = %v, want nil or ErrClosed", key, err)
		}
	}
}

// gate is a sinks.Ready that lets the rows go once opened, or fails them
// with err.
type gate struct {
	open chan struct{}
	err  error
}

func (g *gate) Wait(ctx context.Context) error {
	select {
	case <-g.open:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// testAfterWaited: rows whose After has not returned are not written, and
// Write waits; once After returns nil they are, and Write returns nil.
func testAfterWaited(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	g := &gate{open: make(chan struct{})}
	rows := message(7)
	for i := range rows {
		rows[i].After = g
	}
	done := make(chan error, 1)
	go func() { done <- s.Write(context.Background(), rows) }()
	time.Sleep(100 * time.Millisecond) // longer than any batch waits
	for _, r := range rows {
		if v, _ := read(r.Table, r.Key); v != nil {
			t.Fatalf("row %q written before its After returned", r.Key)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Write returned %v before its rows' After did", err)
	default:
	}
	close(g.open)
	if err := <-done; err != nil {
		t.Fatalf("Write: %v", err)
	}
	for _, r := range rows {
		checkRow(t, read, r)
	}
}

// testAfterFailed: a message whose After fails writes none of its rows and
// Write returns After's error; another message written at the same time
// (the same batch, for a sink that batches) lands.
func testAfterFailed(t *testing.T, s sinks.Sink, read ReadBack, _ Options) {
	lost := errors.New("the claim decided nothing")
	g := &gate{open: make(chan struct{}), err: lost}
	failing, fine := message(8), one(row("after-fine", 9))
	for i := range failing {
		failing[i].After = g
	}
	var wg sync.WaitGroup
	var failErr, fineErr error
	wg.Go(func() { failErr = s.Write(context.Background(), failing) })
	wg.Go(func() { fineErr = s.Write(context.Background(), fine) })
	time.Sleep(20 * time.Millisecond)
	close(g.open)
	wg.Wait()
	if !errors.Is(failErr, lost) {
		t.Fatalf("the Write whose After failed returned %v; want its error", failErr)
	}
	if fineErr != nil {
		t.Fatalf("the other Write: %v", fineErr)
	}
	for _, r := range failing {
		if v, _ := read(r.Table, r.Key); v != nil {
			t.Fatalf("row %q written though its After failed", r.Key)
		}
	}
	checkRow(t, read, fine[0])
}
