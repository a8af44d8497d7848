package e2e

// End-to-end tests of issue 19 (payload formats, CEL expressions, many rows
// per message) on the real emulators, with the built binary: Avro topic
// schemas whose revision changes mid-stream, in both encodings; a message
// of fifty rows and its rival under kill -9; a Protocol Buffers schema file.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/hamba/avro/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// --- expected tables ------------------------------------------------------

// wantCell is one expected cell: its value and its (only) timestamp.
type wantCell struct {
	value string
	ts    bigtable.Timestamp
}

// wantTables is what a test expects to read back: table → row → column →
// the one version of the cell.
type wantTables map[string]map[string]map[string]wantCell

func (w wantTables) put(table, row string, ts time.Time, cols map[string]string) {
	if w[table] == nil {
		w[table] = map[string]map[string]wantCell{}
	}
	r := map[string]wantCell{}
	for q, v := range cols {
		r[q] = wantCell{v, bigtable.Time(ts).TruncateToMilliseconds()}
	}
	w[table][row] = r
}

func (w wantTables) rows() int {
	n := 0
	for _, rows := range w {
		n += len(rows)
	}
	return n
}

// checkTables reads every table of want and fails the test unless each
// holds exactly the expected rows, columns, values and timestamps, one
// version per cell.
func (e *env) checkTables(want wantTables) {
	e.t.Helper()
	tables := make([]string, 0, len(want))
	for t := range want {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 15 {
			e.t.Errorf(format, args...)
		}
	}
	for _, table := range tables {
		rows := want[table]
		got := e.readTable(table)
		if len(got) != len(rows) {
			report("%s: %d rows, want %d", table, len(got), len(rows))
		}
		for key := range got {
			if _, ok := rows[key]; !ok {
				report("%s: unexpected row %q: %v", table, key, got[key])
			}
		}
		for key, cols := range rows {
			g, ok := got[key]
			if !ok {
				report("%s: row %q is missing", table, key)
				continue
			}
			if len(g) != len(cols) {
				report("%s: row %q has columns %v, want %d columns", table, key, g, len(cols))
			}
			for q, c := range cols {
				switch vs := g[q]; {
				case len(vs) != 1:
					report("%s: row %q column %s: %d versions %v, want 1 (%q @%d)", table, key, q, len(vs), vs, c.value, c.ts)
				case vs[0].value != c.value || vs[0].ts != c.ts:
					report("%s: row %q column %s = %q @%d, want %q @%d", table, key, q, vs[0].value, vs[0].ts, c.value, c.ts)
				}
			}
		}
	}
	if bad > 15 {
		e.t.Errorf("... %d mismatches in all", bad)
	}
}

