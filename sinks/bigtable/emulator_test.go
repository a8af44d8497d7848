package bigtable

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/sinks/sinktest"
)

// TestEmulatorPartialFailureAndTimestamps runs against the real cbtemulator
// process: a batch where one message's row goes to a column family the
// table lacks (one the configuration names, as if setup had not created
// it), and the cell timestamps the sink writes.
//
// cbtemulator (the gcloud build of June 2025) accepts microsecond
// timestamps, unlike production Bigtable and the bttest of the client
// module, so the truncation is checked by reading the cells back.
func TestEmulatorPartialFailureAndTimestamps(t *testing.T) {
	ctx, client, _ := emulatorTable(t)
	cfg := sinkConfig(config.Batch{MaxMessages: 4, MaxBytes: 4 << 20, MaxDelay: time.Hour})
	cfg.Mappings = append(cfg.Mappings, config.Mapping{ColumnFamily: "missing"})
	s := New(client, zap.NewNop(), cfg, nil)
	t.Cleanup(func() { s.Close(context.Background()) })

	bad := testRow("bad")
	bad.Family = "missing"
	var wg sync.WaitGroup
	var badErr error
	wg.Go(func() { badErr = s.Write(ctx, msg(bad)) })
	good := []string{"good-1", "good-2", "good-3"}
	goodErrs := make([]error, len(good))
	for i, k := range good {
		wg.Go(func() { goodErrs[i] = s.Write(ctx, msg(testRow(k))) })
	}
	wg.Wait()

	t.Run("the batch-mates of a refused entry are written", func(t *testing.T) {
		for i, err := range goodErrs {
			if err != nil {
				t.Errorf("Write %s = %v", good[i], err)
			}
		}
	})
	t.Run("the refused entry fails on its own, transiently", func(t *testing.T) {
		// Whatever the code (cbtemulator answers Internal; production,
		// NotFound), the family is the configuration's: the probe of the
		// pair fails, so the row is not at fault, whatever its batch-mates
		// of another family proved.
		t.Logf("entry for a missing family: %v (code %v)", badErr, status.Code(badErr))
		if badErr == nil || sinks.IsRejected(badErr) {
			t.Errorf("Write = %v, want a transient error", badErr)
		}
		if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), `column family "missing" of bigtable table "events"`) {
			t.Errorf("Check = %v, want it to name the family", err)
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

// TestEmulatorRowsInTwoTables: one message of rows in both tables of the
// configuration, written by one Write, on cbtemulator.
func TestEmulatorRowsInTwoTables(t *testing.T) {
	ctx, client, _ := emulatorTable(t)
	s := New(client, zap.NewNop(), sinkConfig(defaultBatch), nil)
	t.Cleanup(func() { s.Close(context.Background()) })
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check = %v", err)
	}
	rows := msg(testRow("order-42"), indexRow("customer-7#order-42"), testRow("order-42#item-1"))
	if err := s.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	read := readBack(t, client)
	for _, r := range rows {
		if v, versions := read(r.Table, r.Key); string(v["data"]) != "payload-"+r.Key || versions != 1 {
			t.Errorf("row %q of table %q = %q in %d versions, want its payload in one", r.Key, r.Table, v, versions)
		}
	}
	if v, _ := read("", "customer-7#order-42"); v != nil {
		t.Error("the index row landed in the main table")
	}
}

// TestEmulatorOneRowOfThreeRefused: a message whose second row breaks a
// limit is rejected naming it, before any I/O: none of its rows is written;
// and one whose third row names a table the configuration does not is
// rejected too, the table never touched.
func TestEmulatorOneRowOfThreeRefused(t *testing.T) {
	ctx, client, _ := emulatorTable(t)
	s := New(client, zap.NewNop(), sinkConfig(defaultBatch), nil)
	t.Cleanup(func() { s.Close(context.Background()) })
	over := testRow("over")
	over.Cells = []sinks.Cell{{Column: strings.Repeat("q", MaxQualifierBytes+1), Value: []byte("v")}}
	elsewhere := testRow("elsewhere")
	elsewhere.Table = "not-configured"
	for _, c := range []struct {
		name string
		rows []sinks.Row
		row  int
	}{
		{"a row over a limit", msg(testRow("a-0"), over, indexRow("a-2")), 1},
		{"a row of a table not configured", msg(testRow("b-0"), indexRow("b-1"), elsewhere), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := s.Write(ctx, c.rows)
			t.Logf("Write = %v", err)
			var rej *sinks.RejectedError
			if !errors.As(err, &rej) || rej.Row != c.row {
				t.Fatalf("Write = %v, want a RejectedError of row %d", err, c.row)
			}
			read := readBack(t, client)
			for _, r := range c.rows {
				if r.Table == "not-configured" {
					continue
				}
				if v, _ := read(r.Table, r.Key); v != nil {
					t.Errorf("row %q of the rejected message was written", r.Key)
				}
			}
		})
	}
}

// TestEmulatorADroppedFamilyIsRetriedNotRejected is the hardening issue on
// cbtemulator: after a write succeeded, the family is dropped. Writes fail
// transiently (cbtemulator answers Internal where production answers
// NotFound), Check names the family, and once it is back writes resume.
func TestEmulatorADroppedFamilyIsRetriedNotRejected(t *testing.T) {
	ctx, client, admin := emulatorTable(t)
	s := New(client, zap.NewNop(), sinkConfig(defaultBatch), nil)
	t.Cleanup(func() { s.Close(context.Background()) })
	if err := s.Write(ctx, msg(testRow("before"))); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteColumnFamily(ctx, table, family); err != nil {
		t.Fatal(err)
	}

	err := s.Write(ctx, msg(testRow("during")))
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
	if err := s.Write(ctx, msg(testRow("during"))); err != nil {
		t.Errorf("Write = %v once the family is back", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check = %v once the family is back", err)
	}
}

// emulatorTable starts cbtemulator with the tables and their families, and
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
	if err := admin.CreateTable(ctx, index); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, index, indexFamily); err != nil {
		t.Fatal(err)
	}
	return ctx, client, admin
}

// TestEmulatorChangeConformance runs the change rows' conformance on the
// real cbtemulator: its conditional mutations, filters (regular expressions,
// timestamp ranges) and row deletes, each case on an emulator of its own.
func TestEmulatorChangeConformance(t *testing.T) {
	sinktest.RunChangeConformance(t, func(t *testing.T) (sinks.Sink, sinktest.ReadRow) {
		ctx, client, admin := emulatorTable(t)
		if err := admin.CreateColumnFamily(ctx, table, tombstones); err != nil {
			t.Fatal(err)
		}
		return New(client, zap.NewNop(), changeConfig(defaultBatch), nil), readRow(t, client)
	})
}
