package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

const topicSchemaV1 = `{"type": "record", "name": "Reading", "namespace": "acme", "fields": [
  {"name": "id", "type": "string"},
  {"name": "temperature_c", "type": "double"}
]}`

// topicSchemaV2 adds an optional note.
const topicSchemaV2 = `{"type": "record", "name": "Reading", "namespace": "acme", "fields": [
  {"name": "id", "type": "string"},
  {"name": "temperature_c", "type": "double"},
  {"name": "note", "type": ["null", "string"], "default": null}
]}`

// topicSchemaPipeline is a config whose one pipeline reads topic's schema,
// with filter and columns (YAML flow mapping entries).
func topicSchemaPipeline(topic, sub, filter, columns string) string {
	return fmt.Sprintf(`project: p
state: {instance: i}
pipelines:
  - name: readings
    mode: at_least_once
    source: {topic: %s, subscription: %s, streams: 1}
    payload: {format: avro, schema: topic}
    filter: %q
    sink:
      table: readings
      row_key: "{data.id}"
      columns: {%s}
`, topic, sub, filter, columns)
}

// schemaTopic is a topic on the emulator with an Avro schema of the
// revisions definitions (JSON encoding), made under fresh names.
type schemaTopic struct {
	ps     *pubsub.Client
	schema string   // the schema's full name
	revs   []string // its revision ids, oldest first
	topic  string   // the topic's short name
	id     string   // the fresh part of the names
}

func newSchemaTopic(t *testing.T, prefix string, definitions ...string) *schemaTopic {
	t.Helper()
	e := emulator.RequirePubSub(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", e.Host)
	ctx := context.Background()
	ps, err := e.Client(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	sc := schemaClientOn(t, e)
	st := &schemaTopic{ps: ps, id: fmt.Sprintf("%s%d", prefix, time.Now().UnixNano())}
	for i, def := range definitions {
		var got *pubsubpb.Schema
		if i == 0 {
			got, err = sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{Parent: "projects/p", SchemaId: st.id,
				Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: def}})
		} else {
			got, err = sc.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{Name: st.schema,
				Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: def}})
		}
		if err != nil {
			t.Fatal(err)
		}
		st.schema = got.GetName()
		st.revs = append(st.revs, got.GetRevisionId())
	}
	st.topic = "t-" + st.id
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/" + st.topic,
		SchemaSettings: &pubsubpb.SchemaSettings{Schema: st.schema, Encoding: pubsubpb.Encoding_JSON}}); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestValidateChecksEveryRevisionOfTheTopicSchema: on the real Pub/Sub
