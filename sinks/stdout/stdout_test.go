package stdout_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/sinks/sinktest"
	"github.com/pubsink/pubsink/sinks/stdout"
)

// syncBuffer is a bytes.Buffer safe to read while the sink writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type jsonLine struct {
	Key       string            `json:"key"`
	Table     string            `json:"table"`
	Family    string            `json:"family"`
	Timestamp string            `json:"timestamp"`
	Cells     map[string]string `json:"cells"`
	Base64    []string          `json:"base64"`
}

// readBack replays the lines as Bigtable would apply them: a cell is
// (key, column, timestamp); a later line with the same cell replaces it.
func readBack(t *testing.T, out *syncBuffer) sinktest.ReadBack {
	return func(table, key string) (map[string][]byte, int) {
		type version struct {
			ts    string
			value []byte
		}
		cols := map[string][]version{}
		for _, text := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if text == "" {
				continue
			}
			var l jsonLine
			if err := json.Unmarshal([]byte(text), &l); err != nil {
				t.Fatalf("line %q: %v", text, err)
			}
			if l.Key != key || l.Table != table {
				continue
			}
			for col, v := range l.Cells {
				value := []byte(v)
				for _, b := range l.Base64 {
					if b == col {
						var err error
						if value, err = base64.StdEncoding.DecodeString(v); err != nil {
							t.Fatalf("column %q: %v", col, err)
						}
					}
				}
				vs := cols[col]
				replaced := false
				for i := range vs {
					if vs[i].ts == l.Timestamp {
						vs[i].value, replaced = value, true
					}
				}
				if !replaced {
					vs = append(vs, version{l.Timestamp, value})
				}
				cols[col] = vs
			}
		}
		if len(cols) == 0 {
			return nil, 0
		}
		values, versions := map[string][]byte{}, 0
		for col, vs := range cols {
			latest := vs[0]
			for _, v := range vs[1:] {
				if v.ts >= latest.ts { // same format, so text order is time order
					latest = v
				}
			}
			values[col] = latest.value
			versions = max(versions, len(vs))
		}
		return values, versions
	}
}

func TestConformance(t *testing.T) {
	sinktest.RunConformance(t, func(t *testing.T) (sinks.Sink, sinktest.ReadBack) {
		out := &syncBuffer{}
		return stdout.New(out, zap.NewNop(), config.Sink{Type: config.SinkStdout}), readBack(t, out)
	}, sinktest.Options{OtherTable: "index", OtherFamily: "i"}) // stdout refuses no row
}

func TestWriteFormatsOneJSONObjectPerLine(t *testing.T) {
	var out bytes.Buffer
	s := stdout.New(&out, zap.NewNop(), config.Sink{})
	row := &sinks.Row{
		Key: "c1#o<1>",
		Cells: []sinks.Cell{
			{Column: "data", Value: []byte(`{"a":"é & <b>"}`)},
			{Column: "raw", Value: []byte{0xff, 0x00, 0x01}},
			{Column: "dup", Value: []byte{0xfe}},
			{Column: "dup", Value: []byte("last wins")},
		},
		Timestamp: time.Date(2026, 3, 4, 6, 6, 7, 123_999_999, time.FixedZone("CET", 3600)),
	}
	if err := s.Write(t.Context(), []sinks.Row{*row}); err != nil {
		t.Fatal(err)
	}
	want := `{"key":"c1#o<1>","timestamp":"2026-03-04T05:06:07.123Z","cells":{"data":"{\"a\":\"é & <b>\"}","dup":"last wins","raw":"/wAB"},"base64":["raw"]}` + "\n"
	if got := out.String(); got != want {
		t.Errorf("line =\n%s\nwant\n%s", got, want)
	}
}

func TestAChangeRowSaysItsOperationModeAndDeletes(t *testing.T) {
	var out bytes.Buffer
	s := stdout.New(&out, zap.NewNop(), config.Sink{})
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	rows := []sinks.Row{
		{Key: "k1", Timestamp: ts, Cells: []sinks.Cell{{Column: "a", Value: []byte("1")}},
			Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeReplaceIfNewer, Delete: []string{"b"}}},
		{Key: "k2", Timestamp: ts, Change: sinks.Change{Op: sinks.OpDelete, Mode: sinks.ModeUpsert}},
		{Key: "k3", Timestamp: ts, Cells: []sinks.Cell{{Column: "a", Value: []byte("1")}}},
	}
	if err := s.Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	want := `{"key":"k1","op":"set","mode":"replace_if_newer","delete":["b"],"timestamp":"2026-03-04T05:06:07.000Z","cells":{"a":"1"}}` + "\n" +
		`{"key":"k2","op":"delete","timestamp":"2026-03-04T05:06:07.000Z","cells":{}}` + "\n" +
		`{"key":"k3","timestamp":"2026-03-04T05:06:07.000Z","cells":{"a":"1"}}` + "\n"
	if got := out.String(); got != want {
		t.Errorf("lines =\n%s\nwant\n%s", got, want)
	}
}