// renderDouble is how pubsink renders a double (as JSON writes it), for the
// values these tests use (between 1e-6 and 1e21, or 0).
func renderDouble(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// renderTime is how pubsink renders a time: RFC 3339, UTC, 3 digits.
func renderTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// cents is CEL's int(math.round(v * 100.0)): ties away from zero.
func cents(v float64) string { return strconv.FormatInt(int64(math.Round(v*100.0)), 10) }

// pipelineStatusNumber reads a number field of /status.
func num(st map[string]any, key string) int {
	f, _ := st[key].(float64)
	return int(f)
}

// deadLettered sums /status dead_lettered.
func deadLettered(st map[string]any) (int, map[string]any) {
	d, _ := st["dead_lettered"].(map[string]any)
	n := 0
	for _, v := range d {
		f, _ := v.(float64)
		n += int(f)
	}
	return n, d
}

// baseYAML is the top of the configuration of these tests; the pipeline
// follows.
func (e *env) baseYAML() string {
	return fmt.Sprintf(`
project: %s
log: {level: info, format: json}
http: {addr: "127.0.0.1:%s"}
shutdown_timeout: 10s
state: {instance: %s, table: %s}
pipelines:
`, project, freePort(e.t), instance, e.stateTable)
}

// publishRaw publishes msgs to topic (a short name) in order, in requests
// of up to 100 messages, and returns their message IDs.
func (e *env) publishRaw(topic string, msgs []*pubsubpb.PubsubMessage) ([]string, error) {
	e.t.Helper()
	var ids []string
	for len(msgs) > 0 {
		n := min(len(msgs), 100)
		resp, err := e.pubsub.TopicAdminClient.Publish(context.Background(), &pubsubpb.PublishRequest{
			Topic: "projects/" + project + "/topics/" + topic, Messages: msgs[:n]})
		if err != nil {
			return ids, err
		}
		ids = append(ids, resp.MessageIds...)
		msgs = msgs[n:]
	}
	return ids, nil
}

// schemaClient opens a Schema API client on the Pub/Sub emulator.
func (e *env) schemaClient() *vkit.SchemaClient {
	e.t.Helper()
	c, err := vkit.NewSchemaClient(context.Background(),
		option.WithEndpoint(e.ps.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCConnectionPool(1),
	)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// --- 1. Avro topic schema, revisions mid-stream -----------------------------

const readingV1 = `{"type": "record", "name": "Reading", "namespace": "pubsink.e2e", "fields": [
  {"name": "id", "type": "string"},
  {"name": "sensor", "type": "string"},
  {"name": "value", "type": "double"},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "points", "type": {"type": "array", "items": {"type": "record", "name": "Point",
    "fields": [{"name": "n", "type": "long"}, {"name": "v", "type": "double"}]}}}
]}`

// readingV2 adds an optional note.
var readingV2 = strings.Replace(readingV1, "}}}\n]}", "}}},\n  {\"name\": \"note\", \"type\": [\"null\", \"string\"], \"default\": null}\n]}", 1)

type avroPoint struct {
	N int64   `avro:"n" json:"n"`
	V float64 `avro:"v" json:"v"`
}

type avroReadingV1 struct {
	ID     string      `avro:"id"`
	Sensor string      `avro:"sensor"`
	Value  float64     `avro:"value"`
	TS     time.Time   `avro:"ts"`
	Points []avroPoint `avro:"points"`
}

type avroReadingV2 struct {
	ID     string      `avro:"id"`
	Sensor string      `avro:"sensor"`
	Value  float64     `avro:"value"`
	TS     time.Time   `avro:"ts"`
	Points []avroPoint `avro:"points"`
	Note   *string     `avro:"note"`
}

// reading is one published message of the Avro test.
type reading struct {
	avroReadingV2
	writer int  // the revision it is written with: 1 or 2
	json   bool // Avro JSON encoding, else binary
	rival  bool // a second message of an earlier reading's id
}

func (r reading) filtered() bool { return r.Sensor == "test" }

// encode writes r with its writer's schema in its encoding.
func (r reading) encode(t *testing.T, v1, v2 avro.Schema) []byte {
	t.Helper()
	if r.json {
		m := map[string]any{"id": r.ID, "sensor": r.Sensor, "value": r.Value, "ts": r.TS.UnixMilli(), "points": r.Points}
		if r.Points == nil {
			m["points"] = []avroPoint{}
		}
		if r.writer == 2 {
			m["note"] = nil
			if r.Note != nil {
				m["note"] = map[string]string{"string": *r.Note}
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var b []byte
	var err error
	if r.writer == 1 {
		b, err = avro.Marshal(v1, avroReadingV1{r.ID, r.Sensor, r.Value, r.TS, r.Points})
	} else {
		b, err = avro.Marshal(v2, r.avroReadingV2)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newReading makes reading i: ts and value vary, every tenth is from the
// sensor "test" (filtered), i%4 points.
func newReading(i, writer int, asJSON bool, note *string) reading {
	value := float64(i%90) + []float64{0.125, 0.375, 0.1, 0.995, 0.5}[i%5]
	if i%7 == 3 {
		value = -value
	}
	sensor := fmt.Sprintf("s%d", i%3)
	if i%10 == 9 {
		sensor = "test"
	}
	var pts []avroPoint
	for j := range i % 4 {
		pts = append(pts, avroPoint{N: int64(j + 1), V: float64(i)/8 + float64(j)*0.25})
	}
	r := reading{writer: writer, json: asJSON}
	r.avroReadingV2 = avroReadingV2{
		ID:     fmt.Sprintf("rd-%04d", i),
		Sensor: sensor,
		Value:  value,
		TS:     time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Second + 7*time.Millisecond),
		Points: pts,
		Note:   note,
	}
	return r
}

func strp(s string) *string { return &s }

// avroPipeline is the pipeline of the Avro tests on topic schemas.
func (e *env) avroPipeline(idx, deadLetterFile string) string {
	return e.baseYAML() + fmt.Sprintf(`
  - name: e2e
    mode: exactly_once
    source:
      topic: %[1]s
      subscription: %[2]s
      id_template: "{data.id}"
      timestamp_template: "{data.ts}"
      streams: 4
      max_outstanding_messages: 500
    payload: {format: avro, schema: topic}
    filter: "data.sensor != 'test'"
    dead_letter: {file: %[5]s}
    sink:
      table: %[3]s
      column_family: d
      mappings:
        - row_key: "{data.id}"
          columns:
            sensor: "{data.sensor}"
            cents: "{= int(math.round(data.value * 100.0))}"
            ts: "{data.ts}"
            points: "{= size(data.points)}"
            note: "{= has(data.note) ? data.note : '-'}"
            rev: "{attributes.googclient_schemarevisionid}"
        - each: data.points
          row_key: "{data.id}#p{item.n}"
          columns: {v: "{item.v}", vc: "{= int(math.round(item.v * 100.0))}"}
        - table: %[4]s
          when: "data.value >= 50.0"
          row_key: "{data.sensor}#{data.id}"
          columns: {id: "{data.id}"}
        - table: %[4]s
          when: "has(data.note)"
          row_key: "note#{data.id}"
          columns: {note: "{data.note}"}
`, e.topic, e.sub, e.table, idx, deadLetterFile)
}

// avroTopic creates an Avro schema with revision 1 and a topic with it in
// encoding enc; returns the schema's name and the revision's id.
func (e *env) avroTopic(sc *vkit.SchemaClient, enc pubsubpb.Encoding) (string, string) {
	e.t.Helper()
	ctx := context.Background()
	schemaID := "sc-" + strings.TrimPrefix(e.topic, "t-")
	s, err := sc.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{
		Parent: "projects/" + project, SchemaId: schemaID,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: readingV1},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.pubsub.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
		Name:           "projects/" + project + "/topics/" + e.topic,
		SchemaSettings: &pubsubpb.SchemaSettings{Schema: s.Name, Encoding: enc},
	}); err != nil {
		e.t.Fatal(err)
	}
	return s.Name, s.RevisionId
}

// setTopicEncoding changes the encoding of the test topic's schema.
func (e *env) setTopicEncoding(schema string, enc pubsubpb.Encoding) {
	e.t.Helper()
	if _, err := e.pubsub.TopicAdminClient.UpdateTopic(context.Background(), &pubsubpb.UpdateTopicRequest{
		Topic: &pubsubpb.Topic{
			Name:           "projects/" + project + "/topics/" + e.topic,
			SchemaSettings: &pubsubpb.SchemaSettings{Schema: schema, Encoding: enc},
		},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schema_settings"}},
	}); err != nil {
		e.t.Fatalf("UpdateTopic to %v: %v", enc, err)
	}
}

// TestAvroTopicSchemaRevisionsDecodeMidStream: pubsink reads a topic with
// an Avro schema (payload.schema: topic). Revision 1 messages (binary) are
// committed; revision 2 (an optional note) is committed while pubsink runs;
// then binary messages of both writers, rivals of earlier ids written with
// revision 2, and, once the topic's encoding is switched to JSON, Avro JSON
// messages of both writers. Every message's rows are checked exactly: the
// main row (with a computed column and the revision Pub/Sub tagged it
// with), one row per point (each), and index rows in a second table (when).
func TestAvroTopicSchemaRevisionsDecodeMidStream(t *testing.T) {
	e := newEnv(t)
	sc := e.schemaClient()
	schemaName, rev1 := e.avroTopic(sc, pubsubpb.Encoding_BINARY)
	v1, err := avro.Parse(readingV1)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := avro.Parse(readingV2)
	if err != nil {
		t.Fatal(err)
	}
	idx := "idx-" + strings.TrimPrefix(e.table, "rows-")
	dlFile := filepath.Join(e.dir, "dead.jsonl")
	path, cfg := e.writeConfig(e.avroPipeline(idx, dlFile))
	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)

	var all []reading
	var revOf []string // the revision each message is expected to be tagged with
	publish := func(rs []reading, revs []string) {
		t.Helper()
		msgs := make([]*pubsubpb.PubsubMessage, len(rs))
		for i, r := range rs {
			msgs[i] = &pubsubpb.PubsubMessage{Data: r.encode(t, v1, v2)}
		}
		if _, err := e.publishRaw(e.topic, msgs); err != nil {
			t.Fatalf("publish: %v", err)
		}
		all = append(all, rs...)
		revOf = append(revOf, revs...)
	}
	finished := func() {
		t.Helper()
		n := len(all)
		waitStatus(t, c, func(st map[string]any) bool {
			d, _ := deadLettered(st)
			return num(st, "committed")+num(st, "duplicate")+num(st, "filtered")+d >= n && num(st, "in_flight") == 0
		}, 30*time.Second)
	}

	// Phase A: revision 1, binary.
	var rs []reading
	var revs []string
	for i := range 150 {
		rs, revs = append(rs, newReading(i, 1, false, nil)), append(revs, rev1)
	}
	publish(rs, revs)
	finished()

	// Revision 2, committed while pubsink runs.
	r2, err := sc.CommitSchema(context.Background(), &pubsubpb.CommitSchemaRequest{Name: schemaName,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: readingV2}})
	if err != nil {
		t.Fatal(err)
	}
	rev2 := r2.RevisionId

	// Phase B: binary, both writers; Pub/Sub tags each message with the
	// newest revision that reads it: revision 1's records (nothing after
	// points) only revision 1 reads.
	rs, revs = nil, nil
	for i := 150; i < 300; i++ {
		switch i % 3 {
		case 0:
			rs, revs = append(rs, newReading(i, 1, false, nil)), append(revs, rev1)
		case 1:
			rs, revs = append(rs, newReading(i, 2, false, strp(fmt.Sprintf("note %d é", i)))), append(revs, rev2)
		default:
			rs, revs = append(rs, newReading(i, 2, false, nil)), append(revs, rev2)
		}
	}
	// Rivals: ids of phase A, written with revision 2, another value, a note
	// and an event time: duplicates, which must change nothing.
	for _, i := range []int{0, 5, 11, 62, 148} {
		r := newReading(i, 2, false, strp("rival"))
		r.Value, r.TS, r.rival = 77.5, r.TS.Add(time.Hour), true
		rs, revs = append(rs, r), append(revs, rev2)
	}
	publish(rs, revs)
	finished()

	// Phase C: the topic's encoding switched to JSON; Avro JSON of both
	// writers (revision 2's union wrapped, or null).
	e.setTopicEncoding(schemaName, pubsubpb.Encoding_JSON)
	rs, revs = nil, nil
	for i := 300; i < 360; i++ {
		switch i % 3 {
		case 0:
			rs, revs = append(rs, newReading(i, 1, true, nil)), append(revs, rev1)
		case 1:
			rs, revs = append(rs, newReading(i, 2, true, strp(fmt.Sprintf("json note %d", i)))), append(revs, rev2)
		default:
			rs, revs = append(rs, newReading(i, 2, true, nil)), append(revs, rev2)
		}
	}
	publish(rs, revs)
	finished()

	st := c.status()
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}

	want := wantTables{e.table: {}, idx: {}}
	committed, filtered, duplicates := 0, 0, 0
	perRev := map[string]int{}
	for k, r := range all {
		perRev[revOf[k]]++
		switch {
		case r.rival:
			duplicates++
			continue
		case r.filtered():
			filtered++
			continue
		}
		committed++
		note := "-"
		if r.Note != nil {
			note = *r.Note
		}
		want.put(e.table, r.ID, r.TS, map[string]string{
			"sensor": r.Sensor, "cents": cents(r.Value), "ts": renderTime(r.TS),
			"points": fmt.Sprint(len(r.Points)), "note": note, "rev": revOf[k],
		})
		for _, p := range r.Points {
			want.put(e.table, fmt.Sprintf("%s#p%d", r.ID, p.N), r.TS, map[string]string{"v": renderDouble(p.V), "vc": cents(p.V)})
		}
		if r.Value >= 50 {
			want.put(idx, r.Sensor+"#"+r.ID, r.TS, map[string]string{"id": r.ID})
		}
		if r.Note != nil {
			want.put(idx, "note#"+r.ID, r.TS, map[string]string{"note": *r.Note})
		}
	}
	e.checkTables(want)

	if dl, reasons := deadLettered(st); dl != 0 {
		b, _ := os.ReadFile(dlFile)
		t.Errorf("%d dead letters %v: %s", dl, reasons, tail(string(b), 5))
	}
	if num(st, "committed") != committed || num(st, "filtered") != filtered || num(st, "duplicate") != duplicates ||
		num(st, "rows") != want.rows() || num(st, "received") != len(all) {
		t.Errorf("status: committed %v filtered %v duplicate %v rows %v received %v; want %d, %d, %d, %d, %d",
			st["committed"], st["filtered"], st["duplicate"], st["rows"], st["received"], committed, filtered, duplicates, want.rows(), len(all))
	}
	m, _ := st["mapping"].(map[string]any)
	if m["format"] != "avro" || m["schema"] != "topic" {
		t.Errorf("status mapping %v: want format avro, schema topic", m)
	}
	seen := map[string]int{}
	list, _ := m["revisions"].([]any)
	for _, x := range list {
		r, _ := x.(map[string]any)
		if r["schema"] != schemaName || r["type"] != "avro" || r["error"] != nil {
			t.Errorf("status revision %v: want schema %s, type avro, no error", r, schemaName)
		}
		rev, _ := r["revision"].(string)
		seen[rev] = num(r, "messages")
	}
	if len(seen) != 2 || seen[rev1] != perRev[rev1] || seen[rev2] != perRev[rev2] {
		t.Errorf("status mapping.revisions %v: want %s with %d messages and %s with %d", list, rev1, perRev[rev1], rev2, perRev[rev2])
	}
	t.Logf("%d messages (%d revision 1, %d revision 2; %d JSON): %d committed, %d filtered, %d duplicates, %d rows in 2 tables",
		len(all), perRev[rev1], perRev[rev2], 60, committed, filtered, duplicates, want.rows())
}

// TestAvroJSONThatPubSubAcceptsIsDecoded: with the JSON encoding Pub/Sub
// accepts a record with members its revision does not name (it ignores
// them: docs/emulator-schemas.md), and tags such a message with the newest
// revision that reads it. A revision-2 writer that leaves its optional note
// unwrapped ({"note": "x"}, plain JSON) is thus validated and tagged as
// revision 1. Pub/Sub delivered it as a valid revision-1 message: pubsink,
// decoding with revision 1, writes it (without the note) rather than
// dead-letter it as invalid_payload: the Avro JSON decoder skips members
// the revision does not name, as Pub/Sub does.
func TestAvroJSONThatPubSubAcceptsIsDecoded(t *testing.T) {
	e := newEnv(t)
	sc := e.schemaClient()
	schemaName, rev1 := e.avroTopic(sc, pubsubpb.Encoding_JSON)
	if _, err := sc.CommitSchema(context.Background(), &pubsubpb.CommitSchemaRequest{Name: schemaName,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: readingV2}}); err != nil {
		t.Fatal(err)
	}
	idx := "idx-" + strings.TrimPrefix(e.table, "rows-")
	dlFile := filepath.Join(e.dir, "dead.jsonl")
	path, cfg := e.writeConfig(e.avroPipeline(idx, dlFile))

	ts := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	plain := []string{
		fmt.Sprintf(`{"id":"pl-1","sensor":"s1","value":1.5,"ts":%d,"points":[],"note":"unwrapped"}`, ts.UnixMilli()),
		fmt.Sprintf(`{"id":"pl-2","sensor":"s2","value":2.5,"ts":%d,"points":[{"n":1,"v":0.5}],"extra":true}`, ts.UnixMilli()),
	}
	var msgs []*pubsubpb.PubsubMessage
	for _, p := range plain {
		msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte(p)})
	}
	if _, err := e.publishRaw(e.topic, msgs); err != nil {
		t.Fatalf("the emulator refused a message: %v", err)
	}
	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	waitStatus(t, c, func(st map[string]any) bool {
		d, _ := deadLettered(st)
		return num(st, "committed")+d >= len(plain) && num(st, "in_flight") == 0
	}, 30*time.Second)
	st := c.status()
	c.signal(syscall.SIGTERM)
	c.wait(cfg.ShutdownTimeout + 10*time.Second)
	if dl, reasons := deadLettered(st); dl != 0 {
		b, _ := os.ReadFile(dlFile)
		t.Errorf("%d of %d messages that Pub/Sub validated against revision %s were dead-lettered %v:\n%s",
			dl, len(plain), rev1, reasons, strings.TrimSpace(string(b)))
	}
	want := wantTables{e.table: {}, idx: {}}
	want.put(e.table, "pl-1", ts, map[string]string{"sensor": "s1", "cents": "150", "ts": renderTime(ts), "points": "0", "note": "-", "rev": rev1})
	want.put(e.table, "pl-2", ts, map[string]string{"sensor": "s2", "cents": "250", "ts": renderTime(ts), "points": "1", "note": "-", "rev": rev1})
	want.put(e.table, "pl-2#p1", ts, map[string]string{"v": "0.5", "vc": "50"})
	e.checkTables(want)
}

