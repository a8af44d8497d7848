package mapping

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"

	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/template"
)

// Expressions are CEL (github.com/google/cel-go): typed, side-effect free,
// compiled and type-checked once, evaluated per message against an
// activation that hands cel-go the message's values without copying them.
//
// Variables:
//
//	attributes    map(string, string)  the message's attributes
//	data          dyn                  the decoded payload (value.go's model); with
//	                                   a schema, also checked against its types
//	                                   (schematypes.go), never evaluated by them
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
// limit bounds it.

// exprCostLimit bounds one evaluation, in CEL's cost units (checker and
// cel-go's runtime agree on them): about one per variable, field access,
// comparison or function call, ten per list or map made, a tenth of one per
// byte a string function scans, and a comprehension's units once per
// element it visits. A filter or a key is a few to tens of units; a map
// over a 1,000-element list about 15,000, which must fit, since a mapping
// makes up to max_rows (1,000 by default) rows of each's list. A hostile
// payload (data.all(x, data.all(y, …)) over a long list) is stopped within
// the limit, so that one message costs a bounded slice of CPU (a few
// milliseconds, BenchmarkExprCostLimit) and becomes expression_failed, never
// a stalled pipeline.
//
// How the limit is kept depends on what the checker proves of the
// expression (compile's costMode):
//
//   - costFree: its worst case is below the limit whatever the payload
//     (no comprehension, no string function over payload strings): not
//     counted, as counting allocates per evaluation.
//   - costSteps: it has comprehensions, and the checker bounds its cost
//     when every list it ranges over is one element long (call it S: one
//     step of each comprehension and the rest once); all its
//     comprehensions together may then take exprCostLimit/S steps, counted
//     by cel-go's interruption check (one atomic add per step, with
//     cel.InterruptCheckFrequency and a context already done, so that the
//     check stops the evaluation at the step after the last).
//   - costTracked: the rest (a string function over payload strings in a
//     comprehension, a hash of the payload): cel-go's cost tracker counts
//     every call and stops at the limit. Its own cost grows with the square
//     of a comprehension's steps (cel-go v0.31's tracker searches a stack
//     that grows with them), which is why costSteps exists, and why such an
//     expression with a comprehension gets a tenth of the limit
//     (trackedLoopLimit): stopping at 100,000 units would take 25 ms.
const exprCostLimit = 100_000

// trackedLoopLimit is the limit of a costTracked expression with a
// comprehension (see exprCostLimit): cel-go's tracker stops it within a few
// milliseconds.
const trackedLoopLimit = exprCostLimit / 10

// errTooManyElements: the list of an each expression is longer than its
// mapping allows (dead-letter reason too_many_rows). It does not wrap
// template.ErrExpression.
var errTooManyElements = errors.New("too many list elements")

// exprOptions say which optional variables an environment declares.
type exprOptions struct {
	// item declares item: the expression is in a mapping with each.
	item bool
	// eventTime declares event_time; false for the expression that computes
	// the event time itself.
	eventTime bool
}

// exprEnv compiles expressions. It is immutable and safe for concurrent use.
type exprEnv struct {
	env   *cel.Env
	names []string // the declared variables, for did-you-mean
	// schema and provider: a typed environment's (newTypedEnv), or nil.
	schema   *schemaTypes
	provider *schemaProvider
}

// Our functions' overload IDs.
const (
	overloadSHA256Bytes  = "sha256_bytes"
	overloadSHA256String = "sha256_string"
	overloadHexBytes     = "hex_bytes"
)

// newExprEnv returns an environment with the variables opts declares, data
// and item of type dyn: the one every program is made in.
func newExprEnv(opts exprOptions) (*exprEnv, error) {
	return buildExprEnv(opts, nil, nil)
}

// newTypedEnv returns an environment for checking expressions against a
// schema (schematypes.go): data is of the schema's root type, item (with
// opts.item) of type item, or dyn when item is nil. Its expressions are
// checked, never run.
func newTypedEnv(opts exprOptions, s *schemaTypes, item *cel.Type) (*exprEnv, error) {
	return buildExprEnv(opts, s, item)
}

