package app

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/setupplan"
)

// permissionsOf are the IAM permissions of each Pub/Sub and Bigtable
// client call pubsink makes (Pub/Sub's and Bigtable's access-control
// pages). A call with two is checked on both: CreateSubscription needs
// pubsub.subscriptions.create in the project and
// pubsub.topics.attachSubscription on the topic; a conditional Apply
// (CheckAndMutateRow) reads and mutates.
var permissionsOf = map[string][]string{
	// Pub/Sub
	"Receive":                {"pubsub.subscriptions.consume"}, // StreamingPull
	"Pull":                   {"pubsub.subscriptions.consume"},
	"Acknowledge":            {"pubsub.subscriptions.consume"},
	"ModifyAckDeadline":      {"pubsub.subscriptions.consume"},
	"GetSubscription":        {"pubsub.subscriptions.get"},
	"CreateSubscription":     {"pubsub.subscriptions.create", "pubsub.topics.attachSubscription"},
	"DeleteSubscription":     {"pubsub.subscriptions.delete"},
	"Seek":                   {"pubsub.subscriptions.consume", "pubsub.snapshots.seek"},
	"CreateSnapshot":         {"pubsub.snapshots.create", "pubsub.subscriptions.consume"},
	"GetSnapshot":            {"pubsub.snapshots.get"},
	"DeleteSnapshot":         {"pubsub.snapshots.delete"},
	"GetTopic":               {"pubsub.topics.get"},
	"CreateTopic":            {"pubsub.topics.create"},
	"UpdateTopic":            {"pubsub.topics.update"},
	"ListTopicSubscriptions": {"pubsub.topics.get"},
	"Publish":                {"pubsub.topics.publish"},
	"GetSchema":              {"pubsub.schemas.get"},
	"ListSchemaRevisions":    {"pubsub.schemas.listRevisions"},
	"CreateSchema":           {"pubsub.schemas.create"},
	// Bigtable
	"ReadRows":           {"bigtable.tables.readRows"},
	"ReadRow":            {"bigtable.tables.readRows"},
	"Apply":              {"bigtable.tables.mutateRows", "bigtable.tables.readRows"},
	"ApplyBulk":          {"bigtable.tables.mutateRows"},
	"TableInfo":          {"bigtable.tables.get"},
	"CreateTable":        {"bigtable.tables.create"},
	"CreateColumnFamily": {"bigtable.tables.update"},
	"SetGCPolicy":        {"bigtable.tables.update"},
}

// notCalls are methods of the clients that send no request of their own
// (or only with another call above), which the source calls.
var notCalls = []string{"Close", "Open", "Stop", "Connection", "Publisher", "Subscriber", "Get", "Ready", "ID", "Flush", "String"}

