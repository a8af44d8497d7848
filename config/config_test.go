package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// cleanEnv clears every variable Parse reads, so that the developer's or
// CI's environment cannot change a test's outcome.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, d := range topDefaults {
		t.Setenv(envName(d.key), "")
	}
	t.Setenv("PORT", "")
}

// minimal is the smallest valid config; tests append keys of its sink or
// pipeline at the end.
const minimal = `
project: p
state: {instance: i}
pipelines:
  - name: orders
    source: {subscription: orders-sub}
    sink:
      table: orders
`

func mustParse(t *testing.T, yaml string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// update rewrites the .expected files of TestBadConfigs from what Load
// says: go test ./config -run TestBadConfigs -update (then read the diff);
// and docs/pubsink.schema.json: go test ./config -run TestSchemaFileIsUpToDate -update.
var update = flag.Bool("update", false, "rewrite testdata/*.bad.expected and docs/pubsink.schema.json")

// TestBadConfigs parses every testdata/NAME.bad.yaml and expects exactly the
// problems listed in NAME.bad.expected, in that order: file order, each
// with its line.
func TestBadConfigs(t *testing.T) {
	forEachBadConfig(t, func(t *testing.T, _, file string) {
		want, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".expected")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(file)
		if cfg != nil {
			t.Errorf("Load returned a config along with problems")
		}
		var problems Problems
		if !errors.As(err, &problems) {
			t.Fatalf("Load error = %v, want Problems", err)
		}
		if *update {
			if err := os.WriteFile(strings.TrimSuffix(file, ".yaml")+".expected", []byte(problems.Error()+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		got := strings.Split(problems.Error(), "\n")
		wantLines := strings.Split(strings.TrimRight(string(want), "\n"), "\n")
		if !slices.Equal(got, wantLines) {
			t.Errorf("problems:\n%s\n\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
		}
	})
}

// forEachBadConfig runs test on each testdata/NAME.bad.yaml, as subtest
// NAME, in the environment that the fixtures expect.
func forEachBadConfig(t *testing.T, test func(t *testing.T, name, file string)) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".bad.yaml")
		t.Run(name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv("PUBSINK_FIXTURE_UNSET", "")
			os.Unsetenv("PUBSINK_FIXTURE_UNSET") // restored by Setenv's cleanup
			test(t, name, file)
		})
	}
}