// --- 2. fifty rows per message, rivals, kill -9 ----------------------------

// fiftyMsg is one message of the fifty-rows test: key i, the original or
// its rival.
type fiftyMsg struct {
	id    string
	ts    time.Time
	v     string
	items []fiftyItem
	rival bool
}

type fiftyItem struct {
	K string `json:"k"`
	X int    `json:"x"`
}

const fiftyItems = 50

// newFifty makes key i's original (items e00..e49, x = 100i+j) or its
// rival (items e25..e74, x = 900000+100i+j, a second later, another v):
// a rival's rows would show as rows e50..e74, other values, or a second
// version of e25..e49 and of the main row.
func newFifty(i int, rival bool) fiftyMsg {
	m := fiftyMsg{id: fmt.Sprintf("m-%04d", i), ts: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond), v: fmt.Sprintf("original %d", i)}
	from, base := 0, 100*i
	if rival {
		m.rival, m.ts, m.v, from, base = true, m.ts.Add(time.Second), fmt.Sprintf("rival %d", i), 25, 900000+100*i
	}
	for j := from; j < from+fiftyItems; j++ {
		m.items = append(m.items, fiftyItem{K: fmt.Sprintf("e%02d", j), X: base + j})
	}
	return m
}

func (m fiftyMsg) data() []byte {
	b, _ := json.Marshal(map[string]any{"id": m.id, "ts": m.ts.UnixMilli(), "v": m.v, "items": m.items})
	return b
}

