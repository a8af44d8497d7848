package metrics

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The values of pubsink_bigtable_mutations_total's call label: the Bigtable
// data API calls that mutate rows.
const (
	CallMutateRows      = "mutate_rows"      // MutateRows (ApplyBulk): one per entry of each request sent
	CallCheckAndMutate  = "check_and_mutate" // CheckAndMutateRow (a conditional Apply): one per call
	CallMutateRow       = "mutate_row"       // MutateRow (an unconditional Apply): one per call
	CallReadModifyWrite = "read_modify_write"
)

// The data API's methods the interceptors count, as gRPC names them.
const (
	methodMutateRows        = "/google.bigtable.v2.Bigtable/MutateRows"
	methodMutateRow         = "/google.bigtable.v2.Bigtable/MutateRow"
	methodCheckAndMutateRow = "/google.bigtable.v2.Bigtable/CheckAndMutateRow"
	methodReadModifyWrite   = "/google.bigtable.v2.Bigtable/ReadModifyWriteRow"
)

// bigtableMutationsHelp is pubsink_bigtable_mutations_total's help.
const bigtableMutationsHelp = "Rows mutated in Bigtable by this process, counted by the client as its requests are sent, by table (its ID) and call: mutate_rows (an entry of a MutateRows request), check_and_mutate (CheckAndMutateRow), mutate_row (MutateRow), read_modify_write (ReadModifyWriteRow). Every attempt counts: a retried request's rows count again."

// tableMutations are the counters of one table, one per call, bound once.
type tableMutations struct {
	mutateRows, checkAndMutate, mutateRow, readModifyWrite prometheus.Counter
}

// bigtableCounter counts the rows the process's Bigtable data clients
// mutate. Its cache maps a request's table name (the full path, as the
// request carries it) to the table's counters: an immutable map, replaced
// whole when a table is first seen, so that the per-call path is an
// atomic load and a map lookup, without a lock or an allocation.
type bigtableCounter struct {
	vec    *prometheus.CounterVec
	mu     sync.Mutex // serializes the replacements of tables
	tables atomic.Pointer[map[string]*tableMutations]
}

func newBigtableCounter(r *prometheus.Registry) *bigtableCounter {
	c := &bigtableCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pubsink_bigtable_mutations_total",
		Help: bigtableMutationsHelp,
	}, []string{"table", "call"})}
	r.MustRegister(c.vec)
	return c
}