// TestExamplesFileIsValid loads the documented examples.yaml at the repo
// root, so that the docs cannot rot.
func TestExamplesFileIsValid(t *testing.T) {
	cleanEnv(t)
	t.Setenv("GOOGLE_CLOUD_PROJECT", "")
	t.Setenv("BIGTABLE_INSTANCE", "")
	data, err := os.ReadFile("../examples.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(data)
	if err != nil {
		t.Fatalf("examples.yaml: %v", err)
	}
	if ws := Warnings(cfg, data); len(ws) > 0 {
		t.Errorf("examples.yaml, which users copy, has warnings:\n%v", ws)
	}
	if len(cfg.Pipelines) != 3 {
		t.Fatalf("examples.yaml has %d pipelines, want orders, clicks and customers", len(cfg.Pipelines))
	}
	orders, clicks, customers := cfg.Pipelines[0], cfg.Pipelines[1], cfg.Pipelines[2]
	if cfg.Project != "my-project" || cfg.State.Instance != "my-instance" {
		t.Errorf("${VAR:-default} gave project %q, instance %q", cfg.Project, cfg.State.Instance)
	}
	if !orders.ExactlyOnce() || orders.DedupeKeyAttribute() != "order_id" || orders.Source.TimestampAttribute != "event_ts" ||
		orders.Source.TrackingSubscription == "" || orders.DeadLetter.Topic == "" ||
		orders.Sink.RowKey != "{attributes.customer_id}#{attributes.order_id}" || orders.Sink.Columns["amount"] != "{data.amount}" {
		t.Errorf("orders is not the documented pipeline: %+v", orders)
	}
	if clicks.ExactlyOnce() || clicks.Sink.RowKey != "{attributes.user_id}#{message_id}" || clicks.DeadLetter.File == "" {
		t.Errorf("clicks is not the documented pipeline: %+v", clicks)
	}
	if !customers.ExactlyOnce() || !customers.Source.Ordering || customers.Source.TimestampTemplate != "{data.source.ts_ms}" ||
		customers.Sink.WriteMode != WriteReplaceIfNewer || customers.Sink.OnMissing != MissingSkip || customers.Filter != "" ||
		customers.Sink.Op != "data.op == 'd' ? 'delete' : data.op in ['c', 'u', 'r'] ? 'set' : 'dead_letter'" || len(customers.Sink.ChangeTables()) != 1 {
		t.Errorf("customers is not the documented Debezium pipeline: %+v", customers)
	}
	if orders.Sink.Instance != cfg.State.Instance {
		t.Errorf("orders sink instance = %q, want state.instance %q", orders.Sink.Instance, cfg.State.Instance)
	}
}

func TestDefaultsFillEveryUnsetKey(t *testing.T) {
	cleanEnv(t)
	cfg := mustParse(t, minimal)
	want := Config{
		Project:         "p",
		Log:             Log{Level: "info", Format: "json"},
		HTTP:            HTTP{Addr: ":8080"},
		ShutdownTimeout: 20 * time.Second,
		State:           State{Instance: "i", Table: "pubsink_state"},
		Pipelines: []Pipeline{{
			Name: "orders",
			Mode: ModeExactlyOnce,
			Source: Source{
				Subscription:           "orders-sub",
				TimestampFormat:        TimestampAuto,
				Streams:                4,
				MaxOutstandingMessages: 1000,
				StallTimeout:           2 * time.Minute,
			},
			Dedupe:    Dedupe{Window: 10 * time.Minute},
			Watermark: Watermark{EstimationBand: 10 * time.Second, LateData: LateAccept},
			Payload:   Payload{Format: FormatJSON},
			Sink: Sink{
				Type:         SinkBigtable,
				Instance:     "i",
				Table:        "orders",
				ColumnFamily: "d",
				RowKey:       "{message_id}",
				Columns:      map[string]string{"data": "{data}"},
				Timestamp:    CellTimeEvent,
				// No op: a plain mapping, as before change mappings.
				WriteMode:          WriteUpsert,
				OnMissing:          MissingDeadLetter,
				TombstoneFamily:    "tombstone",
				TombstoneRetention: 168 * time.Hour,
				MaxRows:            1000,
				Batch:              Batch{MaxMessages: 500, MaxBytes: 4 * MiB, MaxDelay: 20 * time.Millisecond},
			},
		}},
	}
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", *cfg, want)
	}
}

func TestDefaultsFollowOtherKeys(t *testing.T) {
	cleanEnv(t)
	t.Run("the row key defaults to the dedupe attribute", func(t *testing.T) {
		cfg := mustParse(t, strings.Replace(minimal, "{subscription: orders-sub}", "{subscription: orders-sub, id_attribute: order_id}", 1))
		if got := cfg.Pipelines[0].Sink.RowKey; got != "{attributes.order_id}" {
			t.Errorf("row_key = %q, want {attributes.order_id}", got)
		}
	})
	t.Run("the dead-letter subscription defaults to TOPIC-replay", func(t *testing.T) {
		cfg := mustParse(t, minimal+"    dead_letter: {topic: projects/q/topics/dlq}\n")
		if got := cfg.Pipelines[0].DeadLetter.Subscription; got != "dlq-replay" {
			t.Errorf("dead_letter.subscription = %q, want dlq-replay", got)
		}
	})
	t.Run("the sink's app profile does not follow the state's", func(t *testing.T) {
		cfg := mustParse(t, strings.Replace(minimal, "{instance: i}", "{instance: i, app_profile: pubsink-state}", 1))
		if got := cfg.Pipelines[0].Sink; got.Instance != "i" || got.AppProfile != "" {
			t.Errorf("sink instance %q, app_profile %q; want i and the instance's default profile", got.Instance, got.AppProfile)
		}
	})
	t.Run("an explicit zero is not replaced by the default", func(t *testing.T) {
		_, err := Parse([]byte(strings.Replace(minimal, "{subscription: orders-sub}", "{subscription: orders-sub, streams: 0}", 1)))
		if err == nil || err.Error() != "pipelines[0].source.streams: must be 1 to 64, not 0 (line 6)" {
			t.Errorf("Parse error = %v, want the streams problem", err)
		}
	})
	t.Run("an explicit zero stall timeout turns the watchdog off", func(t *testing.T) {
		cfg := mustParse(t, strings.Replace(minimal, "{subscription: orders-sub}", "{subscription: orders-sub, stall_timeout: 0}", 1))
		if got := cfg.Pipelines[0].Source.StallTimeout; got != 0 {
			t.Errorf("stall_timeout = %v, want 0 (off), not the default", got)
		}
		cfg = mustParse(t, strings.Replace(minimal, "{subscription: orders-sub}", "{subscription: orders-sub, stall_timeout: 30s}", 1))
		if got := cfg.Pipelines[0].Source.StallTimeout; got != 30*time.Second {
			t.Errorf("stall_timeout = %v, want 30s", got)
		}
	})
	t.Run("a key with no value is unset", func(t *testing.T) {
		cfg := mustParse(t, minimal+"    dedupe:\n      window:\nlog:\n")
		if cfg.Pipelines[0].Dedupe.Window != 10*time.Minute || cfg.Log.Level != "info" {
			t.Errorf("window = %v, log = %+v, want the defaults", cfg.Pipelines[0].Dedupe.Window, cfg.Log)
		}
	})
}

