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
)

// fake is an in-process bttest server with a reactor on MutateRows and
// MutateRow: it records the size of every MutateRows request and counts the
// MutateRow calls (the sink's schema probes), answers as production Bigtable
// does where bttest differs, and injects per-entry errors.
type fake struct {
	client *cbt.Client
	admin  *cbt.AdminClient

	mu        sync.Mutex
	requests  []int                   // entries per MutateRows request
	probes    int                     // MutateRow calls
	probeCode codes.Code              // MutateRow answers it instead, unless OK
	inject    map[string][]codes.Code // row key: codes to answer, one a request, instead of bttest's
	stall     bool                    // MutateRows blocks until its ctx ends
}

func newFake(t testing.TB) *fake {
	t.Helper()
	f := &fake{inject: map[string][]codes.Code{}}
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
	return func(key string) (map[string][]byte, int) {
		row, err := f.client.Open(table).ReadRow(context.Background(), key)
		if err != nil {
			t.Fatalf("ReadRow %q: %v", key, err)
		}
		if row == nil {
			return nil, 0
		}
		values, counts := map[string][]byte{}, map[string]int{}
		for _, it := range row[family] {
			col := strings.TrimPrefix(it.Column, family+":")
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

func sinkConfig(b config.Batch) config.Sink {
	return config.Sink{Type: config.SinkBigtable, Instance: instance, Table: table, ColumnFamily: family, Batch: b}
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

func TestConformance(t *testing.T) {
	sinktest.RunConformance(t, func(t *testing.T) (sinks.Sink, sinktest.ReadBack) {
		f := newFake(t)
		return New(f.client, zap.NewNop(), sinkConfig(defaultBatch), nil), f.readBack(t)
	})
}

func TestCellTimestampIsTheRowTimestampTruncatedToMilliseconds(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	row := testRow("ts")
	if err := s.Write(t.Context(), row); err != nil {
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
		wg.Go(func() { errs[i] = s.Write(ctx, testRow(fmt.Sprintf("k-%02d", i))) })
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
			err := s.Write(t.Context(), c.row)
			if !sinks.IsRejected(err) {
				t.Errorf("Write = %v, want a RejectedError", err)
			}
		})
	}
	if got := f.requestSizes(); len(got) != 0 {
		t.Errorf("MutateRows was called %d times, want none", len(got))
	}

	t.Run("a row key of exactly 4 KiB is written", func(t *testing.T) {
		if err := s.Write(t.Context(), testRow(strings.Repeat("k", MaxKeyBytes))); err != nil {
			t.Errorf("Write = %v", err)
		}
	})
}

func TestAnEntryRefusedTwiceIsRejectedWhileItsBatchMatesSucceed(t *testing.T) {
	f := newFake(t)
	s := newSink(t, f, sinkConfig(config.Batch{MaxMessages: 4, MaxBytes: 4 << 20, MaxDelay: time.Hour}))

	// Three rows for the configured family and one for a family the table
	// does not have, in the same batch.
	bad, err := newEntry(testRow("bad"), "missing")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var badErr error
	wg.Go(func() { badErr = s.batcher.Add(t.Context(), bad, 10) })
	writeAll(t, s, 3)
	wg.Wait()

	if !sinks.IsRejected(badErr) || status.Code(badErr) != codes.NotFound {
		t.Errorf("the row for a missing family got %v, want a RejectedError with NotFound", badErr)
	}
	if got := f.requestSizes(); fmt.Sprint(got) != "[4 1]" {
		t.Errorf("MutateRows requests of %v entries, want [4 1]: the batch, then the refused row alone", got)
	}
	if n := f.probeCount(); n != 1 {
		t.Errorf("%d schema probes, want 1: after the row was refused alone, before rejecting it", n)
	}
	read := f.readBack(t)
	for i := range 3 {
		if v, _ := read(fmt.Sprintf("k-%02d", i)); v == nil {
			t.Errorf("batch-mate k-%02d was not written", i)
		}
	}
}

func TestAPermanentCodeBeforeAnyWriteSucceededIsNotARejection(t *testing.T) {
	f := newFake(t)
	cfg := sinkConfig(defaultBatch)
	cfg.ColumnFamily = "typo" // every row is refused with NotFound
	s := newSink(t, f, cfg)
	err := s.Write(t.Context(), testRow("k"))
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
	if err := s.Write(t.Context(), testRow("flaky")); err != nil {
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
			err := s.Write(t.Context(), testRow("busy"))
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
	err := s.Write(t.Context(), testRow("k"))
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
	err := s.Write(t.Context(), testRow("k"))
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
			row := testRow(fmt.Sprintf("bench-%09d", n.Add(1)))
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
