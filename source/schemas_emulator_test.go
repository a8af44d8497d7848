package source

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/hamba/avro/v2"
	"go.uber.org/zap"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// These tests run on the real Pub/Sub emulator. Besides Schemas, they pin
// what the emulator does with topic schemas (docs/emulator-schemas.md
// names the test of each fact), so that a changed emulator fails a test
// instead of making the page wrong.

// revisionID is the form of the emulator's revision ids: the last 8
// characters of a random UUID.
var revisionID = regexp.MustCompile(`^[0-9a-f]{8}$`)

// schemaEmulator is a Pub/Sub emulator with a Pub/Sub client and a schema
// client on it, in project project; the schema client counts its calls.
type schemaEmulator struct {
	e       *emulator.PubSub
	project string
	client  *pubsub.Client
	schemas *vkit.SchemaClient
	calls   atomic.Int64
}

func newSchemaEmulator(t *testing.T, project string) *schemaEmulator {
	t.Helper()
	e := emulator.RequirePubSub(t)
	ctx := context.Background()
	se := &schemaEmulator{e: e, project: project}
	var err error
	if se.client, err = e.Client(ctx, project); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { se.client.Close() })
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		se.calls.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	se.schemas, err = vkit.NewSchemaClient(ctx,
		option.WithEndpoint(e.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithUnaryInterceptor(count)),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCConnectionPool(1),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { se.schemas.Close() })
	return se
}

func (se *schemaEmulator) name(kind, id string) string {
	return "projects/" + se.project + "/" + kind + "/" + id
}

// avroSchema creates schema id with the definitions as its revisions and
// returns its name and their ids.
func (se *schemaEmulator) avroSchema(t *testing.T, id string, defs ...string) (string, []string) {
	t.Helper()
	revs := createSchema(t, se.schemas, "projects/"+se.project, id, pubsubpb.Schema_AVRO, defs...)
	return se.name("schemas", id), revs
}

// topic creates topic id with settings and a subscription of the same id.
func (se *schemaEmulator) topic(t *testing.T, id string, settings *pubsubpb.SchemaSettings) (topic, sub string) {
	t.Helper()
	ctx := context.Background()
	topic, sub = se.name("topics", id), se.name("subscriptions", id)
	if _, err := se.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic, SchemaSettings: settings}); err != nil {
		t.Fatal(err)
	}
	if _, err := se.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	return topic, sub
}

// publish publishes data to topic, with attribute i = tag, and returns the
// error of the Publish call.
func (se *schemaEmulator) publish(topic, tag string, data []byte) error {
	_, err := se.client.TopicAdminClient.Publish(context.Background(), &pubsubpb.PublishRequest{Topic: topic,
		Messages: []*pubsubpb.PubsubMessage{{Data: data, Attributes: map[string]string{"i": tag}}}})
	return err
}

func (se *schemaEmulator) mustPublish(t *testing.T, topic, tag string, data []byte) {
	t.Helper()
	if err := se.publish(topic, tag, data); err != nil {
		t.Fatalf("publish %s %q: %v", tag, data, err)
	}
}

// pull pulls until it has n messages (not acked), and returns them by
// their attribute i.
func (se *schemaEmulator) pull(t *testing.T, sub string, n int) map[string]*pubsubpb.ReceivedMessage {
	t.Helper()
	got := map[string]*pubsubpb.ReceivedMessage{}
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pulled %d messages of %d from %s", len(got), n, sub)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := se.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 100})
		cancel()
		if err != nil && status.Code(err) != codes.DeadlineExceeded {
			t.Fatal(err)
		}
		for _, m := range resp.GetReceivedMessages() {
			got[m.Message.Attributes["i"]] = m
		}
	}
	if len(got) != n {
		t.Fatalf("pulled %d messages from %s; want %d", len(got), sub, n)
	}
	return got
}

// schemaAttrs returns the googclient_ attributes of m.
func schemaAttrs(m *pubsubpb.ReceivedMessage) [3]string {
	a := m.Message.Attributes
	return [3]string{a[SchemaNameAttribute], a[SchemaRevisionAttribute], a[SchemaEncodingAttribute]}
}

