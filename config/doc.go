// Package config loads, defaults and validates pubsink's YAML configuration.
//
// It owns the file format of docs/reference.md "Configuration": the keys and their types,
// the defaults (all in defaults.go, each with its reason), ${VAR} expansion,
// PUBSINK_* environment overrides, validation, and the JSON Schema that
// editors check the file with (JSONSchema; docs/pubsink.schema.json, kept
// equal to it by a test). It is the only package
// that imports viper. It does not own what the values mean at run time, nor
// checks that need the network (that the tracking subscription is on the same
// topic is checked at start by source and watermark; that tables exist, by
// setup).
//
// The entry point is Load (or Parse, for bytes):
//
//	cfg, err := config.Load(path)
//	var problems config.Problems
//	if errors.As(err, &problems) { /* print every problem; exit 2 */ }
//
// # Precedence
//
// From lowest to highest: the defaults; the file, with ${VAR} and
// ${VAR:-default} expanded in its values; the environment variable
// PUBSINK_<KEY> of each top-level key (dots become underscores:
// PUBSINK_STATE_INSTANCE, PUBSINK_HTTP_ADDR, PUBSINK_SHUTDOWN_TIMEOUT; an
// empty variable is ignored); for http.addr, $PORT (Cloud Run) when
// PUBSINK_HTTP_ADDR is not set. Pipelines are list elements and have no
// environment overrides; use ${VAR} in the file for them. Per-pipeline
// defaults apply only to keys the file leaves out, so an explicit zero is
// reported rather than replaced; sink.instance defaults to state.instance
// after the overrides.
//
// # Guarantees
//
//   - A Config returned without error passed every check: row keys and
//     columns compile as templates, names are valid and unique, no
//     subscription is read by two pipelines (nor by a pipeline and its own
//     tracker), batches can fill, and state.instance is set wherever state is
//     needed. Consumers need not check again.
//   - Sink.Columns keeps each qualifier's case as written (viper lowercases
//     map keys; Parse takes the columns from the file).
//   - A Config is not shared: the caller owns it, and by convention treats it
//     as read-only once loaded.
//   - Parse reads only its input and the environment; it is safe for
//     concurrent use. It never panics on any input (FuzzParse).
//
// # Errors
//
// Load returns a plain error when the file cannot be read. Anything wrong
// in the file is returned as Problems (a value, not a pointer), every problem
// at once, one "key.path: message" per line:
//
//	pipelines[1].sink.colums: unknown key
//	pipelines[0].sink.row_key: unknown placeholder "{atributes.x}"
//	pipelines[0].source.subscription: ${ORDERS_SUB} is not set (write ${ORDERS_SUB:-default} for a default)
//
// An unknown key or a value of the wrong type hides further problems under
// the same path, which would only repeat it.
package config
