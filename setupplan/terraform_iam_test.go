package setupplan

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestTerraformGrantsEachCommandsRoles: with service accounts, the .tf
// still parses and is formatted, creates the accounts asked for
// (pubsink-COMMAND), uses a given email as it is, and holds one IAM member
// resource per grant of Roles, on the resource the file creates (a
// reference) with the role and the account as member, and each custom
// role with its permissions.
func TestTerraformGrantsEachCommandsRoles(t *testing.T) {
	cfg := load(t, "testdata/roles.yaml")
	accounts := []Account{{Command: CommandRun}, {Command: CommandAudit, Email: "auditor@p.iam.gserviceaccount.com"}, {Command: CommandSetup}, {Command: CommandTest}}
	for i := range accounts {
		g, err := Roles(cfg, accounts[i].Command)
		if err != nil {
			t.Fatal(err)
		}
		accounts[i].Grants = g
	}
	src := Terraform(New(cfg), Vars{Project: "p", Instance: "i", Region: "r", Accounts: accounts})
	rs, byAddr := parseTF(t, src)
	for _, c := range []string{"run", "setup", "test"} {
		sa, ok := byAddr["google_service_account."+c]
		if !ok {
			t.Fatalf("no google_service_account.%s in:\n%s", c, src)
		}
		if got := attribute(t, sa.Body, "account_id"); got != "pubsink-"+c {
			t.Errorf("google_service_account.%s: account_id %q", c, got)
		}
	}
	if _, ok := byAddr["google_service_account.audit"]; ok {
		t.Error("the file creates audit's account, which was given by its email")
	}
	if !strings.Contains(string(src), "# pubsink test needs no role for this file.") {
		t.Error("test's account has no note that it needs no role")
	}

	// Each grant is one member resource: the resource's key (type, the
	// target, role) holds the account's member.
	type key struct{ typ, target, role, member string }
	have := map[key]int{}
	for _, r := range rs {
		if !strings.HasSuffix(r.Type, "_iam_member") {
			continue
		}
		target := ""
		switch r.Type {
		case "google_project_iam_member":
			target = attribute(t, r.Body, "project")
		case "google_pubsub_subscription_iam_member":
			target = attribute(t, r.Body, "subscription")
		case "google_pubsub_topic_iam_member":
			target = attribute(t, r.Body, "topic")
		case "google_bigtable_instance_iam_member":
			target = attribute(t, r.Body, "instance")
		case "google_bigtable_table_iam_member":
			target = attribute(t, r.Body, "instance") + "/" + attribute(t, r.Body, "table")
		}
		have[key{r.Type, target, attribute(t, r.Body, "role"), attribute(t, r.Body, "member")}]++
	}
	members := map[string]string{
		"run":   "serviceAccount:${google_service_account.run.email}",
		"audit": "serviceAccount:auditor@p.iam.gserviceaccount.com",
		"setup": "serviceAccount:${google_service_account.setup.email}",
	}
	n := 0
	for _, a := range accounts {
		for _, g := range a.Grants {
			n++
			k := key{member: members[a.Command], role: g.Role}
			switch g.On {
			case OnProject:
				k.typ, k.target = "google_project_iam_member", "var.project"
			case OnSubscription:
				_, id := split(g.Name, "subscriptions")
				k.typ, k.target = "google_pubsub_subscription_iam_member", "google_pubsub_subscription."+id+".name"
			case OnTopic:
				_, id := split(g.Name, "topics")
				k.typ, k.target = "google_pubsub_topic_iam_member", "google_pubsub_topic."+id+".name"
			case OnInstance:
				k.typ, k.target = "google_bigtable_instance_iam_member", "var.instance"
			case OnTable:
				k.typ, k.target = "google_bigtable_table_iam_member", "var.instance/google_bigtable_table."+g.Name+".name"
			}
			if g.Custom() {
				k.role = "google_project_iam_custom_role." + a.Command + ".name"
				cr, ok := byAddr["google_project_iam_custom_role."+a.Command]
				if !ok {
					t.Fatalf("no custom role of %s in:\n%s", a.Command, src)
				}
				if got := attribute(t, cr.Body, "permissions"); got != strings.Join(g.Permissions, ",") {
					t.Errorf("custom role of %s: permissions %s, want %s", a.Command, got, strings.Join(g.Permissions, ","))
				}
				if got := attribute(t, cr.Body, "role_id"); got != CustomRoleID(a.Command) {
					t.Errorf("custom role of %s: role_id %s", a.Command, got)
				}
			}
			if have[k] != 1 {
				t.Errorf("%s: %d resources %+v, want 1", a.Command, have[k], k)
			}
		}
	}
	total := 0
	for _, c := range have {
		total += c
	}
	if total != n {
		t.Errorf("%d IAM member resources, want %d (one per grant)", total, n)
	}
	// Without accounts, no IAM at all: the file of setup --plan as before.
	plain := Terraform(New(cfg), Vars{Project: "p", Instance: "i", Region: "r"})
	if bytes.Contains(plain, []byte("iam")) || bytes.Contains(plain, []byte("google_service_account")) {
		t.Errorf("a file without accounts has IAM resources:\n%s", plain)
	}
}

func TestParseAccount(t *testing.T) {
	for _, tc := range []struct{ in, command, email, err string }{
		{in: "run", command: "run"},
		{in: "deadletter-replay=dl@p.iam.gserviceaccount.com", command: "deadletter-replay", email: "dl@p.iam.gserviceaccount.com"},
		{in: "deadletter", err: `--service-account "deadletter": the command is one of run, reprocess`},
		{in: "", err: `--service-account "": the command is one of`},
		{in: "=a@b", err: `--service-account "=a@b": the command is one of`},
		{in: "run=", err: `"" is not a service account's email`},
		{in: "run=nobody", err: `"nobody" is not a service account's email`},
		{in: "run=a@b@c", err: `"a@b@c" is not a service account's email`},
		{in: "run=@p.iam", err: `"@p.iam" is not a service account's email`},
	} {
		a, err := ParseAccount(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseAccount(%q): error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || a.Command != tc.command || a.Email != tc.email):
			t.Errorf("ParseAccount(%q) = %+v, %v", tc.in, a, err)
		}
	}
	if !slices.Contains(Commands, AccountID("deadletter-inspect")[len("pubsink-"):]) || len(AccountID("deadletter-inspect")) > 30 {
		t.Errorf("account ID %s is not one Google accepts (6 to 30 characters)", AccountID("deadletter-inspect"))
	}
}