// table returns the counters of the table a request names (its table_name,
// or its authorized view's table); nil for a request that names neither.
func (c *bigtableCounter) table(tableName, viewName string) *tableMutations {
	name := tableName
	if name == "" {
		name = viewName
	}
	if name == "" {
		return nil
	}
	if m := c.tables.Load(); m != nil {
		if t, ok := (*m)[name]; ok {
			return t
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.tables.Load()
	if old != nil {
		if t, ok := (*old)[name]; ok {
			return t
		}
	}
	id := tableID(name)
	t := &tableMutations{
		mutateRows:      c.vec.WithLabelValues(id, CallMutateRows),
		checkAndMutate:  c.vec.WithLabelValues(id, CallCheckAndMutate),
		mutateRow:       c.vec.WithLabelValues(id, CallMutateRow),
		readModifyWrite: c.vec.WithLabelValues(id, CallReadModifyWrite),
	}
	next := make(map[string]*tableMutations, 1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[name] = t
	c.tables.Store(&next)
	return t
}

// tableID is the table's ID in a table's or authorized view's resource
// name: projects/P/instances/I/tables/T[/authorizedViews/V] → T.
func tableID(name string) string {
	const tables = "/tables/"
	i := strings.LastIndex(name, tables)
	if i < 0 {
		return name
	}
	id := name[i+len(tables):]
	if j := strings.IndexByte(id, '/'); j >= 0 {
		id = id[:j]
	}
	return id
}

// unary counts the rows of the unary calls that mutate: one per call,
// counted as the call starts, whatever its result.
func (c *bigtableCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case methodMutateRow:
		if r, ok := req.(*btpb.MutateRowRequest); ok {
			if t := c.table(r.GetTableName(), r.GetAuthorizedViewName()); t != nil {
				t.mutateRow.Inc()
			}
		}
	case methodCheckAndMutateRow:
		if r, ok := req.(*btpb.CheckAndMutateRowRequest); ok {
			if t := c.table(r.GetTableName(), r.GetAuthorizedViewName()); t != nil {
				t.checkAndMutate.Inc()
			}
		}
	case methodReadModifyWrite:
		if r, ok := req.(*btpb.ReadModifyWriteRowRequest); ok {
			if t := c.table(r.GetTableName(), r.GetAuthorizedViewName()); t != nil {
				t.readModifyWrite.Inc()
			}
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// stream wraps the MutateRows streams, whose one request carries the
// entries; every other stream is left as it is.
func (c *bigtableCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != methodMutateRows {
		return s, err
	}
	return &mutateRowsStream{ClientStream: s, c: c}, nil
}

// mutateRowsStream counts the entries of each MutateRowsRequest it sends.
type mutateRowsStream struct {
	grpc.ClientStream
	c *bigtableCounter
}

func (s *mutateRowsStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil {
		return err
	}
	if r, ok := m.(*btpb.MutateRowsRequest); ok && len(r.GetEntries()) > 0 {
		if t := s.c.table(r.GetTableName(), r.GetAuthorizedViewName()); t != nil {
			t.mutateRows.Add(float64(len(r.GetEntries())))
		}
	}
	return nil
}

// BigtableMutations is pubsink_bigtable_mutations_total's counter of one
// table (its ID) and call (CallMutateRows, ...): what the interceptors of
// BigtableDialOptions count into.
func (m *Metrics) BigtableMutations(table, call string) prometheus.Counter {
	return m.bigtable.vec.WithLabelValues(table, call)
}

// BigtableDialOptions are the gRPC dial options that make a Bigtable data
// client's connection count its row mutations in
// pubsink_bigtable_mutations_total: a unary interceptor (MutateRow,
// CheckAndMutateRow, ReadModifyWriteRow: one each) and a stream one
// (MutateRows: each request's entries).
//
// The counter is the process's (no pipeline label): each table's series,
// one per call, appear at the first mutation of that table.
func (m *Metrics) BigtableDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(m.bigtable.unary),
		grpc.WithChainStreamInterceptor(m.bigtable.stream),
	}
}

// BigtableClientOptions are the options of a Bigtable data client
// (bigtable.NewClientWithConfig) that count its row mutations
// (BigtableDialOptions).
//
// Against the emulator (BIGTABLE_EMULATOR_HOST set) the client library
// dials the emulator itself and ignores every dial option
// (option.WithGRPCDialOption) it is given, so there these options are the
// client's connection instead, dialled here with the interceptors, as the
// library would (plaintext, passthrough); the client closes it when it is
// closed. Elsewhere they are dial options, applied to every connection of
// the client's pool.
//
// Not counted: the writes the client may route over Bigtable's session
// protocol (its OpenTable streams, which carry only unconditional
// single-row mutations, and only when the service turns sessions on for
// the client; never on the emulator).
func (m *Metrics) BigtableClientOptions() ([]option.ClientOption, error) {
	dial := m.BigtableDialOptions()
	if addr := os.Getenv("BIGTABLE_EMULATOR_HOST"); addr != "" {
		addr = strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://"), "passthrough:///")
		conn, err := grpc.NewClient("passthrough:///"+addr, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return nil, fmt.Errorf("bigtable emulator %s: %w", addr, err)
		}
		return []option.ClientOption{option.WithGRPCConn(conn)}, nil
	}
	opts := make([]option.ClientOption, len(dial))
	for i, d := range dial {
		opts[i] = option.WithGRPCDialOption(d)
	}
	return opts, nil
}
