// Package maptest runs mapping tests: the cases of a tests file kept beside
// the configuration (NAME.test.yaml for NAME.yaml), each a message given to
// one pipeline and the outcome expected of it (its rows, filtered, or
// dead-lettered with a reason), for `pubsink test`. It owns the tests
// file's format (Parse; docs/pubsink-test.schema.json restates it), the run
// of the cases and the diff of a failure. It does not own the
// configuration (config), the mapping it runs (mapping: the same Map as
// run's, with the sink's size limits the caller gives), the command line or
// the exit codes (app and the CLI).
//
// Entry points: Parse reads a tests file; New compiles the mappings its
// cases name against a loaded configuration; Suite.Run runs the cases.
//
// # Guarantees
//
// Offline: nothing is read but the tests file and the schema files it and
// the configuration name. A pipeline with payload.schema: topic gets the
// revisions the cases give (message.schema) instead of the Schema API, and
// the case's message carries the googclient_schema* attributes Pub/Sub
// would set. A message's publish time and ID default to fixed values
// (DefaultPublishTime, DefaultMessageID), so a case gives the same rows on
// every run. A dead-letter's error text is the one the dead-letter copy's
// pubsink_error would hold (deadletter.ErrorText of the same error).
// Cases run one after another, in the file's order; each costs one Map
// (microseconds to a millisecond).
//
// # Errors
//
// Parse and New return config.Problems, one per problem with its key path
// (cases[2].expect.rows[0].op) and line: unknown keys, a case without a
// name, pipeline or expectation, two payloads or two outcomes, bad base64,
// a time that is not RFC 3339, an unknown op, mode or reason, a schema
// file that cannot be read, a pipeline the configuration does not have. A
// case that fails is not an error: Run counts it and writes its diff.
package maptest
