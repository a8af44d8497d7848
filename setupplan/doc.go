// Package setupplan decides what `pubsink setup` wants for a
// configuration: every topic (with its message retention and the schema of
// a payload.schema file), topic schema, subscription (topic, ack deadline,
// retry policy, message ordering), table and column family (with its GC
// rule: the sink's families, the tombstone family, the dead-letter table's,
// the state table's), in the order setup applies them.
//
// It owns the decision, not the doing: app's setup applies a Plan object by
// object against the live project (create, exists, widen), and `setup
// --plan` compares it with the live project or prints it (text, JSON,
// Terraform, gcloud) without changing anything, so the two cannot drift.
// It holds no client and opens no connection.
//
// The entry point is New:
//
//	plan := setupplan.New(cfg)
//	for _, p := range plan.Pipelines { ... }
//
// # Guarantees
//
// New touches no network; it reads each payload.schema file, whose text is
// the topic schema's definition. The same configuration (and schema
// files) gives the same Plan, in the same order.
//
// # Errors
//
// A pipeline whose plan cannot be computed (a schema file that cannot be
// read any more, a config built without its defaults) has Pipeline.Err set
// and no objects; the other pipelines are planned as usual.
package setupplan
