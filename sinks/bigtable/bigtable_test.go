package bigtable

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cbt "cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/bigtable/bttest"
	"go.uber.org/zap"
	"google.golang.org/api/option"
	statpb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/sinks/sinktest"
)

const (
	project  = "proj"
	instance = "inst"
	table    = "events"
	family   = "d"
	// index and indexFamily are a second table of the fake and of the
	// emulator, which sinkConfig names in a second mapping.
	index       = "index"
	indexFamily = "i"
)

// fake is an in-process bttest server with a reactor on MutateRows and
// MutateRow: it records the size of every MutateRows request and counts the
// MutateRow calls (the sink's schema probes), answers as production Bigtable
// does where bttest differs, and injects per-entry errors.
type fake struct {
	client *cbt.Client
	admin  *cbt.AdminClient

	mu        sync.Mutex
	requests  []int                     // entries per MutateRows request
	probes    int                       // MutateRow calls
	probeCode codes.Code                // MutateRow answers it instead, unless OK
	inject    map[string][]codes.Code   // row key: codes to answer, one a request, instead of bttest's
	refuse    map[string]codes.Code     // row key: a code to answer in every request, instead of bttest's
	stall     bool                      // MutateRows blocks until its ctx ends
	cond      map[string]codes.Code     // row key: a code CheckAndMutateRow answers, instead of bttest's
	stallCond func(ctx context.Context) // when set, CheckAndMutateRow of a key in cond runs it first, then bttest
}

func newFake(t testing.TB) *fake {
	t.Helper()
	f := &fake{inject: map[string][]codes.Code{}, refuse: map[string]codes.Code{}, cond: map[string]codes.Code{}}
	srv, err := bttest.NewServer("127.0.0.1:0", grpc.StreamInterceptor(f.intercept), grpc.UnaryInterceptor(f.interceptUnary))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	f.client, err = cbt.NewClientWithConfig(ctx, project, instance,
		cbt.ClientConfig{MetricsProvider: cbt.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	f.admin, err = cbt.NewAdminClient(ctx, project, instance, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.admin.CreateTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	if err := f.admin.CreateColumnFamily(ctx, table, family); err != nil {
		t.Fatal(err)
	}
	if err := f.admin.CreateTable(ctx, index); err != nil {
		t.Fatal(err)
	}
	if err := f.admin.CreateColumnFamily(ctx, index, indexFamily); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fake) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != "/google.bigtable.v2.Bigtable/MutateRows" {
		return handler(srv, ss)
	}
	f.mu.Lock()
	stall := f.stall
	f.mu.Unlock()
	if stall {
		<-ss.Context().Done()
		return status.FromContextError(ss.Context().Err()).Err()
	}
	return handler(srv, &mutateRows{ServerStream: ss, f: f})
}

// interceptUnary counts MutateRow calls, and answers NotFound for a missing
// family as production does (bttest answers Unknown).
func (f *fake) interceptUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == "/google.bigtable.v2.Bigtable/CheckAndMutateRow" {
		f.mu.Lock()
		code, ok := f.cond[string(req.(*btpb.CheckAndMutateRowRequest).RowKey)]
		stall := f.stallCond
		f.mu.Unlock()
		if ok && stall != nil {
			stall(ctx)
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		if ok && code != codes.OK {
			return nil, status.Error(code, "injected by the test")
		}
		res, err := handler(ctx, req)
		if err != nil && unknownFamily(status.Convert(err).Message()) {
			return nil, status.Error(codes.NotFound, familyNotFound)
		}
		return res, err
	}
	if info.FullMethod != "/google.bigtable.v2.Bigtable/MutateRow" {
		return handler(ctx, req)
	}
	f.mu.Lock()
	f.probes++
	code := f.probeCode
	f.mu.Unlock()
	if code != codes.OK {
		return nil, status.Error(code, "injected by the test")
	}
	res, err := handler(ctx, req)
	if err != nil && unknownFamily(err.Error()) {
		return nil, status.Error(codes.NotFound, familyNotFound)
	}
	return res, err
}

// familyNotFound is production Bigtable's message for a mutation naming a
// column family the table lacks; its code is NotFound.
const familyNotFound = "Requested column family not found."

// unknownFamily reports whether bttest refused a mutation for that reason.
func unknownFamily(msg string) bool { return strings.HasPrefix(msg, "unknown family") }

type mutateRows struct {
	grpc.ServerStream
	f   *fake
	req *btpb.MutateRowsRequest
}

func (m *mutateRows) RecvMsg(msg any) error {
	err := m.ServerStream.RecvMsg(msg)
	if req, ok := msg.(*btpb.MutateRowsRequest); ok && err == nil {
		m.req = req
		m.f.mu.Lock()
		m.f.requests = append(m.f.requests, len(req.Entries))
		m.f.mu.Unlock()
	}
	return err
}

func (m *mutateRows) SendMsg(msg any) error {
	res, ok := msg.(*btpb.MutateRowsResponse)
	if !ok || m.req == nil {
		return m.ServerStream.SendMsg(msg)
	}
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	for _, e := range res.Entries {
		entry := m.req.Entries[e.Index]
		if code, ok := m.f.refuse[string(entry.RowKey)]; ok {
			e.Status = &statpb.Status{Code: int32(code), Message: "refused by the test"}
			continue
		}
		if cs := m.f.inject[string(entry.RowKey)]; len(cs) > 0 {
			m.f.inject[string(entry.RowKey)] = cs[1:]
			e.Status = &statpb.Status{Code: int32(cs[0]), Message: "injected by the test"}
			continue
		}
		// bttest answers Internal for every refused entry; production
		// Bigtable answers NotFound for an unknown column family.
		if e.Status.GetCode() == int32(codes.Internal) && unknownFamily(e.Status.GetMessage()) {
			e.Status = &statpb.Status{Code: int32(codes.NotFound), Message: familyNotFound}
		}
	}
	return m.ServerStream.SendMsg(msg)
}

func (f *fake) requestSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.requests...)
}