// put adds m's rows to want.
func (m fiftyMsg) put(want wantTables, rows, items string) {
	want.put(rows, m.id, m.ts, map[string]string{"v": m.v, "n": fmt.Sprint(len(m.items))})
	for _, it := range m.items {
		want.put(items, m.id+"#"+it.K, m.ts, map[string]string{"x": fmt.Sprint(it.X), "y": fmt.Sprint(3 * it.X)})
	}
}

// catalogEntry is what the dedupe catalog says of a key.
type catalogEntry struct {
	claims   []string // message IDs of the claims (distinct)
	recorded bool
}

// catalog reads the dedupe catalog of pipeline e2e from the state table
// (dedupe/catalog.go: dedupe#PIPELINE#HH#KEY, k:w/MESSAGE_ID a claim, k:c
// the record).
func (e *env) catalog() map[string]catalogEntry {
	e.t.Helper()
	out := map[string]catalogEntry{}
	prefix := "dedupe#e2e#"
	err := e.bigtable.Open(e.stateTable).ReadRows(context.Background(), bigtable.PrefixRange(prefix), func(r bigtable.Row) bool {
		rest := strings.TrimPrefix(r.Key(), prefix)
		if strings.HasPrefix(rest, "~") {
			return true
		}
		key := rest[strings.IndexByte(rest, '#')+1:]
		var ce catalogEntry
		for _, items := range r {
			for _, it := range items {
				q := it.Column[strings.IndexByte(it.Column, ':')+1:]
				if w, ok := strings.CutPrefix(q, "w/"); ok {
					if !slices.Contains(ce.claims, w) {
						ce.claims = append(ce.claims, w)
					}
				} else if q == "c" {
					ce.recorded = true
				}
			}
		}
		out[key] = ce
		return true
	})
	if err != nil {
		e.t.Fatalf("read catalog: %v", err)
	}
	return out
}

