package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/internal/testenv/hclread"
)

// TestSetupTerraformHoldsWhatSetupCreates: after `pubsink setup` on the
// emulators, `pubsink setup --plan --format terraform` for the same file
// parses (hcl/v2) and holds, resource by resource, what setup created, as
// read back through the admin APIs: each topic and its retention, each
// subscription's topic, ack deadline, ordering and retry policy, each
// table's families, and each GC rule (and no family has a rule the .tf
// lacks). For a file with a tracking subscription, ordering, retention and
// a dead-letter topic, and for examples.yaml (three pipelines, a change
// mapping's tombstone family, a shared state table), in a project and
// instance of its own.
func TestSetupTerraformHoldsWhatSetupCreates(t *testing.T) {
	t.Run("one pipeline", func(t *testing.T) {
		e := newEnv(t)
		yaml := strings.Replace(e.configYAML("exactly_once", "    dead_letter: {topic: "+e.topic+"-dlq}\n"),
			"      streams: 8\n", "      tracking_subscription: "+e.tracking+"\n      ordering: true\n      streams: 8\n", 1)
		yaml = strings.Replace(yaml, "      topic: "+e.topic+"\n", "      topic: "+e.topic+"\n      topic_message_retention: 24h\n", 1)
		path := filepath.Join(e.dir, "tf.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		// The topic and its dead-letter topic; main, tracking and replay
		// subscriptions; the sink's table and the state table, whose four
		// families have rules.
		checkTerraform(t, e, path, project, e.admin, os.Environ(),
			map[string]int{"google_pubsub_topic": 2, "google_pubsub_subscription": 3, "google_bigtable_table": 2, "google_bigtable_gc_policy": 4})
	})
	t.Run("examples.yaml", func(t *testing.T) {
		e := newEnv(t)
		suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
		proj, inst := "e2e-examples-"+suffix, "e2e-examples-"+suffix
		_, admin, err := e.bt.Clients(context.Background(), proj, inst)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		env := append(os.Environ(), "GOOGLE_CLOUD_PROJECT="+proj, "BIGTABLE_INSTANCE="+inst)
		// Three topics and their dead-letter topics, four main and tracking
		// subscriptions and three replay ones; three sink tables and the
		// state table; the tombstone rule and the state table's four.
		checkTerraform(t, e, "../examples.yaml", proj, admin, env,
			map[string]int{"google_pubsub_topic": 5, "google_pubsub_subscription": 6, "google_bigtable_table": 4, "google_bigtable_gc_policy": 5})
	})
	// The other example configurations users copy: the demo's, and the
	// GKE base's and overlay's (copied with a project and instance of the
	// test's own).
	for _, c := range []struct {
		file string
		want map[string]int
	}{
		{"../app/demo.yaml", map[string]int{"google_pubsub_topic": 1, "google_pubsub_subscription": 2, "google_bigtable_table": 2, "google_bigtable_gc_policy": 4}},
		{"../deploy/gke/base/config.yaml", map[string]int{"google_pubsub_topic": 2, "google_pubsub_subscription": 3, "google_bigtable_table": 2, "google_bigtable_gc_policy": 4}},
		{"../deploy/gke/overlays/example/config.yaml", map[string]int{"google_pubsub_topic": 2, "google_pubsub_subscription": 3, "google_bigtable_table": 2, "google_bigtable_gc_policy": 4}},
	} {
		t.Run(strings.TrimPrefix(c.file, "../"), func(t *testing.T) {
			e := newEnv(t)
			suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
			proj, inst := "e2e-ex-"+suffix, "e2e-ex-"+suffix
			_, admin, err := e.bt.Clients(context.Background(), proj, inst)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			path := filepath.Join(e.dir, "config.yaml")
			writeWithProject(t, c.file, path, proj, inst)
			checkTerraform(t, e, path, proj, admin, os.Environ(), c.want)
		})
	}
	t.Run("variants", func(t *testing.T) {
		// The variants examples.yaml lacks: an Avro schema file in binary
		// encoding (setup creates the topic's schema), ordering with
		// retention, mappings into two tables of which one is a change
		// table, a table two pipelines share with a family each, and a
		// dead-letter table. (The emulator has no Protocol Buffers
		// schemas: docs/emulator-*.md.)
		e := newEnv(t)
		suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
		proj, inst := "e2e-variants-"+suffix, "e2e-variants-"+suffix
		_, admin, err := e.bt.Clients(context.Background(), proj, inst)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		avsc := filepath.Join(e.dir, "v.avsc")
		if err := os.WriteFile(avsc, []byte(`{"type": "record", "name": "V", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}]}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(e.dir, "variants.yaml")
		yaml := `project: ` + proj + `
state: {instance: ` + inst + `}
pipelines:
  - name: va
    mode: exactly_once
    source: {topic: va-topic, subscription: va-sub, tracking_subscription: va-tracking, ordering: true, topic_message_retention: 24h}
    payload: {format: avro, schema: "` + avsc + `", encoding: binary}
    sink:
      mappings:
        - {table: shared, column_family: a, row_key: "{data.id}", columns: {n: "{data.n}"}}
        - {table: changes, row_key: "{data.id}", op: "data.n == 0 ? 'delete' : 'set'", write_mode: replace_if_newer, columns: {n: "{data.n}"}}
    dead_letter: {bigtable_table: va_dead}
  - name: vb
    source: {topic: vb-topic, subscription: vb-sub}
    sink: {table: shared, column_family: b, row_key: "{message_id}", columns: {d: "{data}"}}
    dead_letter: {topic: vb-topic-dlq}
`
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		// Topics va-topic, vb-topic, vb-topic-dlq and va-topic's schema; va's main and tracking
		// subscriptions, vb's and its replay one; the tables shared,
		// changes, va_dead and the state table; the tombstone rule of
		// changes and the state table's four.
		checkTerraform(t, e, path, proj, admin, os.Environ(),
			map[string]int{"google_pubsub_topic": 3, "google_pubsub_schema": 1, "google_pubsub_subscription": 4, "google_bigtable_table": 4, "google_bigtable_gc_policy": 5})
	})
}

// checkTerraform runs setup for the file at path, then compares its
// Terraform with what setup created, in project (admin: its instance),
// and counts the resources of each type against want.
func checkTerraform(t *testing.T, e *env, path, project string, admin *bigtable.AdminClient, environ []string, want map[string]int) {
	t.Helper()
	pubsink := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"setup", "--config", path}, args...)...)
		cmd.Env = append(append(environ, e.ps.Env()...), e.bt.Env()...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pubsink setup %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return out
	}
	pubsink()
	src := pubsink("--plan", "--format", "terraform")
	rs, err := hclread.Resources(src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	attr := func(r hclread.Resource, key string) string {
		t.Helper()
		v, err := hclread.Attr(r.Body, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ctx := context.Background()
	topics := map[string]string{} // resource address → topic name
	counts := map[string]int{}
	rules := map[string]string{} // TABLE:FAMILY → the .tf's rule
	for _, r := range rs {
		counts[r.Type]++
		if attr(r, "project") != "var.project" {
			t.Errorf("%s.%s: project %q, want var.project", r.Type, r.Name, attr(r, "project"))
		}
		switch r.Type {
		case "google_pubsub_topic":
			name := "projects/" + project + "/topics/" + attr(r, "name")
			topics["google_pubsub_topic."+r.Name+".id"] = name
			got, err := e.pubsub.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if want, have := attr(r, "message_retention_duration"), durationOrEmpty(got.GetMessageRetentionDuration().AsDuration()); want != have {
				t.Errorf("%s: the .tf retains for %q, setup created %q", name, want, have)
			}
		case "google_pubsub_subscription":
			name := "projects/" + project + "/subscriptions/" + attr(r, "name")
			got, err := e.pubsub.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			var min, max string
			if p := got.GetRetryPolicy(); p != nil {
				min, max = durationOrEmpty(p.GetMinimumBackoff().AsDuration()), durationOrEmpty(p.GetMaximumBackoff().AsDuration())
			}
			expiry := "none: 31 days" // no policy: Pub/Sub's default
			if p := got.GetExpirationPolicy(); p != nil {
				expiry = durationOrEmpty(p.GetTtl().AsDuration()) // "": never
			}
			ordering := "false"
			if attr(r, "enable_message_ordering") == "true" {
				ordering = "true"
			}
			for _, c := range [][3]string{
				{"topic", topics[attr(r, "topic")], got.Topic},
				{"ack_deadline_seconds", attr(r, "ack_deadline_seconds"), strconv.Itoa(int(got.AckDeadlineSeconds))},
				{"enable_message_ordering", ordering, strconv.FormatBool(got.EnableMessageOrdering)},
				{"retry_policy.minimum_backoff", attr(r, "retry_policy.minimum_backoff"), min},
				{"retry_policy.maximum_backoff", attr(r, "retry_policy.maximum_backoff"), max},
				{"expiration_policy.ttl", attr(r, "expiration_policy.ttl"), expiry},
			} {
				if c[1] != c[2] {
					t.Errorf("%s: the .tf's %s is %q, setup created %q", name, c[0], c[1], c[2])
				}
			}
		case "google_bigtable_table":
			name := attr(r, "name")
			info, err := admin.TableInfo(ctx, name)
			if err != nil {
				t.Errorf("table %s: %v", name, err)
				continue
			}
			want := strings.Split(attr(r, "column_family.family"), ",")
			have := slices.Clone(info.Families)
			slices.Sort(want)
			slices.Sort(have)
			if !slices.Equal(want, have) {
				t.Errorf("table %s: the .tf's families %v, setup created %v", name, want, have)
			}
			for _, fi := range info.FamilyInfos {
				if fi.FullGCPolicy != nil && fi.FullGCPolicy.String() != "" {
					rules[name+":"+fi.Name] = "" // to be found among the policies
				}
			}
		case "google_bigtable_gc_policy":
			table := strings.TrimSuffix(strings.TrimPrefix(attr(r, "table"), "google_bigtable_table."), ".name")
			var rule bigtable.GCPolicy
			if d := attr(r, "max_age.duration"); d != "" {
				age, err := time.ParseDuration(d)
				if err != nil {
					t.Fatal(err)
				}
				rule = bigtable.MaxAgePolicy(age)
			} else if n, err := strconv.Atoi(attr(r, "max_version.number")); err == nil {
				rule = bigtable.MaxVersionsPolicy(n)
			}
			for _, tr := range rs {
				if tr.Type == "google_bigtable_table" && tr.Name == table {
					table = attr(tr, "name")
				}
			}
			family := attr(r, "column_family")
			rules[table+":"+family] = rule.String()
			info, err := admin.TableInfo(ctx, table)
			if err != nil {
				t.Errorf("table %s: %v", table, err)
				continue
			}
			for _, fi := range info.FamilyInfos {
				if fi.Name == family && fi.FullGCPolicy.String() != rule.String() {
					t.Errorf("%s:%s: the .tf's rule is %s, setup created %s", table, family, rule, fi.FullGCPolicy)
				}
			}
		}
	}
	for fam, rule := range rules {
		if rule == "" {
			t.Errorf("family %s has a GC rule on the emulator and no google_bigtable_gc_policy in the .tf", fam)
		}
	}
	for typ, n := range want {
		if counts[typ] != n {
			t.Errorf("%d %s resources, want %d:\n%s", counts[typ], typ, n, src)
		}
	}
}

// durationOrEmpty is d as the .tf writes Pub/Sub durations ("86400s"), ""
// for none.
func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// writeWithProject copies the configuration at from to to with its
// project and state instance replaced by project and instance (the lines
// "project: …" and the state's "instance: …", in either of the forms the
// example files use), so that a test has names of its own.
func writeWithProject(t *testing.T, from, to, project, instance string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`(?m)^project: .*$`).ReplaceAllString(string(b), "project: "+project)
	text = regexp.MustCompile(`(?m)^(state: \{instance: )[^,}]+`).ReplaceAllString(text, "${1}"+instance)
	text = regexp.MustCompile(`(?m)^(  instance: )\S+`).ReplaceAllString(text, "${1}"+instance)
	if !strings.Contains(text, "project: "+project) || !strings.Contains(text, instance) {
		t.Fatalf("%s: no project or state instance to replace", from)
	}
	if err := os.WriteFile(to, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
