package setupplan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pubsink/pubsink/config"
)

// Commands are the commands that Roles knows, as --service-account names
// them: deadletter-inspect is `deadletter list` and `deadletter show`
// (which only look), deadletter-replay is `deadletter replay`.
var Commands = []string{
	CommandRun, CommandReprocess, CommandAudit, CommandTry, CommandTest, CommandValidate,
	CommandDeadLetterInspect, CommandDeadLetterReplay, CommandSetup,
}

// The commands of Commands.
const (
	CommandRun               = "run"
	CommandReprocess         = "reprocess"
	CommandAudit             = "audit"
	CommandTry               = "try"
	CommandTest              = "test"
	CommandValidate          = "validate"
	CommandDeadLetterInspect = "deadletter-inspect"
	CommandDeadLetterReplay  = "deadletter-replay"
	CommandSetup             = "setup"
)

// What a role is granted on.
const (
	OnProject      = "project"      // Name: the project's ID
	OnTopic        = "topic"        // Name: projects/P/topics/T
	OnSubscription = "subscription" // Name: projects/P/subscriptions/S
	OnInstance     = "instance"     // Name: the Bigtable instance's ID
	OnTable        = "table"        // Name: the table's ID, in Instance
)

// Predefined roles that pubsink's commands are granted.
const (
	RolePubSubSubscriber = "roles/pubsub.subscriber"
	RolePubSubViewer     = "roles/pubsub.viewer"
	RolePubSubPublisher  = "roles/pubsub.publisher"
	RolePubSubEditor     = "roles/pubsub.editor"
	RoleBigtableUser     = "roles/bigtable.user"
	RoleBigtableReader   = "roles/bigtable.reader"
	RoleBigtableAdmin    = "roles/bigtable.admin"
	RoleMetricWriter     = "roles/monitoring.metricWriter"
)

// RolePermissions are, for each predefined role of Roles, the permissions
// pubsink's calls need that it holds (Google's roles hold more). The test
// of Roles checks every call's permission against them.
var RolePermissions = map[string][]string{
	RolePubSubSubscriber: {"pubsub.subscriptions.consume", "pubsub.topics.attachSubscription", "pubsub.snapshots.seek"},
	RolePubSubViewer:     {"pubsub.subscriptions.get", "pubsub.topics.get", "pubsub.snapshots.get", "pubsub.schemas.get", "pubsub.schemas.listRevisions"},
	RolePubSubPublisher:  {"pubsub.topics.publish"},
	RolePubSubEditor: {"pubsub.topics.create", "pubsub.topics.get", "pubsub.topics.update", "pubsub.topics.attachSubscription",
		"pubsub.subscriptions.create", "pubsub.subscriptions.get", "pubsub.schemas.create", "pubsub.schemas.get", "pubsub.schemas.attach"},
	RoleBigtableUser:   {"bigtable.tables.readRows", "bigtable.tables.mutateRows", "bigtable.tables.get"},
	RoleBigtableReader: {"bigtable.tables.readRows", "bigtable.tables.get"},
	RoleBigtableAdmin:  {"bigtable.tables.create", "bigtable.tables.get", "bigtable.tables.update"},
	RoleMetricWriter:   {"monitoring.timeSeries.create"},
}

// Grant is one role a command needs on one resource.
type Grant struct {
	// Role is a predefined role (roles/…), or for permissions that no
	// predefined role grants narrowly enough, the command's custom role
	// on the project: projects/P/roles/pubsink_COMMAND (CustomRoleID),
	// with Permissions.
	Role        string
	Permissions []string // the custom role's, sorted; nil for a predefined role
	On          string   // OnProject, OnTopic, OnSubscription, OnInstance or OnTable
	Name        string   // see the On constants
	Instance    string   // the table's instance (OnTable)
	Why         string   // the calls it allows, in words
}

// Custom reports whether g is a command's custom role.
func (g Grant) Custom() bool { return g.Permissions != nil }