// TestPlanRolesKnowEveryClientCall: every method of the Pub/Sub and
// Bigtable clients that the source calls (a grep of the module's non-test
// Go files for .Method( over the clients' method sets) has its
// permissions in permissionsOf, so a new call cannot go without a role.
func TestPlanRolesKnowEveryClientCall(t *testing.T) {
	methods := map[string]bool{}
	for _, v := range []any{&bigtable.Table{}, &bigtable.AdminClient{}, &bigtable.Client{}, &vkit.SubscriptionAdminClient{},
		&vkit.TopicAdminClient{}, &vkit.SchemaClient{}, &pubsub.Publisher{}, &pubsub.Subscriber{}, &pubsub.Client{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumMethod() {
			methods[typ.Method(i).Name] = true
		}
	}
	call := regexp.MustCompile(`\.([A-Z]\w*)\(`)
	found := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(path)
		if d.IsDir() {
			for _, skip := range []string{"../e2e", "../tools", "../internal/testenv", "../internal/fake", "../deadletter/internal/dltest", "../.git"} {
				if rel == skip {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			if methods[m[1]] {
				found[m[1]] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"Receive", "CreateSnapshot", "Apply", "ApplyBulk", "Publish", "ListSchemaRevisions"} {
		if _, ok := found[must]; !ok {
			t.Errorf("the grep found no call of %s: it no longer finds the calls", must)
		}
	}
	for m, file := range found {
		if _, ok := permissionsOf[m]; !ok && !slices.Contains(notCalls, m) {
			t.Errorf("%s calls %s: add its permissions to permissionsOf, the calls of the commands that make it below, and the role to setupplan.Roles and the reference's \"IAM roles\"", file, m)
		}
	}
}

// The resources a command's call is made on, resolved in the plan.
const (
	onMain     = "main subscription"
	onTracking = "tracking subscription"
	onTopic    = "source topic"
	onDLTopic  = "dead-letter topic"
	onDLSub    = "dead-letter subscription"
	onSink     = "sink table"
	onDLTable  = "dead-letter table"
	onState    = "state table"
	onOwn      = "named at run time" // the command's own subscription, a snapshot, a topic's schema: the project
)

type call struct{ method, on string }

func calls(on string, methods ...string) []call {
	var cs []call
	for _, m := range methods {
		cs = append(cs, call{m, on})
	}
	return cs
}

// callsOf are the calls each command makes (read from app/, source/,
// deadletter/, dedupe/, members/, watermark/, sinks/bigtable, reprocess/
// and audit/), on what.
var callsOf = map[string][]call{
	setupplan.CommandRun: slices.Concat(
		calls(onMain, "Receive", "Pull", "Acknowledge", "ModifyAckDeadline", "GetSubscription"),
		calls(onTracking, "Pull", "Acknowledge", "ModifyAckDeadline", "GetSubscription"),
		calls(onTopic, "GetTopic"), calls(onOwn, "GetSchema", "ListSchemaRevisions"),
		calls(onDLTopic, "Publish", "GetTopic", "ListTopicSubscriptions"),
		calls(onSink, "ApplyBulk", "Apply", "ReadRow", "ReadRows"), calls(onDLTable, "ApplyBulk", "ReadRow"),
		calls(onState, "Apply", "ApplyBulk", "ReadRow", "ReadRows", "TableInfo")),
	setupplan.CommandReprocess: slices.Concat(
		calls(onMain, "GetSubscription", "CreateSnapshot"), calls(onTopic, "GetTopic", "CreateSubscription"),
		calls(onOwn, "Receive", "Acknowledge", "ModifyAckDeadline", "GetSubscription", "Seek", "DeleteSubscription",
			"GetSnapshot", "DeleteSnapshot", "GetSchema", "ListSchemaRevisions"),
		calls(onDLTopic, "Publish", "GetTopic", "ListTopicSubscriptions"),
		calls(onSink, "ApplyBulk", "Apply", "ReadRow", "ReadRows"), calls(onDLTable, "ApplyBulk", "ReadRow"),
		calls(onState, "Apply", "ApplyBulk", "ReadRow", "ReadRows", "TableInfo")),
	setupplan.CommandAudit: slices.Concat(
		calls(onMain, "GetSubscription"), calls(onTopic, "GetTopic", "CreateSubscription"),
		calls(onOwn, "Receive", "Acknowledge", "ModifyAckDeadline", "Seek", "DeleteSubscription", "GetSnapshot", "GetSchema", "ListSchemaRevisions"),
		calls(onSink, "ReadRows"), calls(onState, "ReadRows"),
		calls(onDLSub, "GetSubscription", "Pull", "ModifyAckDeadline"), calls(onDLTable, "ReadRows", "ReadRow")),
	setupplan.CommandTry: slices.Concat(
		calls(onMain, "GetSubscription"), calls(onTopic, "GetTopic", "CreateSubscription"),
		calls(onOwn, "Receive", "Acknowledge", "ModifyAckDeadline", "Seek", "DeleteSubscription", "GetSnapshot", "GetSchema", "ListSchemaRevisions"),
		calls(onState, "ReadRows")),
	setupplan.CommandTest:     nil,
	setupplan.CommandValidate: slices.Concat(calls(onTopic, "GetTopic"), calls(onOwn, "GetSchema", "ListSchemaRevisions")),
	setupplan.CommandDeadLetterInspect: slices.Concat(
		calls(onDLSub, "GetSubscription", "Pull", "ModifyAckDeadline"), calls(onDLTable, "ReadRows", "ReadRow")),
	setupplan.CommandDeadLetterReplay: slices.Concat(
		calls(onDLSub, "GetSubscription", "Pull", "Acknowledge", "ModifyAckDeadline"), calls(onTopic, "Publish"),
		calls(onDLTable, "ReadRows", "ReadRow", "ApplyBulk")),
	setupplan.CommandSetup: slices.Concat(
		calls(onTopic, "GetTopic", "CreateTopic", "UpdateTopic"), calls(onOwn, "CreateSchema", "GetSchema"),
		calls(onMain, "GetSubscription", "CreateSubscription"), calls(onTracking, "GetSubscription", "CreateSubscription"),
		calls(onDLTopic, "GetTopic", "CreateTopic"), calls(onDLSub, "GetSubscription", "CreateSubscription"),
		calls(onSink, "TableInfo", "CreateTable", "CreateColumnFamily", "SetGCPolicy"),
		calls(onDLTable, "TableInfo", "CreateTable", "CreateColumnFamily"),
		calls(onState, "TableInfo", "CreateTable", "CreateColumnFamily", "SetGCPolicy")),
}

// TestPlanRolesCoverEveryCallOfEachCommand: for a file with every kind of
// object (a topic-schema pipeline with a tracking subscription and a
// dead-letter table, exactly once; a pipeline with a dead-letter topic),
// every permission of every call a command makes (callsOf, permissionsOf)
// is held by a role setupplan.Roles gives the command: on the object
// itself, or on what holds it (the project; a table's instance).
func TestPlanRolesCoverEveryCallOfEachCommand(t *testing.T) {
	t.Setenv("GOOGLE_CLOUD_PROJECT", "p")
	cfg, err := config.Load("../setupplan/testdata/roles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan := setupplan.New(cfg)
	for _, command := range setupplan.Commands {
		grants, err := setupplan.Roles(cfg, command)
		if err != nil {
			t.Fatal(err)
		}
		holds := func(on, name, instance, perm string) bool {
			for _, g := range grants {
				perms := g.Permissions
				if !g.Custom() {
					perms = setupplan.RolePermissions[g.Role]
				}
				if !slices.Contains(perms, perm) {
					continue
				}
				switch {
				case g.On == setupplan.OnProject && g.Name == cfg.Project,
					g.On == on && g.Name == name && g.Instance == instance,
					on == setupplan.OnTable && g.On == setupplan.OnInstance && g.Name == instance:
					return true
				}
			}
			return false
		}
		for _, pp := range plan.Pipelines {
			for _, c := range callsOf[command] {
				type target struct{ on, name, instance string }
				var targets []target
				switch c.on {
				case onMain:
					targets = []target{{setupplan.OnSubscription, pp.Subscription.Name, ""}}
				case onTracking:
					if pp.Tracking != nil {
						targets = []target{{setupplan.OnSubscription, pp.Tracking.Name, ""}}
					}
				case onTopic:
					if pp.Topic != nil && (c.method != "GetTopic" || command != setupplan.CommandValidate || pp.Topic.ReadsTopicSchema) &&
						(command != setupplan.CommandDeadLetterReplay || pp.DeadLetterTopic != nil || hasTable(pp, setupplan.RoleDeadLetter)) {
						targets = []target{{setupplan.OnTopic, pp.Topic.Name, ""}}
					}
				case onDLTopic:
					if pp.DeadLetterTopic != nil {
						targets = []target{{setupplan.OnTopic, pp.DeadLetterTopic.Name, ""}}
					}
				case onDLSub:
					if pp.DeadLetterSubscription != nil {
						targets = []target{{setupplan.OnSubscription, pp.DeadLetterSubscription.Name, ""}}
					}
				case onSink, onDLTable:
					role := map[string]string{onSink: setupplan.RoleSink, onDLTable: setupplan.RoleDeadLetter}[c.on]
					for _, tb := range pp.Tables {
						if tb.Role == role {
							targets = append(targets, target{setupplan.OnTable, tb.Name, tb.Instance})
						}
					}
				case onState:
					if plan.State != nil {
						targets = []target{{setupplan.OnTable, plan.State.Name, plan.State.Instance}}
					}
				case onOwn:
					if (c.method != "GetSchema" && c.method != "ListSchemaRevisions") || pp.Topic != nil && pp.Topic.ReadsTopicSchema || command == setupplan.CommandSetup {
						targets = []target{{setupplan.OnProject, cfg.Project, ""}}
					}
				}
				for _, tg := range targets {
					for _, perm := range permissionsOf[c.method] {
						if !holds(tg.on, tg.name, tg.instance, perm) {
							t.Errorf("%s, pipeline %s: %s on %s %s needs %s, which no role of setupplan.Roles holds there", command, pp.Name, c.method, c.on, tg.name, perm)
						}
					}
				}
			}
		}
	}
}

func hasTable(pp setupplan.Pipeline, role string) bool {
	return slices.ContainsFunc(pp.Tables, func(t setupplan.Table) bool { return t.Role == role })
}