func avroBinary(t *testing.T, def string, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(def), v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || (msg != "" && status.Convert(err).Message() != msg) {
		t.Errorf("%s: %v; want %v %q", what, err, code, msg)
	}
}

// TestSchemasOnTheEmulator: the messages of a topic with a two-revision
// Avro schema reach a Source with their own revision in the attributes, and
// Schemas.Get fetches each of those revisions, with which each message
// decodes. An unknown schema or revision is gone; a deleted marker is gone
// without a call; a fetch from a dead emulator is transient.
func TestSchemasOnTheEmulator(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-get")
	ctx := context.Background()
	name, revs := se.avroSchema(t, "events", avroV1, avroV2)
	for _, r := range revs {
		if !revisionID.MatchString(r) {
			t.Errorf("revision id %q is not 8 hex digits", r)
		}
	}
	topic, sub := se.topic(t, "events", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY})
	// The first is valid under revision 1 only (revision 2 runs out of
	// bytes at the union), the second under revision 2 (and, its union
	// ignored as trailing bytes, under revision 1: the emulator tries the
	// newest revision first).
	payloads := [][]byte{
		avroBinary(t, avroV1, map[string]any{"id": "one", "n": int64(1)}),
		avroBinary(t, avroV2, map[string]any{"id": "two", "n": int64(2), "note": map[string]any{"string": "hello"}}),
	}
	for i, p := range payloads {
		se.mustPublish(t, topic, fmt.Sprint(i), p)
	}

	var mu sync.Mutex
	got := map[string]*Message{}
	src := New(se.client, zap.NewNop(), sub, config.Source{Streams: 1, MaxOutstandingMessages: 10}, 1<<20)
	r := runSource(src, ctx, func(_ context.Context, m *Message) bool {
		mu.Lock()
		defer mu.Unlock()
		c := *m
		c.Data = append([]byte(nil), m.Data...)
		c.Attributes = map[string]string{}
		for k, v := range m.Attributes {
			c.Attributes[k] = v
		}
		got[m.Attributes["i"]] = &c
		return true
	})
	waitFor(t, "both messages received", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	r.stop(t, 10*time.Second)

	s := NewSchemas(se.schemas)
	defs := []string{avroV1, avroV2}
	for i := range payloads {
		m := got[fmt.Sprint(i)]
		want := map[string]string{"i": fmt.Sprint(i), SchemaNameAttribute: name, SchemaRevisionAttribute: revs[i], SchemaEncodingAttribute: "BINARY"}
		if fmt.Sprint(m.Attributes) != fmt.Sprint(want) {
			t.Errorf("message %d: attributes %v; want %v", i, m.Attributes, want)
		}
		sc, err := s.Get(ctx, m.Attributes[SchemaNameAttribute], m.Attributes[SchemaRevisionAttribute])
		if err != nil || sc != (Schema{Name: name, Revision: revs[i], Type: "avro", Definition: defs[i]}) {
			t.Errorf("Get(message %d's revision) = %+v, %v; want revision %d", i, sc, err, i+1)
			continue
		}
		var v map[string]any
		if err := avro.Unmarshal(avro.MustParse(sc.Definition), m.Data, &v); err != nil {
			t.Errorf("message %d does not decode with its revision: %v", i, err)
		}
		if i == 1 && v["note"] != "hello" {
			t.Errorf("message 2 decodes to %v; want its note", v)
		}
	}

	for _, c := range []struct{ name, rev string }{{se.name("schemas", "nothing"), revs[0]}, {name, "0123abcd"}} {
		if _, err := s.Get(ctx, c.name, c.rev); !errors.Is(err, ErrSchemaGone) || status.Code(err) != codes.NotFound {
			t.Errorf("Get(%s, %s) = %v; want ErrSchemaGone from NotFound", c.name, c.rev, err)
		}
	}
	before := se.calls.Load()
	for _, c := range []struct{ name, rev string }{{DeletedSchema, DeletedRevision}, {name, DeletedRevision}} {
		if _, err := s.Get(ctx, c.name, c.rev); !errors.Is(err, ErrSchemaGone) {
			t.Errorf("Get(%s, %s) = %v; want ErrSchemaGone", c.name, c.rev, err)
		}
	}
	if n := se.calls.Load() - before; n != 0 {
		t.Errorf("the deleted markers made %d calls; want none", n)
	}

	if err := se.e.Stop(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.Get(sctx, name, revs[0]); err == nil || errors.Is(err, ErrSchemaGone) {
		t.Errorf("Get with the emulator stopped = %v; want a transient error", err)
	}
}

// TestEmulatorSchemaGetByRevision pins the Schema API's reads: ids,
// GetSchema by NAME@REVISION, NAME and NAME@, ListSchemaRevisions, and the
// errors.
func TestEmulatorSchemaGetByRevision(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-read")
	ctx := context.Background()
	name, revs := se.avroSchema(t, "events", avroV1, avroV2)
	defs := map[string]string{revs[0]: avroV1, revs[1]: avroV2}

	for _, view := range []pubsubpb.SchemaView{pubsubpb.SchemaView_SCHEMA_VIEW_UNSPECIFIED, pubsubpb.SchemaView_FULL} {
		for _, r := range revs {
			got, err := se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name + "@" + r, View: view})
			if err != nil || got.Name != name || got.RevisionId != r || got.Definition != defs[r] {
				t.Errorf("GetSchema(%s@%s, %v) = %v, %v; want that revision", name, r, view, got, err)
			}
		}
	}
	for _, n := range []string{name, name + "@"} {
		if got, err := se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: n}); err != nil || got.RevisionId != revs[1] {
			t.Errorf("GetSchema(%s) = %v, %v; want the latest revision", n, got, err)
		}
	}
	got, err := se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name + "@" + revs[0], View: pubsubpb.SchemaView_BASIC})
	if err != nil || got.Definition != "" || got.RevisionId != revs[0] {
		t.Errorf("GetSchema(BASIC) = %v, %v; want no definition", got, err)
	}
	// The revision's create time is not wall-clock time: it comes from the
	// JVM's System.nanoTime (seconds since some arbitrary origin, here boot).
	if ct := got.GetRevisionCreateTime().AsTime(); ct.After(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("revision create time %v; the emulator was found to give nanoTime, near 1970", ct)
	}

	_, err = se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name + "@0123abcd"})
	wantCode(t, "GetSchema(unknown revision)", err, codes.NotFound, "Schema revision not found")
	_, err = se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: se.name("schemas", "nothing") + "@" + revs[0]})
	wantCode(t, "GetSchema(unknown schema)", err, codes.NotFound, "Schema not found")
	_, err = se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: DeletedSchema})
	wantCode(t, "GetSchema(_deleted-schema_)", err, codes.InvalidArgument, "")

	var listed []string
	it := se.schemas.ListSchemaRevisions(ctx, &pubsubpb.ListSchemaRevisionsRequest{Name: name})
	for {
		r, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Definition != defs[r.RevisionId] {
			t.Errorf("listed revision %s without its definition (unspecified view)", r.RevisionId)
		}
		listed = append(listed, r.RevisionId)
	}
	if fmt.Sprint(listed) != fmt.Sprint(revs) {
		t.Errorf("ListSchemaRevisions = %v; want %v, oldest first", listed, revs)
	}
}

