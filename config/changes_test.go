package config

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
)

// Tests of issue 27's keys: change mappings (op, write_mode, on_missing,
// on_missing_columns, delete_columns), the tombstone family and retention,
// and source.ordering. Their problems are in testdata/changes.bad.yaml.

// TestChangesGoodConfig parses testdata/changes.good.yaml, which uses every
// new key, into the structs it means.
func TestChangesGoodConfig(t *testing.T) {
	cleanEnv(t)
	t.Setenv("PUBSINK_FIXTURE_ORDERED", "")
	data, err := os.ReadFile("testdata/changes.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if ws := Warnings(cfg, data); len(ws) > 0 {
		t.Errorf("warnings: %v", ws)
	}
	customers, orders := cfg.Pipelines[0], cfg.Pipelines[1]
	if !customers.Source.Ordering || !orders.Source.Ordering {
		t.Errorf("ordering = %v, %v; want true (a YAML boolean, and TRUE from ${VAR:-TRUE})", customers.Source.Ordering, orders.Source.Ordering)
	}
	s := customers.Sink
	if s.Op != "data.op == 'd' ? 'delete' : 'set'" || s.WriteMode != WriteReplaceIfNewer || s.OnMissing != MissingSkip ||
		!reflect.DeepEqual(s.OnMissingColumns, map[string]string{"eMail": MissingDelete}) || s.DeleteColumns != nil ||
		s.TombstoneFamily != "ts" || s.TombstoneRetention != 240*time.Hour {
		t.Errorf("customers sink = %+v", s)
	}
	m := s.AllMappings()[0]
	if !m.IsChange() || m.MissingPolicy("eMail") != MissingDelete || m.MissingPolicy("Name") != MissingSkip {
		t.Errorf("the single mapping = %+v", m)
	}

	k := orders.Sink
	if k.Op != "" || k.OnMissingColumns != nil || k.DeleteColumns != nil || k.TombstoneFamily != "tombstone" || k.TombstoneRetention != 168*time.Hour {
		t.Errorf("orders sink = %+v: the single mapping's keys must stay unset, the tombstones' defaulted", k)
	}
	wantMappings := []Mapping{
		{RowKey: "{data.id}", Columns: map[string]string{"Status": "{data.status}", "Note": "{data.note}"},
			WriteMode: WriteUpsert, OnMissingColumns: map[string]string{"Note": MissingSkip}},
		{ColumnFamily: "x", RowKey: "{data.id}", Columns: map[string]string{"a": "{data.a}", "B": "{data.b}"},
			Op: OpDeleteColumns, DeleteColumns: []string{"B", "17"}},
		{Table: "archive", RowKey: "{data.id}", Columns: map[string]string{"v": "{data}"}, Op: OpDelete, OnMissing: MissingDeadLetter},
	}
	if !reflect.DeepEqual(k.Mappings, wantMappings) {
		t.Errorf("mappings:\n got %+v\nwant %+v", k.Mappings, wantMappings)
	}
	all := k.AllMappings()
	if all[0].WriteMode != WriteUpsert || all[1].WriteMode != WriteInsert || all[1].OnMissing != MissingEmpty || all[2].OnMissing != MissingDeadLetter {
		t.Errorf("AllMappings does not default write_mode and on_missing from the sink: %+v", all)
	}
	if got := k.ChangeTables(); !slices.Equal(got, []string{"orders", "archive"}) {
		t.Errorf("ChangeTables = %v", got)
	}
}

// TestBooleansAcceptYAMLAndStrings: a bool key takes a YAML boolean, or a
// string of one as YAML spells it (so that ${VAR} works), and refuses
// anything else.
func TestBooleansAcceptYAMLAndStrings(t *testing.T) {
	cleanEnv(t)
	t.Setenv("PUBSINK_TEST_ORDERED", "true")
	with := func(v string) string {
		return strings.Replace(minimal, "{subscription: orders-sub}", "{subscription: orders-sub, ordering: "+v+"}", 1)
	}
	for v, want := range map[string]bool{
		"true": true, "false": false, "True": true, "FALSE": false, `"true"`: true, `" false "`: false, `"TRUE"`: true,
		`"${PUBSINK_TEST_ORDERED}"`: true, `"${PUBSINK_TEST_UNSET:-false}"`: false, "": false,
	} {
		if got := mustParse(t, with(v)).Pipelines[0].Source.Ordering; got != want {
			t.Errorf("ordering: %s = %v, want %v", v, got, want)
		}
	}
	for v, problem := range map[string]string{
		"yes":       `"yes" is not a boolean: write true or false`,
		`"on"`:      `"on" is not a boolean: write true or false`,
		"1":         `1 is not a boolean: write true or false`,
		"0.5":       `0.5 is not a boolean: write true or false`,
		`"t"`:       `"t" is not a boolean: write true or false`,
		"[true]":    `a list is not a boolean: write true or false`,
		"{a: true}": `a mapping is not a boolean: write true or false`,
	} {
		_, err := Parse([]byte(with(v)))
		if want := "pipelines[0].source.ordering: " + problem + " (line 6)"; err == nil || err.Error() != want {
			t.Errorf("ordering: %s: error %v, want %s", v, err, want)
		}
	}
}