func buildExprEnv(opts exprOptions, s *schemaTypes, item *cel.Type) (*exprEnv, error) {
	data := cel.DynType
	var provider *schemaProvider
	if s != nil {
		p, err := newSchemaProvider(s)
		if err != nil {
			return nil, fmt.Errorf("expression environment: %w", err)
		}
		data, provider = s.root, p
	}
	if item == nil {
		item = cel.DynType
	}
	names := []string{"attributes", "data", "message_id", "publish_time"}
	vars := []cel.EnvOption{
		cel.Variable("attributes", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("data", data),
		cel.Variable("message_id", cel.StringType),
		cel.Variable("publish_time", cel.TimestampType),
	}
	if opts.eventTime {
		names = append(names, "event_time")
		vars = append(vars, cel.Variable("event_time", cel.TimestampType))
	}
	if opts.item {
		names = append(names, "item")
		vars = append(vars, cel.Variable("item", item))
	}
	var first []cel.EnvOption
	if provider != nil {
		// Before anything that registers types with the provider.
		first = append(first, cel.CustomTypeProvider(provider))
	}
	envOpts := append(first,
		// First: the adapter must be set before anything that uses it.
		cel.CustomTypeAdapter(modelAdapter{}),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Encoders(),
		ext.Math(),
		// lists.range(n) makes its list before the cost of it counts: no
		// larger than a list the cost limit lets an expression use.
		ext.Lists(ext.ListsMaxRangeSize(exprCostLimit)),
		ext.Bindings(),
		// Strings' replace, again, with a bound: its result, made before its
		// cost is counted, could be the square of the payload
		// (data.s.replace('', data.s)).
		cel.Function("replace",
			cel.MemberOverload("string_replace_string_string",
				[]*cel.Type{cel.StringType, cel.StringType, cel.StringType}, cel.StringType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return boundedReplace(args, -1) })),
			cel.MemberOverload("string_replace_string_string_int",
				[]*cel.Type{cel.StringType, cel.StringType, cel.StringType, cel.IntType}, cel.StringType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					if len(args) != 4 {
						return types.NewErr("replace: want 4 arguments")
					}
					n, ok := args[3].(types.Int)
					if !ok {
						return types.MaybeNoSuchOverloadErr(args[3])
					}
					return boundedReplace(args[:3], int64(n))
				}))),
		cel.Function("sha256",
			cel.Overload(overloadSHA256Bytes, []*cel.Type{cel.BytesType}, cel.BytesType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					b, ok := v.(types.Bytes)
					if !ok {
						return types.MaybeNoSuchOverloadErr(v)
					}
					sum := sha256.Sum256(b)
					return types.Bytes(sum[:])
				})),
			cel.Overload(overloadSHA256String, []*cel.Type{cel.StringType}, cel.BytesType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					s, ok := v.(types.String)
					if !ok {
						return types.MaybeNoSuchOverloadErr(v)
					}
					sum := sha256.Sum256([]byte(s))
					return types.Bytes(sum[:])
				}))),
		cel.Function("hex",
			cel.Overload(overloadHexBytes, []*cel.Type{cel.BytesType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					b, ok := v.(types.Bytes)
					if !ok {
						return types.MaybeNoSuchOverloadErr(v)
					}
					return types.String(hex.EncodeToString(b))
				}))),
		// Both scan their argument: a tenth of a unit per byte, as CEL's
		// own string functions, so that hashing is not free in the estimate.
		cel.CostEstimatorOptions(
			checker.OverloadCostEstimate(overloadSHA256Bytes, estimateScan(true)),
			checker.OverloadCostEstimate(overloadSHA256String, estimateScan(true)),
			checker.OverloadCostEstimate(overloadHexBytes, estimateScan(false)),
		),
	)
	env, err := cel.NewEnv(append(envOpts, vars...)...)
	if err != nil {
		return nil, fmt.Errorf("expression environment: %w", err)
	}
	return &exprEnv{env: env, names: names, schema: s, provider: provider}, nil
}

// maxReplaceResult bounds the string replace makes: 16 MiB, more than a
// Pub/Sub message holds (10 MB) and more than a replacement that escapes a
// payload's characters makes of it.
const maxReplaceResult = 16 << 20

// boundedReplace is s.replace(old, new[, n]) (n < 0: all), refusing a
// result larger than maxReplaceResult before making it.
func boundedReplace(args []ref.Val, n int64) ref.Val {
	if len(args) != 3 {
		return types.NewErr("replace: want 3 arguments")
	}
	var str [3]string
	for i, a := range args {
		s, ok := a.(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(a)
		}
		str[i] = string(s)
	}
	s, old, repl := str[0], str[1], str[2]
	if n == 0 || old == repl {
		return args[0]
	}
	count := int64(strings.Count(s, old))
	if n > 0 && n < count {
		count = n
	}
	if grow := int64(len(repl)) - int64(len(old)); grow > 0 && count > (maxReplaceResult-int64(len(s)))/grow {
		return types.NewErr("replace: the result would be larger than %d bytes", maxReplaceResult)
	}
	if n < 0 {
		return types.String(strings.ReplaceAll(s, old, repl))
	}
	return types.String(strings.Replace(s, old, repl, int(n)))
}

// estimateScan estimates a call that reads its one argument once: a unit
// plus a tenth per byte, as CEL's own string functions. Its result is 32
// bytes (hash) or twice the argument (hex).
func estimateScan(hash bool) checker.FunctionEstimator {
	return func(est checker.CostEstimator, _ *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
		if len(args) != 1 {
			return nil
		}
		sz := checker.SizeEstimate{Min: 0, Max: math.MaxUint64}
		if l := args[0].ComputedSize(); l != nil {
			sz = *l
		} else if l := est.EstimateSize(args[0]); l != nil {
			sz = *l
		}
		cost := sz.MultiplyByCostFactor(common.StringTraversalCostFactor).Add(checker.FixedCostEstimate(1))
		res := checker.FixedSizeEstimate(sha256.Size)
		if !hash {
			res = checker.SizeEstimate{Min: satMul(sz.Min, 2), Max: satMul(sz.Max, 2)}
		}
		return &checker.CallEstimate{CostEstimate: cost, ResultSize: &res}
	}
}

// scanCost is estimateScan's runtime counterpart.
func scanCost(args []ref.Val, _ ref.Val) *uint64 {
	n := uint64(1)
	if len(args) == 1 {
		n = satAdd(n, argCost(args[0]))
	}
	return costPtr(n)
}

// argCost is what reading an argument costs: a tenth of a unit per byte of
// a string or bytes, one per element of a list or map.
func argCost(a ref.Val) uint64 {
	switch x := a.(type) {
	case types.String:
		return uint64(math.Ceil(float64(len(x)) * common.StringTraversalCostFactor))
	case types.Bytes:
		return uint64(math.Ceil(float64(len(x)) * common.StringTraversalCostFactor))
	case traits.Sizer:
		if sz, ok := x.Size().(types.Int); ok && sz > 0 {
			return uint64(sz)
		}
	}
	return 0
}

// smallCosts are the costs costPtr hands out without allocating: cel-go
// wants a *uint64 per call and only reads it.
var smallCosts = func() (c [256]uint64) {
	for i := range c {
		c[i] = uint64(i)
	}
	return c
}()

func costPtr(n uint64) *uint64 {
	if n < uint64(len(smallCosts)) {
		return &smallCosts[n]
	}
	return &n
}

