package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// TestSetupCreatesTheTopicSchemaThatRunReads: `pubsink setup` (the binary,
// on the emulators the environment names) with payload.schema naming an
// .avsc file creates the topic's schema and the topic with it, in JSON;
// the emulator then refuses a message the schema does not read. A pipeline
// that reads the topic's schema (payload.schema: topic) decodes what was
// published with the revision setup created.
func TestSetupCreatesTheTopicSchemaThatRunReads(t *testing.T) {
	e := newEnv(t)
	avsc := filepath.Join(e.dir, "reading.avsc")
	if err := os.WriteFile(avsc, []byte(`{"type": "record", "name": "Reading", "fields": [
  {"name": "id", "type": "string"}, {"name": "temp", "type": "double"},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pipeline := func(payload string) string {
		return e.baseYAML() + fmt.Sprintf(`
  - name: e2e
    mode: at_least_once
    source: {topic: %s, subscription: %s, timestamp_template: "{data.ts}"}
    payload: %s
    sink:
      table: %s
      column_family: d
      row_key: "{data.id}"
      columns: {temp: "{data.temp}", enc: "{attributes.googclient_schemaencoding}"}
`, e.topic, e.sub, payload, e.table)
	}
	path := filepath.Join(e.dir, "setup.yaml")
	if err := os.WriteFile(path, []byte(pipeline(fmt.Sprintf("{format: avro, schema: %s, encoding: json}", avsc))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "setup", "--config", path)
	cmd.Env = append(append(os.Environ(), e.ps.Env()...), e.bt.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pubsink setup: %v\n%s", err, out)
	}
	schema := "projects/" + project + "/schemas/" + e.topic + "-schema"
	for _, want := range []string{
		"created schema " + schema + " (avro, from " + avsc + ")\n",
		"created topic projects/" + project + "/topics/" + e.topic + " (schema " + schema + ", encoding JSON)\n",
		"setup: done\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("pubsink setup did not print %q:\n%s", want, out)
		}
	}

	if _, err := e.publishRaw(e.topic, []*pubsubpb.PubsubMessage{{Data: []byte(`{"id": "nope"}`)}}); err == nil {
		t.Error("the topic accepted a message that its schema does not read")
	}
	readings := map[string]string{"r1": "21.5", "r2": "-3.25"}
	ts := time.Date(2026, 6, 3, 12, 0, 0, 0, time.UTC)
	var msgs []*pubsubpb.PubsubMessage
	for id, temp := range readings {
		msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte(fmt.Sprintf(`{"id": %q, "temp": %s, "ts": %d}`, id, temp, ts.UnixMilli()))})
	}
	if _, err := e.publishRaw(e.topic, msgs); err != nil {
		t.Fatalf("the topic refused messages of its schema: %v", err)
	}

	runPath, cfg := e.writeConfig(pipeline("{format: avro, schema: topic}"))
	c := e.start(runPath, cfg)
	c.waitReady(30 * time.Second)
	waitStatus(t, c, func(st map[string]any) bool {
		d, _ := deadLettered(st)
		return num(st, "committed")+d >= len(readings) && num(st, "in_flight") == 0
	}, 20*time.Second)
	st := c.status()
	c.signal(syscall.SIGTERM)
	c.wait(cfg.ShutdownTimeout + 10*time.Second)
	if d, reasons := deadLettered(st); d != 0 {
		t.Errorf("%d messages dead-lettered: %v", d, reasons)
	}
	want := wantTables{e.table: {}}
	for id, temp := range readings {
		want.put(e.table, id, ts, map[string]string{"temp": temp, "enc": "JSON"})
	}
	e.checkTables(want)
}