// TestStringListsTakeScalarsAsText: a list of strings takes YAML numbers
// and booleans as their text, as string keys do; an element that is no
// scalar is a problem of its own, which hides the rest of it.
func TestStringListsTakeScalarsAsText(t *testing.T) {
	cleanEnv(t)
	cfg := mustParse(t, minimal+"      op: delete_columns\n      delete_columns: [data, 17, true, 1.5, \"${PUBSINK_TEST_UNSET:-x}\"]\n")
	if got, want := cfg.Pipelines[0].Sink.DeleteColumns, []string{"data", "17", "true", "1.5", "x"}; !slices.Equal(got, want) {
		t.Errorf("delete_columns = %q, want %q", got, want)
	}
	for v, want := range map[string][]string{
		"data":         {`pipelines[0].sink.delete_columns: must be a list, not "data" (line 10)`},
		"{a: b}":       {`pipelines[0].sink.delete_columns: must be a list, not a mapping (line 10)`},
		"[a, [b]]":     {`pipelines[0].sink.delete_columns[1]: must be a string, not a list (line 10)`},
		"[a, ~, \"\"]": {`pipelines[0].sink.delete_columns[1]: must not be empty: each is a column qualifier (line 10)`, `pipelines[0].sink.delete_columns[2]: must not be empty: each is a column qualifier (line 10)`},
		"[]":           {`pipelines[0].sink.delete_columns: must name at least one column (leave it out for all the mapping's columns) (line 10)`},
	} {
		_, err := Parse([]byte(minimal + "      op: delete_columns\n      delete_columns: " + v + "\n"))
		var ps Problems
		if !errors.As(err, &ps) || !slices.Equal(strings.Split(ps.Error(), "\n"), want) {
			t.Errorf("delete_columns: %s: error %v, want %q", v, err, want)
		}
	}
}

// TestPoliciesOfColumnsKeepTheirCase: on_missing_columns names qualifiers,
// which are case-sensitive, in the sink's single mapping and in each of
// sink.mappings (viper lowercases map keys).
func TestPoliciesOfColumnsKeepTheirCase(t *testing.T) {
	cleanEnv(t)
	cfg := mustParse(t, minimal+"      columns: {Amount: \"{data.amount}\", amountCents: \"{data.cents}\"}\n"+
		"      on_missing_columns: {Amount: skip, amountCents: empty}\n")
	if got, want := cfg.Pipelines[0].Sink.OnMissingColumns, map[string]string{"Amount": "skip", "amountCents": "empty"}; !reflect.DeepEqual(got, want) {
		t.Errorf("on_missing_columns = %v, want %v", got, want)
	}
	cfg = mustParse(t, minimal+"      mappings:\n        - {row_key: \"{data.id}\", columns: {ID: \"{data.id}\"}, on_missing_columns: {ID: delete}}\n")
	if got, want := cfg.Pipelines[0].Sink.Mappings[0].OnMissingColumns, map[string]string{"ID": "delete"}; !reflect.DeepEqual(got, want) {
		t.Errorf("mappings[0].on_missing_columns = %v, want %v", got, want)
	}
}

