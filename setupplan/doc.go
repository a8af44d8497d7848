// Package setupplan decides what `pubsink setup` wants for a
// configuration: every topic (with its message retention and the schema of
// a payload.schema file), topic schema, subscription (topic, ack deadline,
// retry policy, message ordering), table and column family (with its GC
// rule: the sink's families, the tombstone family, the dead-letter table's,
// the state table's), in the order setup applies them.
//
// It owns the decision and its renderings, not the doing: app's setup
// applies a Plan object by object against the live project (create,
// exists, widen), and `setup --plan` compares it with the live project by
// the same code, reading only, so the two cannot drift. The renderers
// here print it without the project: JSON (the plan as data, with the
// status app found for each object), Terraform (a .tf for the google
// provider, formatted by hclwrite as terraform fmt formats) and Gcloud
// (the gcloud and cbt commands). It holds no client and opens no
// connection; the Bigtable GC rules are the client library's policy
// values (state.Families), nothing more of it.
//
// Roles gives the IAM roles each command needs for a configuration, on
// the narrowest resource its calls allow (the reference's "IAM roles"),
// and Terraform renders them for the service accounts Vars.Accounts
// names.
//
// The entry point is New, then a renderer:
//
//	plan := setupplan.New(cfg)
//	tf := setupplan.Terraform(plan, setupplan.Vars{Project: cfg.Project, Instance: cfg.State.Instance, Region: "us-central1"})
//
// # Guarantees
//
// New touches no network; it reads each payload.schema file, whose text is
// the topic schema's definition. The same configuration (and schema
// files) gives the same Plan, in the same order, and each renderer the
// same bytes. The renderers name each topic, subscription and table once,
// however many pipelines name it (a family two name with max ages gets
// the longer, as setup widens it).
//
// # Errors
//
// A pipeline whose plan cannot be computed (a schema file that cannot be
// read any more, a config built without its defaults) has Pipeline.Err set
// and no objects; the other pipelines are planned as usual.
package setupplan
