package source

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Two revisions of one Avro schema: the second adds an optional field.
const (
	avroV1 = `{"type":"record","name":"Event","fields":[{"name":"id","type":"string"},{"name":"n","type":"long"}]}`
	avroV2 = `{"type":"record","name":"Event","fields":[{"name":"id","type":"string"},{"name":"n","type":"long"},{"name":"note","type":["null","string"],"default":null}]}`
)

// schemaFake is a pstest server with a schema client on it that counts its
// calls. The client does not retry: an injected error comes back at once.
type schemaFake struct {
	client *vkit.SchemaClient
	calls  atomic.Int64
}

func newSchemaFake(t *testing.T, opts ...pstest.ServerReactorOption) *schemaFake {
	t.Helper()
	srv := pstest.NewServer(opts...)
	t.Cleanup(func() { srv.Close() })
	f := &schemaFake{}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		f.calls.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient("passthrough:///"+srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(count))
	if err != nil {
		t.Fatal(err)
	}
	f.client, err = vkit.NewSchemaClient(context.Background(), option.WithGRPCConn(conn), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	f.client.CallOptions = &vkit.SchemaCallOptions{}
	t.Cleanup(func() { f.client.Close() })
	return f
}

// create makes schema id in project p with the definitions as its
// revisions, and returns their ids.
func (f *schemaFake) create(t *testing.T, id string, typ pubsubpb.Schema_Type, defs ...string) []string {
	t.Helper()
	return createSchema(t, f.client, "projects/p", id, typ, defs...)
}

func createSchema(t *testing.T, c *vkit.SchemaClient, parent, id string, typ pubsubpb.Schema_Type, defs ...string) []string {
	t.Helper()
	ctx := context.Background()
	first, err := c.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: parent, SchemaId: id, Schema: &pubsubpb.Schema{Type: typ, Definition: defs[0]}})
	if err != nil {
		t.Fatal(err)
	}
	revs := []string{first.RevisionId}
	for _, d := range defs[1:] {
		r, err := c.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: first.Name, Schema: &pubsubpb.Schema{Type: typ, Definition: d}})
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.RevisionId)
	}
	return revs
}

func TestSchemasGetFetchesTheRevisionItIsAskedFor(t *testing.T) {
	f := newSchemaFake(t)
	revs := f.create(t, "events", pubsubpb.Schema_AVRO, avroV1, avroV2)
	s := NewSchemas(f.client)
	for i, def := range []string{avroV1, avroV2} {
		got, err := s.Get(context.Background(), "projects/p/schemas/events", revs[i])
		want := Schema{Name: "projects/p/schemas/events", Revision: revs[i], Type: "avro", Definition: def}
		if err != nil || got != want {
			t.Errorf("Get(revision %d) = %+v, %v; want %+v", i+1, got, err, want)
		}
	}
	pb := f.create(t, "protos", pubsubpb.Schema_PROTOCOL_BUFFER, `syntax = "proto3"; message M { string id = 1; }`)
	if got, err := s.Get(context.Background(), "projects/p/schemas/protos", pb[0]); err != nil || got.Type != "protobuf" {
		t.Errorf("Get(protobuf) = %+v, %v; want type protobuf", got, err)
	}
}

func TestSchemasTakesDeletedMarkersAndBadNamesForGoneWithoutACall(t *testing.T) {
	f := newSchemaFake(t)
	s := NewSchemas(f.client)
	for _, c := range []struct{ name, rev string }{
		{DeletedSchema, DeletedRevision},
		{DeletedSchema, "0123abcd"},
		{"projects/p/schemas/events", DeletedRevision},
		{"projects/p/schemas/events", ""},
		{"projects/p/schemas/events", "a@b"},
		{"", "0123abcd"},
		{"projects/p/topics/events", "0123abcd"},
		{"projects/p/schemas/events@0123abcd", "0123abcd"},
	} {
		_, err := s.Get(context.Background(), c.name, c.rev)
		if !errors.Is(err, ErrSchemaGone) {
			t.Errorf("Get(%q, %q) = %v; want ErrSchemaGone", c.name, c.rev, err)
		}
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("%d calls to the Schema API; want none", n)
	}
}

