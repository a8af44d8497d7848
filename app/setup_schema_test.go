package app

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// readingAvsc is the schema file of the setup tests; readingAvscReformatted
// is the same schema written otherwise (keys reordered, spaces), and
// otherAvsc another one.
const (
	readingAvsc            = `{"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "string"}, {"name": "temp", "type": "double"}]}`
	readingAvscReformatted = "{\n  \"name\": \"Reading\",\n  \"type\": \"record\",\n  \"fields\": [\n    {\"type\": \"string\", \"name\": \"id\"},\n    {\"name\": \"temp\", \"type\": \"double\"}\n  ]\n}\n"
	otherAvsc              = `{"type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]}`
	readingProto           = "syntax = \"proto3\";\npackage acme;\nmessage Reading {\n  string id = 1;\n  double temp = 2;\n}\n"
)

// schemaSetupYAML is a pipeline on topic readings whose payload is PAYLOAD.
const schemaSetupYAML = `
project: PROJECT
state: {instance: i}
pipelines:
  - name: readings
    mode: at_least_once
    payload: PAYLOAD
    source: {topic: readings, subscription: readings-sub}
    sink: {table: readings, row_key: "{message_id}", columns: {v: "{data}"}}
`

// schemaSetupEnv is a Pub/Sub emulator, with a Bigtable fake for the
// tables, and a schema file of each kind in a temporary folder.
type schemaSetupEnv struct {
	t     *testing.T
	e     *emulator.PubSub
	f     *fakes
	avsc  string // reading.avsc
	proto string // reading.proto
}

func newSchemaSetupEnv(t *testing.T) *schemaSetupEnv {
	t.Helper()
	e := emulator.RequirePubSub(t)
	f := newFakes(t)
	stateAdmin(t, f)
	dir := t.TempDir()
	env := &schemaSetupEnv{t: t, e: e, f: f, avsc: filepath.Join(dir, "reading.avsc"), proto: filepath.Join(dir, "reading.proto")}
	for path, text := range map[string]string{env.avsc: readingAvsc, env.proto: readingProto} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

// project is a Pub/Sub client and a schema client on the emulator for a
// project of the test's own, so that the cases do not see each other.
type project struct {
	name    string
	ps      *pubsub.Client
	schemas *vkit.SchemaClient
}

func (env *schemaSetupEnv) project(name string) *project {
	t := env.t
	t.Helper()
	ctx := context.Background()
	ps, err := env.e.Client(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	sc, err := vkit.NewSchemaClient(ctx, option.WithEndpoint(env.e.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(), option.WithTelemetryDisabled(), option.WithGRPCConnectionPool(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return &project{name: name, ps: ps, schemas: sc}
}

// setup runs Setup on p with the pipeline's payload set to payload.
func (env *schemaSetupEnv) setup(p *project, payload string) (string, error) {
	env.t.Helper()
	yaml := strings.NewReplacer("PROJECT", p.name, "PAYLOAD", payload).Replace(schemaSetupYAML)
	cfg := parse(env.t, yaml)
	var out bytes.Buffer
	err := Setup(context.Background(), cfg, p.ps, env.f.admin, &out)
	return out.String(), err
}

func (p *project) topic(id string) string  { return "projects/" + p.name + "/topics/" + id }
func (p *project) schema(id string) string { return "projects/" + p.name + "/schemas/" + id }

// createSchema creates schema id with an Avro definition.
func (p *project) createSchema(t *testing.T, id, definition string) {
	t.Helper()
	if _, err := p.schemas.CreateSchema(context.Background(), &pubsubpb.CreateSchemaRequest{Parent: "projects/" + p.name, SchemaId: id,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: definition}}); err != nil {
		t.Fatal(err)
	}
}

// createTopic creates topic id with settings (nil: no schema).
func (p *project) createTopic(t *testing.T, id string, settings *pubsubpb.SchemaSettings) {
	t.Helper()
	if _, err := p.ps.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: p.topic(id), SchemaSettings: settings}); err != nil {
		t.Fatal(err)
	}
}

func (p *project) settings(t *testing.T, id string) *pubsubpb.SchemaSettings {
	t.Helper()
	got, err := p.ps.TopicAdminClient.GetTopic(context.Background(), &pubsubpb.GetTopicRequest{Topic: p.topic(id)})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetSchemaSettings()
}

func (p *project) hasSchema(id string) bool {
	_, err := p.schemas.GetSchema(context.Background(), &pubsubpb.GetSchemaRequest{Name: p.schema(id)})
	return err == nil
}

// publish publishes data to topic id; the emulator validates it against
// the topic's schema.
func (p *project) publish(id, data string) error {
	_, err := p.ps.TopicAdminClient.Publish(context.Background(), &pubsubpb.PublishRequest{Topic: p.topic(id),
		Messages: []*pubsubpb.PubsubMessage{{Data: []byte(data)}}})
	return err
}

func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("setup's report lacks %q:\n%s", l, out)
		}
	}
}

