package maptest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
)

// The cases of these tests run against testdata/pipelines.yaml: events
// (JSON, a filter, a computed column), items (two tables, each), people (a
// change mapping, on_missing: delete), readings and gauges (the topic's
// Avro and Protocol Buffers schemas).

func loadConfig(t *testing.T) *config.Config {
	t.Helper()
	data, err := os.ReadFile("testdata/pipelines.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ResolvePaths("testdata")
	return cfg
}

// smallCells are limits under which a cell over 16 bytes is too large.
func smallCells(config.Pipeline) sinks.Limits { return sinks.Limits{MaxCellBytes: 16} }

// runCases runs the cases of the tests file text (in testdata/) and returns
// what Run wrote.
func runCases(t *testing.T, text string, o Options) (string, Summary) {
	t.Helper()
	f, err := Parse([]byte(text), "testdata")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	s, err := New(loadConfig(t), f, []byte(text), smallCells)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var out bytes.Buffer
	sum, err := s.Run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), sum
}

const passing = `
cases:
  - name: a event is its row
    pipeline: events
    message:
      json: {kind: login}
      attributes: {user: u1}
      message_id: "m-1"
      publish_time: 2026-03-01T10:00:00.123Z
    expect:
      rows:
        - key: "u1#m-1"
          table: events
          family: d
          columns: {kind: login, upper: LOGIN}
          timestamp: 2026-03-01T10:00:00.123Z
          op: set
          mode: plain
      event_time: 2026-03-01T10:00:00.123Z
      dedupe_key: m-1
  - name: some columns are enough with only false
    pipeline: events
    message: {json: {kind: x}, attributes: {user: u1}}
    expect:
      rows: [{key: "u1#test-message", only: false, columns: {kind: x}}]
  - name: a skipped event is filtered
    pipeline: events
    message: {json: {kind: x}, attributes: {user: u1, skip: "yes"}}
    expect: {filtered: true}
  - name: an event without a user is dead-lettered with the copy's error text
    pipeline: events
    message: {data: '{"kind": "x"}'}
    expect:
      dead_letter: {reason: missing_field, error: "sink.row_key: {attributes.user}: missing field: attribute not set"}
  - name: a long kind is too large
    pipeline: events
    message: {json: {kind: "a kind longer than sixteen bytes"}, attributes: {user: u1}}
    expect:
      dead_letter: {reason: too_large}
  - name: an order's items go to two tables
    pipeline: items
    message:
      data_base64: eyJpdGVtcyI6IFt7InNrdSI6ICJzMSIsICJxdHkiOiAyfSwgeyJza3UiOiAiczIiLCAicXR5IjogMX1dfQ==
      attributes: {order: o1}
    expect:
      rows:
        - {table: items, key: s1, columns: {qty: "2"}}
        - {table: items, key: s2, columns: {qty: "1"}}
        - {table: totals, key: o1, columns: {count: "2"}}
  - name: an order without items makes no row
    pipeline: items
    message: {json: {items: []}, attributes: {order: o2}}
    expect: {no_rows: true}
  - name: a person gone is a delete
    pipeline: people
    message: {json: {id: 7, gone: true}}
    expect:
      rows: [{key: "7", op: delete, mode: upsert}]
  - name: a person's missing email is deleted
    pipeline: people
    message: {json: {id: 7, name: Ann}}
    expect:
      rows: [{key: "7", mode: upsert, columns: {name: Ann}, delete: [email]}]
  - name: a reading in the topic's Avro schema, JSON encoded
    pipeline: readings
    message:
      json: {site: north, celsius: 21.5}
      schema: {file: reading.avsc, revision: r1}
    expect:
      rows: [{key: north, columns: {celsius: "21.5"}}]
  - name: a reading in the topic's Avro schema, binary encoded
    pipeline: readings
    message:
      data_base64: Cm5vcnRoAAAAAACANUA=
      schema: {file: reading.avsc, revision: r1, encoding: binary}
    expect:
      rows: [{key: north, columns: {celsius: "21.5"}}]
  - name: a gauge in the topic's Protocol Buffers schema, binary encoded
    pipeline: gauges
    message:
      data_base64: CgVzb3V0aBEAAAAAAADoPw==
      schema: {file: gauge.proto, revision: g1, encoding: binary}
    expect:
      rows: [{key: south, columns: {level: "0.75"}}]
  - name: a gauge in JSON
    pipeline: gauges
    message:
      json: {site: south, level: 0.75}
      schema: {file: gauge.proto, revision: g1}
    expect:
      rows: [{key: south, columns: {level: "0.75"}}]
  - name: a gauge of a revision no case gives is dead-lettered
    pipeline: gauges
    message:
      json: {site: south, level: 0.75}
      attributes: {googclient_schemaname: projects/test/schemas/gauge, googclient_schemarevisionid: g9, googclient_schemaencoding: JSON}
    expect:
      dead_letter: {reason: schema_unavailable, error: "no case of the tests file gives revision g9 of projects/test/schemas/gauge"}
  - name: a reading without its schema is dead-lettered
    pipeline: readings
    message: {json: {site: north, celsius: 21.5}}
    expect:
      dead_letter: {reason: schema_unavailable}
`

