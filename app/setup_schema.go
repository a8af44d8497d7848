package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/setupplan"
	"github.com/pubsink/pubsink/source"
)

// The source topic's Pub/Sub schema: a pipeline whose payload.schema names
// a schema file gets the topic that setup creates with that schema (so
// that Pub/Sub refuses what the file does not read), in payload.encoding.
// Setup creates the schema resource, named after the topic, or reuses one
// of that name with the same definition; it changes no schema and no
// existing topic, and says what it found and the gcloud command that would
// change it.

// schemaKind is the Pub/Sub type of a schema of the plan.
func schemaKind(ts *setupplan.Schema) pubsubpb.Schema_Type {
	if ts.Type == setupplan.SchemaProtocolBuffer {
		return pubsubpb.Schema_PROTOCOL_BUFFER
	}
	return pubsubpb.Schema_AVRO
}

// schemaEncoding is the Pub/Sub message encoding of a schema of the plan.
func schemaEncoding(ts *setupplan.Schema) pubsubpb.Encoding {
	if ts.Encoding == setupplan.EncodingJSON {
		return pubsubpb.Encoding_JSON
	}
	return pubsubpb.Encoding_BINARY
}

// attachCommand is the gcloud command that creates the schema setup
// would have created for topic and gives it to the existing topic.
func attachCommand(ts *setupplan.Schema, topic string) string {
	return fmt.Sprintf("gcloud pubsub schemas create %s --type=%s --definition-file=%s && gcloud pubsub topics update %s --schema=%s --message-encoding=%s",
		ts.Name, ts.Type, ts.File, topic, ts.Name, encodingFlag(schemaEncoding(ts)))
}

// sameDefinition reports whether def defines what ts's file does: the
// same JSON for Avro (whitespace and the order of keys aside), the same
// text for Protocol Buffers (surrounding whitespace aside).
func sameDefinition(ts *setupplan.Schema, def string) bool {
	if ts.Type != setupplan.SchemaAvro {
		return strings.TrimSpace(def) == strings.TrimSpace(ts.Definition)
	}
	a, errA := normalJSON(def)
	b, errB := normalJSON(ts.Definition)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// normalJSON is s re-encoded: objects' keys sorted, no white space.
func normalJSON(s string) ([]byte, error) {
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber() // 1.0 and 1 are different defaults; keep them apart
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// sourceTopic sets up a pipeline's source topic: as topic does, and with
// the schema that the payload's schema file defines when setup creates
// it. An existing topic whose schema differs from the file's, or a topic
// without a schema under payload.schema: topic, is reported.
func (s *setup) sourceTopic(ctx context.Context, t setupplan.Topic) error {
	name, retention, want, readsTopicSchema := t.Name, t.Retention, t.Schema, t.ReadsTopicSchema
	if want == nil && !readsTopicSchema {
		return s.topic(ctx, name, retention, nil)
	}
	got, err := s.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
	switch {
	case status.Code(err) == codes.NotFound:
		var settings *pubsubpb.SchemaSettings
		var note string
		if want != nil {
			if settings, note, err = s.schema(ctx, name, want); err != nil {
				return err
			}
		}
		if err := s.topic(ctx, name, retention, settings); err != nil {
			return err
		}
		if note != "" {
			s.say("  %s", note)
		}
		if readsTopicSchema {
			s.noSchemaNote(name)
		}
		return nil
	case err != nil:
		return fmt.Errorf("topic %s: %w", name, err)
	}
	if err := s.topic(ctx, name, retention, nil); err != nil { // says it exists, and notes its retention
		return err
	}
	switch {
	case got.GetSchemaSettings().GetSchema() == "":
		if want != nil {
			s.say("  note: it has no schema; payload.schema names %s, and setup changes no existing topic: to give it one, %s", want.File, attachCommand(want, name))
		} else {
			s.noSchemaNote(name)
		}
	case want != nil:
		return s.compareTopicSchema(ctx, name, got.GetSchemaSettings(), want)
	}
	return nil
}

// noSchemaNote says that a topic without a schema leaves a pipeline that
// reads its topic's schema nothing to decode with.
func (s *setup) noSchemaNote(topic string) {
	s.say("  note: topic %s has no schema, and payload.schema is topic: run can decode none of its messages (schema_unavailable); name the schema file in payload.schema (setup creates the schema with the topic), or give the topic a schema: gcloud pubsub topics update %s --schema=SCHEMA --message-encoding=binary",
		topic, topic)
}

// compareTopicSchema reports how the schema settings of an existing topic
// differ from want; it changes nothing.
func (s *setup) compareTopicSchema(ctx context.Context, topic string, have *pubsubpb.SchemaSettings, want *setupplan.Schema) error {
	sc, err := s.schemas(ctx)
	if err != nil {
		return err
	}
	got, err := sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: have.Schema, View: pubsubpb.SchemaView_FULL})
	switch {
	case status.Code(err) == codes.NotFound || status.Code(err) == codes.InvalidArgument && have.Schema == source.DeletedSchema:
		s.say("  note: its schema %s was deleted, so every publish to it fails; setup changes no existing topic: %s", have.Schema, attachCommand(want, topic))
		return nil
	case err != nil:
		return fmt.Errorf("topic %s: its schema %s: %w", topic, have.Schema, err)
	case got.Type != schemaKind(want) || !sameDefinition(want, got.Definition):
		s.say("  note: its schema %s (revision %s) is not the definition of %s (payload.schema); setup changes no schema: to make the file its newest revision, gcloud pubsub schemas commit %s --type=%s --definition-file=%s",
			have.Schema, got.RevisionId, want.File, have.Schema, want.Type, want.File)
	}
	if have.Encoding != schemaEncoding(want) {
		s.say("  note: its messages are encoded %s, and payload.encoding is %s; setup changes no existing topic: set payload.encoding to %s, or gcloud pubsub topics update %s --schema=%s --message-encoding=%s",
			have.Encoding, encodingFlag(schemaEncoding(want)), encodingFlag(have.Encoding), topic, have.Schema, encodingFlag(schemaEncoding(want)))
	}
	return nil
}