// CustomRoleID is the ID of command's custom role in its project:
// pubsink_ and the command, with - as _ (a role ID has no -).
func CustomRoleID(command string) string {
	return "pubsink_" + strings.ReplaceAll(command, "-", "_")
}

// Roles are the roles command needs for cfg, granted on the narrowest
// resource each call allows, one Grant per role and resource, in a stable
// order: the project's custom role first (only the permissions of objects
// named at run time: the subscriptions and snapshots a command creates,
// a topic's schema), then by pipeline the subscriptions, topics and
// tables, then the state table. test needs none (it is offline); an
// unknown command is an error.
//
// It reads only cfg (and the plan New computes from it): no network. A
// subscription without source.topic leaves its topic unknown: no grant on
// it (the topic must then be granted by hand, see the reference).
func Roles(cfg *config.Config, command string) ([]Grant, error) {
	if !slices.Contains(Commands, command) {
		return nil, fmt.Errorf("unknown command %q; the commands are: %s", command, strings.Join(Commands, ", "))
	}
	plan := New(cfg)
	r := &roles{command: command, project: cfg.Project, seen: map[string]bool{}}
	for i, pp := range plan.Pipelines {
		if pp.Err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", pp.Name, pp.Err)
		}
		r.pipeline(cfg.Pipelines[i], pp)
	}
	switch {
	case plan.State != nil:
		r.state(*plan.State)
	case command == CommandReprocess || command == CommandAudit || command == CommandTry:
		// They open the state table whatever the modes: reprocess's
		// lock and record are there, and audit and try read the
		// dedupe journal there for an empty range.
		r.state(Table{Instance: cfg.State.Instance, Name: cfg.State.Table, Role: RoleState})
	}
	if slices.ContainsFunc(r.grants, func(g Grant) bool { return g.On == OnTable }) {
		// The Bigtable data client exports its built-in client-side
		// metrics to Cloud Monitoring, as the command's account.
		r.add(RoleMetricWriter, OnProject, cfg.Project, "", "the Bigtable client's built-in client-side metrics (CreateTimeSeries)")
	}
	if len(r.perms) > 0 {
		perms := slices.Sorted(func(yield func(string) bool) {
			for p := range r.perms {
				if !yield(p) {
					return
				}
			}
		})
		custom := Grant{
			Role: "projects/" + cfg.Project + "/roles/" + CustomRoleID(command), Permissions: perms,
			On: OnProject, Name: cfg.Project, Why: strings.Join(r.permWhy, "; "),
		}
		r.grants = append([]Grant{custom}, r.grants...)
	}
	return r.grants, nil
}

type roles struct {
	command, project string
	grants           []Grant
	seen             map[string]bool
	perms            map[string]bool // the custom role's
	permWhy          []string
}

func (r *roles) add(role, on, name, instance, why string) {
	key := role + " " + on + " " + instance + "/" + name
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	r.grants = append(r.grants, Grant{Role: role, On: on, Name: name, Instance: instance, Why: why})
}

// custom adds permissions to the command's custom role on the project.
func (r *roles) custom(why string, perms ...string) {
	if r.perms == nil {
		r.perms = map[string]bool{}
	}
	if !slices.Contains(r.permWhy, why) {
		r.permWhy = append(r.permWhy, why)
	}
	for _, p := range perms {
		r.perms[p] = true
	}
}