// fiftyPipeline is the pipeline of the fifty-rows test: a main row per
// message and one row per element in a second table, keyed by the payload's
// id; one stream and a small flow-control window, so that the drain lasts
// long enough for a kill to land inside it.
func (e *env) fiftyPipeline(items string) string {
	return e.baseYAML() + fmt.Sprintf(`
  - name: e2e
    mode: exactly_once
    source:
      topic: %[1]s
      subscription: %[2]s
      id_template: "{data.id}"
      timestamp_template: "{data.ts}"
      timestamp_format: unix_ms
      streams: 1
      max_outstanding_messages: 200
    payload: {format: json}
    sink:
      table: %[3]s
      batch: {max_messages: 200}
      mappings:
        - row_key: "{data.id}"
          columns: {v: "{data.v}", n: "{= size(data.items)}"}
        - table: %[4]s
          each: data.items
          row_key: "{data.id}#{item.k}"
          columns: {x: "{item.x}", y: "{= int(item.x) * 3}"}
`, e.topic, e.sub, e.table, items)
}

// TestAnArrayOfFiftyAndItsRivalUnderKillNine: 200 keys, each an original
// message of 50 elements (51 rows in two tables: a main row and one per
// element) and, published right after it, a rival of the same dedupe key
// (id_template) with other elements, values and event time. The binary is
// killed with SIGKILL twice mid-stream (between rows and records: the
// catalog read at each kill shows keys claimed, rows written, no record)
// and restarted. At the end every key has exactly the rows of one payload,
// one version per cell, never a mix of the two; that payload's message is
// the key's one claim in the catalog, and a claim seen at a kill is the
// one that won. A last wave of 20 keys and rivals on the surviving process
// (no kill) counts every second delivery as a duplicate.
//
// Which of the two wins is not the publish order: both are in flight at
// once and the first to claim wins (docs/reference.md: "written once ...
// by one of its deliveries"); the test counts the rivals' wins and checks
// that each won whole.
func TestAnArrayOfFiftyAndItsRivalUnderKillNine(t *testing.T) {
	const keys = 200
	e := newEnv(t)
	items := "items-" + strings.TrimPrefix(e.table, "rows-")
	path, cfg := e.writeConfig(e.fiftyPipeline(items))

	byID := map[string]fiftyMsg{}   // message ID → message
	original := map[string]string{} // key → the original's message ID
	publish := func(from, to int) {
		t.Helper()
		var msgs []fiftyMsg
		var pbs []*pubsubpb.PubsubMessage
		for i := from; i < to; i++ {
			for _, rival := range []bool{false, true} {
				m := newFifty(i, rival)
				msgs = append(msgs, m)
				pbs = append(pbs, &pubsubpb.PubsubMessage{Data: m.data()})
			}
		}
		ids, err := e.publishRaw(e.topic, pbs)
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range msgs {
			byID[ids[k]] = m
			if !m.rival {
				original[m.id] = ids[k]
			}
		}
	}
	publish(0, keys)

	// The claim of each key seen at a kill: binding.
	claimedAtKill := map[string]string{}
	midStream := 0 // kills that came with main rows still to write
	start := time.Now()
	for round, at := range []int{keys / 5, keys / 4} {
		c := e.start(path, cfg)
		c.waitReady(30 * time.Second)
		// Polled tightly, so that the kill comes while rows are written.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
			if st := c.status(); num(st, "committed") >= at && num(st, "in_flight") > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: %d committed not reached", round+1, at)
			}
		}
		c.signal(syscall.SIGKILL)
		cat := e.catalog()
		got := e.readTable(e.table)
		itemRows := e.countRows(items)
		between, claimed := 0, 0
		for key, ce := range cat {
			if len(ce.claims) > 1 {
				t.Errorf("kill %d: key %s claimed by %v", round+1, key, ce.claims)
			}
			if len(ce.claims) == 0 {
				continue
			}
			if prev, ok := claimedAtKill[key]; ok && prev != ce.claims[0] {
				t.Errorf("kill %d: key %s claimed by %s, by %s at the kill before", round+1, key, ce.claims[0], prev)
			}
			claimedAtKill[key] = ce.claims[0]
			if !ce.recorded { // no record: the claim decides (dedupe/doc.go)
				claimed++
				if _, ok := got[key]; ok {
					between++
				}
			}
		}
		t.Logf("kill %d: SIGKILL with %d main rows and %d element rows written (of %d and %d); %d keys claimed, %d of them with their main row written",
			round+1, len(got), itemRows, keys, keys*fiftyItems, claimed, between)
		if len(got) < keys {
			midStream++
		} else {
			// A loaded machine can drain before the poll sees the kill's
			// threshold: the kill still lands on records and duplicates in
			// flight, and the checks below still hold.
			t.Logf("kill %d came after the main rows were written", round+1)
		}
	}
	if midStream == 0 {
		t.Fatal("no kill came while main rows were still to write")
	}
	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	e.waitRows(items, keys*fiftyItems, time.Minute)
	settle(t, []*child{c})
	drained := time.Since(start)

	// checkWinners: every key of [0, to) has one claim, recorded, the one
	// seen at a kill if any; its rows are exactly that message's.
	want := wantTables{e.table: {}, items: {}}
	rivalWins := map[string]bool{}
	checkWinners := func(to int) {
		t.Helper()
		cat := e.catalog()
		for i := range to {
			key := newFifty(i, false).id
			ce := cat[key]
			winner, ok := byID[firstOr(ce.claims, "")]
			switch {
			case len(ce.claims) != 1 || ce.recorded:
				t.Errorf("catalog of %s: %+v, want one claim, which decides the key (no record)", key, ce)
			case !ok || winner.id != key:
				t.Errorf("catalog of %s names message %s, not one of the key", key, ce.claims[0])
			case claimedAtKill[key] != "" && claimedAtKill[key] != ce.claims[0]:
				t.Errorf("key %s: won by %s, but claimed by %s when the process was killed", key, ce.claims[0], claimedAtKill[key])
			}
			if !ok {
				winner = newFifty(i, false)
			}
			if winner.rival {
				rivalWins[key] = true
			}
			winner.put(want, e.table, items)
		}
		e.checkTables(want)
	}
	checkWinners(keys)

	// A last wave on the survivor: every second delivery of a key a
	// duplicate, counted.
	before := c.status()
	const wave = 20
	publish(keys, keys+wave)
	waitStatus(t, c, func(st map[string]any) bool {
		return num(st, "received")-num(before, "received") >= 2*wave && num(st, "in_flight") == 0
	}, 30*time.Second)
	after := c.status()
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	dc, dd, dr := num(after, "committed")-num(before, "committed"), num(after, "duplicate")-num(before, "duplicate"), num(after, "rows")-num(before, "rows")
	if dc != wave || dd != wave || dr != wave*(fiftyItems+1) {
		t.Errorf("last wave: %d committed, %d duplicates, %d rows; want %d, %d, %d", dc, dd, dr, wave, wave, wave*(fiftyItems+1))
	}
	if dl, reasons := deadLettered(after); dl != 0 || num(after, "retried") != 0 {
		t.Errorf("survivor: %d dead letters %v, %v retried", dl, reasons, after["retried"])
	}
	killWins := len(rivalWins)
	checkWinners(keys + wave)
	if left := e.pull(e.sub, 0, time.Minute); len(left) != 0 {
		t.Errorf("%d messages left on the subscription", len(left))
	}
	t.Logf("%d keys × (1 + %d rows) with rivals, 2 kills: drained in %v, %d keys won by their rival; last wave without a kill: %d of %d keys won by their rival; survivor: %v committed, %v duplicates of %v received",
		keys, fiftyItems, drained.Round(time.Millisecond), killWins, len(rivalWins)-killWins, wave, after["committed"], after["duplicate"], after["received"])
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