// TestSetupCreatesTheTopicSchema runs on the real Pub/Sub emulator, which
// implements Avro schemas and validates what is published against them.
func TestSetupCreatesTheTopicSchema(t *testing.T) {
	env := newSchemaSetupEnv(t)
	avroJSON := fmt.Sprintf("{format: avro, schema: %s, encoding: json}", env.avsc)

	// setup creates readings-schema from the file, then the topic with it
	// in payload.encoding, and its subscription; the emulator then refuses
	// what the schema does not read. A second setup changes nothing.
	t.Run("creates the schema and the topic, then changes nothing", func(t *testing.T) {
		p := env.project("schema-new")
		out, err := env.setup(p, avroJSON)
		if err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		wantLines(t, out,
			"created schema "+p.schema("readings-schema")+" (avro, from "+env.avsc+")\n",
			"created topic "+p.topic("readings")+" (schema "+p.schema("readings-schema")+", encoding JSON)\n",
			"created subscription projects/schema-new/subscriptions/readings-sub on "+p.topic("readings")+"\n")
		if s := p.settings(t, "readings"); s.GetSchema() != p.schema("readings-schema") || s.GetEncoding() != pubsubpb.Encoding_JSON {
			t.Errorf("the topic's schema settings are %v; want readings-schema, JSON", s)
		}
		got, err := p.schemas.GetSchema(context.Background(), &pubsubpb.GetSchemaRequest{Name: p.schema("readings-schema"), View: pubsubpb.SchemaView_FULL})
		if err != nil || got.Type != pubsubpb.Schema_AVRO || got.Definition != readingAvsc {
			t.Errorf("schema = %v, %v; want the file's Avro definition", got, err)
		}
		if err := p.publish("readings", `{"id": "r1", "temp": 21.5}`); err != nil {
			t.Errorf("the topic refused a message of its schema: %v", err)
		}
		if err := p.publish("readings", `{"id": "r1"}`); err == nil {
			t.Error("the topic accepted a message its schema does not read: it has no schema")
		}
		again, err := env.setup(p, avroJSON)
		if err != nil {
			t.Fatalf("second setup: %v\n%s", err, again)
		}
		wantLines(t, again, "topic "+p.topic("readings")+" exists\n")
		if strings.Contains(again, "created") || strings.Contains(again, "note") {
			t.Errorf("the second setup created or noted something:\n%s", again)
		}
	})

	// A schema of that name with the same definition (written otherwise)
	// is reused.
	t.Run("reuses a schema with the same definition", func(t *testing.T) {
		p := env.project("schema-same")
		p.createSchema(t, "readings-schema", readingAvscReformatted)
		out, err := env.setup(p, fmt.Sprintf("{format: avro, schema: %s}", env.avsc))
		if err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		wantLines(t, out,
			"schema "+p.schema("readings-schema")+" exists (the definition of "+env.avsc+")\n",
			"created topic "+p.topic("readings")+" (schema "+p.schema("readings-schema")+", encoding BINARY)\n")
	})

	// One with another definition is an error naming the fix, and no topic
	// is created with it.
	t.Run("refuses a schema of that name with another definition", func(t *testing.T) {
		p := env.project("schema-other")
		p.createSchema(t, "readings-schema", otherAvsc)
		out, err := env.setup(p, avroJSON)
		if err == nil {
			t.Fatalf("setup succeeded with a schema of another definition:\n%s", out)
		}
		for _, want := range []string{
			"pipeline readings: schema " + p.schema("readings-schema") + " exists, and its newest revision (",
			") is not the definition of " + env.avsc + " (payload.schema); setup changes no schema, so it did not create topic " + p.topic("readings"),
			"gcloud pubsub schemas commit " + p.schema("readings-schema") + " --type=avro --definition-file=" + env.avsc + ", then run setup again",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("setup = %v; want it to say %q", err, want)
			}
		}
		if _, err := p.ps.TopicAdminClient.GetTopic(context.Background(), &pubsubpb.GetTopicRequest{Topic: p.topic("readings")}); err == nil {
			t.Error("setup created the topic with a schema that is not the file's")
		}
	})

	// An existing topic is left as it is: another schema, another
	// encoding, no schema at all are each reported with the fix.
	t.Run("reports an existing topic with another schema", func(t *testing.T) {
		p := env.project("topic-other")
		p.createSchema(t, "theirs", otherAvsc)
		theirs := &pubsubpb.SchemaSettings{Schema: p.schema("theirs"), Encoding: pubsubpb.Encoding_BINARY}
		p.createTopic(t, "readings", theirs)
		out, err := env.setup(p, avroJSON)
		if err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		wantLines(t, out,
			"topic "+p.topic("readings")+" exists\n  note: its schema "+p.schema("theirs")+" (revision ",
			") is not the definition of "+env.avsc+" (payload.schema); setup changes no schema: to make the file its newest revision, gcloud pubsub schemas commit "+p.schema("theirs")+" --type=avro --definition-file="+env.avsc+"\n",
			"  note: its messages are encoded BINARY, and payload.encoding is json; setup changes no existing topic: set payload.encoding to binary, or gcloud pubsub topics update "+p.topic("readings")+" --schema="+p.schema("theirs")+" --message-encoding=json\n")
		if s := p.settings(t, "readings"); s.GetSchema() != theirs.Schema || s.GetEncoding() != theirs.Encoding {
			t.Errorf("setup changed the topic's schema settings to %v", s)
		}
		if p.hasSchema("readings-schema") || strings.Contains(out, "created schema") {
			t.Errorf("setup created a schema for an existing topic:\n%s", out)
		}
	})
	t.Run("reports an existing topic without a schema", func(t *testing.T) {
		p := env.project("topic-none")
		p.createTopic(t, "readings", nil)
		out, err := env.setup(p, avroJSON)
		if err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		wantLines(t, out, "topic "+p.topic("readings")+" exists\n  note: it has no schema; payload.schema names "+env.avsc+
			", and setup changes no existing topic: to give it one, gcloud pubsub schemas create "+p.schema("readings-schema")+" --type=avro --definition-file="+env.avsc+
			" && gcloud pubsub topics update "+p.topic("readings")+" --schema="+p.schema("readings-schema")+" --message-encoding=json\n")
		if s := p.settings(t, "readings"); s != nil {
			t.Errorf("setup gave the existing topic schema settings %v", s)
		}
		if p.hasSchema("readings-schema") {
			t.Error("setup created a schema for an existing topic")
		}
	})
	// An existing topic with a schema of the file's definition under
	// another name, in the same encoding, is as it should be.
	t.Run("accepts an existing topic with the file's schema", func(t *testing.T) {
		p := env.project("topic-same")
		p.createSchema(t, "mine", readingAvscReformatted)
		p.createTopic(t, "readings", &pubsubpb.SchemaSettings{Schema: p.schema("mine"), Encoding: pubsubpb.Encoding_JSON})
		out, err := env.setup(p, avroJSON)
		if err != nil || strings.Contains(out, "note") || strings.Contains(out, "created schema") {
			t.Errorf("setup = %v, with a note or a new schema:\n%s", err, out)
		}
	})

	// The emulator implements no Protocol Buffers schemas: setup creates
	// the topic without one and says so (the pipeline reads with the file).
	t.Run("protocol buffers on the emulator", func(t *testing.T) {
		p := env.project("schema-proto")
		out, err := env.setup(p, fmt.Sprintf("{format: protobuf, schema: %s, message: acme.Reading}", env.proto))
		if err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		wantLines(t, out, "created topic "+p.topic("readings")+"\n  note: it has no schema: this Pub/Sub does not implement Protocol Buffers schemas (\"Protocol buffer support not implemented in emulator\"), as the emulator does not; pubsink reads its messages with "+env.proto+" all the same (on Google Cloud, setup creates schema "+p.schema("readings-schema")+" with the topic)\n")
		if s := p.settings(t, "readings"); s != nil {
			t.Errorf("topic schema settings %v; want none", s)
		}
	})

	// payload.schema: topic on a topic without a schema dead-letters every
	// message: setup says so, for the topic it creates and an existing one.
	t.Run("payload.schema topic on a topic without a schema", func(t *testing.T) {
		p := env.project("schema-topic")
		note := "  note: topic " + p.topic("readings") + " has no schema, and payload.schema is topic: run can decode none of its messages (schema_unavailable); name the schema file in payload.schema (setup creates the schema with the topic), or give the topic a schema: gcloud pubsub topics update " + p.topic("readings") + " --schema=SCHEMA --message-encoding=binary\n"
		for _, first := range []bool{true, false} {
			out, err := env.setup(p, "{format: avro}")
			if err != nil {
				t.Fatalf("setup: %v\n%s", err, out)
			}
			wantLines(t, out, note)
			if first {
				wantLines(t, out, "created topic "+p.topic("readings")+"\n"+note)
			}
		}
		p.createSchema(t, "topic-schema-of-other", readingAvsc)
		p.createTopic(t, "other", &pubsubpb.SchemaSettings{Schema: p.schema("topic-schema-of-other"), Encoding: pubsubpb.Encoding_BINARY})
		yaml := strings.NewReplacer("PROJECT", p.name, "PAYLOAD", "{format: avro}", "topic: readings", "topic: other", "readings-sub", "other-sub").Replace(schemaSetupYAML)
		var out bytes.Buffer
		if err := Setup(context.Background(), parse(t, yaml), p.ps, env.f.admin, &out); err != nil || strings.Contains(out.String(), "note") {
			t.Errorf("setup on a topic with a schema = %v, with a note:\n%s", err, out.String())
		}
	})
}