// dynCallCost costs the calls whose overload the checker left to
// evaluation (an argument is dyn: data, item). cel-go counts such a call as
// one unit whatever its arguments, so that data.s + data.s on a megabyte
// string would be as cheap as 1 + 1; here it is what the typed overload
// would cost: one unit plus a tenth per byte of its string and bytes
// arguments plus one per element of its lists and maps, and for contains
// and matches the product of their operands' costs, as cel-go's own.
type dynCallCost struct{}

func (dynCallCost) CallCost(function, overloadID string, args []ref.Val, _ ref.Val) *uint64 {
	if overloadID != "" {
		return nil // cel-go's own cost of a resolved overload
	}
	var sizes [2]uint64
	var total uint64
	for i, a := range args {
		n := argCost(a)
		if i < len(sizes) {
			sizes[i] = n
		}
		total = satAdd(total, n)
	}
	cost := satAdd(1, total)
	if (function == "contains" || function == "matches") && len(args) == 2 {
		cost = satMul(1+sizes[0], 1+sizes[1])
	}
	return costPtr(cost)
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func satMul(a, b uint64) uint64 {
	if b != 0 && a > math.MaxUint64/b {
		return math.MaxUint64
	}
	return a * b
}

// noSizes knows no sizes: every variable may be as large as can be, so that
// a bound the checker finds holds for every payload.
type noSizes struct{}

func (noSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }
func (noSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// expr is a compiled expression. It is immutable and safe for concurrent
// use; each evaluation reads one message's activation.
type expr struct {
	src string
	prg cel.Program
	out *cel.Type
	// mode is how the cost limit is kept; limit is the limit; steps, in
	// costSteps, is how many comprehension steps the evaluation may take.
	mode  costMode
	limit uint64
	steps uint
	// data: the expression reads the payload.
	data bool

	// ast, env and popts make, the first time an evaluation fails for want
	// of an overload, a program that keeps every value it computes
	// (traced), so that the error can say which call failed on which types
	// (explainOverload).
	ast       *cel.Ast
	env       *cel.Env
	popts     []cel.ProgramOption
	traceOnce sync.Once
	traced    cel.Program
}

// readsData reports whether the expression reads the payload (data), so
// that a caller can skip decoding it when none does.
func (e *expr) readsData() bool { return e.data }

// String returns the expression's source.
func (e *expr) String() string { return e.src }

// compile parses and type-checks src, and checks that its type is
// assignable to want (nil: any type). A result of type dyn passes and is
// checked when evaluated. The error reads as
// `1:5: undeclared reference to 'dta' (did you mean 'data'?)`.
func (e *exprEnv) compile(src string, want *cel.Type) (*expr, error) {
	ast, err := e.checked(src, want)
	if err != nil {
		return nil, err
	}
	out := ast.OutputType()
	mode, limit, steps := e.costMode(ast)
	popts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	switch mode {
	case costSteps:
		// The check runs after every step and looks at the (already
		// cancelled) context on the steps+1st: the evaluation stops there.
		popts = append(popts, cel.InterruptCheckFrequency(steps+1))
	case costTracked:
		popts = append(popts,
			cel.CostLimit(limit),
			cel.CostTracking(dynCallCost{}),
			cel.CostTrackerOptions(
				interpreter.OverloadCostTracker(overloadSHA256Bytes, scanCost),
				interpreter.OverloadCostTracker(overloadSHA256String, scanCost),
				interpreter.OverloadCostTracker(overloadHexBytes, scanCost),
			))
	}
	prg, err := e.env.Program(ast, popts...)
	if err != nil {
		return nil, err // a constant regular expression that does not compile
	}
	data := readsVar(ast.NativeRep().Expr(), "data", 0)
	return &expr{src: src, prg: prg, out: out, mode: mode, limit: limit, steps: steps, data: data,
		ast: ast, env: e.env, popts: popts}, nil
}

// checked parses and type-checks src and checks its type against want, as
// compile says.
func (e *exprEnv) checked(src string, want *cel.Type) (*cel.Ast, error) {
	if e.provider != nil {
		e.provider.takeMisses() // another check's
	}
	ast, iss := e.env.Compile(src)
	if iss != nil && iss.Err() != nil {
		if e.schema != nil && e.schema.onlyLenient(iss) {
			return nil, nil // see onlyLenient: no verdict
		}
		return nil, errors.New(e.issuesText(iss))
	}
	out := ast.OutputType()
	if want != nil && !out.IsExactType(cel.DynType) && !want.IsAssignableType(out) {
		msg := fmt.Sprintf("the expression is of type %s, want %s", cel.FormatCELType(out), wantText(want))
		if out.Kind() == types.OpaqueKind && out.TypeName() == "optional_type" {
			msg += " (an optional value: take it with .orValue(default) or .value())"
		}
		return nil, errors.New(msg)
	}
	return ast, nil
}

// wantText names the type an expression must have: a list of any elements
// is "a list", as each wants.
func wantText(want *cel.Type) string {
	if want.Kind() == types.ListKind && want.Parameters()[0].IsExactType(cel.DynType) {
		return "a list"
	}
	return cel.FormatCELType(want)
}

// check type-checks src in a typed environment (newTypedEnv) and returns
// its type: the schema's verdict on an expression that compile accepted.
func (e *exprEnv) check(src string, want *cel.Type) (*cel.Type, error) {
	ast, err := e.checked(src, want)
	if err != nil || ast == nil {
		return cel.DynType, err
	}
	return ast.OutputType(), nil
}

// costMode is how the cost limit of an expression is kept (see
// exprCostLimit).
type costMode uint8

const (
	costFree costMode = iota
	costSteps
	costTracked
)

func (m costMode) String() string {
	return [...]string{"free", "steps", "tracked"}[m]
}

// costMode decides how the cost limit of ast is kept, which limit, and for
// costSteps how many comprehension steps it may take.
// (The estimate's minimum is not used to refuse an expression that always
// costs too much: cel-go's extensions misestimate it, e.g. substring's.)
func (e *exprEnv) costMode(ast *cel.Ast) (mode costMode, limit uint64, steps uint) {
	est, err := e.env.EstimateCost(ast, noSizes{})
	if err == nil && est.Max <= exprCostLimit {
		return costFree, exprCostLimit, 0
	}
	ranges := map[int64]bool{}
	celast.PostOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(x celast.Expr) {
		if x.Kind() == celast.ComprehensionKind {
			ranges[x.AsComprehension().IterRange().ID()] = true
		}
	}))
	if len(ranges) > 0 {
		one, err := e.env.EstimateCost(ast, oneElement{ranges})
		if err == nil && one.Max <= exprCostLimit {
			return costSteps, exprCostLimit, uint(exprCostLimit / max(one.Max, 1))
		}
		return costTracked, trackedLoopLimit, 0
	}
	return costTracked, exprCostLimit, 0
}