func (f *fake) probeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes
}

func (f *fake) readBack(t testing.TB) sinktest.ReadBack {
	return readBack(t, f.client)
}

// readBack reads the tables of sinkConfig: table "" is the sink's own.
func readBack(t testing.TB, client *cbt.Client) sinktest.ReadBack {
	return func(tbl, key string) (map[string][]byte, int) {
		fam := family
		switch tbl {
		case "":
			tbl = table
		case index:
			fam = indexFamily
		}
		row, err := client.Open(tbl).ReadRow(context.Background(), key)
		if err != nil {
			t.Fatalf("ReadRow %q: %v", key, err)
		}
		if row == nil {
			return nil, 0
		}
		values, counts := map[string][]byte{}, map[string]int{}
		for _, it := range row[fam] {
			col := strings.TrimPrefix(it.Column, fam+":")
			if _, seen := values[col]; !seen {
				values[col] = it.Value // newest first
			}
			counts[col]++
		}
		versions := 0
		for _, n := range counts {
			versions = max(versions, n)
		}
		return values, versions
	}
}

// sinkConfig is a sink writing to table and family, and to index and
// indexFamily: the mappings of a main row and an index row.
func sinkConfig(b config.Batch) config.Sink {
	return config.Sink{Type: config.SinkBigtable, Instance: instance, Table: table, ColumnFamily: family, Batch: b,
		Mappings: []config.Mapping{{RowKey: "main"}, {Table: index, ColumnFamily: indexFamily, RowKey: "index"}}}
}

var defaultBatch = config.Batch{MaxMessages: 100, MaxBytes: 4 << 20, MaxDelay: 2 * time.Millisecond}

