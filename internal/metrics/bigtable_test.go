package metrics

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/bigtable/bttest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// mutate makes, through client, the mutations the test counts: ApplyBulk
// of 3 rows, a conditional Apply, a plain Apply on table; and one
// ReadModifyWrite on other.
func mutate(t *testing.T, client *bigtable.Client, table, other string) {
	t.Helper()
	ctx := context.Background()
	tbl := client.Open(table)
	keys := []string{"a", "b", "c"}
	muts := make([]*bigtable.Mutation, len(keys))
	for i := range muts {
		muts[i] = bigtable.NewMutation()
		muts[i].Set("f", "c", bigtable.Now(), []byte("v"))
	}
	if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
	set := bigtable.NewMutation()
	set.Set("f", "c", bigtable.Now(), []byte("w"))
	if err := tbl.Apply(ctx, "a", bigtable.NewCondMutation(bigtable.PassAllFilter(), set, nil)); err != nil {
		t.Fatalf("conditional Apply: %v", err)
	}
	if err := tbl.Apply(ctx, "d", set); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("f", "n", 1)
	if _, err := client.Open(other).ApplyReadModifyWrite(ctx, "x", rmw); err != nil {
		t.Fatalf("ReadModifyWrite: %v", err)
	}
}

// newTables starts an in-process Bigtable (bttest) with the tables, each
// with family f.
func newTables(t *testing.T, tables ...string) *bttest.Server {
	t.Helper()
	srv, err := bttest.NewServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := bigtable.NewAdminClient(context.Background(), "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, table := range tables {
		if err := admin.CreateTableFromConf(context.Background(), &bigtable.TableConf{TableID: table, Families: map[string]bigtable.GCPolicy{"f": bigtable.MaxVersionsPolicy(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

const wantMutations = `
# HELP pubsink_bigtable_mutations_total ` + bigtableMutationsHelp + `
# TYPE pubsink_bigtable_mutations_total counter
pubsink_bigtable_mutations_total{call="check_and_mutate",table="counters"} 0
pubsink_bigtable_mutations_total{call="check_and_mutate",table="orders_state"} 1
pubsink_bigtable_mutations_total{call="mutate_row",table="counters"} 0
pubsink_bigtable_mutations_total{call="mutate_row",table="orders_state"} 1
pubsink_bigtable_mutations_total{call="mutate_rows",table="counters"} 0
pubsink_bigtable_mutations_total{call="mutate_rows",table="orders_state"} 3
pubsink_bigtable_mutations_total{call="read_modify_write",table="counters"} 1
pubsink_bigtable_mutations_total{call="read_modify_write",table="orders_state"} 0
`

// TestBigtableMutationsOnTheEmulator: with BIGTABLE_EMULATOR_HOST set, as
// app runs against the emulator, the client made with
// BigtableClientOptions counts ApplyBulk's 3 rows, the conditional Apply
// and the plain one under the table's ID and the call. (The library ignores
// dial options there: the options are the connection.)
func TestBigtableMutationsOnTheEmulator(t *testing.T) {
	srv := newTables(t, "orders_state", "counters")
	t.Setenv("BIGTABLE_EMULATOR_HOST", srv.Addr)
	m := New()
	opts, err := m.BigtableClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	client, err := bigtable.NewClientWithConfig(context.Background(), "p", "i", bigtable.ClientConfig{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	checkMutations(t, m, client)
}

// TestBigtableMutationsThroughDialOptions: away from the emulator the
// options are dial options, and they reach the client's connections (its
// own channel pool).
func TestBigtableMutationsThroughDialOptions(t *testing.T) {
	srv := newTables(t, "orders_state", "counters")
	t.Setenv("BIGTABLE_EMULATOR_HOST", "")
	m := New()
	opts, err := m.BigtableClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	client, err := bigtable.NewClientWithConfig(context.Background(), "p", "i", bigtable.ClientConfig{
		MetricsProvider:     bigtable.NoopMetricsProvider{},
		DisableDirectAccess: true,
		DisableSession:      true,
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	checkMutations(t, m, client)
}

// sentStream is a client stream that takes every message.
type sentStream struct{ grpc.ClientStream }

func (sentStream) SendMsg(any) error { return nil }

// TestMutateRowsCountsEveryRequestSent: a MutateRows stream counts the
// entries of each request it sends (a retry sends the failed entries in a
// new request: they count again); other streams are not wrapped.
func TestMutateRowsCountsEveryRequestSent(t *testing.T) {
	m := New()
	c := m.bigtable
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return sentStream{}, nil
	}
	entries := func(n int) []*btpb.MutateRowsRequest_Entry { return make([]*btpb.MutateRowsRequest_Entry, n) }
	for _, n := range []int{500, 2} {
		s, err := c.stream(context.Background(), nil, nil, methodMutateRows, streamer)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(&btpb.MutateRowsRequest{TableName: "projects/p/instances/i/tables/rows", Entries: entries(n)}); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := c.stream(context.Background(), nil, nil, "/google.bigtable.v2.Bigtable/ReadRows", streamer)
	if _, ok := s.(sentStream); !ok {
		t.Errorf("a ReadRows stream is wrapped: %T", s)
	}
	if got := testutil.ToFloat64(c.vec.WithLabelValues("rows", CallMutateRows)); got != 502 {
		t.Errorf("mutate_rows of rows = %v, want 502", got)
	}
}

func TestTableID(t *testing.T) {
	for in, want := range map[string]string{
		"projects/p/instances/i/tables/orders":                   "orders",
		"projects/p/instances/i/tables/orders/authorizedViews/v": "orders",
		"projects/p/instances/i/tables/pubsink_state":            "pubsink_state",
		"orders": "orders",
	} {
		if got := tableID(in); got != want {
			t.Errorf("tableID(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkMutateRowsSend: the count of a MutateRows request, the per-call
// cost on the sink's path: no allocation.
func BenchmarkMutateRowsSend(b *testing.B) {
	m := New()
	s := &mutateRowsStream{ClientStream: sentStream{}, c: m.bigtable}
	req := &btpb.MutateRowsRequest{TableName: "projects/p/instances/i/tables/rows", Entries: make([]*btpb.MutateRowsRequest_Entry, 500)}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.SendMsg(req)
	}
}

// checkMutations makes mutate's writes through client and compares the
// counter of m with what they are.
func checkMutations(t *testing.T, m *Metrics, client *bigtable.Client) {
	t.Helper()
	mutate(t, client, "orders_state", "counters")
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(wantMutations), "pubsink_bigtable_mutations_total"); err != nil {
		t.Error(err)
	}
}