// TestEmulatorSchemaWrites pins CreateSchema, CommitSchema and
// DeleteSchemaRevision: no compatibility check, at most 20 revisions, the
// last revision cannot be deleted.
func TestEmulatorSchemaWrites(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-write")
	ctx := context.Background()
	name, revs := se.avroSchema(t, "events", avroV1)
	_, err := se.schemas.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: "projects/" + se.project, SchemaId: "events", Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV1}})
	wantCode(t, "CreateSchema(existing)", err, codes.AlreadyExists, "Schema already exists")
	_, err = se.schemas.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: "projects/" + se.project, SchemaId: "broken", Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: "{nope"}})
	wantCode(t, "CreateSchema(invalid Avro)", err, codes.InvalidArgument, "Could not parse schema definition")
	_, err = se.schemas.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: name + "@" + revs[0]})
	wantCode(t, "DeleteSchemaRevision(the only one)", err, codes.InvalidArgument, "Cannot delete last revision. Please use DeleteSchema.")
	// A revision need not be compatible with the one before.
	if _, err := se.schemas.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: `"string"`}}); err != nil {
		t.Errorf("CommitSchema(incompatible) = %v; want it accepted", err)
	}
	for n := 3; n <= 20; n++ {
		if _, err := se.schemas.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV1}}); err != nil {
			t.Fatalf("CommitSchema(revision %d): %v", n, err)
		}
	}
	_, err = se.schemas.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV1}})
	wantCode(t, "CommitSchema(revision 21)", err, codes.ResourceExhausted, "Already at maximum number of schema revisions")
}