func newSink(t testing.TB, f *fake, cfg config.Sink) *Sink {
	t.Helper()
	s := New(f.client, zap.NewNop(), cfg, nil)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func testRow(key string) *sinks.Row {
	return &sinks.Row{
		Key:       key,
		Cells:     []sinks.Cell{{Column: "data", Value: []byte("payload-" + key)}},
		Timestamp: time.Date(2026, 3, 4, 5, 6, 7, 123_456_789, time.UTC),
	}
}

// indexRow is a row of the table index.
func indexRow(key string) *sinks.Row {
	r := testRow(key)
	r.Table, r.Family = index, indexFamily
	return r
}

// msg is the rows of one message, for Write.
func msg(rows ...*sinks.Row) []sinks.Row {
	out := make([]sinks.Row, len(rows))
	for i, r := range rows {
		out[i] = *r
	}
	return out
}

// refusedKey is a row key the fake of TestConformance refuses with
// InvalidArgument whenever it is written, in a batch or alone.
const refusedKey = "partly-refused"

func TestConformance(t *testing.T) {
	sinktest.RunConformance(t, func(t *testing.T) (sinks.Sink, sinktest.ReadBack) {
		f := newFake(t)
		f.refuse[refusedKey] = codes.InvalidArgument
		return New(f.client, zap.NewNop(), sinkConfig(defaultBatch), nil), f.readBack(t)
	}, sinktest.Options{
		OtherTable: index, OtherFamily: indexFamily,
		// Refused by Bigtable itself, after I/O: the other rows of the
		// message are written.
		Refused: func(key string) sinks.Row {
			if key != refusedKey {
				t.Fatalf("Refused(%q): the fake refuses %q", key, refusedKey)
			}
			return *testRow(key)
		},
	})
}

func TestCellTimestampIsTheRowTimestampTruncatedToMilliseconds(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	row := testRow("ts")
	if err := s.Write(t.Context(), msg(row)); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.Open(table).ReadRow(t.Context(), "ts")
	if err != nil {
		t.Fatal(err)
	}
	want := cbt.Timestamp(time.Date(2026, 3, 4, 5, 6, 7, 123_000_000, time.UTC).UnixMicro())
	if len(got[family]) != 1 || got[family][0].Timestamp != want {
		t.Errorf("cells = %+v, want one cell at %d (whole milliseconds)", got[family], want)
	}
}

func TestBatching(t *testing.T) {
	rowSize := testRow("k-00").Size()
	t.Run("a batch goes when max_messages is reached", func(t *testing.T) {
		f := newFake(t)
		s := newSink(t, f, sinkConfig(config.Batch{MaxMessages: 5, MaxBytes: 4 << 20, MaxDelay: time.Hour}))
		writeAll(t, s, 10)
		if got := f.requestSizes(); fmt.Sprint(got) != "[5 5]" {
			t.Errorf("MutateRows requests of %v entries, want [5 5]", got)
		}
	})
	t.Run("a batch goes when max_bytes is reached", func(t *testing.T) {
		f := newFake(t)
		s := newSink(t, f, sinkConfig(config.Batch{MaxMessages: 100, MaxBytes: config.ByteSize(3 * rowSize), MaxDelay: time.Hour}))
		writeAll(t, s, 6)
		if got := f.requestSizes(); fmt.Sprint(got) != "[3 3]" {
			t.Errorf("MutateRows requests of %v entries, want [3 3]", got)
		}
	})
	t.Run("a batch goes max_delay after its first row", func(t *testing.T) {
		f := newFake(t)
		const delay = 30 * time.Millisecond
		s := newSink(t, f, sinkConfig(config.Batch{MaxMessages: 100, MaxBytes: 4 << 20, MaxDelay: delay}))
		start := time.Now()
		writeAll(t, s, 1)
		if took := time.Since(start); took < delay {
			t.Errorf("a lone row was written after %v, before max_delay %v", took, delay)
		}
		if got := f.requestSizes(); fmt.Sprint(got) != "[1]" {
			t.Errorf("MutateRows requests of %v entries, want [1]", got)
		}
	})
}

// writeAll writes rows k-00, k-01… concurrently, and fails t unless every
// one is written.
func writeAll(t *testing.T, s *Sink, n int) {
	t.Helper()
	for i, err := range writeRows(t.Context(), s, n) {
		if err != nil {
			t.Errorf("Write k-%02d: %v", i, err)
		}
	}
}

// writeRows writes rows k-00, k-01… concurrently, and returns their errors.
func writeRows(ctx context.Context, s *Sink, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.Write(ctx, msg(testRow(fmt.Sprintf("k-%02d", i)))) })
	}
	wg.Wait()
	return errs
}