func TestEveryExpectationKindPasses(t *testing.T) {
	out, sum := runCases(t, passing, Options{})
	if sum.Failed != 0 || sum.Passed != 15 {
		t.Fatalf("passed %d, failed %d, want 15 and 0:\n%s", sum.Passed, sum.Failed, out)
	}
	if !strings.HasPrefix(out, "ok   [events] a event is its row\n") {
		t.Errorf("first line: %q", strings.SplitN(out, "\n", 2)[0])
	}
}

func TestAFailingCaseSaysWhatDiffers(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		diff       []string
	}{
		{"a column, the key, the timestamp, the op and an extra column", `
cases:
  - name: c
    pipeline: events
    message: {json: {kind: login}, attributes: {user: u1}}
    expect:
      rows:
        - key: "u2#test-message"
          columns: {kind: logout}
          timestamp: 2026-01-01T00:00:01Z
          op: delete_columns
          delete: [kind]
          mode: upsert`, []string{
			`rows[0].key: expected "u2#test-message", got "u1#test-message"`,
			`rows[0].op: expected delete_columns, got set`,
			`rows[0].mode: expected upsert, got plain`,
			`rows[0].timestamp: expected 2026-01-01T00:00:01Z, got 2026-01-01T00:00:00Z`,
			`rows[0].columns.kind: expected "logout", got "login"`,
			`rows[0].columns.upper: not expected (only: true), got "LOGIN"`,
			`rows[0].delete: expected [kind], got none`,
		}},
		{"a missing column, the table and the family", `
cases:
  - name: c
    pipeline: events
    message: {json: {kind: login}, attributes: {user: u1}}
    expect:
      rows: [{key: "u1#test-message", table: other, family: f, only: false, columns: {nope: x}}]`, []string{
			`rows[0].table: expected other, got events`,
			`rows[0].family: expected f, got d`,
			`rows[0].columns.nope: expected "x", got no such column`,
		}},
		{"another outcome", `
cases:
  - name: c
    pipeline: events
    message: {json: {kind: x}, attributes: {user: u1, skip: "yes"}}
    expect: {rows: [{key: k}]}`, []string{
			`outcome: expected 1 row, got filtered`,
		}},
		{"a dead letter's reason and text", `
cases:
  - name: c
    pipeline: events
    message: {json: {kind: x}}
    expect: {dead_letter: {reason: invalid_payload, error: "no such thing"}}`, []string{
			`dead_letter.reason: expected invalid_payload, got missing_field (sink.row_key: {attributes.user}: missing field: attribute not set)`,
			`dead_letter.error: expected it to contain "no such thing", got "sink.row_key: {attributes.user}: missing field: attribute not set"`,
		}},
		{"rows too few and too many", `
cases:
  - name: c
    pipeline: items
    message: {json: {items: [{sku: s1, qty: 2}]}, attributes: {order: o1}}
    expect: {rows: [{table: items, key: s1, columns: {qty: "2"}}]}
  - name: d
    pipeline: items
    message: {json: {items: []}, attributes: {order: o1}}
    expect: {rows: [{table: items, key: s1}]}`, []string{
			`rows: expected 1 row, got 2`,
			`rows[1]: not expected, got table totals, family d, key "o1", op set, mode plain, timestamp 2026-01-01T00:00:00Z`,
			`outcome: expected 1 row, got no rows`,
		}},
		{"the deleted columns, the event time and the dedupe key", `
cases:
  - name: c
    pipeline: people
    message: {json: {id: 7, name: Ann}}
    expect:
      rows: [{key: "7", columns: {name: Ann}}]
      event_time: 2026-01-02T00:00:00Z
      dedupe_key: k`, []string{
			`rows[0].delete: expected none, got [email]`,
			`event_time: expected 2026-01-02T00:00:00Z, got 2026-01-01T00:00:00Z`,
			`dedupe_key: expected "k", got "test-message"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, sum := runCases(t, tc.text, Options{})
			if sum.Passed != 0 || sum.Failed == 0 {
				t.Fatalf("passed %d, failed %d:\n%s", sum.Passed, sum.Failed, out)
			}
			var got []string
			for _, l := range strings.Split(out, "\n") {
				if d, ok := strings.CutPrefix(l, "    "); ok {
					got = append(got, d)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.diff, "\n") {
				t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.diff, "\n"))
			}
		})
	}
}

func TestOptionsSelectCases(t *testing.T) {
	out, sum := runCases(t, passing, Options{Pipeline: "items", Run: regexp.MustCompile("without")})
	if sum.Passed != 1 || out != "ok   [items] an order without items makes no row\n" {
		t.Errorf("passed %d:\n%s", sum.Passed, out)
	}
	out, _ = runCases(t, passing, Options{Run: regexp.MustCompile("^a skipped"), Verbose: true})
	if want := "ok   [events] a skipped event is filtered\n    got:\n      filtered\n"; out != want {
		t.Errorf("verbose:\n%s\nwant:\n%s", out, want)
	}
}

func TestCasesThatDoNotFitTheConfiguration(t *testing.T) {
	text := `cases:
  - name: a
    pipeline: event
    message: {data: x}
    expect: {filtered: true}
  - name: b
    pipeline: events
    message:
      data: x
      schema: {file: reading.avsc, revision: r1}
    expect: {filtered: true}
`
	f, err := Parse([]byte(text), "testdata")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(loadConfig(t), f, []byte(text), smallCells)
	var ps config.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %v, want problems", err)
	}
	want := `cases[0].pipeline: no pipeline "event" in the configuration (did you mean events?) (line 3)
cases[1].message.schema: pipeline events does not read its topic's schema (payload.schema: topic): its messages name no revision (line 10)`
	if ps.Error() != want {
		t.Errorf("got:\n%s\nwant:\n%s", ps, want)
	}
}

// TestBadTestsFiles parses each testdata/bad/*.test.yaml and compares its
// problems with the .expected file beside it; -update rewrites those.
func TestBadTestsFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.test.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad files: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(data, "testdata")
			var ps config.Problems
			if !errors.As(err, &ps) {
				t.Fatalf("error %v, want problems", err)
			}
			got := ps.Error() + "\n"
			exp := strings.TrimSuffix(path, ".test.yaml") + ".expected"
			if *update {
				if err := os.WriteFile(exp, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(exp)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("problems:\n%s\nwant (%s):\n%s", got, exp, want)
			}
		})
	}
}

// TestADeadLetterErrorIsTheCopysText: the text an expected error is looked
// for in is the dead-letter copy's pubsink_error, cut to 1 KiB as every
// output stores it, not the whole error.
func TestADeadLetterErrorIsTheCopysText(t *testing.T) {
	long := strings.Repeat("a", 1100)
	data := []byte("project: p\nstate: {instance: i}\npipelines:\n  - name: long\n    mode: at_least_once\n" +
		"    source: {subscription: long-sub}\n    sink: {table: t, row_key: \"{attributes." + long + "}\", columns: {c: \"{data}\"}}\n")
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	text := "cases:\n  - name: cut\n    pipeline: long\n    message: {data: x}\n    expect: {dead_letter: {reason: missing_field, error: \"aaa…\"}}\n"
	f, err := Parse([]byte(text), "testdata")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, f, []byte(text), smallCells)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if sum, _ := s.Run(context.Background(), Options{Verbose: true}, &out); sum.Passed != 1 {
		t.Errorf("the error is not cut as the copy's is:\n%s", out.String())
	}
}