// TestEmulatorSchemaProtocolBuffersUnimplemented: every call that would hold or check a
// Protocol Buffers definition answers Unimplemented, so no topic can have a
// Protocol Buffers schema on the emulator.
func TestEmulatorSchemaProtocolBuffersUnimplemented(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-proto")
	ctx := context.Background()
	const def = "syntax = \"proto3\";\nmessage Event { string id = 1; }\n"
	proto := &pubsubpb.Schema{Type: pubsubpb.Schema_PROTOCOL_BUFFER, Definition: def}
	name, _ := se.avroSchema(t, "events", avroV1)
	const msg = "Protocol buffer support not implemented in emulator"

	_, err := se.schemas.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: "projects/" + se.project, SchemaId: "proto", Schema: proto})
	wantCode(t, "CreateSchema", err, codes.Unimplemented, msg)
	_, err = se.schemas.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: proto})
	wantCode(t, "CommitSchema", err, codes.Unimplemented, msg)
	_, err = se.schemas.ValidateSchema(ctx, &pubsubpb.ValidateSchemaRequest{Parent: "projects/" + se.project, Schema: proto})
	wantCode(t, "ValidateSchema", err, codes.Unimplemented, msg)
	_, err = se.schemas.ValidateMessage(ctx, &pubsubpb.ValidateMessageRequest{Parent: "projects/" + se.project,
		SchemaSpec: &pubsubpb.ValidateMessageRequest_Schema{Schema: proto}, Message: []byte{0x0a, 0x01, 'x'}, Encoding: pubsubpb.Encoding_BINARY})
	wantCode(t, "ValidateMessage", err, codes.Unimplemented, msg)
	// Avro is validated.
	if _, err := se.schemas.ValidateSchema(ctx, &pubsubpb.ValidateSchemaRequest{Parent: "projects/" + se.project, Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV1}}); err != nil {
		t.Errorf("ValidateSchema(Avro) = %v", err)
	}
}

// TestEmulatorSchemaTopicSettings pins what CreateTopic and UpdateTopic
// check of schema settings, and that UpdateTopic can add, change and remove
// them.
func TestEmulatorSchemaTopicSettings(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-topic")
	ctx := context.Background()
	name, revs := se.avroSchema(t, "events", avroV1, avroV2)
	create := func(id string, s *pubsubpb.SchemaSettings) error {
		_, err := se.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: se.name("topics", id), SchemaSettings: s})
		return err
	}
	wantCode(t, "unknown schema", create("unknown", &pubsubpb.SchemaSettings{Schema: se.name("schemas", "nothing"), Encoding: pubsubpb.Encoding_BINARY}), codes.NotFound, "Schema could not be found")
	wantCode(t, "no encoding", create("noencoding", &pubsubpb.SchemaSettings{Schema: name}), codes.InvalidArgument, "Invalid schema encoding provided")
	wantCode(t, "unknown first revision", create("badfirst", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY, FirstRevisionId: "0123abcd"}), codes.NotFound, "First revision could not be found")
	wantCode(t, "first after last", create("reversed", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY, FirstRevisionId: revs[1], LastRevisionId: revs[0]}), codes.InvalidArgument, "First revision creation time is after last revision creation time")

	topic, sub := se.topic(t, "plain", nil)
	m1 := avroBinary(t, avroV1, map[string]any{"id": "one", "n": int64(1)})
	update := func(s *pubsubpb.SchemaSettings) {
		t.Helper()
		if _, err := se.client.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{Topic: &pubsubpb.Topic{Name: topic, SchemaSettings: s},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schema_settings"}}}); err != nil {
			t.Fatalf("UpdateTopic(%v): %v", s, err)
		}
	}
	se.mustPublish(t, topic, "none", m1)
	update(&pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY, FirstRevisionId: revs[0], LastRevisionId: revs[0]})
	se.mustPublish(t, topic, "first", m1)
	update(&pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY})
	if err := se.publish(topic, "garbage", []byte("garbage")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("publish garbage = %v; want InvalidArgument", err)
	}
	update(nil)
	se.mustPublish(t, topic, "removed", []byte("garbage"))
	got := se.pull(t, sub, 3)
	if a := got["none"].Message.Attributes; len(a) != 1 {
		t.Errorf("a message from before the schema has attributes %v; want only its own", a)
	}
	if a := schemaAttrs(got["first"]); a != [3]string{name, revs[0], "BINARY"} {
		t.Errorf("a message under first=last=revision 1 has %v; want revision 1", a)
	}
	if a := got["removed"].Message.Attributes; len(a) != 1 {
		t.Errorf("a message after the schema was removed has attributes %v; want only its own", a)
	}
}

