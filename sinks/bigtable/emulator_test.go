package bigtable

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/sinks"
)

// TestEmulatorPartialFailureAndTimestamps runs against the real cbtemulator
// process: a batch where one entry names a column family the table lacks,
// and the cell timestamps the sink writes.
//
// cbtemulator (the gcloud build of June 2025) accepts microsecond
// timestamps, unlike production Bigtable and the bttest of the client
// module, so the truncation is checked by reading the cells back.
func TestEmulatorPartialFailureAndTimestamps(t *testing.T) {
	ctx, client, _ := emulatorTable(t)
	s := New(client, zap.NewNop(), sinkConfig(config.Batch{MaxMessages: 4, MaxBytes: 4 << 20, MaxDelay: time.Hour}), nil)
	t.Cleanup(func() { s.Close(context.Background()) })

	bad, err := newEntry(testRow("bad"), "missing")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var badErr error
	wg.Go(func() { badErr = s.batcher.Add(ctx, bad, 10) })
	good := []string{"good-1", "good-2", "good-3"}
	goodErrs := make([]error, len(good))
	for i, k := range good {
		wg.Go(func() { goodErrs[i] = s.Write(ctx, testRow(k)) })
	}
	wg.Wait()

	t.Run("the batch-mates of a refused entry are written", func(t *testing.T) {
		for i, err := range goodErrs {
			if err != nil {
				t.Errorf("Write %s = %v", good[i], err)
			}
		}
	})
	t.Run("the refused entry fails on its own", func(t *testing.T) {
		t.Logf("entry for a missing family: %v (code %v)", badErr, status.Code(badErr))
		switch {
		case badErr == nil:
			t.Fatal("the entry for a missing family succeeded")
		case status.Code(badErr) == codes.NotFound || status.Code(badErr) == codes.InvalidArgument:
			// Production Bigtable's answer: proven permanent by the retry
			// alone, and the batch-mates prove the family is the row's.
			if !sinks.IsRejected(badErr) {
				t.Errorf("a permanent refusal, repeated alone, was not rejected: %v", badErr)
			}
		default:
			// cbtemulator is bttest in a process: it answers Internal for
			// every refused entry, which is transient. Not a rejection.
			if sinks.IsRejected(badErr) {
				t.Errorf("a %v refusal was rejected: %v", status.Code(badErr), badErr)
			}
		}
	})
	t.Run("cells carry the row timestamp truncated to milliseconds", func(t *testing.T) {
		row, err := client.Open(table).ReadRow(ctx, "good-1")
		if err != nil {
			t.Fatal(err)
		}
		want := cbt.Timestamp(time.Date(2026, 3, 4, 5, 6, 7, 123_000_000, time.UTC).UnixMicro())
		if len(row[family]) != 1 || row[family][0].Timestamp != want {
			t.Errorf("cells = %+v, want one at %d", row[family], want)
		}
	})
}

// TestEmulatorADroppedFamilyIsRetriedNotRejected is the hardening issue on
// cbtemulator: after a write succeeded, the family is dropped. Writes fail
// transiently (cbtemulator answers Internal where production answers
// NotFound), Check names the family, and once it is back writes resume.
func TestEmulatorADroppedFamilyIsRetriedNotRejected(t *testing.T) {
	ctx, client, admin := emulatorTable(t)
	s := New(client, zap.NewNop(), sinkConfig(defaultBatch), nil)
	t.Cleanup(func() { s.Close(context.Background()) })
	if err := s.Write(ctx, testRow("before")); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteColumnFamily(ctx, table, family); err != nil {
		t.Fatal(err)
	}

	err := s.Write(ctx, testRow("during"))
	t.Logf("Write with the family dropped: %v", err)
	if err == nil || sinks.IsRejected(err) {
		t.Errorf("Write = %v, want a transient error", err)
	}
	err = s.Check(ctx)
	t.Logf("Check with the family dropped: %v", err)
	if err == nil || !strings.Contains(err.Error(), `column family "d" of bigtable table "events"`) {
		t.Errorf("Check = %v, want it to name the family", err)
	}

	if err := admin.CreateColumnFamily(ctx, table, family); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, testRow("during")); err != nil {
		t.Errorf("Write = %v once the family is back", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check = %v once the family is back", err)
	}
}

// emulatorTable starts cbtemulator with the table and its family, and
// returns a context bounding the test and the clients, closed at cleanup.
func emulatorTable(t *testing.T) (context.Context, *cbt.Client, *cbt.AdminClient) {
	t.Helper()
	em := emulator.RequireBigtable(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	client, admin, err := em.Clients(ctx, project, instance)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); admin.Close() })
	if err := admin.CreateTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, table, family); err != nil {
		t.Fatal(err)
	}
	return ctx, client, admin
}