// TestChangeKeysThatAreFine: what validation must not refuse.
func TestChangeKeysThatAreFine(t *testing.T) {
	cleanEnv(t)
	for name, sink := range map[string]string{
		"every operation":                           "op: set",
		"delete":                                    "op: delete",
		"delete_family":                             "op: delete_family",
		"delete_columns":                            "op: delete_columns",
		"an expression":                             `op: "data.op == 'd' ? 'delete' : 'set'"`,
		"a variable":                                "op: message_id",
		"an expression mapping reads":               `op: "data.kind"`,
		"a word no operation is near":               "op: remove", // mapping says what is wrong with it
		"a variable near nothing":                   "op: data",
		"a word in a string":                        `op: "'delet'"`,
		"policies of the default column":            "on_missing_columns: {data: delete}",
		"a plain mapping's family may be tombstone": "column_family: tombstone",
		"the tombstone family of a stdout sink":     "{type: stdout, tombstone_family: \"\", column_family: tombstone, op: delete}",
		"an hour of tombstones":                     "{op: delete, tombstone_retention: 1h}",
	} {
		y := minimal + "      " + sink + "\n"
		if strings.HasPrefix(sink, "{") {
			y = strings.Replace(minimal, "    sink:\n      table: orders\n", "    sink: "+strings.Replace(sink, "{", "{table: orders, ", 1)+"\n", 1)
		}
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestNearOperation: a bare word close to an operation is named; nothing
// that may be an expression is.
func TestNearOperation(t *testing.T) {
	for op, want := range map[string]string{
		"delet": "delete", "Delete": "delete", "DELETE": "delete", " set ": "set", "sets": "set", "SET": "set",
		"del": "delete", "delete-family": "delete_family", "deletefamily": "delete_family", "delete_column": "delete_columns",
		"delete-columns": "delete_columns", "delete_colums": "delete_columns", "dlete": "delete",
		"remove": "", "upsert": "", "deleted_at": "", "data": "", "item": "", "message_id": "", "int": "", "null": "",
		"data.op": "", "'delete'": "", `"set"`: "", "data-set": "", "item-sets": "", "set(1)": "", "delete ? 'a' : 'b'": "",
		"data.op == 'd' ? 'delete' : 'set'": "", "": "", "d": "", "s": "", "se": "set",
	} {
		if got := nearOperation(op); got != want {
			t.Errorf("nearOperation(%q) = %q, want %q", op, got, want)
		}
	}
}

// TestNearOperationRefusesNoExpression checks nearOperation's premise with
// CEL itself: every word it names an operation for is no expression in an
// environment of mapping's variables, as mapping would compile it.
func TestNearOperationRefusesNoExpression(t *testing.T) {
	env, err := cel.NewEnv(
		cel.Variable("attributes", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("data", cel.DynType),
		cel.Variable("message_id", cel.StringType),
		cel.Variable("publish_time", cel.TimestampType),
		cel.Variable("event_time", cel.TimestampType),
		cel.Variable("item", cel.DynType),
		cel.OptionalTypes(),
	)
	if err != nil {
		t.Fatal(err)
	}
	words := []string{"delet", "Delete", "DELETE", "sets", "set", "del", "delete-family", "deletefamily", "delete_column",
		"delete-columns", "dlete", "sat", "get", "Set", "delete_familly", "delete-data", "set-item"}
	for _, w := range words {
		if nearOperation(w) == "" {
			continue
		}
		ast, iss := env.Compile(w)
		if iss.Err() == nil && ast.OutputType() == cel.StringType {
			t.Errorf("nearOperation(%q) names an operation, but CEL compiles it as a string expression", w)
		}
	}
	// And every name CEL takes alone is exempt.
	for name := range celNames {
		if nearOperation(name) != "" {
			t.Errorf("nearOperation(%q) names an operation", name)
		}
	}
}

// TestChangeWarnings: delete_columns beside an operation that never reads
// them, and a topic that keeps messages longer than the tombstones live.
func TestChangeWarnings(t *testing.T) {
	cleanEnv(t)
	// A row key that warns of nothing itself.
	base := minimal + "      row_key: \"{data.id}\"\n"
	retention := strings.Replace(base, "{subscription: orders-sub}", "{subscription: orders-sub, topic_message_retention: 240h}", 1)
	for name, tc := range map[string]struct {
		yaml, path, message string
		line                int
	}{
		"op not set": {yaml: base + "      delete_columns: [data]\n",
			path: "pipelines[0].sink.delete_columns", message: "op is not set: delete_columns is never used", line: 10},
		"op delete": {yaml: base + "      op: delete\n      delete_columns: [data]\n",
			path: "pipelines[0].sink.delete_columns", message: "op is delete: delete_columns is never used", line: 11},
		"op set in a mapping": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}}\n" +
			"        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, op: set, delete_columns: [a]}\n",
			path: "pipelines[0].sink.mappings[1].delete_columns", message: "op is set: delete_columns is never used", line: 11},
		"op delete_columns": {yaml: base + "      op: delete_columns\n      delete_columns: [data]\n"},
		"op an expression":  {yaml: base + "      op: \"data.op\"\n      delete_columns: [data]\n"},
		"no delete_columns": {yaml: base + "      op: delete\n"},
		"insert with an op expression": {yaml: base + "      write_mode: insert\n      op: \"data.op\"\n",
			path: "pipelines[0].sink.op", line: 11, message: "write_mode insert with an op that may delete"},
		"insert with an op expression, ordered": {yaml: strings.Replace(base, "{subscription: orders-sub}", "{subscription: orders-sub, ordering: true}", 1) +
			"      write_mode: insert\n      op: \"data.op\"\n"},
		"insert with a fixed op": {yaml: base + "      write_mode: insert\n      op: set\n"},
		"retention, a change mapping": {yaml: retention + "      op: delete\n",
			path: "pipelines[0].source.topic_message_retention", line: 6,
			message: "240h is longer than sink.tombstone_retention (168h): a reprocess from further back could replay a change older than a delete whose tombstone is gone, and bring back what the delete deleted. Make sink.tombstone_retention at least 240h"},
		"retention, insert makes a change mapping": {yaml: retention + "      write_mode: insert\n",
			path: "pipelines[0].source.topic_message_retention", line: 6, message: "240h is longer than sink.tombstone_retention (168h)"},
		"retention, policy delete makes a change mapping": {yaml: retention + "      on_missing_columns: {data: delete}\n",
			path: "pipelines[0].source.topic_message_retention", line: 6, message: "240h is longer than sink.tombstone_retention (168h)"},
		"retention, tombstones live as long": {yaml: retention + "      op: delete\n      tombstone_retention: 240h\n"},
		"retention, a plain mapping":         {yaml: retention + "      on_missing: skip\n"},
		"retention, a stdout sink":           {yaml: retention + "      type: stdout\n      op: delete\n"},
		"a plain and a change mapping write one table": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, op: \"data.op\"}\n" +
			"        - {row_key: \"{data.id}\", columns: {b: \"{data}\"}}\n",
			path: "pipelines[0].sink.mappings[1].table", line: 11,
			message: "a plain mapping writes table orders, where the change mapping pipelines[0].sink.mappings[0] deletes or replaces what it writes: the plain mapping's writes do not check the tombstones"},
		"a plain mapping beside a replace_if_newer one in its family": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, write_mode: replace_if_newer}\n" +
			"        - {row_key: \"{data.id}\", columns: {b: \"{data}\"}}\n",
			path: "pipelines[0].sink.mappings[1].table", line: 11, message: "a plain mapping writes table orders, where the change mapping pipelines[0].sink.mappings[0]"},
		"a plain mapping beside a replace_if_newer one in another family": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, write_mode: replace_if_newer}\n" +
			"        - {row_key: \"{data.id}\", columns: {b: \"{data}\"}, column_family: x}\n"},
		"a plain mapping beside a delete of its columns": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, op: delete_columns, delete_columns: [b]}\n" +
			"        - {row_key: \"{data.id}\", columns: {b: \"{data}\"}}\n",
			path: "pipelines[0].sink.mappings[1].table", line: 11, message: "a plain mapping writes table orders, where the change mapping pipelines[0].sink.mappings[0]"},
		"a plain mapping beside a delete of other columns": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, op: delete_columns}\n" +
			"        - {row_key: \"{data.id}\", columns: {b: \"{data}\"}}\n"},
		"a plain and a change mapping write two tables": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, op: \"data.op\"}\n" +
			"        - {row_key: \"{data.id}\", columns: {b: \"{data}\"}, table: audit}\n"},
		"two change mappings write one table": {yaml: minimal + "      mappings:\n        - {row_key: \"{data.id}\", columns: {a: \"{data}\"}, op: \"data.op\"}\n" +
			"        - {row_key: \"{data.id}\", columns: {b: \"{data}\"}, write_mode: replace_if_newer}\n"},
	} {
		data := []byte(tc.yaml)
		cfg, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ws := Warnings(cfg, data)
		switch {
		case tc.path == "" && len(ws) != 0:
			t.Errorf("%s: warned %v", name, ws)
		case tc.path != "" && (len(ws) != 1 || ws[0].Path != tc.path || !strings.HasPrefix(ws[0].Message, tc.message) || ws[0].Line != tc.line):
			t.Errorf("%s: %v; want one warning at %s (line %d): %s", name, ws, tc.path, tc.line, tc.message)
		}
	}
}