func TestSchemasTakesNotFoundForGone(t *testing.T) {
	f := newSchemaFake(t)
	revs := f.create(t, "events", pubsubpb.Schema_AVRO, avroV1, avroV2)
	s := NewSchemas(f.client)
	for _, c := range []struct{ name, rev string }{
		{"projects/p/schemas/nothing", revs[0]},
		{"projects/p/schemas/events", "0123abcd"},
	} {
		_, err := s.Get(context.Background(), c.name, c.rev)
		if !errors.Is(err, ErrSchemaGone) || status.Code(err) != codes.NotFound {
			t.Errorf("Get(%q, %q) = %v; want ErrSchemaGone, with the NotFound", c.name, c.rev, err)
		}
	}
	// A revision deleted since: its id never comes back.
	if _, err := f.client.DeleteSchemaRevision(context.Background(), &pubsubpb.DeleteSchemaRevisionRequest{Name: "projects/p/schemas/events@" + revs[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "projects/p/schemas/events", revs[0]); !errors.Is(err, ErrSchemaGone) {
		t.Errorf("Get(deleted revision) = %v; want ErrSchemaGone", err)
	}
}

func TestSchemasPassesOtherFailuresOnAsTransient(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.PermissionDenied, codes.Internal, codes.InvalidArgument} {
		f := newSchemaFake(t, pstest.WithErrorInjection("GetSchema", code, "injected"))
		_, err := NewSchemas(f.client).Get(context.Background(), "projects/p/schemas/events", "0123abcd")
		if err == nil || errors.Is(err, ErrSchemaGone) || status.Code(err) != code {
			t.Errorf("Get with %v injected = %v; want a transient error with the code", code, err)
		}
	}
}

// latestReactor answers every GetSchema of a revision with latest, as a
// server that ignored the @REVISION suffix would, and counts the
// ListSchemaRevisions calls.
type latestReactor struct {
	latest atomic.Pointer[pubsubpb.Schema]
	listed atomic.Int64
}

func (r *latestReactor) React(req any) (bool, any, error) {
	switch req := req.(type) {
	case *pubsubpb.GetSchemaRequest:
		if strings.Contains(req.Name, "@") {
			return true, r.latest.Load(), nil
		}
	case *pubsubpb.ListSchemaRevisionsRequest:
		r.listed.Add(1)
	}
	return false, nil, nil
}

func TestSchemasListsTheRevisionsWhenGetAnswersAnother(t *testing.T) {
	r := &latestReactor{}
	f := newSchemaFake(t,
		pstest.ServerReactorOption{FuncName: "GetSchema", Reactor: r},
		pstest.ServerReactorOption{FuncName: "ListSchemaRevisions", Reactor: r})
	revs := f.create(t, "events", pubsubpb.Schema_AVRO, avroV1, avroV2)
	r.latest.Store(&pubsubpb.Schema{Name: "projects/p/schemas/events", Type: pubsubpb.Schema_AVRO, Definition: avroV2, RevisionId: revs[1]})
	s := NewSchemas(f.client)
	got, err := s.Get(context.Background(), "projects/p/schemas/events", revs[0])
	if err != nil || got.Revision != revs[0] || got.Definition != avroV1 {
		t.Fatalf("Get(revision 1) = %+v, %v; want revision 1's definition", got, err)
	}
	if r.listed.Load() != 1 {
		t.Errorf("%d ListSchemaRevisions; want 1", r.listed.Load())
	}
	if got, err := s.Get(context.Background(), "projects/p/schemas/events", revs[1]); err != nil || got.Definition != avroV2 {
		t.Errorf("Get(revision 2) = %+v, %v; want revision 2's definition", got, err)
	}
	if r.listed.Load() != 1 {
		t.Errorf("the latest revision was listed for; want it taken from GetSchema")
	}
	if _, err := s.Get(context.Background(), "projects/p/schemas/events", "0123abcd"); !errors.Is(err, ErrSchemaGone) {
		t.Errorf("Get(unknown revision) = %v; want ErrSchemaGone", err)
	}
}