func TestRowsOverBigtableLimitsAreRejectedWithoutIO(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	withCells := func(cells ...sinks.Cell) *sinks.Row { r := testRow("k"); r.Cells = cells; return r }
	for _, c := range []struct {
		name string
		row  *sinks.Row
	}{
		{"a row key over 4 KiB", testRow(strings.Repeat("k", MaxKeyBytes+1))},
		{"an empty row key", testRow("")},
		{"a row without cells", withCells()},
		{"a column qualifier over 16 KiB", withCells(sinks.Cell{Column: strings.Repeat("c", MaxQualifierBytes+1)})},
		{"a value over 100 MiB", withCells(sinks.Cell{Column: "c", Value: make([]byte, MaxCellBytes+1)})},
		{"values over 256 MiB in all", withCells(
			sinks.Cell{Column: "a", Value: make([]byte, MaxCellBytes)},
			sinks.Cell{Column: "b", Value: make([]byte, MaxCellBytes)},
			sinks.Cell{Column: "c", Value: make([]byte, MaxCellBytes)})},
		{"a timestamp before 1970", func() *sinks.Row { r := testRow("k"); r.Timestamp = time.Time{}; return r }()},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := s.Write(t.Context(), msg(c.row))
			if !sinks.IsRejected(err) {
				t.Errorf("Write = %v, want a RejectedError", err)
			}
		})
	}
	if got := f.requestSizes(); len(got) != 0 {
		t.Errorf("MutateRows was called %d times, want none", len(got))
	}

	t.Run("a row key of exactly 4 KiB is written", func(t *testing.T) {
		if err := s.Write(t.Context(), msg(testRow(strings.Repeat("k", MaxKeyBytes)))); err != nil {
			t.Errorf("Write = %v", err)
		}
	})
}

func TestAnEntryRefusedTwiceIsRejectedWhileItsBatchMatesSucceed(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(config.Batch{MaxMessages: 4, MaxBytes: 4 << 20, MaxDelay: time.Hour}))
	f.mu.Lock()
	f.refuse["bad"] = codes.NotFound // what production answers for a missing family, here the row's own
	f.mu.Unlock()

	// Three messages that are written and one that Bigtable refuses, in the
	// same batch.
	var wg sync.WaitGroup
	var badErr error
	wg.Go(func() { badErr = s.Write(t.Context(), msg(testRow("bad"))) })
	writeAll(t, s, 3)
	wg.Wait()

	if !sinks.IsRejected(badErr) || status.Code(badErr) != codes.NotFound {
		t.Errorf("the refused row got %v, want a RejectedError with NotFound", badErr)
	}
	if got := f.requestSizes(); fmt.Sprint(got) != "[4 1]" {
		t.Errorf("MutateRows requests of %v entries, want [4 1]: the batch, then the refused row alone", got)
	}
	if n := f.probeCount(); n != 1 {
		t.Errorf("%d schema probes, want 1: after the row was refused alone, before rejecting it", n)
	}
	read := f.readBack(t)
	for i := range 3 {
		if v, _ := read("", fmt.Sprintf("k-%02d", i)); v == nil {
			t.Errorf("batch-mate k-%02d was not written", i)
		}
	}
}

