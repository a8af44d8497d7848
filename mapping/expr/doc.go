// Package expr is CEL (github.com/google/cel-go) over the value model
// (package value): the environment and its functions (env.go), compiling
// an expression with a cost limit (expr.go), checking it against a
// schema's types (schema.Types, through provider.go), evaluating it over
// one message's activation (eval.go), and the texts of its errors
// (errors.go). It knows no format and not the mapping: mapping compiles its
// filter, when, each, op and {= EXPR} placeholders here, once, and
// evaluates them per message.
//
// Expressions are typed, side-effect free, compiled and type-checked once,
// evaluated per message against an activation that hands cel-go the
// message's values without copying them:
//
//	env, err := expr.NewEnv(expr.Options{EventTime: true})
//	e, err := env.Compile(`attributes.type == 'reading'`, cel.BoolType)
//	...
//	act := expr.AcquireActivation(msg.ID, msg.PublishTime, msg.Attributes, decode)
//	defer act.Release()
//	ok, err := e.Bool(act)
//
// An *Expr is also a template.Expr: a {= EXPR} placeholder renders its
// value (AppendTo), reading the activation in template.Input.Vars.
//
// Variables:
//
//	attributes    map(string, string)  the message's attributes
//	data          dyn                  the decoded payload (the value model); with
//	                                   a schema, also checked against its types
//	                                   (NewTypedEnv), never evaluated by them
//	message_id    string
//	publish_time  timestamp
//	event_time    timestamp            not in the expression that computes it
//	item          dyn                  the element of each's list (with each only)
//
// Functions: CEL's standard library and macros (has, all, exists,
// exists_one, map, filter), optional values (data.?a.orValue(x),
// optional.of), cel-go's extensions Strings (upperAscii, lowerAscii, replace,
// split, substring, trim, charAt, indexOf, lastIndexOf, join, format,
// strings.quote, reverse), Encoders (base64.encode, base64.decode), Math
// (math.round, ceil, floor, trunc, abs, sign, sqrt, greatest, least, isNaN,
// isInf, isFinite, bit operations), Lists (slice, flatten, distinct,
// reverse, sort, sortBy, lists.range), Bindings (cel.bind), and ours: sha256(bytes|string) -> bytes
// and hex(bytes) -> string, so that hex(sha256(data.user)).substring(0, 8)
// is a hash prefix that spreads row keys (CEL has no [i:j] slices). Strings'
// replace is bounded (maxReplaceResult), lists.range too (exprCostLimit).
//
// Evaluation is never interrupted by a clock or a caller's context (that
// would make a message's fate depend on the machine's load): the cost
// limit bounds it (expr.go says how it is counted).
//
// An evaluation's error wraps template.ErrExpression (and ErrNoSuchValue
// when the expression read a value the message does not have), or is the
// payload's decode error as the activation's decode func returned it; an
// each list longer than allowed is ErrTooManyElements. Its text never
// quotes a value of the message.
package expr