func TestColumnQualifiersKeepTheirCase(t *testing.T) {
	cleanEnv(t)
	cfg := mustParse(t, minimal+"      columns: {Amount: \"{data.amount}\", amountCents: \"{data.cents}\"}\n")
	want := map[string]string{"Amount": "{data.amount}", "amountCents": "{data.cents}"}
	if got := cfg.Pipelines[0].Sink.Columns; !reflect.DeepEqual(got, want) {
		t.Errorf("columns = %v, want %v", got, want)
	}
}

func TestEnvironmentOverridesReachTheStruct(t *testing.T) {
	cleanEnv(t)
	t.Setenv("PUBSINK_STATE_INSTANCE", "from-env")
	t.Setenv("PUBSINK_PROJECT", "env-project")
	t.Setenv("PUBSINK_SHUTDOWN_TIMEOUT", "7s")
	t.Setenv("PUBSINK_LOG_LEVEL", "debug")
	t.Setenv("PUBSINK_STATE_TABLE", "") // empty: ignored
	t.Setenv("PUBSINK_STATE_APP_PROFILE", "pubsink-state")
	cfg := mustParse(t, minimal)
	if cfg.State.Instance != "from-env" || cfg.Project != "env-project" || cfg.ShutdownTimeout != 7*time.Second ||
		cfg.Log.Level != "debug" || cfg.State.Table != "pubsink_state" || cfg.State.AppProfile != "pubsink-state" {
		t.Errorf("overrides not applied: %+v", cfg)
	}
	if got := cfg.Pipelines[0].Sink.Instance; got != "from-env" {
		t.Errorf("sink.instance = %q, want the overridden state.instance", got)
	}
}

func TestEnvironmentOverrideOfTheWrongTypeIsAProblem(t *testing.T) {
	cleanEnv(t)
	t.Setenv("PUBSINK_SHUTDOWN_TIMEOUT", "soon")
	_, err := Parse([]byte(minimal))
	want := `shutdown_timeout: $PUBSINK_SHUTDOWN_TIMEOUT: "soon" is not a duration: write it with a unit, like 20s, 500ms or 10m`
	if err == nil || err.Error() != want {
		t.Errorf("Parse error = %v, want %s", err, want)
	}
}