func TestTheRowsOfAMessageTravelInOneBatch(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(config.Batch{MaxMessages: 4, MaxBytes: 4 << 20, MaxDelay: time.Hour}))
	// Two messages of two rows: four rows, a full batch (max_messages
	// counts rows, the entries of an ApplyBulk).
	var wg sync.WaitGroup
	for m := range 2 {
		wg.Go(func() {
			if err := s.Write(t.Context(), msg(testRow(fmt.Sprintf("m%d-a", m)), testRow(fmt.Sprintf("m%d-b", m)))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// A message of more rows than max_messages goes alone, whole.
	big := make([]*sinks.Row, 5)
	for i := range big {
		big[i] = testRow(fmt.Sprintf("big-%d", i))
	}
	if err := s.Write(t.Context(), msg(big...)); err != nil {
		t.Fatal(err)
	}
	if got := f.requestSizes(); fmt.Sprint(got) != "[4 5]" {
		t.Errorf("MutateRows requests of %v entries, want [4 5]", got)
	}
	read := f.readBack(t)
	for _, key := range []string{"m0-a", "m0-b", "m1-a", "m1-b", "big-0", "big-4"} {
		if v, _ := read("", key); v == nil {
			t.Errorf("row %s was not written", key)
		}
	}
}

func TestRowsInTwoTablesAreOneApplyBulkPerTable(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	if err := s.Write(t.Context(), msg(testRow("main-1"), indexRow("idx-1"), testRow("main-2"))); err != nil {
		t.Fatal(err)
	}
	if got := f.requestSizes(); fmt.Sprint(got) != "[1 2]" && fmt.Sprint(got) != "[2 1]" {
		t.Errorf("MutateRows requests of %v entries, want one of 2 (table events) and one of 1 (index)", got)
	}
	read := f.readBack(t)
	for _, c := range []struct{ table, key string }{{"", "main-1"}, {"", "main-2"}, {index, "idx-1"}} {
		if v, _ := read(c.table, c.key); v == nil {
			t.Errorf("row %s of table %q was not written", c.key, c.table)
		}
	}
	if v, _ := read("", "idx-1"); v != nil {
		t.Error("the index row landed in the main table")
	}
}

// TestOneRowOfAMessageRefusedByBigtable: the message is rejected naming the
// row; its other rows are written (Bigtable applies each row on its own),
// which is harmless: the message is dead-lettered, and a replay rewrites
// the same cells.
func TestOneRowOfAMessageRefusedByBigtable(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	f.mu.Lock()
	f.refuse["bad"] = codes.InvalidArgument
	f.mu.Unlock()
	err := s.Write(t.Context(), msg(testRow("good-0"), indexRow("good-1"), testRow("bad")))
	var rej *sinks.RejectedError
	if !errors.As(err, &rej) || rej.Row != 2 || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write = %v, want a RejectedError of row 2 with InvalidArgument", err)
	}
	if n := f.probeCount(); n != 1 {
		t.Errorf("%d schema probes, want 1", n)
	}
	read := f.readBack(t)
	if v, _ := read("", "good-0"); v == nil {
		t.Error("row 0 was not written")
	}
	if v, _ := read(index, "good-1"); v == nil {
		t.Error("row 1 was not written")
	}
}

func TestARowFailingTransientlyMakesTheMessageTransient(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	writeAll(t, s, 1)
	f.mu.Lock()
	f.inject["busy"] = []codes.Code{codes.ResourceExhausted}
	f.mu.Unlock()
	err := s.Write(t.Context(), msg(testRow("a"), testRow("busy"), indexRow("c")))
	if err == nil || sinks.IsRejected(err) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Write = %v, want a transient ResourceExhausted", err)
	}
	read := f.readBack(t)
	if v, _ := read("", "a"); v == nil {
		t.Error("row 0 was not written")
	}
	// The pipeline retries the whole message: the rows written are
	// rewritten, the same cells.
	if err := s.Write(t.Context(), msg(testRow("a"), testRow("busy"), indexRow("c"))); err != nil {
		t.Fatal(err)
	}
	if _, versions := read("", "a"); versions != 1 {
		t.Errorf("row a has %d versions after the retry, want 1", versions)
	}
}

func TestARejectionWinsOverATransientFailureOfTheSameMessage(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	f.mu.Lock()
	f.inject["busy"] = []codes.Code{codes.ResourceExhausted}
	f.refuse["bad-1"] = codes.InvalidArgument
	f.refuse["bad-2"] = codes.InvalidArgument
	f.mu.Unlock()
	err := s.Write(t.Context(), msg(testRow("busy"), testRow("bad-1"), testRow("bad-2")))
	var rej *sinks.RejectedError
	if !errors.As(err, &rej) || rej.Row != 1 {
		t.Errorf("Write = %v, want a RejectedError of row 1, the first refused", err)
	}
}

func TestRowsRejectedBeforeIOWriteNothingOfTheMessage(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	overLimit := testRow("over")
	overLimit.Cells = []sinks.Cell{{Column: strings.Repeat("c", MaxQualifierBytes+1)}}
	unknownTable := testRow("elsewhere")
	unknownTable.Table = "not-configured"
	unknownFamily := testRow("other-family")
	unknownFamily.Table = index // and the sink's own family, which index does not have here
	for _, c := range []struct {
		name string
		rows []sinks.Row
		row  int
	}{
		{"a row over a limit", msg(testRow("ok-0"), overLimit, indexRow("ok-2")), 1},
		{"a row naming a table the configuration does not", msg(testRow("ok-0"), indexRow("ok-1"), unknownTable), 2},
		{"a row naming a pair the configuration does not", msg(unknownFamily, testRow("ok-1")), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := s.Write(t.Context(), c.rows)
			var rej *sinks.RejectedError
			if !errors.As(err, &rej) || rej.Row != c.row {
				t.Errorf("Write = %v, want a RejectedError of row %d", err, c.row)
			}
		})
	}
	if got := f.requestSizes(); len(got) != 0 {
		t.Errorf("MutateRows requests of %v entries, want none", got)
	}
}