func (r *roles) pipeline(p config.Pipeline, pp Pipeline) {
	reads := pp.Topic != nil && pp.Topic.ReadsTopicSchema
	schemas := func() {
		if reads {
			r.custom("the topic's schema and its revisions (GetSchema, ListSchemaRevisions), named by the topic at run time",
				"pubsub.schemas.get", "pubsub.schemas.listRevisions")
		}
	}
	sub := pp.Subscription.Name
	topic := ""
	if pp.Topic != nil {
		topic = pp.Topic.Name
	}
	switch r.command {
	case CommandRun:
		r.add(RolePubSubSubscriber, OnSubscription, sub, "", "receive, ack and extend leases (StreamingPull, Pull, Acknowledge, ModifyAckDeadline)")
		r.add(RolePubSubViewer, OnSubscription, sub, "", "start-up checks: its topic, ordering, retry policy (GetSubscription)")
		if pp.Tracking != nil {
			r.add(RolePubSubSubscriber, OnSubscription, pp.Tracking.Name, "", "the watermark's tracking reads (Pull, Acknowledge, ModifyAckDeadline)")
			r.add(RolePubSubViewer, OnSubscription, pp.Tracking.Name, "", "start-up checks: its topic and ack deadline (GetSubscription)")
		}
		if topic != "" {
			r.add(RolePubSubViewer, OnTopic, topic, "", "start-up checks: its retention and schema settings (GetTopic)")
		}
		schemas()
		r.deadLetterOutput(pp, RoleBigtableUser)
		r.tables(pp, RoleSink, RoleBigtableUser, "write the mappings' rows (MutateRows, MutateRow, CheckAndMutateRow for a change mapping's writes; ReadRows)")
	case CommandReprocess:
		r.add(RolePubSubSubscriber, OnSubscription, sub, "", "the restore point and the probe: a snapshot of the live subscription (CreateSnapshot needs pubsub.subscriptions.consume on it)")
		r.add(RolePubSubViewer, OnSubscription, sub, "", "the live subscription's settings, copied to the run's (GetSubscription)")
		if topic != "" {
			r.add(RolePubSubSubscriber, OnTopic, topic, "", "create the run's subscription on the live topic (CreateSubscription needs pubsub.topics.attachSubscription)")
			r.add(RolePubSubViewer, OnTopic, topic, "", "the topic's retention (GetTopic)")
		}
		r.custom("the run's own subscription and snapshots, named at run time (CreateSubscription, GetSubscription, StreamingPull, Acknowledge, Seek, DeleteSubscription; CreateSnapshot, GetSnapshot, DeleteSnapshot)",
			"pubsub.subscriptions.create", "pubsub.subscriptions.get", "pubsub.subscriptions.consume", "pubsub.subscriptions.delete",
			"pubsub.snapshots.create", "pubsub.snapshots.get", "pubsub.snapshots.seek", "pubsub.snapshots.delete")
		schemas()
		r.deadLetterOutput(pp, RoleBigtableUser)
		r.tables(pp, RoleSink, RoleBigtableUser, "write the range's rows again, as run writes them (MutateRows, MutateRow, CheckAndMutateRow; ReadRows)")
	case CommandAudit, CommandTry:
		r.add(RolePubSubViewer, OnSubscription, sub, "", "the live subscription's settings, copied to the "+r.command+"'s own (GetSubscription)")
		if topic != "" {
			r.add(RolePubSubSubscriber, OnTopic, topic, "", "create the "+r.command+"'s own subscription on the topic (CreateSubscription needs pubsub.topics.attachSubscription)")
			r.add(RolePubSubViewer, OnTopic, topic, "", "the topic's retention (GetTopic)")
		}
		r.custom("the "+r.command+"'s own subscription, named at run time, and --snapshot's snapshot (CreateSubscription, StreamingPull, Acknowledge, Seek, DeleteSubscription; GetSnapshot)",
			"pubsub.subscriptions.create", "pubsub.subscriptions.consume", "pubsub.subscriptions.delete",
			"pubsub.snapshots.get", "pubsub.snapshots.seek")
		schemas()
		if r.command == CommandAudit {
			r.tables(pp, RoleSink, RoleBigtableReader, "read the rows the range should have written (ReadRows)")
			r.readDeadLetters(pp) // a message dead-lettered is not missing
		}
	case CommandValidate:
		if reads {
			r.add(RolePubSubViewer, OnTopic, topic, "", "payload.schema: topic: the topic's schema settings (GetTopic)")
			schemas()
		}
	case CommandDeadLetterInspect:
		r.readDeadLetters(pp)
	case CommandDeadLetterReplay:
		if s := pp.DeadLetterSubscription; s != nil {
			r.add(RolePubSubSubscriber, OnSubscription, s.Name, "", "read the copies and remove those replayed (Pull, Acknowledge, ModifyAckDeadline)")
			r.add(RolePubSubViewer, OnSubscription, s.Name, "", "check it exists (GetSubscription)")
		}
		if dl := p.DeadLetter; topic != "" && (dl.Topic != "" || dl.BigtableTable != "" || dl.File != "") {
			r.add(RolePubSubPublisher, OnTopic, topic, "", "republish the originals to the pipeline's topic (Publish)")
		}
		r.tables(pp, RoleDeadLetter, RoleBigtableUser, "read the copies and delete those replayed (ReadRows, MutateRows)")
	case CommandSetup:
		r.add(RolePubSubEditor, OnProject, r.project, "", "create topics, schemas and subscriptions, widen a topic's retention (CreateTopic, UpdateTopic, CreateSchema, CreateSubscription; GetTopic, GetSchema, GetSubscription)")
		for _, t := range pp.Tables {
			r.add(RoleBigtableAdmin, OnInstance, t.Instance, "", "create tables and column families, set and widen GC rules (CreateTable, ModifyColumnFamilies, GetTable)")
		}
	}
}