// TestEmulatorSchemaBinaryNewestRevisionFirst: a BINARY message is
// tried against the topic's revisions newest first and gets the id of the
// first that reads it; bytes after the record are ignored; what no revision
// reads is refused with InvalidArgument.
func TestEmulatorSchemaBinaryNewestRevisionFirst(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-binary")
	name, revs := se.avroSchema(t, "events", avroV1, avroV2)
	topic, sub := se.topic(t, "events", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY})
	m1 := avroBinary(t, avroV1, map[string]any{"id": "one", "n": int64(1)})
	cases := []struct {
		tag  string
		data []byte
		rev  int // the revision it gets, -1: refused
	}{
		{"v1", m1, 0},
		{"v2", avroBinary(t, avroV2, map[string]any{"id": "two", "n": int64(2), "note": map[string]any{"string": "x"}}), 1},
		// Revision 1 reads this too, ignoring the union byte: newest first.
		{"v2null", avroBinary(t, avroV2, map[string]any{"id": "two", "n": int64(2), "note": nil}), 1},
		// Trailing bytes are ignored: revision 2 reads 0x02 as the union's
		// string branch and runs out of bytes; revision 1 stops before it.
		{"trailing", append(append([]byte(nil), m1...), 0x02), 0},
		{"garbage", []byte("garbage"), -1},
		{"empty", nil, -1},
	}
	n := 0
	for _, c := range cases {
		err := se.publish(topic, c.tag, c.data)
		if c.rev < 0 {
			wantCode(t, "publish "+c.tag, err, codes.InvalidArgument, "Could not parse message")
			continue
		}
		if err != nil {
			t.Fatalf("publish %s: %v", c.tag, err)
		}
		n++
	}
	got := se.pull(t, sub, n)
	for _, c := range cases {
		if c.rev < 0 {
			continue
		}
		if a := schemaAttrs(got[c.tag]); a != [3]string{name, revs[c.rev], "BINARY"} {
			t.Errorf("%s: attributes %v; want revision %d (%s)", c.tag, a, c.rev+1, revs[c.rev])
		}
	}
}

// TestEmulatorSchemaJSONIsAvroJSON: under JSON encoding the emulator
// reads a message with Avro's JSON decoder: unions other than null wrapped
// as {"string":"x"}, every field present (defaults are not applied), any
// field order, unknown fields ignored. A message a newer revision refuses
// may so pass, and be tagged, as an older one.
func TestEmulatorSchemaJSONIsAvroJSON(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-json")
	name, revs := se.avroSchema(t, "events", avroV1, avroV2)
	pinned, psub := se.topic(t, "pinned", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_JSON, FirstRevisionId: revs[1], LastRevisionId: revs[1]})
	both, bsub := se.topic(t, "both", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_JSON})
	cases := []struct {
		tag, data  string
		pinned, to int // the revision it gets on each topic, -1: refused
	}{
		{"wrapped", `{"id":"a","n":1,"note":{"string":"x"}}`, 1, 1},
		{"null", `{"n":1,"id":"a","note":null}`, 1, 1},
		{"plain", `{"id":"a","n":1,"note":"x"}`, -1, 0},
		{"missing", `{"id":"a","n":1}`, -1, 0},
		{"extra", `{"id":"a","n":1,"note":null,"more":5}`, 1, 1},
		{"nojson", `not json`, -1, -1},
	}
	counts := map[string]int{}
	for _, c := range cases {
		for _, tp := range []struct {
			topic, sub string
			rev        int
		}{{pinned, psub, c.pinned}, {both, bsub, c.to}} {
			err := se.publish(tp.topic, c.tag, []byte(c.data))
			if tp.rev < 0 {
				wantCode(t, "publish "+c.tag+" to "+tp.topic, err, codes.InvalidArgument, "Could not parse message")
				continue
			}
			if err != nil {
				t.Fatalf("publish %s to %s: %v", c.tag, tp.topic, err)
			}
			counts[tp.sub]++
		}
	}
	got := map[string]map[string]*pubsubpb.ReceivedMessage{psub: se.pull(t, psub, counts[psub]), bsub: se.pull(t, bsub, counts[bsub])}
	for _, c := range cases {
		for sub, rev := range map[string]int{psub: c.pinned, bsub: c.to} {
			if rev < 0 {
				continue
			}
			if a := schemaAttrs(got[sub][c.tag]); a != [3]string{name, revs[rev], "JSON"} {
				t.Errorf("%s on %s: attributes %v; want revision %d", c.tag, sub, a, rev+1)
			}
		}
	}
}

