package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/pubsink/pubsink/app"
)

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("project: p\npipelines:\n  - name: a\n    mode: at_least_once\n    source: {subscription: subs-a}\n    sink: {type: stdout}\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("project: p\npipelines:\n  - name: a\n    source: {subscription: subs-a}\n    sink: {table: t, colums: {}}\n"), 0o644)
	withFile := filepath.Join(dir, "file.yaml")
	os.WriteFile(withFile, []byte("project: p\npipelines:\n  - name: a\n    mode: at_least_once\n    source: {subscription: subs-a}\n    sink: {type: stdout}\n    dead_letter: {file: "+filepath.Join(dir, "dl.jsonl")+"}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "dl.jsonl"), []byte(`{"pubsink_reason":"missing_field","pubsink_error":"{data.temprature_c}: no such field","pubsink_pipeline":"a","pubsink_message_id":"77","pubsink_publish_time":"2026-12-03T10:00:00Z","pubsink_failed_at":"2026-12-03T10:00:01.5Z","attributes":{"k":"v"},"data":"eyJ0IjoxfQ=="}`+"\n"), 0o600)
	noDir := filepath.Join(dir, "nodir.yaml")
	os.WriteFile(noDir, []byte("project: p\npipelines:\n  - name: a\n    mode: at_least_once\n    source: {subscription: subs-a}\n    sink: {type: stdout}\n    dead_letter: {file: "+filepath.Join(dir, "missing", "dl.jsonl")+"}\n"), 0o644)

	cases := []struct {
		name string
		args []string
		code int
		out  string // expected in stdout+stderr
	}{
		{"no command is a usage error", nil, exitUsage, "Usage:"},
		{"an unknown command is a usage error", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"an unknown flag is a usage error", []string{"validate", "--nope"}, exitUsage, "unknown flag: --nope"},
		{"a positional argument is a usage error", []string{"validate", "-c", good, "extra"}, exitUsage, `unexpected argument "extra"`},
		{"deadletter without a subcommand is a usage error", []string{"deadletter"}, exitUsage, "deadletter: a subcommand is needed; the subcommands are: "},
		{"list without --pipeline is a usage error", []string{"deadletter", "list", "-c", withFile}, exitUsage, "--pipeline is required"},
		{"list with a negative --limit is a usage error", []string{"deadletter", "list", "-c", withFile, "--pipeline", "a", "--limit", "-1"}, exitUsage, "--limit must not be negative"},
		{"list with an unknown --reason is a usage error", []string{"deadletter", "list", "-c", withFile, "--pipeline", "a", "--reason", "lat"}, exitUsage, `--reason "lat" is not one of invalid_payload,`},
		{"list of a pipeline the file lacks is a usage error", []string{"deadletter", "list", "-c", withFile, "--pipeline", "b"}, exitUsage, `has no pipeline "b"`},
		{"list of a pipeline without output is a usage error", []string{"deadletter", "list", "-c", good, "--pipeline", "a"}, exitUsage, "no dead_letter output is configured"},
		{"list prints a line per copy and a summary", []string{"deadletter", "list", "-c", withFile, "--pipeline", "a"}, exitOK,
			"77                   2026-12-03T10:00:01.500Z missing_field              7  {data.temprature_c}: no such field\n1 copy of pipeline a in dead-letter file "},
		{"list --json prints JSON objects", []string{"deadletter", "list", "-c", withFile, "--pipeline", "a", "--json"}, exitOK, `"data_encoding":"text","data":"{\"t\":1}"`},
		{"show without a message ID is a usage error", []string{"deadletter", "show", "-c", withFile, "--pipeline", "a"}, exitUsage, "give one message ID (got 0 arguments)"},
		{"show prints the copy whole", []string{"deadletter", "show", "-c", withFile, "--pipeline", "a", "77"}, exitOK, "attributes    k=v\nsize          7\ndata_encoding text\ndata\n{\"t\":1}\n"},
		{"show of a message without copy exits 1", []string{"deadletter", "show", "-c", withFile, "--pipeline", "a", "78"}, exitFailure, "holds no copy of message 78 of pipeline a"},
		{"replay without --pipeline is a usage error", []string{"deadletter", "replay", "-c", good}, exitUsage, "--pipeline is required"},
		{"version names the Go version", []string{"version"}, exitOK, "pubsink (devel) (revision "},
		{"--version too", []string{"--version"}, exitOK, runtime.Version()},
		{"and -version, as the flag package had it", []string{"-version"}, exitOK, runtime.Version()},
		{"a single-dash long flag, as the flag package had it", []string{"validate", "-config", good}, exitOK, "ok (1 pipeline)"},
		{"run with a bad file logs the problems as JSON and exits 2", []string{"run", "-c", bad}, exitUsage, `"severity":"ERROR"`},
		{"validate accepts a good file", []string{"validate", "-c", good}, exitOK, "ok (1 pipeline)"},
		{"validate prints every problem and exits 2", []string{"validate", "--config", bad}, exitUsage, "pipelines[0].sink.colums: unknown key"},
		{"validate of a missing file exits 2", []string{"validate", "-c", filepath.Join(dir, "none.yaml")}, exitUsage, "none.yaml"},
		{"the examples validate", []string{"validate", "-c", "examples.yaml"}, exitOK, "ok (3 pipelines)"},
		{"validate refuses a dead-letter file in a missing directory", []string{"validate", "-c", noDir}, exitUsage, "pipelines[0].dead_letter.file: directory"},
		{"setup --plan --offline plans the examples without the network", []string{"setup", "-c", "examples.yaml", "--plan", "--offline"}, exitOK,
			"would create column family customers:tombstone (GC rule age() > 7d)\nwould create table pubsink_state in instance "},
		{"setup --plan --offline --format json prints the plan as data", []string{"setup", "-c", "examples.yaml", "--plan", "--offline", "--format", "json"}, exitOK,
			`"ack_deadline_seconds": 10,`},
		{"setup --plan --format terraform prints the .tf without the network", []string{"setup", "-c", "examples.yaml", "--plan", "--format", "terraform"}, exitOK,
			"resource \"google_bigtable_gc_policy\" \"customers_tombstone\" {\n  project       = var.project\n"},
		{"setup --plan --format gcloud prints the commands without the network", []string{"setup", "-c", "examples.yaml", "--plan", "--format", "gcloud"}, exitOK,
			"--enable-message-ordering --min-retry-delay=1s --max-retry-delay=5s\n"},
		{"setup --format without --plan is a usage error", []string{"setup", "-c", good, "--format", "json"}, exitUsage, "setup: --format is a flag of --plan"},
		{"setup --offline without --plan is a usage error", []string{"setup", "-c", good, "--offline"}, exitUsage, "setup: --offline is a flag of --plan"},
		{"setup --plan with an unknown --format is a usage error", []string{"setup", "-c", good, "--plan", "--format", "yaml"}, exitUsage, `setup: unknown --format "yaml"; the formats are: text, json, terraform, gcloud`},
		{"setup --plan --format terraform --service-account grants the command's roles", []string{"setup", "-c", "examples.yaml", "--plan", "--format", "terraform", "--service-account", "run", "--service-account", "audit=audit@p.iam.gserviceaccount.com"}, exitOK,
			"resource \"google_pubsub_subscription_iam_member\" \"run_subscriber_orders-pubsink\" {\n  project      = var.project\n  subscription = google_pubsub_subscription.orders-pubsink.name\n  role         = \"roles/pubsub.subscriber\"\n  member       = \"serviceAccount:${google_service_account.run.email}\"\n}"},
		{"setup --service-account without --plan is a usage error", []string{"setup", "-c", good, "--service-account", "run"}, exitUsage, "setup: --service-account is a flag of --plan"},
		{"setup --service-account without --format terraform is a usage error", []string{"setup", "-c", good, "--plan", "--service-account", "run"}, exitUsage, "setup: --service-account is a flag of --format terraform"},
		{"setup --service-account of an unknown command is a usage error", []string{"setup", "-c", good, "--plan", "--format", "terraform", "--service-account", "deadletter"}, exitUsage,
			`setup: --service-account "deadletter": the command is one of run, reprocess, audit, try, test, validate, deadletter-inspect, deadletter-replay, setup, then =EMAIL or nothing (the file creates its account)`},
		{"setup --service-account with a bad email is a usage error", []string{"setup", "-c", good, "--plan", "--format", "terraform", "--service-account", "run=nobody"}, exitUsage,
			`setup: --service-account "run=nobody": "nobody" is not a service account's email (NAME@PROJECT.iam.gserviceaccount.com)`},
		{"setup --service-account naming a command twice is a usage error", []string{"setup", "-c", good, "--plan", "--format", "terraform", "--service-account", "run", "--service-account", "run=a@b.c"}, exitUsage,
			"setup: --service-account names run twice"},
		{"setup --plan of a bad file exits 2", []string{"setup", "-c", bad, "--plan", "--offline"}, exitUsage, "pipelines[0].sink.colums: unknown key"},
		{"reprocess refuses a negative --rate", []string{"reprocess", "-c", good, "--pipeline", "p", "--from", "1h", "--rate", "-1"}, exitUsage, "reprocess: --rate must not be negative"},
		{"try without --pipeline is a usage error", []string{"try", "-c", good, "--next", "5"}, exitUsage, "try: --pipeline is required"},
		{"try without a range is a usage error", []string{"try", "-c", good, "--pipeline", "a"}, exitUsage, "try: give exactly one of --from, --snapshot and --next"},
		{"try with --from and --next is a usage error", []string{"try", "-c", good, "--pipeline", "a", "--from", "1h", "--next", "5"}, exitUsage, "try: give exactly one of --from, --snapshot and --next"},
		{"try refuses --next 0", []string{"try", "-c", good, "--pipeline", "a", "--next", "0"}, exitUsage, "try: --next must be positive"},
		{"try refuses --limit with --next", []string{"try", "-c", good, "--pipeline", "a", "--next", "5", "--limit", "3"}, exitUsage, "try: --next N takes the next N messages: --until and --limit go with --from or --snapshot"},
		{"try refuses --limit 0", []string{"try", "-c", good, "--pipeline", "a", "--from", "1h", "--limit", "0"}, exitUsage, "try: --limit must be positive"},
		{"try refuses a bad --from as audit does", []string{"try", "-c", good, "--pipeline", "a", "--from", "yesterday"}, exitUsage, `try: --from "yesterday" is neither an RFC 3339 time`},
		{"audit refuses a negative --rate", []string{"audit", "-c", good, "--pipeline", "p", "--from", "1h", "--rate", "-1"}, exitUsage, "audit: --rate must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(c.args, &out, &out)
			if code != c.code || !strings.Contains(out.String(), c.out) {
				t.Fatalf("run(%q) = %d, output:\n%s\nwant %d and %q", c.args, code, out.String(), c.code, c.out)
			}
		})
	}
}

// TestAPositionalConfigFileNamesTheFlag: every command that reads a
// configuration file, given the file as an argument (as other tools take
// it), says to write -c FILE.
func TestAPositionalConfigFileNamesTheFlag(t *testing.T) {
	var commands [][]string
	var walk func(cmd *cobra.Command, path []string)
	walk = func(cmd *cobra.Command, path []string) {
		// deadletter show's one positional argument is a message ID.
		if cmd.LocalFlags().Lookup("config") != nil && cmd.CommandPath() != "pubsink deadletter show" {
			commands = append(commands, path)
		}
		for _, sub := range cmd.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk(newRoot(context.Background(), io.Discard, io.Discard), nil)
	if len(commands) < 5 { // run, validate, setup, deadletter replay, reprocess
		t.Fatalf("commands with --config: %q", commands)
	}
	for _, cmd := range commands {
		var out bytes.Buffer
		args := append(cmd, "pubsink.yaml")
		code := run(args, &out, &out)
		want := fmt.Sprintf("%s: unexpected argument \"pubsink.yaml\": to name the configuration file, write -c pubsink.yaml", cmd[len(cmd)-1])
		if code != exitUsage || !strings.Contains(out.String(), want) {
			t.Errorf("run(%q) = %d:\n%s\nwant %d and %q", args, code, out.String(), exitUsage, want)
		}
	}
}

// TestACommandGroupNamesItsSubcommands: a group run with a subcommand it
// does not have, with flags, or with nothing, lists the subcommands it has.
func TestACommandGroupNamesItsSubcommands(t *testing.T) {
	root := newRoot(context.Background(), io.Discard, io.Discard)
	dl, _, err := root.Find([]string{"deadletter"})
	if err != nil || dl.Name() != "deadletter" {
		t.Fatalf("no deadletter command: %v", err)
	}
	var subs []string
	for _, c := range dl.Commands() {
		subs = append(subs, c.Name())
	}
	list := "the subcommands are: " + strings.Join(subs, ", ")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"deadletter", "peek", "-c", "examples.yaml", "--pipeline", "p"}, `deadletter: unknown subcommand "peek"; ` + list},
		{[]string{"deadletter", "lsit"}, `deadletter: unknown subcommand "lsit" (did you mean "list"?); ` + list},
		{[]string{"deadletter", "replya", "--pipeline", "p"}, `deadletter: unknown subcommand "replya" (did you mean "replay"?); ` + list},
		{[]string{"deadletter", "--pipeline", "p"}, "deadletter: a subcommand is needed; " + list},
	} {
		var out bytes.Buffer
		if code := run(c.args, &out, &out); code != exitUsage || !strings.Contains(out.String(), c.want) {
			t.Errorf("run(%q) = %d:\n%s\nwant %d and %q", c.args, code, out.String(), exitUsage, c.want)
		}
	}
}