// oneElement sizes every list or map a comprehension ranges over at one
// element, and nothing else: the estimate is then the cost of one step of
// every comprehension and of the rest, once.
type oneElement struct{ ranges map[int64]bool }

func (o oneElement) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	if o.ranges[n.Expr().ID()] {
		return &checker.SizeEstimate{Min: 0, Max: 1}
	}
	return nil
}

func (oneElement) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// stopped is an evaluation context that is already done: a costSteps
// evaluation's interruption check, when it looks, stops it.
var stopped = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// readsVar reports whether e reads the variable name: an identifier name
// outside the scope of a comprehension's (or cel.bind's) variable of the
// same name.
func readsVar(e celast.Expr, name string, depth int) bool {
	if e == nil {
		return false
	}
	if depth > 1000 {
		return true // deeper than the parser nests: assume it does
	}
	depth++
	switch e.Kind() {
	case celast.IdentKind:
		return e.AsIdent() == name
	case celast.SelectKind:
		return readsVar(e.AsSelect().Operand(), name, depth)
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && readsVar(c.Target(), name, depth) {
			return true
		}
		for _, a := range c.Args() {
			if readsVar(a, name, depth) {
				return true
			}
		}
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			if readsVar(x, name, depth) {
				return true
			}
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			m := en.AsMapEntry()
			if readsVar(m.Key(), name, depth) || readsVar(m.Value(), name, depth) {
				return true
			}
		}
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if readsVar(f.AsStructField().Value(), name, depth) {
				return true
			}
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		if readsVar(c.IterRange(), name, depth) || readsVar(c.AccuInit(), name, depth) {
			return true
		}
		iter := c.IterVar() == name || (c.HasIterVar2() && c.IterVar2() == name)
		accu := c.AccuVar() == name
		if !iter && !accu && (readsVar(c.LoopCondition(), name, depth) || readsVar(c.LoopStep(), name, depth)) {
			return true
		}
		if !accu && readsVar(c.Result(), name, depth) {
			return true
		}
	}
	return false
}

// issuesText is CEL's issues as `line:column: message`, one after another,
// with a did-you-mean for an undeclared variable.
func (e *exprEnv) issuesText(iss *cel.Issues) string {
	var misses []fieldMiss
	if e.provider != nil {
		misses = e.provider.takeMisses()
	}
	var b strings.Builder
	for i, err := range iss.Errors() {
		if i > 0 {
			b.WriteString("; ")
		}
		msg := strings.TrimSuffix(err.Message, " (in container '')")
		const undefinedField = "undefined field '"
		if rest, ok := strings.CutPrefix(msg, undefinedField); ok {
			field, _, _ := strings.Cut(rest, "'")
			for _, m := range misses {
				if m.field == field {
					msg = e.schema.noFieldText(m)
					break
				}
			}
		}
		fmt.Fprintf(&b, "%d:%d: %s", err.Location.Line(), err.Location.Column()+1, msg)
		const undeclared = "undeclared reference to '"
		if rest, ok := strings.CutPrefix(msg, undeclared); ok {
			if name, _, ok := strings.Cut(rest, "'"); ok {
				if s := closest(name, e.names); s != "" {
					fmt.Fprintf(&b, " (did you mean '%s'?)", s)
				}
			}
		}
		if nullCompared(msg) {
			b.WriteString(" (a field that is null is absent from the payload: test it with has(…), or read it with .?field.orValue(…))")
		}
		if _, args, ok := overloadArgs(msg); ok && mixedNumbers(args) {
			b.WriteString(" (CEL does not convert numbers: write 9.0 for a double, or convert with double(…) or int(…))")
		}
	}
	return b.String()
}

// overloadArgs splits a checker's "found no matching overload for '_*_'
// applied to '(double, int)'" into the function and its argument types; a
// member call's target ('optional_type(string).(null)') is its first.
func overloadArgs(msg string) (fn string, args []string, ok bool) {
	rest, ok := strings.CutPrefix(msg, "found no matching overload for '")
	if !ok {
		return "", nil, false
	}
	fn, rest, _ = strings.Cut(rest, "'")
	_, rest, ok = strings.Cut(rest, "applied to '")
	if !ok {
		return "", nil, false
	}
	rest = strings.TrimSuffix(rest, "'")
	target, rest, member := strings.Cut(rest, ".(")
	if member {
		args = append(args, target)
	} else {
		rest = strings.TrimPrefix(target, "(")
	}
	rest = strings.TrimSuffix(rest, ")")
	return fn, append(args, strings.Split(rest, ", ")...), true
}

// mixedNumbers reports whether args are numbers of two or three kinds
// (int, uint, double): the mistake of data.celsius * 9 / 5 over a double
// field.
func mixedNumbers(args []string) bool {
	kinds := map[string]bool{}
	for _, a := range args {
		if a != "int" && a != "uint" && a != "double" {
			return false
		}
		kinds[a] = true
	}
	return len(kinds) >= 2
}