// countingWriter counts the Write calls it receives.
type countingWriter struct {
	bytes.Buffer
	calls int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.calls++
	return w.Buffer.Write(p)
}

func TestTheRowsOfAMessageAreOneLineEachInOneWriteCall(t *testing.T) {
	var out countingWriter
	s := stdout.New(&out, zap.NewNop(), config.Sink{Table: "orders", ColumnFamily: "d"})
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	err := s.Write(t.Context(), []sinks.Row{
		{Key: "o-42", Cells: []sinks.Cell{{Column: "data", Value: []byte("x")}}, Timestamp: ts},
		{Table: "by_customer", Family: "i", Key: "c-7#o-42", Cells: []sinks.Cell{{Column: "order", Value: []byte("o-42")}}, Timestamp: ts},
		{Table: "orders", Key: "o-42#item-1", Cells: []sinks.Cell{{Column: "sku", Value: []byte("s1")}}, Timestamp: ts},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"key":"o-42","timestamp":"2026-03-04T05:06:07.000Z","cells":{"data":"x"}}` + "\n" +
		`{"key":"c-7#o-42","table":"by_customer","family":"i","timestamp":"2026-03-04T05:06:07.000Z","cells":{"order":"o-42"}}` + "\n" +
		`{"key":"o-42#item-1","table":"orders","timestamp":"2026-03-04T05:06:07.000Z","cells":{"sku":"s1"}}` + "\n"
	if got := out.String(); got != want {
		t.Errorf("lines =\n%s\nwant\n%s", got, want)
	}
	if out.calls != 1 {
		t.Errorf("%d Write calls, want 1: the lines of a message go together", out.calls)
	}
}

func TestWriteFlushesABufferedWriter(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriterSize(&out, 1<<16)
	s := stdout.New(w, zap.NewNop(), config.Sink{})
	if err := s.Write(t.Context(), []sinks.Row{{Key: "k", Cells: []sinks.Cell{{Column: "c", Value: []byte("v")}}}}); err != nil {
		t.Fatal(err)
	}
	if out.Len() == 0 {
		t.Error("Write returned before the line reached the underlying writer")
	}
}

func TestWriteReturnsTheWritersErrorAsTransient(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	s := stdout.New(w, zap.NewNop(), config.Sink{})
	err = s.Write(t.Context(), []sinks.Row{{Key: "k", Cells: []sinks.Cell{{Column: "c", Value: []byte("v")}}}})
	if err == nil || sinks.IsRejected(err) {
		t.Errorf("Write to a closed pipe = %v, want a transient error", err)
	}
	w.Close()
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct{ release chan struct{} }

func (w blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

func TestCloseIsBoundedByCtxWhileAWriteIsBlocked(t *testing.T) {
	w := blockingWriter{release: make(chan struct{})}
	s := stdout.New(w, zap.NewNop(), config.Sink{})
	done := make(chan error, 1)
	go func() { done <- s.Write(context.Background(), []sinks.Row{{Key: "k"}}) }()
	time.Sleep(10 * time.Millisecond) // let the Write take the writer

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want context.DeadlineExceeded", err)
	}
	close(w.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func ExampleNew() {
	s := stdout.New(os.Stdout, zap.NewNop(), config.Sink{Type: config.SinkStdout})
	ts := time.Date(2026, 3, 4, 5, 6, 7, 890_123_000, time.UTC)
	_ = s.Write(context.Background(), []sinks.Row{{
		Key:       "customer-7#order-42",
		Cells:     []sinks.Cell{{Column: "data", Value: []byte(`{"amount":12.5}`)}},
		Timestamp: ts,
	}, {
		Table:     "orders_by_day",
		Key:       "2026-03-04#order-42",
		Cells:     []sinks.Cell{{Column: "customer", Value: []byte("customer-7")}},
		Timestamp: ts,
	}})
	_ = s.Close(context.Background())
	// Output:
	// {"key":"customer-7#order-42","timestamp":"2026-03-04T05:06:07.890Z","cells":{"data":"{\"amount\":12.5}"}}
	// {"key":"2026-03-04#order-42","table":"orders_by_day","timestamp":"2026-03-04T05:06:07.890Z","cells":{"customer":"customer-7"}}
}
