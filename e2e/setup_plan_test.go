package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// TestSetupPlanFindsWhatSetupCreatedAndReportsDrift: on the emulators,
// `pubsink setup --plan` before setup says what setup then creates; after
// setup it finds everything ("nothing to create"); a catalog rule narrowed
// behind pubsink's back is a widening, and source.ordering turned on for
// an existing subscription is drift with its fix. The plan changes
// nothing.
func TestSetupPlanFindsWhatSetupCreatedAndReportsDrift(t *testing.T) {
	e := newEnv(t)
	yaml := e.configYAML("exactly_once", "    dead_letter: {topic: "+e.topic+"-dlq}\n")
	path := filepath.Join(e.dir, "plan.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	pubsink := func(path string, args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"setup", "--config", path}, args...)...)
		cmd.Env = append(append(os.Environ(), e.ps.Env()...), e.bt.Env()...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pubsink setup %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	topic := "projects/" + project + "/topics/" + e.topic
	sub := "projects/" + project + "/subscriptions/" + e.sub
	before := pubsink(path, "--plan")
	for _, want := range []string{
		"would create topic " + topic + "\n",
		"would create subscription " + sub + " on " + topic + "\n",
		"would create subscription projects/" + project + "/subscriptions/" + e.topic + "-dlq-replay on " + topic + "-dlq\n",
		"would create column family " + e.table + ":d\n",
		"would create column family " + e.stateTable + ":k (GC rule age() > 70m)\n",
		"setup --plan: 11 to create, 0 to widen, 0 drifted\n",
	} {
		if !strings.Contains(before, want) {
			t.Errorf("the plan before setup lacks %q:\n%s", want, before)
		}
	}
	if got := pubsink(path); !strings.Contains(got, "created topic "+topic+"\n") {
		t.Fatalf("setup after a plan did not create the topic:\n%s", got)
	}
	if after := pubsink(path, "--plan"); !strings.HasSuffix(after, "\nsetup --plan: nothing to create\n") || strings.Contains(after, "\nwould ") || strings.HasPrefix(after, "would ") {
		t.Errorf("the plan after setup:\n%s", after)
	}

	ctx := context.Background()
	if err := e.admin.SetGCPolicy(ctx, e.stateTable, "k", bigtable.MaxAgePolicy(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ordered := filepath.Join(e.dir, "ordered.yaml")
	if err := os.WriteFile(ordered, []byte(strings.Replace(yaml, "      streams: 8\n", "      ordering: true\n      streams: 8\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	drift := pubsink(ordered, "--plan")
	for _, want := range []string{
		"would widen the GC rule of " + e.stateTable + ":k from age() > 1m to age() > 70m\n",
		"  drift: subscription " + sub + " has no message ordering, and source.ordering is true (run refuses it); Pub/Sub cannot add ordering to an existing subscription: create a new one, gcloud pubsub subscriptions create NEW --topic=" + topic + " --enable-message-ordering",
		"setup --plan: 0 to create, 1 to widen, 1 drifted\n",
	} {
		if !strings.Contains(drift, want) {
			t.Errorf("the plan of the drifted project lacks %q:\n%s", want, drift)
		}
	}
	info, err := e.admin.TableInfo(ctx, e.stateTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range info.FamilyInfos {
		if fi.Name == "k" && fi.FullGCPolicy.String() != "age() > 1m" {
			t.Errorf("the plan changed the catalog's rule to %v", fi.FullGCPolicy)
		}
	}
}