// nullCompared reports whether a checker's message is a value compared
// with null.
func nullCompared(msg string) bool {
	fn, args, ok := overloadArgs(msg)
	return ok && (fn == "_==_" || fn == "_!=_") && slices.Contains(args, "null")
}

// closest is the candidate nearest to name by edit distance, if it is near
// enough to be a typo (at most 2 edits, and fewer than half of name's
// letters); "" otherwise.
func closest(name string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		d := editDistance(name, c)
		if d < bestD && 2*d < max(len(name), len(c)) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// bytes count one each (itme → item is one).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// eval evaluates e against act. The error wraps template.ErrExpression, or
// is the payload's decode error as the activation's decode func returned it
// (invalid_payload, or a transient error) when the expression read data and
// the payload could not be decoded: that holds even if the expression caught
// the error (has(data.a) || true).
func (e *expr) eval(act *activation) (ref.Val, error) {
	if act == nil {
		return nil, fmt.Errorf("%w: no message to evaluate against", template.ErrExpression)
	}
	var out ref.Val
	var err error
	if e.mode == costSteps {
		out, _, err = e.prg.ContextEval(stopped, act)
	} else {
		out, _, err = e.prg.Eval(act)
	}
	if act.dataErr != nil {
		return nil, act.dataErr
	}
	if err == nil {
		if v, ok := out.(*types.Err); ok {
			err = v
		}
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "no such overload") {
			if why := e.explainOverload(act); why != "" {
				return nil, fmt.Errorf("%w: %s", template.ErrExpression, why)
			}
		}
		return nil, e.evalError(err)
	}
	switch out.(type) {
	case *types.Unknown:
		return nil, fmt.Errorf("%w: the result is unknown", template.ErrExpression)
	}
	return out, nil
}

// explainOverload evaluates e again against act, keeping every value, and
// names the call that had no overload for its arguments' types, with its
// place: "no such overload: '*' applied to (double, int) at 1:20". The
// types are the values' kinds, never the values. "" when it finds none.
// It runs only on a failed evaluation: the program it uses is made once.
func (e *expr) explainOverload(act *activation) string {
	e.traceOnce.Do(func() {
		opts := append(slices.Clone(e.popts), cel.EvalOptions(cel.OptTrackState))
		e.traced, _ = e.env.Program(e.ast, opts...)
	})
	if e.traced == nil {
		return ""
	}
	var det *cel.EvalDetails
	if e.mode == costSteps {
		_, det, _ = e.traced.ContextEval(stopped, act)
	} else {
		_, det, _ = e.traced.Eval(act)
	}
	if det == nil || det.State() == nil {
		return ""
	}
	state := det.State()
	var why string
	celast.PostOrderVisit(e.ast.NativeRep().Expr(), celast.NewExprVisitor(func(x celast.Expr) {
		if why != "" || x.Kind() != celast.CallKind {
			return
		}
		v, ok := state.Value(x.ID())
		if !ok || !types.IsError(v) || !strings.HasPrefix(v.(*types.Err).Error(), "no such overload") {
			return
		}
		call := x.AsCall()
		operands := call.Args()
		if call.IsMemberFunction() {
			operands = append([]celast.Expr{call.Target()}, operands...)
		}
		kinds := make([]string, len(operands))
		for i, a := range operands {
			av, ok := state.Value(a.ID())
			if !ok || types.IsError(av) {
				return // the failure is below: that call is named
			}
			kinds[i] = av.Type().(ref.Type).TypeName()
		}
		fn := call.FunctionName()
		if op, ok := operators.FindReverse(fn); ok && op != "" {
			fn = op
		}
		loc := e.ast.NativeRep().SourceInfo().GetStartLocation(x.ID())
		why = fmt.Sprintf("no such overload: '%s' applied to (%s) at %d:%d", fn, strings.Join(kinds, ", "), loc.Line(), loc.Column()+1)
	}))
	return why
}

// evalError wraps an evaluation error as template.ErrExpression, with
// CEL's message scrubbed of what may be the message's values.
func (e *expr) evalError(err error) error {
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
		return fmt.Errorf("%w: cost limit of %d exceeded", template.ErrExpression, e.limit)
	}
	if errors.Is(err, interpreter.InterruptError{}) {
		return fmt.Errorf("%w: cost limit of %d exceeded (more than %d comprehension steps)", template.ErrExpression, e.limit, e.steps)
	}
	failed := fmt.Errorf("%w: %s", template.ErrExpression, scrub(err.Error(), e.src))
	if isResolutionError(err) {
		return &absentError{failed}
	}
	return failed
}

// errNoSuchValue marks the failure of an expression that read a value the
// message does not have: a map key or a message field that is absent (a
// JSON member, an Avro field whose union is null, an unset proto field: in
// the value model of value.go each is an absent map key), a field of a
// null, an index out of range. A column's missing-value policy applies to
// it as to template.ErrMissingField. Test with errors.Is; its text is not
// in the error's.
var errNoSuchValue = errors.New("no such value")

// absentError is an expression's failure (wrapping template.ErrExpression,
// with the same text) that is also errNoSuchValue.
type absentError struct{ err error }

func (e *absentError) Error() string   { return e.err.Error() }
func (e *absentError) Unwrap() []error { return []error{e.err, errNoSuchValue} }

// isResolutionError reports whether err, from cel-go's evaluation, is its
// failure to resolve what the expression reads: cel-go's interpreter makes
// one (unexported) error type for an absent map key or message field, an
// index out of range and an absent variable, which it wraps in a
// *types.Err. It is told by its type, not its text: see resolutionErrorType.
func isResolutionError(err error) bool {
	t := resolutionErrorType()
	if t == nil {
		return false
	}
	for ; err != nil; err = errors.Unwrap(err) {
		if reflect.TypeOf(err) == t {
			return true
		}
	}
	return false
}