// TestTheTablesAreThoseOfTheMappings: sink.table is the mappings' default;
// when every mapping names its own table, Check does not ask for it, and a
// row that names no table (so names it) is rejected as a caller's bug.
func TestTheTablesAreThoseOfTheMappings(t *testing.T) {
	f := newFake(t)
	cfg := sinkConfig(defaultBatch)
	cfg.Table = "unused-default"
	cfg.Mappings = []config.Mapping{{Table: table}, {Table: index, ColumnFamily: indexFamily}}
	s := newSink(t, f, cfg)
	if err := s.Check(t.Context()); err != nil {
		t.Errorf("Check = %v, want nil: no mapping writes to the default table", err)
	}
	main := testRow("main")
	main.Table = table
	if err := s.Write(t.Context(), msg(main, indexRow("idx"))); err != nil {
		t.Errorf("Write = %v", err)
	}
	var rej *sinks.RejectedError
	if err := s.Write(t.Context(), msg(main, testRow("nowhere"))); !errors.As(err, &rej) || rej.Row != 1 {
		t.Errorf("Write = %v, want a RejectedError of row 1", err)
	}
}

// TestAFamilyMissingInOneTableIsNotTheRowsFault: the schema is judged per
// (table, family). A row of the main table written in the same batch proves
// nothing of the index table's family: the index row is not rejected, the
// message is retried, and Check names the family.
func TestAFamilyMissingInOneTableIsNotTheRowsFault(t *testing.T) {
	ctx := t.Context()
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	if err := f.admin.DeleteColumnFamily(ctx, index, indexFamily); err != nil {
		t.Fatal(err)
	}
	err := s.Write(ctx, msg(testRow("main"), indexRow("idx")))
	if err == nil || sinks.IsRejected(err) || status.Code(err) != codes.NotFound {
		t.Fatalf("Write = %v, want a transient NotFound", err)
	}
	if v, _ := f.readBack(t)("", "main"); v == nil {
		t.Error("the main row was not written")
	}
	if got := f.requestSizes(); len(got) != 2 {
		t.Errorf("MutateRows requests of %v entries, want two (one per table), no retry alone", got)
	}
	want := `column family "i" of bigtable table "index" in instance "inst" is missing`
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Check = %v, want it to say %s", err, want)
	}
	if err := f.admin.CreateColumnFamily(ctx, index, indexFamily); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, msg(testRow("main"), indexRow("idx"))); err != nil {
		t.Errorf("Write = %v once the family is back", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check = %v once the family is back", err)
	}
}

func TestAPermanentCodeBeforeAnyWriteSucceededIsNotARejection(t *testing.T) {
	f := newFake(t)
	cfg := sinkConfig(defaultBatch)
	cfg.ColumnFamily = "typo" // every row is refused with NotFound
	s := newSink(t, f, cfg)
	err := s.Write(t.Context(), msg(testRow("k")))
	if err == nil || sinks.IsRejected(err) {
		t.Fatalf("Write = %v, want a transient error: the family, not the row, is at fault", err)
	}
	if status.Code(err) != codes.NotFound {
		t.Errorf("Write = %v, want its NotFound status kept", err)
	}
	if got := f.requestSizes(); fmt.Sprint(got) != "[1]" {
		t.Errorf("MutateRows requests of %v entries, want [1]: no retry alone once the probe failed", got)
	}
	if err := s.Check(t.Context()); err == nil || !strings.Contains(err.Error(), `column family "typo"`) {
		t.Errorf("Check = %v, want it to name the family", err)
	}
}