// emulator, validate reads the topic's schema and checks the mapping
// against each revision: a mistake with every revision fails it (exit 2)
// naming the revisions, one with some revisions is a warning naming them,
// a field tested with has() that no revision has yet is a warning, and
// what cannot be reached (no subscription yet, --offline) does not fail it.
func TestValidateChecksEveryRevisionOfTheTopicSchema(t *testing.T) {
	st := newSchemaTopic(t, "ts", topicSchemaV1, topicSchemaV2)
	ctx, ps := context.Background(), st.ps
	rev1, rev2, id, topic, sub := st.revs[0], st.revs[1], st.id, st.topic, "s-"+st.id
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/p/subscriptions/" + sub, Topic: "projects/p/topics/" + topic}); err != nil {
		t.Fatal(err)
	}
	plain := "projects/p/topics/plain-" + id
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: plain}); err != nil {
		t.Fatal(err)
	}

	validate := func(t *testing.T, cfg string, offline bool) (string, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "pubsink.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		err := Validate(ctx, path, offline, &out)
		return out.String(), err
	}
	every := fmt.Sprintf("(with every revision of the topic's schema %s: %s, %s)", st.schema, rev2, rev1)
	for _, c := range []struct {
		name, filter, columns string
		wantErr, wantOut      []string
	}{
		{"a misspelled field", "true", `t: "{data.temprature_c}"`,
			[]string{`pipelines[0].sink.columns.t: {data.temprature_c}: no field "temprature_c" in record Reading; did you mean "temperature_c"? ` + every + " (line 12)"}, nil},
		{"a double times an int", "data.temperature_c * 9 > 100.0", `t: "{data.temperature_c}"`,
			[]string{"pipelines[0].filter: 1:20: found no matching overload for '_*_' applied to '(double, int)'", every}, nil},
		{"a field of the newest revision only", "true", `n: "{data.note}"`, nil,
			[]string{fmt.Sprintf(`warning: pipelines[0].sink.columns.n: {data.note}: no field "note" in record Reading (with revision %s of the 2 of the topic's schema %s: messages written with it will fail) (line 12)`, rev1, st.schema),
				"ok (1 pipeline)"}},
		{"right with every revision", "data.temperature_c > 30.0", `t: "{data.temperature_c}", n: "{= data.?note.orValue('-')}"`, nil,
			[]string{"ok (1 pipeline)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := topicSchemaPipeline(topic, sub, c.filter, c.columns)
			out, err := validate(t, cfg, false)
			var ce *ConfigError
			if len(c.wantErr) > 0 {
				if !errors.As(err, &ce) {
					t.Fatalf("validate: %v (out %q), want a ConfigError", err, out)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("validate:\n%v\nwant %q in it", err, w)
					}
				}
			} else if err != nil {
				t.Fatalf("validate: %v", err)
			}
			for _, w := range c.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("validate printed:\n%s\nwant %q in it", out, w)
				}
			}
			if len(c.wantErr) > 0 && !strings.Contains(strings.Join(c.wantErr, ""), "no matching overload") {
				// Offline, only the schema service is not asked: the same
				// file passes.
				// It says so.
				skipped := "warning: pipelines[0].payload.schema: the topic's schema was not checked (--offline): validate without --offline checks the mapping against every revision of it (line "
				if out, err := validate(t, cfg, true); err != nil || !strings.Contains(out, "ok (1 pipeline)") || !strings.Contains(out, skipped) {
					t.Errorf("validate --offline: %v, %q", err, out)
				}
			}
		})
	}

	// A field tested with has() that no revision has yet: a mapping ready
	// for the next revision, a warning.
	out, err := validate(t, topicSchemaPipeline(topic, sub, "true", `x: "{= has(data.extra) ? data.extra : '-'}"`), false)
	if err != nil || !strings.Contains(out, `no field "extra" in record Reading`) || !strings.Contains(out, "tests the field with has()") {
		t.Errorf("a has()-tested field no revision has: %v, %q", err, out)
	}
	// A topic without a schema is a warning (its messages are
	// dead-lettered); a subscription not made yet is not checked, with a
	// warning.
	out, err = validate(t, topicSchemaPipeline("plain-"+id, sub, "true", `t: "{data.id}"`), false)
	if err != nil || !strings.Contains(out, "warning: pipelines[0].payload.schema: topic "+plain+" has no schema, so its messages carry none to decode them with (each is dead-lettered as schema_unavailable)") {
		t.Errorf("a topic without a schema: %v, %q", err, out)
	}
	cfg := strings.Replace(topicSchemaPipeline(topic, "missing-"+id, "true", `t: "{data.id}"`), "topic: "+topic+", ", "", 1)
	out, err = validate(t, cfg, false)
	if err != nil || !strings.Contains(out, "warning: pipelines[0].payload.schema: the topic's schema was not checked: subscription projects/p/subscriptions/missing-"+id+" does not exist") {
		t.Errorf("a missing subscription: %v, %q", err, out)
	}
}

// TestRunRefusesAMappingNoRevisionFits: run's start-up check is
// validate's: a mapping that fails with every revision of the topic's
// schema refuses the start (a ConfigError: exit 2), naming the key and
// the revisions; one that fits starts.
func TestRunRefusesAMappingNoRevisionFits(t *testing.T) {
	st := newSchemaTopic(t, "rs", topicSchemaV1)
	ctx, ps := context.Background(), st.ps
	topic, sub := st.topic, "s-"+st.id
	f := newFakes(t)
	open := func(columns string) error {
		cfg := parse(t, topicSchemaPipeline(topic, sub, "true", columns))
		if err := Setup(ctx, cfg, ps, f.admin, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		opts := Options{Bigtable: f.opts.Bigtable, HTTPAddr: "-"}
		a, err := Open(ctx, zap.NewNop(), cfg, opts)
		if err != nil {
			return err
		}
		stopped, cancel := context.WithCancel(ctx)
		cancel()
		return a.Run(stopped)
	}
	err := open(`t: "{data.temprature_c}"`)
	var ce *ConfigError
	var problems config.Problems
	if !errors.As(err, &ce) || !errors.As(err, &problems) || !strings.Contains(err.Error(), `pipelines[0].sink.columns.t: {data.temprature_c}: no field "temprature_c" in record Reading; did you mean "temperature_c"? (with every revision of the topic's schema `+st.schema) {
		t.Errorf("Open = %v; want a ConfigError naming the key, the field and the revisions", err)
	}
	if err := open(`t: "{data.temperature_c}"`); err != nil {
		t.Errorf("a mapping that fits: %v", err)
	}
}

// schemaClientOn opens a Schema API client on the emulator e.
func schemaClientOn(t *testing.T, e *emulator.PubSub) *vkit.SchemaClient {
	t.Helper()
	c, err := vkit.NewSchemaClient(context.Background(), option.WithEndpoint(e.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