// resolutionErrorType is the type of cel-go's resolution error, learnt
// once from an evaluation that reads an absent key; nil if that evaluation
// does not fail with an error of cel-go's interpreter (a cel-go that has
// changed: TestExpressionMissingValues then fails), so that no other error
// is ever taken for one.
var resolutionErrorType = sync.OnceValue(func() reflect.Type {
	env, err := cel.NewEnv(cel.Variable("m", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		return nil
	}
	ast, iss := env.Compile("m.absent")
	if iss != nil && iss.Err() != nil {
		return nil
	}
	prg, err := env.Program(ast)
	if err != nil {
		return nil
	}
	_, _, err = prg.Eval(map[string]any{"m": map[string]any{}})
	var celErr *types.Err
	if !errors.As(err, &celErr) {
		return nil
	}
	inner := celErr.Unwrap()
	t := reflect.TypeOf(inner)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().PkgPath() != "github.com/google/cel-go/interpreter" {
		return nil
	}
	return t
})

// celTypeNames are the quoted words of CEL's messages that are types, not
// values: kept when scrubbing.
var celTypeNames = map[string]bool{
	"bool": true, "int": true, "uint": true, "double": true, "string": true, "bytes": true,
	"list": true, "map": true, "null_type": true, "timestamp": true, "duration": true,
	"type": true, "optional_type": true, "dyn": true,
	"google.protobuf.Timestamp": true, "google.protobuf.Duration": true,
}

// scrub removes from CEL's error message what may be a value of the message
// (an attribute, a payload string quoted by a failed conversion, the key of
// a dynamic lookup): a quoted text is kept only when it is a type name or
// appears in the expression's source, "no such key: K" keeps K on the same
// terms. The result is at most 300 bytes.
func scrub(msg, src string) string {
	var b strings.Builder
	for i := 0; i < len(msg); {
		c := msg[i]
		if c != '\'' && c != '"' {
			b.WriteByte(c)
			i++
			continue
		}
		end := strings.IndexByte(msg[i+1:], c)
		if end < 0 {
			b.WriteString(msg[i:])
			break
		}
		inner := msg[i+1 : i+1+end]
		b.WriteByte(c)
		if celTypeNames[inner] || strings.Contains(src, inner) {
			b.WriteString(inner)
		} else {
			b.WriteString("…")
		}
		b.WriteByte(c)
		i += end + 2
	}
	out := b.String()
	if key, ok := strings.CutPrefix(out, "no such key: "); ok && !strings.Contains(src, key) {
		out = "no such key"
	}
	if len(out) > 300 {
		out = out[:300] + "…"
	}
	return out
}

// bool evaluates e as a filter or a when: its value must be a bool.
func (e *expr) bool(act *activation) (bool, error) {
	v, err := e.eval(act)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%w: the result is of type %s, want bool", template.ErrExpression, typeName(v))
	}
	return bool(b), nil
}

// string evaluates e as an op: its value must be a string.
func (e *expr) string(act *activation) (string, error) {
	v, err := e.eval(act)
	if err != nil {
		return "", err
	}
	str, ok := v.(types.String)
	if !ok {
		return "", fmt.Errorf("%w: the result is of type %s, want string", template.ErrExpression, typeName(v))
	}
	return string(str), nil
}

// list evaluates e as an each: its value must be a list of at most max
// elements (more: errTooManyElements), returned as values of the model. A
// list of the payload itself (each: data.readings) is returned as it is,
// without copying; the caller must not modify it.
func (e *expr) list(act *activation, max int) ([]any, error) {
	v, err := e.eval(act)
	if err != nil {
		return nil, err
	}
	l, ok := v.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("%w: the result is of type %s, want a list", template.ErrExpression, typeName(v))
	}
	n, ok := l.Size().(types.Int)
	if !ok {
		return nil, fmt.Errorf("%w: the list has no size", template.ErrExpression)
	}
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: the list has %d elements, at most %d are allowed", errTooManyElements, n, max)
	}
	x, err := toModel(l, 0)
	if err != nil {
		return nil, err
	}
	return x.([]any), nil
}

// time evaluates e as a time: its value must be a timestamp (an int or a
// string is not converted here: write timestamp(…) or int(…) in CEL).
func (e *expr) time(act *activation) (time.Time, error) {
	v, err := e.eval(act)
	if err != nil {
		return time.Time{}, err
	}
	t, ok := v.(types.Timestamp)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: the result is of type %s, want timestamp", template.ErrExpression, typeName(v))
	}
	return t.Time, nil
}

// timestamp is time for a template's lone expression, reading the
// activation in in.Vars: ok is false (and err nil) when the value is not a
// timestamp, for the caller to render it instead.
func (e *expr) timestamp(vars any) (t time.Time, ok bool, err error) {
	act, _ := vars.(*activation)
	v, err := e.eval(act)
	if err != nil {
		return time.Time{}, false, err
	}
	ts, ok := v.(types.Timestamp)
	if !ok {
		return time.Time{}, false, nil
	}
	return ts.Time, true, nil
}