// TestNoConfigNamesTheFlagAndTheVariable: with neither --config nor
// $PUBSINK_CONFIG, and no file at the default path, the error says how to
// name the file.
func TestNoConfigNamesTheFlagAndTheVariable(t *testing.T) {
	if _, err := os.Stat(app.DefaultConfigPath); err == nil {
		t.Fatalf("%s exists on this machine: the test needs it not to", app.DefaultConfigPath)
	}
	t.Setenv("PUBSINK_CONFIG", "")
	var out bytes.Buffer
	code := run([]string{"validate"}, &out, &out)
	want := "pubsink: config: no configuration file given, and the default /etc/pubsink/config.yaml does not exist: name one with --config FILE (-c FILE) or $PUBSINK_CONFIG\n"
	if code != exitUsage || out.String() != want {
		t.Fatalf("validate without a file = %d:\n%s\nwant %d and\n%s", code, out.String(), exitUsage, want)
	}
}

// TestConfigSchemaPrintsTheSchemaFile: `pubsink config schema` prints
// docs/pubsink.schema.json (which config's TestSchemaFileIsUpToDate keeps
// equal to what the code and the reference make), byte for byte, on stdout.
func TestConfigSchemaPrintsTheSchemaFile(t *testing.T) {
	want, err := os.ReadFile("docs/pubsink.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "schema"}, &stdout, &stderr); code != exitOK || !bytes.Equal(stdout.Bytes(), want) || stderr.Len() > 0 {
		t.Fatalf("config schema: exit %d, %d bytes (want the %d of docs/pubsink.schema.json), stderr %q", code, stdout.Len(), len(want), stderr.String())
	}
	var out bytes.Buffer
	if code := run([]string{"config", "scheme"}, &out, &out); code != exitUsage ||
		!strings.Contains(out.String(), `config: unknown subcommand "scheme" (did you mean "schema"?); the subcommands are: schema`) {
		t.Errorf("config scheme: exit %d:\n%s", code, out.String())
	}
}