// --- 3. Protocol Buffers schema file ---------------------------------------

// protoReading is one message of the protobuf test, encoded by hand
// (protowire) after e2e/testdata/payloads/reading.proto.
type protoReading struct {
	id     string
	kind   int // 0 KIND_UNSPECIFIED, 1 TEMP, 2 HUMIDITY
	value  float64
	ts     time.Time
	site   *string
	points []avroPoint
	tags   map[string]int64
}

var protoKinds = []string{"KIND_UNSPECIFIED", "TEMP", "HUMIDITY"}

func (r protoReading) encode() []byte {
	var b []byte
	if r.id != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r.id)
	}
	if r.kind != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.kind))
	}
	if r.value != 0 {
		b = protowire.AppendTag(b, 3, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(r.value))
	}
	var ts []byte
	ts = protowire.AppendTag(ts, 1, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(r.ts.Unix()))
	ts = protowire.AppendTag(ts, 2, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(r.ts.Nanosecond()))
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, ts)
	if r.site != nil {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendString(b, *r.site)
	}
	for _, p := range r.points {
		var pb []byte
		if p.N != 0 {
			pb = protowire.AppendTag(pb, 1, protowire.VarintType)
			pb = protowire.AppendVarint(pb, uint64(p.N))
		}
		if p.V != 0 {
			pb = protowire.AppendTag(pb, 2, protowire.Fixed64Type)
			pb = protowire.AppendFixed64(pb, math.Float64bits(p.V))
		}
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, pb)
	}
	keys := make([]string, 0, len(r.tags))
	for k := range r.tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var eb []byte
		eb = protowire.AppendTag(eb, 1, protowire.BytesType)
		eb = protowire.AppendString(eb, k)
		eb = protowire.AppendTag(eb, 2, protowire.VarintType)
		eb = protowire.AppendVarint(eb, uint64(r.tags[k]))
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendBytes(b, eb)
	}
	return b
}