// schema creates the schema want for topic, or reuses the one of that name
// when it has the same definition, and returns the settings of the topic
// to create. A schema of that name with another definition is an error:
// setup changes no schema, and a topic created with it would refuse the
// file's messages or take others. A service without Protocol Buffers
// schemas (the emulator) gets the topic without a schema, and a note.
func (s *setup) schema(ctx context.Context, topic string, want *setupplan.Schema) (settings *pubsubpb.SchemaSettings, note string, err error) {
	sc, err := s.schemas(ctx)
	if err != nil {
		return nil, "", err
	}
	name := want.Name
	project, id, _ := strings.Cut(name, "/schemas/")
	settings = &pubsubpb.SchemaSettings{Schema: name, Encoding: schemaEncoding(want)}
	if s.dry {
		err = s.exists(sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name}))
	} else {
		_, err = sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{
			Parent:   project,
			SchemaId: id,
			Schema:   &pubsubpb.Schema{Type: schemaKind(want), Definition: want.Definition},
		})
	}
	switch status.Code(err) {
	case codes.OK:
		s.created("schema "+name, setupplan.DescribeSchema(want))
		return settings, "", nil
	case codes.AlreadyExists:
		got, err := sc.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name, View: pubsubpb.SchemaView_FULL})
		if err != nil {
			return nil, "", fmt.Errorf("schema %s: %w", name, err)
		}
		if got.Type != schemaKind(want) || !sameDefinition(want, got.Definition) {
			return nil, "", s.refuse("schema "+name, fmt.Errorf("schema %s exists, and its newest revision (%s) is not the definition of %s (payload.schema); setup changes no schema, so it did not create topic %s: make the file its newest revision, gcloud pubsub schemas commit %s --type=%s --definition-file=%s, then run setup again",
				name, got.RevisionId, want.File, topic, name, want.Type, want.File))
		}
		s.say("schema %s exists (the definition of %s)", name, want.File)
		return settings, "", nil
	case codes.Unimplemented:
		if want.Type == setupplan.SchemaProtocolBuffer {
			return nil, fmt.Sprintf("note: it has no schema: this Pub/Sub does not implement Protocol Buffers schemas (%q), as the emulator does not; pubsink reads its messages with %s all the same (on Google Cloud, setup creates schema %s with the topic)",
				status.Convert(err).Message(), want.File, name), nil
		}
	case codes.InvalidArgument:
		if want.Type == setupplan.SchemaProtocolBuffer {
			return nil, "", fmt.Errorf("create schema %s from %s: %w (a Pub/Sub Protocol Buffers schema is one .proto file that defines a single top-level message and imports nothing)", name, want.File, err)
		}
	}
	if s.dry {
		return nil, "", fmt.Errorf("schema %s: %w", name, err)
	}
	return nil, "", fmt.Errorf("create schema %s from %s: %w", name, want.File, err)
}

// schemas returns the Schema API client, opened on first use. It shares
// the Pub/Sub client's connection, so it reaches the same service (the
// emulator, a fake in tests) with the same credentials; it is not closed,
// as closing it would close that connection, which the Pub/Sub client's
// owner closes.
func (s *setup) schemas(ctx context.Context) (*vkit.SchemaClient, error) {
	if s.schemaClient != nil {
		return s.schemaClient, nil
	}
	c, err := vkit.NewSchemaClient(ctx, option.WithGRPCConn(s.ps.TopicAdminClient.Connection()))
	if err != nil {
		return nil, fmt.Errorf("pubsub schema client: %w", err)
	}
	s.schemaClient = c
	return c, nil
}

// encodingFlag is the --message-encoding of gcloud for e.
func encodingFlag(e pubsubpb.Encoding) string { return strings.ToLower(e.String()) }
