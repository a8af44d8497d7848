package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupGcloudCommandsCreateWhatSetupWould: the commands of `pubsink
// setup --plan --format gcloud`, run against the emulators (gcloud with its
// Pub/Sub endpoint overridden, cbt with BIGTABLE_EMULATOR_HOST), create
// everything setup would: `setup --plan` then finds nothing to create. One
// config, with ordering, a tracking subscription, topic retention, an Avro
// topic schema and a dead-letter topic (gcloud takes seconds a call).
func TestSetupGcloudCommandsCreateWhatSetupWould(t *testing.T) {
	for _, tool := range []string{"gcloud", "cbt"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed, and CI needs this test", tool)
			}
			t.Skipf("skipping: %s is not installed", tool)
		}
	}
	e := newEnv(t)
	avsc := filepath.Join(e.dir, "event.avsc")
	if err := os.WriteFile(avsc, []byte(`{"type": "record", "name": "Event", "fields": [{"name": "n", "type": "long"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(e.configYAML("exactly_once", "    dead_letter: {topic: "+e.topic+"-dlq}\n"),
		"      streams: 8\n", "      tracking_subscription: "+e.tracking+"\n      ordering: true\n      topic_message_retention: 24h\n      streams: 8\n", 1)
	yaml = strings.Replace(yaml, "    sink:\n", "    payload: {format: avro, schema: "+avsc+", encoding: json}\n    sink:\n", 1)
	yaml = strings.Replace(yaml, `columns: {data: "{data}", n: "{data.n}"}`, `columns: {n: "{data.n}"}`, 1)
	path := filepath.Join(e.dir, "gcloud.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(append(os.Environ(), e.ps.Env()...), e.bt.Env()...)
	env = append(env, "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=http://"+e.ps.Host+"/", "CLOUDSDK_AUTH_DISABLE_CREDENTIALS=true",
		"CLOUDSDK_CONFIG="+filepath.Join(e.dir, "gcloud"), "CLOUDSDK_CORE_DISABLE_PROMPTS=1")
	pubsink := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"setup", "--config", path}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pubsink setup %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	script := pubsink("--plan", "--format", "gcloud")
	for _, want := range []string{
		"gcloud pubsub schemas create projects/" + project + "/schemas/" + e.topic + "-schema --type=avro --definition-file=" + avsc + "\n",
		"--enable-message-ordering --min-retry-delay=1s --max-retry-delay=5s\n",
		"cbt -project " + project + " -instance " + instance + " setgcpolicy " + e.stateTable + " k maxage=70m\n",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("the commands lack %q:\n%s", want, script)
		}
	}
	sh := exec.Command("sh", "-e")
	sh.Stdin = strings.NewReader(script)
	sh.Env = env
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the commands failed: %v\n%s\n%s", err, out, script)
	}
	if plan := pubsink("--plan"); !strings.HasSuffix(plan, "\nsetup --plan: nothing to create\n") || strings.Contains(plan, "\nwould ") || strings.HasPrefix(plan, "would ") || strings.Contains(plan, "note:") || strings.Contains(plan, "drift:") {
		t.Errorf("after the commands, the plan:\n%s", plan)
	}
}