func TestPortOverridesHTTPAddr(t *testing.T) {
	for _, tc := range []struct {
		name, port, pubsinkAddr, want, problem string
	}{
		{name: "without PORT the file wins", want: "127.0.0.1:9000"},
		{name: "PORT overrides the file", port: "8081", want: ":8081"},
		{name: "PUBSINK_HTTP_ADDR overrides PORT", port: "8081", pubsinkAddr: ":9090", want: ":9090"},
		{name: "a PORT that is not a port is a problem", port: "http", problem: `http.addr: $PORT="http" is not a port number (line 9)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv("PORT", tc.port)
			t.Setenv("PUBSINK_HTTP_ADDR", tc.pubsinkAddr)
			cfg, err := Parse([]byte(minimal + "http: {addr: \"127.0.0.1:9000\"}\n"))
			if tc.problem != "" {
				if err == nil || err.Error() != tc.problem {
					t.Fatalf("Parse error = %v, want %s", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.HTTP.Addr != tc.want {
				t.Errorf("http.addr = %q, want %q", cfg.HTTP.Addr, tc.want)
			}
		})
	}
}

func TestVariablesExpandInValues(t *testing.T) {
	cleanEnv(t)
	t.Setenv("ORDERS_SUB", "orders-from-env")
	t.Setenv("EMPTY", "")
	cfg := mustParse(t, `
project: ${MISSING_PROJECT_VAR:-fallback}
state: {instance: "${EMPTY}i"}
pipelines:
  - name: orders
    source: {subscription: "${ORDERS_SUB}", streams: "${STREAMS:-8}", timestamp_attribute: "$${not a var} $HOME"}
    dedupe: {window: "${WINDOW:-15m}"}
    sink: {table: orders}
`)
	p := cfg.Pipelines[0]
	if cfg.Project != "fallback" || cfg.State.Instance != "i" || p.Source.Subscription != "orders-from-env" ||
		p.Source.Streams != 8 || p.Dedupe.Window != 15*time.Minute || p.Source.TimestampAttribute != "${not a var} $HOME" {
		t.Errorf("expansion: %+v", cfg)
	}
}

func TestExpandEnv(t *testing.T) {
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"A": "a", "EMPTY": ""}[name]
		return v, ok
	}
	for _, tc := range []struct{ in, want, err string }{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "a"},
		{in: "x${A}y${A}", want: "xaya"},
		{in: "${EMPTY}", want: ""},
		{in: "${EMPTY:-d}", want: "d"},
		{in: "${UNSET:-d}", want: "d"},
		{in: "${UNSET:-}", want: ""},
		{in: "${A:-d}", want: "a"},
		{in: "$A $ {A} $$", want: "$A $ {A} $$"},
		{in: "$${A}", want: "${A}"},
		{in: "${UNSET}", err: "${UNSET} is not set (write ${UNSET:-default} for a default)"},
		{in: "${A", err: `unterminated ${ in "${A"`},
		{in: "${}", err: `${}: "" is not an environment variable name`},
		{in: "${A-B}", err: `${A-B}: "A-B" is not an environment variable name`},
	} {
		got, err := expandEnv(tc.in, env)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("expandEnv(%q) error = %v, want %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("expandEnv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		str  string
		err  bool
	}{
		{in: "0", want: 0, str: "0B"},
		{in: "1024", want: 1024, str: "1KiB"},
		{in: "1000", want: 1000, str: "1KB"},
		{in: "1", want: 1, str: "1B"},
		{in: "64MiB", want: 64 << 20, str: "64MiB"},
		{in: "4MB", want: 4_000_000, str: "4MB"},
		{in: "512KiB", want: 512 << 10, str: "512KiB"},
		{in: "1GiB", want: 1 << 30, str: "1GiB"},
		{in: "1.5GiB", want: 3 << 29, str: "1536MiB"},
		{in: "2TiB", want: 2 << 40, str: "2TiB"},
		{in: "1.1TB", want: 1_100_000_000_000, str: "1100GB"},
		{in: "512 kib", want: 512 << 10, str: "512KiB"},
		{in: " 7B ", want: 7, str: "7B"},
		{in: "0.5B", want: 0, str: "0B"},
		{in: "1025", want: 1025, str: "1025B"},
		{in: "8191.999TiB", want: 9007198155229364, str: "9007198155229364B"},
		{in: "64M", err: true},
		{in: "64XB", err: true},
		{in: "MiB", err: true},
		{in: "-1MiB", err: true},
		{in: "1.MiB", err: true},
		{in: ".5MiB", err: true},
		{in: "1e3", err: true},
		{in: "0x10", err: true},
		{in: "9999999TiB", err: true},
		{in: "99999999999999999999", err: true},
		{in: "", err: true},
	} {
		got, err := ParseByteSize(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("ParseByteSize(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("ByteSize(%d).String() = %q, want %q", got, got.String(), tc.str)
		}
		if back, err := ParseByteSize(got.String()); err != nil || back != got {
			t.Errorf("ParseByteSize(%q) = %d, %v; want it to read back %d", got.String(), back, err, got)
		}
	}
	if s := ByteSize(-2048).String(); s != "-2KiB" {
		t.Errorf("ByteSize(-2048).String() = %q, want -2KiB", s)
	}
}

func TestByteSizeKeysAcceptIntegersAndStrings(t *testing.T) {
	cleanEnv(t)
	cfg := mustParse(t, strings.Replace(minimal, "{subscription: orders-sub}", "{subscription: orders-sub, max_outstanding_bytes: 1048576}", 1)+
		"      batch: {max_bytes: 512KiB}\n")
	if got := cfg.Pipelines[0].Source.MaxOutstandingBytes; got != MiB {
		t.Errorf("max_outstanding_bytes = %v, want 1MiB", got)
	}
	if got := cfg.Pipelines[0].Sink.Batch.MaxBytes; got != 512*KiB {
		t.Errorf("batch.max_bytes = %v, want 512KiB", got)
	}
}

func TestNamesAreQualifiedWithTheProject(t *testing.T) {
	cfg := &Config{Project: "p"}
	for _, tc := range []struct{ got, want string }{
		{cfg.SubscriptionName("s"), "projects/p/subscriptions/s"},
		{cfg.SubscriptionName("projects/q/subscriptions/s"), "projects/q/subscriptions/s"},
		{cfg.TopicName("t"), "projects/p/topics/t"},
		{cfg.TopicName("projects/q/topics/t"), "projects/q/topics/t"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	p := Pipeline{Mode: ModeAtLeastOnce, Source: Source{IDAttribute: "order_id"}}
	if p.ExactlyOnce() || p.DedupeKeyAttribute() != "order_id" {
		t.Errorf("ExactlyOnce() = %v, DedupeKeyAttribute() = %q", p.ExactlyOnce(), p.DedupeKeyAttribute())
	}
}

func TestLoadOfAMissingFileIsNotProblems(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	var problems Problems
	if err == nil || errors.As(err, &problems) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load error = %#v, want a plain not-exist error", err)
	}
}

// FuzzParse checks that no input makes Parse panic, and that it returns
// either a config or problems. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	for _, file := range []string{"../examples.yaml", "testdata/mappings.good.yaml", "testdata/changes.good.yaml"} {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of them", cfg, err)
		}
		var problems Problems
		if err != nil && (!errors.As(err, &problems) || len(problems) == 0) {
			t.Fatalf("Parse error %v is not a non-empty Problems", err)
		}
		if err != nil {
			return
		}
		// An accepted configuration is final: validating it again finds
		// nothing and changes nothing, and the same file parses to the
		// same configuration.
		before := fmt.Sprintf("%#v", *cfg)
		c := &collector{}
		validate(cfg, c)
		if len(c.list) > 0 {
			t.Fatalf("an accepted configuration fails validation again: %v", c.list)
		}
		if after := fmt.Sprintf("%#v", *cfg); after != before {
			t.Fatalf("validating an accepted configuration changed it:\n%s\n%s", before, after)
		}
		again, err := Parse(data)
		if err != nil || fmt.Sprintf("%#v", *again) != before {
			t.Fatalf("the same file parses differently the second time (%v)", err)
		}
	})
}

// TestLoadResolvesFilePathsAgainstTheFilesDirectory: Load, which knows the
// file, makes a relative schema file and dead-letter file relative to its
// directory; absolute paths and "topic" stay as written.
func TestLoadResolvesFilePathsAgainstTheFilesDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pubsink.yaml")
	abs := filepath.Join(t.TempDir(), "dl.jsonl")
	yaml := `project: p
pipelines:
  - name: a
    mode: at_least_once
    source: {subscription: sub-a}
    payload: {format: protobuf, schema: protos/a.proto, message: x.A}
    sink: {type: stdout}
    dead_letter: {file: dl/a.jsonl}
  - name: b
    mode: at_least_once
    source: {subscription: sub-b}
    payload: {format: avro}
    sink: {type: stdout}
    dead_letter: {file: ` + abs + `}
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Pipelines[0], cfg.Pipelines[1]
	for _, c := range []struct{ key, got, want string }{
		{"a: payload.schema", a.Payload.Schema, filepath.Join(dir, "protos", "a.proto")},
		{"a: dead_letter.file", a.DeadLetter.File, filepath.Join(dir, "dl", "a.jsonl")},
		{"b: payload.schema", b.Payload.Schema, SchemaTopic},
		{"b: dead_letter.file", b.DeadLetter.File, abs},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}
}