// TestSetupCreatesAProtocolBuffersTopicSchema: where the service
// implements Protocol Buffers schemas (pstest here, as Google Cloud), a
// .proto file becomes the topic's schema as an .avsc does; a second setup
// finds it as it should be.
func TestSetupCreatesAProtocolBuffersTopicSchema(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	stateAdmin(t, f)
	proto := filepath.Join(t.TempDir(), "reading.proto")
	if err := os.WriteFile(proto, []byte(readingProto), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := strings.NewReplacer("PROJECT", "p", "PAYLOAD", fmt.Sprintf("{format: protobuf, schema: %s, message: acme.Reading}", proto)).Replace(schemaSetupYAML)
	var out bytes.Buffer
	if err := Setup(ctx, parse(t, yaml), f.ps, f.admin, &out); err != nil {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	wantLines(t, out.String(),
		"created schema projects/p/schemas/readings-schema (protocol-buffer, from "+proto+")\n",
		"created topic projects/p/topics/readings (schema projects/p/schemas/readings-schema, encoding BINARY)\n")
	got, err := f.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/p/topics/readings"})
	if s := got.GetSchemaSettings(); err != nil || s.GetSchema() != "projects/p/schemas/readings-schema" || s.GetEncoding() != pubsubpb.Encoding_BINARY {
		t.Errorf("topic = %v, %v; want the schema readings-schema, BINARY", got, err)
	}
	var again bytes.Buffer
	if err := Setup(ctx, parse(t, yaml), f.ps, f.admin, &again); err != nil || strings.Contains(again.String(), "created") || strings.Contains(again.String(), "note") {
		t.Errorf("second setup = %v, creating or noting something:\n%s", err, again.String())
	}
}