// TestEmulatorSchemaNewRevisionAtOnce: a revision committed while messages
// flow validates, and tags, the very next message on a topic that names no
// last revision, with no change to the topic.
func TestEmulatorSchemaNewRevisionAtOnce(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-commit")
	ctx := context.Background()
	name, revs := se.avroSchema(t, "events", avroV1)
	topic, sub := se.topic(t, "events", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_JSON, FirstRevisionId: revs[0]})
	se.mustPublish(t, topic, "before", []byte(`{"id":"a","n":1}`))
	if err := se.publish(topic, "early", []byte(`{"id":"a","n":1,"note":{"string":"x"}}`)); err != nil {
		t.Fatalf("a revision 2 message under revision 1 (unknown field) = %v; want it taken", err)
	}
	r2, err := se.schemas.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: name, Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV2}})
	if err != nil {
		t.Fatal(err)
	}
	se.mustPublish(t, topic, "after", []byte(`{"id":"a","n":1,"note":{"string":"x"}}`))
	se.mustPublish(t, topic, "old", []byte(`{"id":"a","n":1}`))
	got := se.pull(t, sub, 4)
	for tag, want := range map[string]string{"before": revs[0], "early": revs[0], "after": r2.RevisionId, "old": revs[0]} {
		if a := schemaAttrs(got[tag]); a != [3]string{name, want, "JSON"} {
			t.Errorf("%s: attributes %v; want revision %s", tag, a, want)
		}
	}
}

// TestEmulatorSchemaDeletedRevisionMarked: DeleteSchemaRevision rewrites the
// revision attribute of the subscription's messages of that revision, the
// leased ones too, to _deleted-schema-revision_; the schema name stays.
// New messages are validated against the other revisions only, and a
// topic's first or last revision that was deleted reads as the marker.
func TestEmulatorSchemaDeletedRevisionMarked(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-delrev")
	ctx := context.Background()
	name, revs := se.avroSchema(t, "events", avroV1, avroV2)
	topic, sub := se.topic(t, "events", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY})
	pinned := se.name("topics", "pinned")
	if _, err := se.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: pinned, SchemaSettings: &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_BINARY, FirstRevisionId: revs[0]}}); err != nil {
		t.Fatal(err)
	}
	m1 := avroBinary(t, avroV1, map[string]any{"id": "one", "n": int64(1)})
	m2 := avroBinary(t, avroV2, map[string]any{"id": "two", "n": int64(2), "note": map[string]any{"string": "x"}})
	se.mustPublish(t, topic, "leased1", m1)
	se.mustPublish(t, topic, "leased2", m2)
	leased := se.pull(t, sub, 2)
	se.mustPublish(t, topic, "waiting1", m1)

	if _, err := se.schemas.DeleteSchemaRevision(ctx, &pubsubpb.DeleteSchemaRevisionRequest{Name: name + "@" + revs[0]}); err != nil {
		t.Fatal(err)
	}
	_, err := se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name + "@" + revs[0]})
	wantCode(t, "GetSchema(deleted revision)", err, codes.NotFound, "Schema revision not found")
	if err := se.publish(topic, "new1", m1); status.Code(err) != codes.InvalidArgument {
		t.Errorf("publish of a revision 1 message after its deletion = %v; want InvalidArgument", err)
	}
	se.mustPublish(t, topic, "new2", m2)
	tp, err := se.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: pinned})
	if err != nil || tp.SchemaSettings.FirstRevisionId != DeletedRevision || tp.SchemaSettings.Schema != name {
		t.Errorf("topic with the deleted first revision reads %v, %v; want first_revision_id %s", tp.GetSchemaSettings(), err, DeletedRevision)
	}

	var ids []string
	for _, m := range leased {
		ids = append(ids, m.AckId)
	}
	if err := se.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: ids}); err != nil {
		t.Fatal(err)
	}
	got := se.pull(t, sub, 4)
	for tag, want := range map[string]string{"leased1": DeletedRevision, "waiting1": DeletedRevision, "leased2": revs[1], "new2": revs[1]} {
		if a := schemaAttrs(got[tag]); a != [3]string{name, want, "BINARY"} {
			t.Errorf("%s: attributes %v; want revision %s", tag, a, want)
		}
	}
}

