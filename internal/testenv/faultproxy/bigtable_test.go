package faultproxy_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/internal/testenv/faultproxy"
)

// TestBigtableStallFailsWritesUntilResume is the fault the dead-letter and
// chaos tests build on: a stalled Bigtable makes a write with a short
// deadline fail with DeadlineExceeded (a transient code), and writes succeed
// again after Resume and after a reset.
func TestBigtableStallFailsWritesUntilResume(t *testing.T) {
	bt := emulator.RequireBigtable(t)
	ctx := context.Background()
	const project, instance, table, family = "proxy", "proxy", "rows", "f"

	direct, admin, err := bt.Clients(ctx, project, instance)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	defer admin.Close()
	if err := admin.CreateTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, table, family); err != nil {
		t.Fatal(err)
	}

	proxy, err := faultproxy.Start(bt.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	client, proxiedAdmin, err := (&emulator.Bigtable{Host: proxy.Addr()}).Clients(ctx, project, instance)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	proxiedAdmin.Close()
	tbl := client.Open(table)

	write := func(timeout time.Duration, row string) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		m := bigtable.NewMutation()
		m.Set(family, "c", bigtable.Timestamp(time.Now().UnixMilli()*1000), []byte(row))
		return tbl.Apply(ctx, row, m)
	}
	if err := write(5*time.Second, "before"); err != nil {
		t.Fatalf("write before the stall: %v", err)
	}

	proxy.Stall()
	start := time.Now()
	err = write(500*time.Millisecond, "during")
	if code := status.Code(err); code != codes.DeadlineExceeded {
		t.Fatalf("write during the stall: %v (code %v); want DeadlineExceeded", err, code)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("write with a 500ms deadline took %v", took)
	}

	proxy.Resume()
	if err := write(5*time.Second, "after"); err != nil {
		t.Fatalf("write after Resume: %v", err)
	}

	t.Run("writes succeed after every connection is reset", func(t *testing.T) {
		proxy.ResetAll()
		if err := write(5*time.Second, "after-reset"); err != nil {
			t.Fatalf("write after ResetAll: %v", err)
		}
	})

	r, err := direct.Open(table).ReadRow(ctx, "during")
	t.Logf("write that timed out during the stall: row %v, err %v", r, err)
	// Every acknowledged write is in the table, read past the proxy.
	for _, row := range []string{"before", "after", "after-reset"} {
		r, err := direct.Open(table).ReadRow(ctx, row)
		if err != nil {
			t.Fatal(err)
		}
		if len(r[family]) != 1 || string(r[family][0].Value) != row {
			t.Errorf("row %q = %v", row, r)
		}
	}
}
