package setupplan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pubsink/pubsink/config"
)

// Account is a command's service account in the Terraform file, with the
// roles Roles gives the command.
type Account struct {
	Command string // one of Commands
	// Email is the service account's; "": the file creates it
	// (google_service_account pubsink-COMMAND in var.project).
	Email  string
	Grants []Grant
}

// WithRoles returns accounts, each with the roles Roles gives its command
// for cfg.
func WithRoles(cfg *config.Config, accounts []Account) ([]Account, error) {
	out := make([]Account, len(accounts))
	for i, a := range accounts {
		grants, err := Roles(cfg, a.Command)
		if err != nil {
			return nil, err
		}
		a.Grants = grants
		out[i] = a
	}
	return out, nil
}

// AccountID is the account ID of the service account the Terraform file
// creates for command: pubsink-COMMAND (6 to 30 letters, digits and -).
func AccountID(command string) string { return "pubsink-" + command }

// accounts renders each account: its google_service_account (when it has
// no email), its custom role, and one IAM member resource per grant, on
// the resource the file creates when it does (a reference), else by name.
func (r *tfRenderer) accounts() {
	for _, a := range r.vars.Accounts {
		id := strings.ReplaceAll(a.Command, "-", "_")
		member := quote("serviceAccount:" + a.Email)
		if a.Email == "" {
			n := r.name("google_service_account", id)
			fmt.Fprintf(&r.b, "# the service account of pubsink %s\nresource \"google_service_account\" %q {\n  project = var.project\n  account_id = %q\n  display_name = %q\n}\n\n",
				commandLine(a.Command), n, AccountID(a.Command), "pubsink "+commandLine(a.Command))
			member = fmt.Sprintf("\"serviceAccount:${google_service_account.%s.email}\"", n)
		} else {
			fmt.Fprintf(&r.b, "# pubsink %s runs as %s\n\n", commandLine(a.Command), a.Email)
		}
		if len(a.Grants) == 0 {
			fmt.Fprintf(&r.b, "# pubsink %s needs no role for this file.\n\n", commandLine(a.Command))
		}
		for _, g := range a.Grants {
			r.grant(a.Command, member, g)
		}
	}
}

func (r *tfRenderer) grant(command, member string, g Grant) {
	id := strings.ReplaceAll(command, "-", "_")
	fmt.Fprintf(&r.b, "# %s\n", oneLine(g.Why))
	role := quote(g.Role)
	if g.Custom() {
		n := r.name("google_project_iam_custom_role", id)
		perms := make([]string, len(g.Permissions))
		for i, p := range g.Permissions {
			perms[i] = "    " + quote(p) + ",\n"
		}
		fmt.Fprintf(&r.b, "resource \"google_project_iam_custom_role\" %q {\n  project = %s\n  role_id = %q\n  title = %q\n  permissions = [\n%s  ]\n}\n\n",
			n, r.project(g.Name), CustomRoleID(command), "pubsink "+commandLine(command)+": objects named at run time", strings.Join(perms, ""))
		role = "google_project_iam_custom_role." + n + ".name"
	}
	_, short := split(g.Name, g.On+"s")
	n := id + "_" + roleWord(g) + "_" + short
	switch g.On {
	case OnProject:
		fmt.Fprintf(&r.b, "resource \"google_project_iam_member\" %q {\n  project = %s\n  role = %s\n  member = %s\n}\n\n",
			r.name("google_project_iam_member", n), r.project(g.Name), role, member)
	case OnTopic, OnSubscription:
		project, short := split(g.Name, g.On+"s")
		ref := quote(short)
		if addr, ok := r.ids[g.On+" "+g.Name]; ok {
			ref = addr + ".name"
		}
		typ := "google_pubsub_" + g.On + "_iam_member"
		fmt.Fprintf(&r.b, "resource %q %q {\n  project = %s\n  %s = %s\n  role = %s\n  member = %s\n}\n\n",
			typ, r.name(typ, n), r.project(project), g.On, ref, role, member)
	case OnInstance:
		fmt.Fprintf(&r.b, "resource \"google_bigtable_instance_iam_member\" %q {\n  project = var.project\n  instance = %s\n  role = %s\n  member = %s\n}\n\n",
			r.name("google_bigtable_instance_iam_member", n), r.instance(g.Name), role, member)
	case OnTable:
		table := quote(g.Name)
		if addr, ok := r.ids["table "+g.Instance+"/"+g.Name]; ok {
			table = addr + ".name"
		}
		fmt.Fprintf(&r.b, "resource \"google_bigtable_table_iam_member\" %q {\n  project = var.project\n  instance = %s\n  table = %s\n  role = %s\n  member = %s\n}\n\n",
			r.name("google_bigtable_table_iam_member", n), r.instance(g.Instance), table, role, member)
	}
}

// instance is the expression of an instance: var.instance for the state
// instance's.
func (r *tfRenderer) instance(name string) string {
	if name == r.vars.Instance {
		return "var.instance"
	}
	return quote(name)
}

// roleWord is the last word of g's role (subscriber, user, …), or custom.
func roleWord(g Grant) string {
	if g.Custom() {
		return "custom"
	}
	return g.Role[strings.LastIndex(g.Role, ".")+1:]
}

// commandLine is command as it is typed: deadletter-inspect is
// `deadletter list|show`.
func commandLine(command string) string {
	switch command {
	case CommandDeadLetterInspect:
		return "deadletter list|show"
	case CommandDeadLetterReplay:
		return "deadletter replay"
	}
	return command
}

// ParseAccount reads a --service-account value: COMMAND (the Terraform
// file creates the command's service account) or COMMAND=EMAIL (it grants
// the roles to that one). COMMAND is one of Commands.
func ParseAccount(s string) (Account, error) {
	command, email, hasEmail := strings.Cut(s, "=")
	if !slices.Contains(Commands, command) {
		return Account{}, fmt.Errorf("--service-account %q: the command is one of %s, then =EMAIL or nothing (the file creates its account)", s, strings.Join(Commands, ", "))
	}
	if hasEmail {
		local, domain, ok := strings.Cut(email, "@")
		if !ok || local == "" || domain == "" || strings.ContainsAny(email, " \t\n\"") || strings.Count(email, "@") != 1 {
			return Account{}, fmt.Errorf("--service-account %q: %q is not a service account's email (NAME@PROJECT.iam.gserviceaccount.com)", s, email)
		}
	}
	return Account{Command: command, Email: email}, nil
}