// TestEmulatorSchemaDeletedSchemaMarked: DeleteSchema rewrites the attributes of
// the subscription's messages to _deleted-schema_ and
// _deleted-schema-revision_ (the encoding stays), and the topic's settings
// likewise; a publish to the topic then fails with NotFound, so no new
// message carries the markers.
func TestEmulatorSchemaDeletedSchemaMarked(t *testing.T) {
	se := newSchemaEmulator(t, "schemas-delete")
	ctx := context.Background()
	name, revs := se.avroSchema(t, "events", avroV1)
	topic, sub := se.topic(t, "events", &pubsubpb.SchemaSettings{Schema: name, Encoding: pubsubpb.Encoding_JSON, FirstRevisionId: revs[0]})
	se.mustPublish(t, topic, "waiting", []byte(`{"id":"a","n":1}`))
	if err := se.schemas.DeleteSchema(ctx, &pubsubpb.DeleteSchemaRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	tp, err := se.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if s := tp.GetSchemaSettings(); err != nil || s.Schema != DeletedSchema || s.FirstRevisionId != DeletedRevision || s.LastRevisionId != "" || s.Encoding != pubsubpb.Encoding_JSON {
		t.Errorf("topic reads %v, %v; want the deleted markers", s, err)
	}
	wantCode(t, "publish after DeleteSchema", se.publish(topic, "after", []byte(`{"id":"a","n":1}`)), codes.NotFound, "Schema associated with topic deleted.")
	_, err = se.schemas.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name + "@" + revs[0]})
	wantCode(t, "GetSchema(deleted schema)", err, codes.NotFound, "Schema not found")
	got := se.pull(t, sub, 1)
	if a := schemaAttrs(got["waiting"]); a != [3]string{DeletedSchema, DeletedRevision, "JSON"} {
		t.Errorf("waiting message: attributes %v; want the deleted markers", a)
	}
}

// TestSchemasListNewestFirst: List gives every revision of a schema with
// its definition, newest first (the emulator lists them oldest first), so
// that validate's check names them in that order.
func TestSchemasListNewestFirst(t *testing.T) {
	se := newSchemaEmulator(t, "list-newest")
	ctx := context.Background()
	s, err := se.schemas.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: "projects/" + se.project, SchemaId: "listed",
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: avroV1}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{s.GetRevisionId()}
	for _, def := range []string{avroV2, avroV1} {
		r, err := se.schemas.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: s.Name, Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: def}})
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{r.GetRevisionId()}, want...)
	}
	got, err := NewSchemas(se.schemas).List(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("List = %d revisions, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Revision != want[i] || r.Type != "avro" || r.Name != s.Name || r.Definition == "" {
			t.Errorf("revision %d: %+v, want %s with its definition", i, r, want[i])
		}
	}
	if got[1].Definition != avroV2 {
		t.Errorf("the middle revision's definition: %q", got[1].Definition)
	}
	if _, err := NewSchemas(se.schemas).List(ctx, "projects/"+se.project+"/schemas/none"); !errors.Is(err, ErrSchemaGone) {
		t.Errorf("List of a missing schema: %v, want ErrSchemaGone", err)
	}
}
