package pipeline

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/bttest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsink/pubsink/internal/state"
)

// BttestClient is bttestClient for the external test package (the
// benchmarks).
var BttestClient = bttestClient

// bttestClient starts an in-process bttest with the state table and
// returns a data client on it.
func bttestClient(b testing.TB) *bigtable.Client {
	b.Helper()
	srv, err := bttest.NewServer("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	ctx := context.Background()
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///"+srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		return conn
	}
	admin, err := bigtable.NewAdminClient(ctx, "bench", "bench", option.WithGRPCConn(dial()))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTable(ctx, "state"); err != nil {
		b.Fatal(err)
	}
	for _, f := range state.Families(time.Hour) {
		if err := admin.CreateColumnFamily(ctx, "state", f.Name); err != nil {
			b.Fatal(err)
		}
	}
	client, err := bigtable.NewClientWithConfig(ctx, "bench", "bench",
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(dial()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	return client
}