// TestMappingTestsOfTheExamples runs examples.test.yaml through the CLI,
// as CI does: every case passes (exit 0); a copy with one expectation
// broken fails (exit 1) with a diff naming the column; a tests file or a
// selection that cannot be run is exit 2 with what is wrong.
func TestMappingTestsOfTheExamples(t *testing.T) {
	tests, err := os.ReadFile("examples.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.test.yaml")
	changed := bytes.Replace(tests, []byte("columns: {first_name: Sally, last_name: Thomas, email: sally@example.org}"),
		[]byte("columns: {first_name: Sally, last_name: Thomas, email: sally@example.com}"), 1)
	if bytes.Equal(changed, tests) {
		t.Fatal("examples.test.yaml has no update case to break")
	}
	os.WriteFile(broken, changed, 0o644)
	bad := filepath.Join(dir, "bad.test.yaml")
	os.WriteFile(bad, []byte("cases:\n  - name: a\n    pipeline: order\n    message: {data_base64: \"!\"}\n    expect: {filtered: true}\n"), 0o644)
	unknown := filepath.Join(dir, "unknown.test.yaml")
	os.WriteFile(unknown, []byte("cases:\n  - name: a\n    pipeline: order\n    expect: {filtered: true}\n"), 0o644)
	lone := filepath.Join(dir, "lone.yaml")
	os.WriteFile(lone, []byte("project: p\npipelines:\n  - name: a\n    mode: at_least_once\n    source: {subscription: subs-a}\n    sink: {type: stdout}\n"), 0o644)
	badConfig := filepath.Join(dir, "badconfig.yaml")
	os.WriteFile(badConfig, []byte("project: p\npipelines:\n  - name: a\n    source: {subscription: subs-a}\n    sink: {table: t, colums: {}}\n"), 0o644)

	for _, c := range []struct {
		name string
		args []string
		code int
		out  []string // each expected in stdout+stderr
	}{
		{"the examples' tests pass", []string{"test", "-c", "examples.yaml"}, exitOK, []string{
			"ok   [orders] an order is one row at its event time\n",
			"ok   [clicks] a crawler's click is filtered\n",
			"ok   [customers] a truncate is dead-lettered, never dropped unseen\n",
			"PASS: 14 cases (examples.test.yaml, "}},
		{"a broken case fails with a diff naming the column", []string{"test", "-c", "examples.yaml", "--tests", broken}, exitFailure, []string{
			"FAIL [customers] an update sets the row to the new columns\n" +
				`    rows[0].columns.email: expected "sally@example.com", got "sally@example.org"` + "\n",
			"ok   [customers] a create sets the row\n",
			"FAIL: 1 of 14 cases failed (" + broken}},
		{"--run and --pipeline select cases, -v shows the rows", []string{"test", "-c", "examples.yaml", "--pipeline", "customers", "--run", "delete deletes", "-v"}, exitOK, []string{
			"ok   [customers] a delete deletes the row, keyed by before\n    got:\n      rows[0]: table customers, family d, key \"1001\", op delete",
			"PASS: 1 case ("}},
		{"a bad tests file is exit 2, each problem with its file, key and line", []string{"test", "-c", "examples.yaml", "-t", bad}, exitUsage, []string{
			bad + ": cases[0].message.data_base64: not base64 (standard alphabet, with padding): illegal base64 data at input byte 0 (line 4)"}},
		{"a case of an unknown pipeline is exit 2", []string{"test", "-c", "examples.yaml", "-t", unknown}, exitUsage, []string{
			unknown + `: cases[0].pipeline: no pipeline "order" in the configuration (did you mean orders?) (line 3)`}},
		{"an unknown --pipeline is exit 2", []string{"test", "-c", "examples.yaml", "--pipeline", "order"}, exitUsage, []string{"--pipeline order: no such pipeline"}},
		{"a --run that matches nothing is exit 2", []string{"test", "-c", "examples.yaml", "--run", "nothing like it"}, exitUsage, []string{"nothing was tested"}},
		{"a bad --run is exit 2", []string{"test", "-c", "examples.yaml", "--run", "("}, exitUsage, []string{"--run: error parsing regexp"}},
		{"no tests file beside the configuration is exit 2", []string{"test", "-c", lone}, exitUsage, []string{
			"lone.test.yaml: no such file or directory (the default tests file of " + lone + "; name another with --tests FILE)"}},
		{"a configuration with problems is exit 2, as validate", []string{"test", "-c", badConfig}, exitUsage, []string{"pipelines[0].sink.colums: unknown key"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(c.args, &out, &out)
			for _, want := range c.out {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q", want)
				}
			}
			if code != c.code || t.Failed() {
				t.Fatalf("run(%q) = %d, want %d; output:\n%s", c.args, code, c.code, out.String())
			}
		})
	}

	want, err := os.ReadFile("docs/pubsink-test.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if code := run([]string{"config", "schema", "--tests"}, &stdout, io.Discard); code != exitOK || !bytes.Equal(stdout.Bytes(), want) {
		t.Errorf("config schema --tests: exit %d, %d bytes (want the %d of docs/pubsink-test.schema.json)", code, stdout.Len(), len(want))
	}
}

