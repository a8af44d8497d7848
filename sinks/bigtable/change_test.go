package bigtable

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/pubsink/pubsink/sinks"
)

// changeRow is a set row of a change mapping, in the sink's own table.
func changeTestRow(key string) sinks.Row {
	return sinks.Row{Key: key, Timestamp: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC),
		Cells:  []sinks.Cell{{Column: "a", Value: []byte("1")}},
		Change: sinks.Change{Op: sinks.OpSet, Mode: sinks.ModeUpsert}}
}

func newChangeFake(t *testing.T, withTombstones bool) (*fake, *Sink) {
	t.Helper()
	f := newFake(t)
	if withTombstones {
		if err := f.admin.CreateColumnFamily(t.Context(), table, tombstones); err != nil {
			t.Fatal(err)
		}
	}
	return f, newSink(t, f, changeConfig(defaultBatch))
}

func TestAChangeRowBigtableRefusesIsRejectedNamingItsIndex(t *testing.T) {
	f, s := newChangeFake(t, true)
	f.cond["refused"] = codes.InvalidArgument
	err := s.Write(t.Context(), []sinks.Row{changeTestRow("fine"), changeTestRow("refused")})
	var rej *sinks.RejectedError
	if !errors.As(err, &rej) || rej.Row != 1 {
		t.Fatalf("Write = %v, want a rejection of row 1", err)
	}
}

func TestAChangeRowFailingTransientlyIsRetriedNotRejected(t *testing.T) {
	f, s := newChangeFake(t, true)
	f.cond["busy"] = codes.Unavailable
	err := s.Write(t.Context(), []sinks.Row{changeTestRow("busy")})
	if err == nil || sinks.IsRejected(err) {
		t.Fatalf("Write = %v, want a transient error", err)
	}
	delete(f.cond, "busy")
	if err := s.Write(t.Context(), []sinks.Row{changeTestRow("busy")}); err != nil {
		t.Fatalf("Write once Bigtable answers again = %v", err)
	}
}

// TestAMissingTombstoneFamilyIsRetriedAndNamed: a table whose tombstone
// family setup did not create refuses every delete (a set that writes no
// tombstone goes through), which is not the rows' fault: each is retried,
// none rejected, and Check names the family until it exists.
func TestAMissingTombstoneFamilyIsRetriedAndNamed(t *testing.T) {
	f, s := newChangeFake(t, false)
	deleteRow := changeTestRow("k")
	deleteRow.Cells, deleteRow.Change.Op = nil, sinks.OpDelete
	err := s.Write(t.Context(), []sinks.Row{deleteRow})
	if err == nil || sinks.IsRejected(err) {
		t.Fatalf("Write = %v, want a transient error", err)
	}
	if err := s.Check(t.Context()); err == nil || !strings.Contains(err.Error(), `column family "tombstone"`) {
		t.Fatalf("Check = %v, want it to name the tombstone family", err)
	}
	if err := f.admin.CreateColumnFamily(t.Context(), table, tombstones); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(t.Context(), []sinks.Row{deleteRow}); err != nil {
		t.Fatalf("Write once the family exists = %v", err)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check once the family exists = %v", err)
	}
}

func TestAChangeRowForATableNoChangeMappingWritesIsRejectedBeforeWriting(t *testing.T) {
	f, _ := newChangeFake(t, true)
	s := newSink(t, f, sinkConfig(defaultBatch)) // no change mapping
	err := s.Write(t.Context(), []sinks.Row{changeTestRow("k")})
	if !sinks.IsRejected(err) || !strings.Contains(err.Error(), "no change mapping") {
		t.Fatalf("Write = %v, want a rejection", err)
	}
	if row, _ := f.client.Open(table).ReadRow(t.Context(), "k"); len(row) > 0 {
		t.Errorf("row written: %v", row)
	}
}

func TestCloseRefusesChangeWritesAfterIt(t *testing.T) {
	_, s := newChangeFake(t, true)
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(t.Context(), []sinks.Row{changeTestRow("k")}); !errors.Is(err, sinks.ErrClosed) {
		t.Fatalf("Write after Close = %v, want ErrClosed", err)
	}
}

// TestCloseCutsChangeWritesThatOutlastIt: a change write stalled in
// Bigtable holds Close until Close's ctx ends; then it is cancelled, and
// its writer gets a transient error.
func TestCloseCutsChangeWritesThatOutlastIt(t *testing.T) {
	f := newFake(t)
	if err := f.admin.CreateColumnFamily(t.Context(), table, tombstones); err != nil {
		t.Fatal(err)
	}
	s := New(f.client, zap.NewNop(), changeConfig(defaultBatch), nil)
	s.timeout = time.Hour
	f.cond["stall"] = codes.OK // replaced below by a stall
	stalled := make(chan struct{})
	f.stallCond = func(ctx context.Context) { close(stalled); <-ctx.Done() }
	done := make(chan error, 1)
	go func() { done <- s.Write(context.Background(), []sinks.Row{changeTestRow("stall")}) }()
	<-stalled
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want its ctx's error", err)
	}
	select {
	case err := <-done:
		if err == nil || sinks.IsRejected(err) {
			t.Errorf("the stalled Write = %v, want a transient error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled Write did not return after Close")
	}
}
