package expr

// Compiling an expression: the cost limit and how it is kept (costMode),
// Env.Compile and Env.Check, and whether an expression reads the payload
// (readsVar). The environment it compiles in is env.go, evaluating it
// eval.go, and the texts of its errors errors.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
)

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
// expression (Compile's costMode):
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

// Expr is a compiled expression. It is immutable and safe for concurrent
// use; each evaluation reads one message's activation.
type Expr struct {
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

// ReadsData reports whether the expression reads the payload (data), so
// that a caller can skip decoding it when none does.
func (e *Expr) ReadsData() bool { return e.data }

// String returns the expression's source.
func (e *Expr) String() string { return e.src }

// Type is the expression's type as compiled, over a dyn data: dyn when it
// depends on the payload (a typed check, Env.Check, may know more).
func (e *Expr) Type() *cel.Type { return e.out }

// Compile parses and type-checks src, and checks that its type is
// assignable to want (nil: any type). A result of type dyn passes and is
// checked when evaluated. The error reads as
// `1:5: undeclared reference to 'dta' (did you mean 'data'?)`.
func (e *Env) Compile(src string, want *cel.Type) (*Expr, error) {
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
	return &Expr{src: src, prg: prg, out: out, mode: mode, limit: limit, steps: steps, data: data,
		ast: ast, env: e.env, popts: popts}, nil
}

// checked parses and type-checks src and checks its type against want, as
// Compile says.
func (e *Env) checked(src string, want *cel.Type) (*cel.Ast, error) {
	if e.provider != nil {
		e.provider.takeMisses() // another check's
	}
	ast, iss := e.env.Compile(src)
	if iss != nil && iss.Err() != nil {
		if e.schema != nil && onlyLenient(e.schema, iss) {
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

// Check type-checks src in a typed environment (NewTypedEnv) and returns
// its type: the schema's verdict on an expression that Compile accepted.
func (e *Env) Check(src string, want *cel.Type) (*cel.Type, error) {
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
func (e *Env) costMode(ast *cel.Ast) (mode costMode, limit uint64, steps uint) {
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

// ResultLiterals returns the string literals that the expression can give
// as its value: itself when it is one, and those of both branches of a
// conditional (c ? a : b), at any depth. Whatever else a branch is (a
// field, a call) can give anything and is not looked into; a literal
// elsewhere (a comparison's, an argument's) is no result. For checking at
// validate what a mapping can only otherwise find per message.
func (e *Expr) ResultLiterals() []string {
	var out []string
	resultLiterals(e.ast.NativeRep().Expr(), &out, 0)
	return out
}

func resultLiterals(e celast.Expr, out *[]string, depth int) {
	if e == nil || depth > 1000 {
		return
	}
	switch e.Kind() {
	case celast.LiteralKind:
		if s, ok := e.AsLiteral().Value().(string); ok {
			*out = append(*out, s)
		}
	case celast.CallKind:
		if c := e.AsCall(); c.FunctionName() == operators.Conditional && len(c.Args()) == 3 {
			resultLiterals(c.Args()[1], out, depth+1)
			resultLiterals(c.Args()[2], out, depth+1)
		}
	}
}