// TestProtobufSchemaFileEndToEnd: a topic without a schema, payloads in
// the Protocol Buffers wire format of a .proto file (payload.schema: FILE,
// payload.message), a filter, an event time from a
// google.protobuf.Timestamp, an enum, zero values of fields without
// presence, an optional field read by has(), a map, and one row per
// repeated element.
func TestProtobufSchemaFileEndToEnd(t *testing.T) {
	e := newEnv(t)
	proto, err := filepath.Abs("testdata/payloads/reading.proto")
	if err != nil {
		t.Fatal(err)
	}
	idx := "idx-" + strings.TrimPrefix(e.table, "rows-")
	yaml := e.baseYAML() + fmt.Sprintf(`
  - name: e2e
    source:
      topic: %[1]s
      subscription: %[2]s
      id_template: "{data.id}"
      timestamp_template: "{data.ts}"
    payload: {format: protobuf, schema: %[5]q, message: pubsink.e2e.Reading}
    filter: "!data.id.startsWith('skip-')"
    sink:
      table: %[3]s
      mappings:
        - row_key: "{data.id}"
          columns:
            kind: "{data.kind}"
            value: "{data.value}"
            cents: "{= int(math.round(data.value * 100.0))}"
            ts: "{data.ts}"
            site: "{= has(data.site) ? data.site : 'none'}"
            tags: "{data.tags}"
            a: "{data.tags.a}"
        - each: data.points
          row_key: "{data.id}#{item.n}"
          columns: {v: "{item.v}"}
        - table: %[4]s
          when: "has(data.site)"
          row_key: "{data.site}#{data.id}"
          columns: {id: "{data.id}"}
`, e.topic, e.sub, e.table, idx, proto)
	path, cfg := e.writeConfig(yaml)

	const n = 300
	var rs []protoReading
	for i := range n {
		r := protoReading{
			id:    fmt.Sprintf("pr-%04d", i),
			kind:  i % 3,
			value: float64(i%50) - 20 + 0.125,
			ts:    time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Second + 123456789*time.Nanosecond),
			tags:  map[string]int64{"a": int64(i), "b": -int64(i % 7)},
		}
		if i%4 == 0 {
			r.value = 0 // not on the wire: renders 0
		}
		if i%5 == 1 {
			r.site = strp(fmt.Sprintf("site-%d", i%2))
		}
		if i%5 == 2 {
			r.site = strp("") // present but empty: has() is true
		}
		for j := range i % 3 {
			r.points = append(r.points, avroPoint{N: int64(j), V: float64(j) * 1.5})
		}
		if i%25 == 24 {
			r.id = fmt.Sprintf("skip-%04d", i)
		}
		rs = append(rs, r)
	}
	var pbs []*pubsubpb.PubsubMessage
	for _, r := range rs {
		pbs = append(pbs, &pubsubpb.PubsubMessage{Data: r.encode()})
	}
	if _, err := e.publishRaw(e.topic, pbs); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := e.start(path, cfg)
	c.waitReady(30 * time.Second)
	waitStatus(t, c, func(st map[string]any) bool {
		d, _ := deadLettered(st)
		return num(st, "committed")+num(st, "filtered")+d >= n && num(st, "in_flight") == 0
	}, 30*time.Second)
	took := time.Since(start)
	st := c.status()
	c.signal(syscall.SIGTERM)
	if code := c.wait(cfg.ShutdownTimeout + 10*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}

	want := wantTables{e.table: {}, idx: {}}
	filtered := 0
	for _, r := range rs {
		if strings.HasPrefix(r.id, "skip-") {
			filtered++
			continue
		}
		site := "none"
		if r.site != nil {
			site = *r.site
			want.put(idx, site+"#"+r.id, r.ts, map[string]string{"id": r.id})
		}
		want.put(e.table, r.id, r.ts, map[string]string{
			"kind": protoKinds[r.kind], "value": renderDouble(r.value), "cents": cents(r.value), "ts": renderTime(r.ts),
			"site": site, "tags": fmt.Sprintf(`{"a":%d,"b":%d}`, r.tags["a"], r.tags["b"]), "a": fmt.Sprint(r.tags["a"]),
		})
		for _, p := range r.points {
			want.put(e.table, fmt.Sprintf("%s#%d", r.id, p.N), r.ts, map[string]string{"v": renderDouble(p.V)})
		}
	}
	if dl, reasons := deadLettered(st); dl != 0 {
		t.Errorf("%d dead letters: %v", dl, reasons)
	}
	if num(st, "committed") != n-filtered || num(st, "filtered") != filtered || num(st, "rows") != want.rows() {
		t.Errorf("status: committed %v filtered %v rows %v; want %d, %d, %d", st["committed"], st["filtered"], st["rows"], n-filtered, filtered, want.rows())
	}
	if m, _ := st["mapping"].(map[string]any); m["format"] != "protobuf" {
		t.Errorf("status mapping %v", m)
	}
	e.checkTables(want)
	t.Logf("%d protobuf messages (%d filtered) → %d rows in 2 tables in %v", n, filtered, want.rows(), took.Round(time.Millisecond))
}