func TestAnEntryThatSucceedsAloneIsWritten(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	writeAll(t, s, 1) // proves the table and family usable
	f.mu.Lock()
	f.inject["flaky"] = []codes.Code{codes.InvalidArgument} // once: "the same error for both entries"
	f.mu.Unlock()
	if err := s.Write(t.Context(), msg(testRow("flaky"))); err != nil {
		t.Errorf("Write = %v, want nil: the row succeeded when retried alone", err)
	}
	if got := f.requestSizes(); fmt.Sprint(got) != "[1 1 1]" {
		t.Errorf("MutateRows requests of %v entries, want [1 1 1]", got)
	}
}

func TestTransientEntryErrorsAreReturnedWithoutRetrying(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	writeAll(t, s, 1)
	for _, code := range []codes.Code{codes.ResourceExhausted, codes.Internal, codes.PermissionDenied, codes.Unauthenticated} {
		t.Run(code.String(), func(t *testing.T) {
			before := len(f.requestSizes())
			f.mu.Lock()
			f.inject["busy"] = []codes.Code{code}
			f.mu.Unlock()
			err := s.Write(t.Context(), msg(testRow("busy")))
			if err == nil || sinks.IsRejected(err) || status.Code(err) != code {
				t.Errorf("Write = %v, want a transient error with code %v", err, code)
			}
			if n := len(f.requestSizes()) - before; n != 1 {
				t.Errorf("%d MutateRows calls, want 1: the sink does not retry", n)
			}
		})
	}
}

func TestAMissingTableFailsEveryRowTransiently(t *testing.T) {
	f := newFake(t)
	cfg := sinkConfig(defaultBatch)
	cfg.Table = "absent"
	s := newSink(t, f, cfg)
	err := s.Write(t.Context(), msg(testRow("k")))
	if err == nil || sinks.IsRejected(err) || status.Code(err) != codes.NotFound {
		t.Errorf("Write = %v, want a transient NotFound", err)
	}
}

func TestAStalledCallIsCutByTheTimeout(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	s.timeout = 50 * time.Millisecond
	f.mu.Lock()
	f.stall = true
	f.mu.Unlock()
	start := time.Now()
	err := s.Write(t.Context(), msg(testRow("k")))
	if err == nil || sinks.IsRejected(err) {
		t.Errorf("Write = %v, want a transient error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Write took %v with a 50ms call timeout", took)
	}
}