func TestConfigDefaultsToTheEnvironment(t *testing.T) {
	t.Setenv("PUBSINK_CONFIG", "examples.yaml")
	var out bytes.Buffer
	if code := run([]string{"validate"}, &out, &out); code != exitOK {
		t.Fatalf("validate with $PUBSINK_CONFIG = %d:\n%s", code, out.String())
	}
}

// TestEveryCommandAnswersHelp: --help (and -h) on every command prints its
// flags to stdout and exits 0.
func TestEveryCommandAnswersHelp(t *testing.T) {
	for _, c := range []struct {
		args  []string
		flags []string
	}{
		{[]string{"--help"}, []string{"run", "validate", "setup", "demo", "config", "deadletter", "version", "completion"}},
		{[]string{"config", "schema", "--help"}, []string{"yaml-language-server"}},
		{[]string{"run", "--help"}, []string{"--config"}},
		{[]string{"validate", "-h"}, []string{"--config"}},
		{[]string{"setup", "--help"}, []string{"--config"}},
		{[]string{"demo", "--help"}, []string{"--messages", "--seed", "--dir", "--timeout", "--log-level"}},
		{[]string{"deadletter", "replay", "--help"}, []string{"--config", "--pipeline", "--reason", "--limit", "--dry-run"}},
		{[]string{"deadletter", "list", "--help"}, []string{"--config", "--pipeline", "--reason", "--limit N", "(default 20)", "--json"}},
		{[]string{"deadletter", "show", "--help"}, []string{"MESSAGE_ID", "--config", "--pipeline", "--json"}},
		{[]string{"help", "demo"}, []string{"--log-level"}},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != exitOK {
			t.Errorf("%q: exit %d, stderr %s", c.args, code, stderr.String())
			continue
		}
		for _, f := range c.flags {
			if !strings.Contains(stdout.String(), f) {
				t.Errorf("%q: help lacks %s:\n%s", c.args, f, stdout.String())
			}
		}
	}
}

