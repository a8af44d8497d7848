package setupplan

import (
	"fmt"
	"strings"
	"testing"
)

// describeGrant is g as one line: ROLE on KIND NAME, a custom role with
// its permissions.
func describeGrant(g Grant) string {
	name := g.Name
	if g.On == OnTable {
		name = g.Instance + "/" + g.Name
	}
	s := fmt.Sprintf("%s on %s %s", g.Role, g.On, name)
	if g.Custom() {
		s += " [" + strings.Join(g.Permissions, " ") + "]"
	}
	return s
}

// TestRolesOfEachCommand pins the roles of every command for a file with a
// topic-schema pipeline (tracking subscription, dead-letter table, exactly
// once) and a JSON one with a dead-letter topic: each grant on the
// narrowest resource its calls allow, the project only for what a command
// names at run time.
func TestRolesOfEachCommand(t *testing.T) {
	cfg := load(t, "testdata/roles.yaml")
	const (
		sub   = " on subscription projects/p/subscriptions/"
		topic = " on topic projects/p/topics/"
	)
	want := map[string][]string{
		CommandRun: {
			"projects/p/roles/pubsink_run on project p [pubsub.schemas.get pubsub.schemas.listRevisions]",
			RolePubSubSubscriber + sub + "readings-sub", RolePubSubViewer + sub + "readings-sub",
			RolePubSubSubscriber + sub + "readings-track", RolePubSubViewer + sub + "readings-track",
			RolePubSubViewer + topic + "readings",
			RoleBigtableUser + " on table i/dead", RoleBigtableUser + " on table i/readings",
			RolePubSubSubscriber + sub + "events-sub", RolePubSubViewer + sub + "events-sub",
			RolePubSubViewer + topic + "events",
			RolePubSubPublisher + topic + "events-dlq", RolePubSubViewer + topic + "events-dlq",
			RoleBigtableUser + " on table i/events",
			RoleBigtableUser + " on table i/pubsink_state",
			RoleMetricWriter + " on project p",
		},
		CommandReprocess: {
			"projects/p/roles/pubsink_reprocess on project p [pubsub.schemas.get pubsub.schemas.listRevisions pubsub.snapshots.create pubsub.snapshots.delete pubsub.snapshots.get pubsub.snapshots.seek pubsub.subscriptions.consume pubsub.subscriptions.create pubsub.subscriptions.delete pubsub.subscriptions.get]",
			RolePubSubSubscriber + sub + "readings-sub", RolePubSubViewer + sub + "readings-sub",
			RolePubSubSubscriber + topic + "readings", RolePubSubViewer + topic + "readings",
			RoleBigtableUser + " on table i/dead", RoleBigtableUser + " on table i/readings",
			RolePubSubSubscriber + sub + "events-sub", RolePubSubViewer + sub + "events-sub",
			RolePubSubSubscriber + topic + "events", RolePubSubViewer + topic + "events",
			RolePubSubPublisher + topic + "events-dlq", RolePubSubViewer + topic + "events-dlq",
			RoleBigtableUser + " on table i/events",
			RoleBigtableUser + " on table i/pubsink_state",
			RoleMetricWriter + " on project p",
		},
		CommandAudit: {
			"projects/p/roles/pubsink_audit on project p [pubsub.schemas.get pubsub.schemas.listRevisions pubsub.snapshots.get pubsub.snapshots.seek pubsub.subscriptions.consume pubsub.subscriptions.create pubsub.subscriptions.delete]",
			RolePubSubViewer + sub + "readings-sub",
			RolePubSubSubscriber + topic + "readings", RolePubSubViewer + topic + "readings",
			RoleBigtableReader + " on table i/readings", RoleBigtableReader + " on table i/dead",
			RolePubSubViewer + sub + "events-sub",
			RolePubSubSubscriber + topic + "events", RolePubSubViewer + topic + "events",
			RoleBigtableReader + " on table i/events",
			RolePubSubSubscriber + sub + "events-dlq-replay", RolePubSubViewer + sub + "events-dlq-replay",
			RoleBigtableReader + " on table i/pubsink_state",
			RoleMetricWriter + " on project p",
		},
		CommandTry: {
			"projects/p/roles/pubsink_try on project p [pubsub.schemas.get pubsub.schemas.listRevisions pubsub.snapshots.get pubsub.snapshots.seek pubsub.subscriptions.consume pubsub.subscriptions.create pubsub.subscriptions.delete]",
			RolePubSubViewer + sub + "readings-sub",
			RolePubSubSubscriber + topic + "readings", RolePubSubViewer + topic + "readings",
			RolePubSubViewer + sub + "events-sub",
			RolePubSubSubscriber + topic + "events", RolePubSubViewer + topic + "events",
			RoleBigtableReader + " on table i/pubsink_state",
			RoleMetricWriter + " on project p",
		},
		CommandTest: nil,
		CommandValidate: {
			"projects/p/roles/pubsink_validate on project p [pubsub.schemas.get pubsub.schemas.listRevisions]",
			RolePubSubViewer + topic + "readings",
		},
		CommandDeadLetterInspect: {
			RoleBigtableReader + " on table i/dead",
			RolePubSubSubscriber + sub + "events-dlq-replay", RolePubSubViewer + sub + "events-dlq-replay",
			RoleMetricWriter + " on project p",
		},
		CommandDeadLetterReplay: {
			RolePubSubPublisher + topic + "readings",
			RoleBigtableUser + " on table i/dead",
			RolePubSubSubscriber + sub + "events-dlq-replay", RolePubSubViewer + sub + "events-dlq-replay",
			RolePubSubPublisher + topic + "events",
			RoleMetricWriter + " on project p",
		},
		CommandSetup: {RolePubSubEditor + " on project p", RoleBigtableAdmin + " on instance i"},
	}
	for _, c := range Commands {
		grants, err := Roles(cfg, c)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, g := range grants {
			got = append(got, describeGrant(g))
			if g.Why == "" {
				t.Errorf("%s: %s has no reason", c, describeGrant(g))
			}
		}
		if strings.Join(got, "\n") != strings.Join(want[c], "\n") {
			t.Errorf("roles of %s:\n%s\nwant:\n%s", c, strings.Join(got, "\n"), strings.Join(want[c], "\n"))
		}
	}
	// Without exactly_once or a tracking subscription setup creates no
	// state table, and run needs none; reprocess keeps its lock and
	// record there, and audit and try read it, all the same.
	atLeastOnce := load(t, "../maptest/testdata/pipelines.yaml")
	for c, want := range map[string]string{CommandRun: "", CommandReprocess: RoleBigtableUser, CommandAudit: RoleBigtableReader, CommandTry: RoleBigtableReader} {
		grants, err := Roles(atLeastOnce, c)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, g := range grants {
			if g.On == OnTable && g.Name == "pubsink_state" {
				got = g.Role
			}
		}
		if got != want {
			t.Errorf("%s of an at_least_once file: %q on the state table, want %q", c, got, want)
		}
	}
	if _, err := Roles(cfg, "deadletter"); err == nil || !strings.Contains(err.Error(), `unknown command "deadletter"`) {
		t.Errorf("Roles of an unknown command: %v", err)
	}
}

// TestRolesGrantOnlyKnownRoles: a custom role is the command's own, on
// the project; every predefined role has its permissions listed in
// RolePermissions (which the coverage test in app checks calls against).
func TestRolesGrantOnlyKnownRoles(t *testing.T) {
	cfg := load(t, "../examples.yaml")
	for _, c := range Commands {
		grants, err := Roles(cfg, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range grants {
			if g.Custom() {
				if g.On != OnProject || g.Role != "projects/p/roles/"+CustomRoleID(c) {
					t.Errorf("%s: custom role %s on %s %s", c, g.Role, g.On, g.Name)
				}
				continue
			}
			if _, ok := RolePermissions[g.Role]; !ok {
				t.Errorf("%s: role %s has no entry in RolePermissions", c, g.Role)
			}
		}
	}
}