// readDeadLetters adds what reading pp's dead-letter copies in place
// needs (deadletter list and show; audit, which compares with them).
func (r *roles) readDeadLetters(pp Pipeline) {
	if s := pp.DeadLetterSubscription; s != nil {
		r.add(RolePubSubSubscriber, OnSubscription, s.Name, "", "look at the dead-letter copies and give them back (Pull, ModifyAckDeadline)")
		r.add(RolePubSubViewer, OnSubscription, s.Name, "", "check it exists (GetSubscription)")
	}
	r.tables(pp, RoleDeadLetter, RoleBigtableReader, "read the dead-letter copies (ReadRows)")
}

// deadLetterOutput adds what run and reprocess need of pp's dead-letter
// outputs: publish to its topic, write its table with tableRole.
func (r *roles) deadLetterOutput(pp Pipeline, tableRole string) {
	if t := pp.DeadLetterTopic; t != nil {
		r.add(RolePubSubPublisher, OnTopic, t.Name, "", "dead-letter copies (Publish)")
		r.add(RolePubSubViewer, OnTopic, t.Name, "", "start-up checks: it exists and has a subscription (GetTopic, ListTopicSubscriptions)")
	}
	r.tables(pp, RoleDeadLetter, tableRole, "dead-letter copies (MutateRows; ReadRow)")
}

// tables grants role on each of pp's tables of tableRole (RoleSink,
// RoleDeadLetter).
func (r *roles) tables(pp Pipeline, tableRole, role, why string) {
	for _, t := range pp.Tables {
		if t.Role == tableRole {
			r.add(role, OnTable, t.Name, t.Instance, why)
		}
	}
}

func (r *roles) state(t Table) {
	switch r.command {
	case CommandRun, CommandReprocess:
		why := "dedupe claims and commits, the watermark, members (CheckAndMutateRow, MutateRow, MutateRows, ReadRows; GetTable: the catalog's GC rule)"
		if r.command == CommandReprocess {
			why = "the run's record and lock, dedupe, the live pipeline's members (CheckAndMutateRow, MutateRow, MutateRows, ReadRows; GetTable)"
		}
		r.add(RoleBigtableUser, OnTable, t.Name, t.Instance, why)
	case CommandAudit, CommandTry:
		r.add(RoleBigtableReader, OnTable, t.Name, t.Instance, "the live pipeline's dedupe journal, for an empty range (ReadRows)")
	case CommandSetup:
		r.add(RoleBigtableAdmin, OnInstance, t.Instance, "", "create the state table and its families (CreateTable, ModifyColumnFamilies, GetTable)")
	}
}