func TestCheck(t *testing.T) {
	f := newFake(t)
	t.Run("an existing table passes", func(t *testing.T) {
		if err := newSink(t, f, sinkConfig(defaultBatch)).Check(t.Context()); err != nil {
			t.Errorf("Check = %v", err)
		}
	})
	t.Run("a missing table is named", func(t *testing.T) {
		cfg := sinkConfig(defaultBatch)
		cfg.Table = "absent"
		err := newSink(t, f, cfg).Check(t.Context())
		if err == nil || !strings.Contains(err.Error(), `table "absent" in instance "inst" does not exist`) {
			t.Errorf("Check = %v, want it to say the table does not exist", err)
		}
	})
	t.Run("a missing table of a mapping is named", func(t *testing.T) {
		cfg := sinkConfig(defaultBatch)
		cfg.Mappings[1].Table = "absent-index"
		err := newSink(t, f, cfg).Check(t.Context())
		if err == nil || !strings.Contains(err.Error(), `table "absent-index" in instance "inst" does not exist`) {
			t.Errorf("Check = %v, want it to say the table does not exist", err)
		}
	})
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want class
	}{
		{status.Error(codes.InvalidArgument, "x"), permanent},
		{status.Error(codes.FailedPrecondition, "x"), permanent},
		{status.Error(codes.NotFound, "x"), permanent},
		{status.Error(codes.OutOfRange, "x"), permanent},
		{fmt.Errorf("wrapped: %w", status.Error(codes.InvalidArgument, "x")), permanent},

		{status.Error(codes.Unavailable, "x"), transient},
		{status.Error(codes.DeadlineExceeded, "x"), transient},
		{status.Error(codes.ResourceExhausted, "x"), transient},
		{status.Error(codes.Aborted, "x"), transient},
		{status.Error(codes.Internal, "x"), transient},
		{status.Error(codes.Unknown, "x"), transient},
		{status.Error(codes.Canceled, "x"), transient},
		{status.Error(codes.Unauthenticated, "x"), transient},
		{status.Error(codes.PermissionDenied, "x"), transient},
		{status.Error(codes.AlreadyExists, "x"), transient},
		{status.Error(codes.Unimplemented, "x"), transient},
		{context.DeadlineExceeded, transient},
		{context.Canceled, transient},
		{io.ErrUnexpectedEOF, transient},
		{errors.New("connection reset by peer"), transient},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// BenchmarkWrite writes rows from many goroutines through the sink to
// bttest, batched as in production (500 rows, 4 MiB, 20 ms).
func BenchmarkWrite(b *testing.B) {
	f := newFake(b)
	s := New(f.client, zap.NewNop(), sinkConfig(config.Batch{MaxMessages: 500, MaxBytes: 4 << 20, MaxDelay: 20 * time.Millisecond}), nil)
	defer s.Close(context.Background())
	var n atomic.Int64
	b.SetParallelism(256) // 256 writers per GOMAXPROCS, like max_outstanding_messages
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			row := msg(testRow(fmt.Sprintf("bench-%09d", n.Add(1))))
			if err := s.Write(ctx, row); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkBttestApplyBulk is the cost of bttest itself: ApplyBulk of 500
// rows from one goroutine, without the sink, per row.
func BenchmarkBttestApplyBulk(b *testing.B) {
	f := newFake(b)
	tbl := f.client.Open(table)
	const rows = 500
	keys := make([]string, rows)
	muts := make([]*cbt.Mutation, rows)
	ts := cbt.Now().TruncateToMilliseconds()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += rows {
		for j := range rows {
			keys[j] = fmt.Sprintf("bench-%09d", i+j)
			muts[j] = cbt.NewMutation()
			muts[j].Set(family, "data", ts, []byte("payload-"+keys[j]))
		}
		if errs, err := tbl.ApplyBulk(context.Background(), keys, muts); err != nil || errs != nil {
			b.Fatal(err, errs)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// tombstones is the tombstone family of changeConfig's table.
const tombstones = "tombstone"

// changeConfig is sinkConfig whose own table is written by a change mapping.
func changeConfig(b config.Batch) config.Sink {
	cfg := sinkConfig(b)
	cfg.Mappings[0].Op = config.OpSet
	cfg.TombstoneFamily = tombstones
	return cfg
}

// readRow reads every version of every cell of family in table.
func readRow(t testing.TB, client *cbt.Client) sinktest.ReadRow {
	return func(key string) map[string][]sinktest.Version {
		row, err := client.Open(table).ReadRow(context.Background(), key, cbt.RowFilter(cbt.FamilyFilter("^"+family+"$")))
		if err != nil {
			t.Fatalf("ReadRow %q: %v", key, err)
		}
		out := map[string][]sinktest.Version{}
		for _, it := range row[family] {
			col := strings.TrimPrefix(it.Column, family+":")
			out[col] = append(out[col], sinktest.Version{Value: string(it.Value), Time: it.Timestamp.Time().UTC()})
		}
		return out
	}
}

func TestChangeConformance(t *testing.T) {
	sinktest.RunChangeConformance(t, func(t *testing.T) (sinks.Sink, sinktest.ReadRow) {
		f := newFake(t)
		if err := f.admin.CreateColumnFamily(t.Context(), table, tombstones); err != nil {
			t.Fatal(err)
		}
		return New(f.client, zap.NewNop(), changeConfig(defaultBatch), nil), readRow(t, f.client)
	})
}