func TestCompletionForEveryShell(t *testing.T) {
	for shell, marker := range map[string]string{"bash": "complete -o default", "zsh": "#compdef pubsink", "fish": "complete -c pubsink"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"completion", shell}, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), marker) {
			t.Errorf("completion %s: exit %d, %d bytes, want %q in it; stderr %s", shell, code, stdout.Len(), marker, stderr.String())
		}
	}
}

// TestJobManifestsNameTheCommandsFlags: the jobs of deploy/ (a Kubernetes
// Job and a Cloud Run job for each of reprocess and audit) run their
// command with flags the command has, and the arguments its own checks ask
// for, parsed by the real command tree. (deploy's tests check the rest: the image's
// entrypoint, the config path, the pipeline, the range.)
func TestJobManifestsNameTheCommandsFlags(t *testing.T) {
	type container struct {
		Name string   `yaml:"name"`
		Args []string `yaml:"args"`
	}
	type podSpec struct {
		Containers []container `yaml:"containers"`
	}
	var gke struct {
		Spec struct {
			Template struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	var cloudRun struct {
		Spec struct {
			Template struct {
				Spec struct {
					Template struct {
						Spec podSpec `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	manifests := []struct {
		file, command string
		into          any
		pod           *podSpec
	}{
		{"deploy/gke/jobs/reprocess.yaml", "reprocess", &gke, &gke.Spec.Template.Spec},
		{"deploy/cloudrun/reprocess-job.yaml", "reprocess", &cloudRun, &cloudRun.Spec.Template.Spec.Template.Spec},
		{"deploy/gke/jobs/audit.yaml", "audit", &gke, &gke.Spec.Template.Spec},
		{"deploy/cloudrun/audit-job.yaml", "audit", &cloudRun, &cloudRun.Spec.Template.Spec.Template.Spec},
	}
	for _, m := range manifests {
		t.Run(m.file, func(t *testing.T) {
			data, err := os.ReadFile(m.file)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(data, m.into); err != nil {
				t.Fatalf("%s: %v", m.file, err)
			}
			var args []string
			for _, c := range m.pod.Containers {
				if c.Name == "pubsink" {
					args = c.Args
				}
			}
			if len(args) == 0 {
				t.Fatalf("%s: no container \"pubsink\" with args", m.file)
			}
			root := newRoot(context.Background(), io.Discard, io.Discard)
			cmd, rest, err := root.Find(args)
			if err != nil || cmd.Name() != m.command {
				t.Fatalf("%s: args %q find the command %q (%v), want %s: does pubsink have the %s command?", m.file, args, cmd.CommandPath(), err, m.command, m.command)
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Fatalf("%s: pubsink %s refuses %q: %v", m.file, m.command, rest, err)
			}
			if extra := cmd.Flags().Args(); len(extra) > 0 {
				t.Errorf("%s: positional arguments %q; %s takes none", m.file, extra, m.command)
			}
			fs := cmd.Flags()
			if v, _ := fs.GetString("pipeline"); v == "" {
				t.Errorf("%s: no --pipeline, which %s requires", m.file, m.command)
			}
			if fs.Changed("from") == fs.Changed("snapshot") {
				t.Errorf("%s: %s needs exactly one of --from and --snapshot", m.file, m.command)
			}
			if !fs.Changed("config") {
				t.Errorf("%s: no --config: the default depends on $PUBSINK_CONFIG", m.file)
			}
		})
	}
}