// AppendTo implements template.Expr: it evaluates e against the activation
// in in.Vars (an *activation) and appends the value as value.go renders it.
// A null or an absent optional is template.ErrMissingField. On error dst is
// returned unchanged.
func (e *expr) AppendTo(dst []byte, vars any) ([]byte, error) {
	act, _ := vars.(*activation)
	if act == nil {
		return dst, fmt.Errorf("%w: no message to evaluate against (Input.Vars is %T)", template.ErrExpression, vars)
	}
	v, err := e.eval(act)
	if err != nil {
		return dst, err
	}
	x, err := toModel(v, 0)
	if err != nil {
		return dst, err
	}
	out, err := appendValue(dst, x)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// typeName is v's CEL type name, for messages.
func typeName(v ref.Val) string {
	if v == nil {
		return "nothing"
	}
	if o, ok := v.(*types.Optional); ok {
		if !o.HasValue() {
			return "optional (none)"
		}
		return "optional_type"
	}
	return v.Type().TypeName()
}

var errAbsent = fmt.Errorf("%w: the value is absent (optional.none())", template.ErrMissingField)

// toModel converts a CEL value to the value model of value.go, recursively,
// at most maxDepth levels deep. Lists and maps that are the payload's own
// ([]any, map[string]any of the model) are returned as they are.
func toModel(v ref.Val, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: the result nests more than %d levels deep", template.ErrExpression, maxDepth)
	}
	switch x := v.(type) {
	case types.String:
		return string(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		return float64(x), nil
	case types.Bool:
		return bool(x), nil
	case types.Bytes:
		return []byte(x), nil
	case types.Timestamp:
		return x.Time, nil
	case types.Duration:
		return x.Duration, nil
	case types.Null:
		return nil, nil
	case *types.Optional:
		if !x.HasValue() {
			return nil, errAbsent
		}
		return toModel(x.GetValue(), depth)
	case *types.Err:
		return nil, fmt.Errorf("%w: %s", template.ErrExpression, x.Error())
	case *types.Type:
		return x.TypeName(), nil
	case traits.Lister:
		if native, ok := x.Value().([]any); ok && isModel(native, depth) {
			return native, nil
		}
		n, ok := x.Size().(types.Int)
		if !ok || n < 0 {
			return nil, fmt.Errorf("%w: a list without a size", template.ErrExpression)
		}
		out := make([]any, 0, int(n))
		for it := x.Iterator(); it.HasNext() == types.True; {
			e, err := toModel(it.Next(), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	case traits.Mapper:
		if native, ok := x.Value().(map[string]any); ok && isModel(native, depth) {
			return native, nil
		}
		n, _ := x.Size().(types.Int)
		out := make(map[string]any, max(int(n), 0))
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			key, err := mapKey(k)
			if err != nil {
				return nil, err
			}
			e, err := toModel(x.Get(k), depth+1)
			if err != nil {
				return nil, err
			}
			out[key] = e
		}
		return out, nil
	}
	if v == nil {
		return nil, fmt.Errorf("%w: no result", template.ErrExpression)
	}
	return nil, fmt.Errorf("%w: a result of type %s cannot be rendered", template.ErrExpression, v.Type().TypeName())
}

// mapKey is a CEL map key as the model's map key: strings as they are,
// integers in decimal, booleans as true/false (as a proto map's keys).
func mapKey(k ref.Val) (string, error) {
	switch x := k.(type) {
	case types.String:
		return string(x), nil
	case types.Int:
		return strconv.FormatInt(int64(x), 10), nil
	case types.Uint:
		return strconv.FormatUint(uint64(x), 10), nil
	case types.Bool:
		return strconv.FormatBool(bool(x)), nil
	}
	return "", fmt.Errorf("%w: a map key of type %s", template.ErrExpression, typeName(k))
}

// isModel reports whether v, found depth levels down, is a tree of the
// value model within maxDepth, so that it can be handed on without a copy.
// It does not allocate.
func isModel(v any, depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch x := v.(type) {
	case nil, bool, int64, uint64, float64, string, Decimal, []byte, time.Time, time.Duration:
		return true
	case []any:
		for _, e := range x {
			if !isModel(e, depth+1) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range x {
			if !isModel(e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// modelAdapter adapts the value model to CEL: Decimal reads as a string,
// and the model's maps and lists adapt their elements with it too. The rest
// is cel-go's default.
type modelAdapter struct{}

func (a modelAdapter) NativeToValue(v any) ref.Val {
	switch x := v.(type) {
	case ref.Val:
		return x
	case string:
		return types.String(x)
	case map[string]any:
		return types.NewStringInterfaceMap(a, x)
	case []any:
		return types.NewDynamicList(a, x)
	case Decimal:
		return types.String(x)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// activation is one message's variables for cel-go
// (interpreter.Activation). It builds no map: each variable is a field,
// boxed into a CEL value when an expression first reads it. The payload is
// decoded on first use. One activation serves every expression of a message
// (and each element of an each list, through setItem); reset makes it ready
// for the next message, so that it can be kept or pooled. It is not safe for
// concurrent use.
type activation struct {
	attrs     attrMap
	messageID string
	publish   time.Time
	event     time.Time
	hasEvent  bool
	item      any
	hasItem   bool

	decode   func() (any, error)
	data     any
	dataDone bool
	// dataErr is the payload's decode error, once an expression asked for
	// data: eval returns it (template.ErrInvalidPayload), not the error the
	// expression saw.
	dataErr error

	// Boxed values, made on first read.
	idVal, publishVal, eventVal ref.Val
}

// newActivation returns an activation for msg (see reset). An activation
// kept for the next message (reset) or pooled (acquireActivation) keeps the
// attribute values it boxed, so that a filter on an attribute allocates
// nothing; a new one boxes them anew.
func newActivation(msg *source.Message, decode func() (any, error)) *activation {
	a := &activation{}
	a.reset(msg.ID, msg.PublishTime, msg.Attributes, decode)
	return a
}

var activations = sync.Pool{New: func() any { return new(activation) }}

// acquireActivation is newActivation from a pool; releaseActivation returns
// it once nothing reads it any more (after the message's rows are made).
func acquireActivation(msg *source.Message, decode func() (any, error)) *activation {
	a := activations.Get().(*activation)
	a.reset(msg.ID, msg.PublishTime, msg.Attributes, decode)
	return a
}

// releaseActivation drops a's references to its message and pools it.
func releaseActivation(a *activation) {
	a.clear()
	activations.Put(a)
}

// reset prepares a for a message: its ID, publish time and attributes (not
// copied; not modified), and decode, which returns the decoded payload
// (value.go's model) the first time an expression reads data (nil: data is
// invalid_payload). Its error is returned by eval as it is, so it should be
// what the caller wants to see: wrapping template.ErrInvalidPayload, or a
// transient error. Event time and item are unset.
func (a *activation) reset(messageID string, publish time.Time, attrs map[string]string, decode func() (any, error)) {
	a.attrs.reset(attrs)
	a.messageID = messageID
	a.publish = publish
	a.event, a.hasEvent = time.Time{}, false
	a.item, a.hasItem = nil, false
	a.decode = decode
	a.data, a.dataDone, a.dataErr = nil, false, nil
	a.idVal, a.publishVal, a.eventVal = nil, nil, nil
}

// clear drops every reference to the last message (before pooling a).
func (a *activation) clear() { a.reset("", time.Time{}, nil, nil) }

// setData sets the decoded payload, for a caller that decoded it already.
func (a *activation) setData(v any) {
	a.data, a.dataDone, a.dataErr = v, true, nil
}

// payload returns the decoded payload, decoding it if no expression did.
func (a *activation) payload() (any, error) {
	if !a.dataDone {
		a.load()
	}
	return a.data, a.dataErr
}

func (a *activation) load() {
	a.dataDone = true
	if a.decode == nil {
		a.dataErr = fmt.Errorf("%w: no payload", template.ErrInvalidPayload)
		return
	}
	a.data, a.dataErr = a.decode()
}

// setEventTime sets event_time.
func (a *activation) setEventTime(t time.Time) {
	a.event, a.hasEvent, a.eventVal = t, true, nil
}

// setItem sets item, the current element of an each list (nil: a null
// element).
func (a *activation) setItem(v any) { a.item, a.hasItem = v, true }

// clearItem unsets item: reading it fails.
func (a *activation) clearItem() { a.item, a.hasItem = nil, false }

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "attributes":
		return &a.attrs, true
	case "data":
		if !a.dataDone {
			a.load()
		}
		if a.dataErr != nil {
			return types.NewErr("the payload could not be decoded"), true
		}
		return a.data, true
	case "message_id":
		if a.idVal == nil {
			a.idVal = types.String(a.messageID)
		}
		return a.idVal, true
	case "publish_time":
		if a.publishVal == nil {
			a.publishVal = types.Timestamp{Time: a.publish}
		}
		return a.publishVal, true
	case "event_time":
		if !a.hasEvent {
			return nil, false
		}
		if a.eventVal == nil {
			a.eventVal = types.Timestamp{Time: a.event}
		}
		return a.eventVal, true
	case "item":
		if !a.hasItem {
			return nil, false
		}
		return a.item, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// attrMap is the attributes variable: the message's map as a CEL map,
// without a copy. cel-go would wrap a map[string]string anew on every read
// and box every value it returns (an allocation per message); attrMap is a
// field of the activation, and it boxes each value once and keeps the boxed
// values for the next messages (an attribute such as type=reading has few
// values), so that attributes.type == 'reading' allocates nothing.
type attrMap struct {
	m     map[string]string
	boxed map[string]ref.Val // value → types.String; kept across messages
	full  traits.Mapper      // cel-go's own map, for what attrMap leaves to it
	// reused: the activation serves its second message or later; a new
	// one (newActivation per message) does not keep boxed values it would
	// never read again.
	reused bool
	used   bool
}

// Bounds of the boxed values kept: they hold attribute strings alive.
const (
	maxBoxed      = 256
	maxBoxedBytes = 64
)

func (a *attrMap) reset(m map[string]string) {
	a.m, a.full = m, nil
	a.reused = a.reused || a.used
	a.used = true
}

func (a *attrMap) box(v string) ref.Val {
	if r, ok := a.boxed[v]; ok {
		return r
	}
	r := ref.Val(types.String(v))
	if a.reused && len(v) <= maxBoxedBytes {
		if a.boxed == nil {
			a.boxed = make(map[string]ref.Val)
		} else if len(a.boxed) >= maxBoxed {
			clear(a.boxed)
		}
		a.boxed[v] = r
	}
	return r
}

func (a *attrMap) mapper() traits.Mapper {
	if a.full == nil {
		a.full = types.NewStringStringMap(modelAdapter{}, a.m)
	}
	return a.full
}

// Find implements traits.Mapper.
func (a *attrMap) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return a.mapper().Find(key)
	}
	v, ok := a.m[string(k)]
	if !ok {
		return nil, false
	}
	return a.box(v), true
}

// Get implements traits.Indexer.
func (a *attrMap) Get(key ref.Val) ref.Val {
	if v, ok := a.Find(key); ok {
		return v
	}
	return a.mapper().Get(key)
}

// Contains implements traits.Container.
func (a *attrMap) Contains(key ref.Val) ref.Val {
	if k, ok := key.(types.String); ok {
		_, found := a.m[string(k)]
		return types.Bool(found)
	}
	return a.mapper().Contains(key)
}

// Size implements traits.Sizer.
func (a *attrMap) Size() ref.Val { return types.Int(len(a.m)) }

// Iterator implements traits.Iterable.
func (a *attrMap) Iterator() traits.Iterator { return a.mapper().Iterator() }

// ConvertToNative implements ref.Val.
func (a *attrMap) ConvertToNative(t reflect.Type) (any, error) { return a.mapper().ConvertToNative(t) }

// ConvertToType implements ref.Val.
func (a *attrMap) ConvertToType(t ref.Type) ref.Val { return a.mapper().ConvertToType(t) }

// Equal implements ref.Val.
func (a *attrMap) Equal(other ref.Val) ref.Val { return a.mapper().Equal(other) }

// Type implements ref.Val.
func (a *attrMap) Type() ref.Type { return types.MapType }

// Value implements ref.Val.
func (a *attrMap) Value() any { return a.m }
