package expr

// The texts of expression errors: a compile's issues with a did-you-mean
// (issuesText), and a failed evaluation's error (evalError), its failing
// call named from a trace (explainOverload) and scrubbed of payload values
// (scrub).

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// issuesText is CEL's issues as `line:column: message`, one after another,
// with a did-you-mean for an undeclared variable.
func (e *Env) issuesText(iss *cel.Issues) string {
	var misses []schema.FieldMiss
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
				if m.Field == field {
					msg = e.schema.NoFieldText(m)
					break
				}
			}
		}
		fmt.Fprintf(&b, "%d:%d: %s", err.Location.Line(), err.Location.Column()+1, msg)
		const undeclared = "undeclared reference to '"
		if rest, ok := strings.CutPrefix(msg, undeclared); ok {
			if name, _, ok := strings.Cut(rest, "'"); ok {
				if s := schema.Closest(name, e.names); s != "" {
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

// explainOverload evaluates e again against act, keeping every value, and
// names the call that had no overload for its arguments' types, with its
// place: "no such overload: '*' applied to (double, int) at 1:20". The
// types are the values' kinds, never the values. "" when it finds none.
// It runs only on a failed evaluation: the program it uses is made once.
func (e *Expr) explainOverload(act *Activation) string {
	state := e.trace(act)
	if state == nil {
		return ""
	}
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

// trace evaluates e again against act, keeping every value it computes,
// with a program made the first time an evaluation fails; nil when it
// cannot. It runs only on a failed evaluation.
func (e *Expr) trace(act *Activation) interpreter.EvalState {
	e.traceOnce.Do(func() {
		opts := append(slices.Clone(e.popts), cel.EvalOptions(cel.OptTrackState))
		e.traced, _ = e.env.Program(e.ast, opts...)
	})
	if e.traced == nil {
		return nil
	}
	var det *cel.EvalDetails
	if e.mode == costSteps {
		_, det, _ = e.traced.ContextEval(stopped, act)
	} else {
		_, det, _ = e.traced.Eval(act)
	}
	if det == nil {
		return nil
	}
	return det.State()
}

// explainAbsent names, for a failure to read a value (CEL's "no such key:
// id"), the path that failed and why, as a template's missing field does:
// "data.before is null" for data.before.id when before is null (a Debezium
// create), "data.after is absent". It looks at the field selections of
// the payload (data.a.b, item.a) whose evaluation failed, the first in
// evaluation order, and follows its path in the message. "" when there is
// none such (an index, a map read by a computed key).
func (e *Expr) explainAbsent(act *Activation) string {
	state := e.trace(act)
	if state == nil {
		return ""
	}
	var why string
	celast.PostOrderVisit(e.ast.NativeRep().Expr(), celast.NewExprVisitor(func(x celast.Expr) {
		if why != "" || x.Kind() != celast.SelectKind || x.AsSelect().IsTestOnly() {
			return
		}
		if v, ok := state.Value(x.ID()); !ok || !types.IsError(v) {
			return
		}
		root, path := selectPath(x)
		var from any
		switch {
		case root == "data" && act.dataErr == nil && act.dataDone:
			from = act.data
		case root == "item" && act.hasItem:
			from = act.item
		default:
			return
		}
		if _, err := value.Lookup(from, path); err != nil {
			why = root + "." + strings.TrimPrefix(err.Error(), template.ErrMissingField.Error()+": ")
			if strings.HasPrefix(why, root+".the value") {
				why = root + strings.TrimPrefix(why, root+".the value")
			}
			if len(path) == 1 && strings.HasSuffix(why, " is absent") {
				why = "-" // "no such key: op" says it all: data.op is absent
			}
		}
	}))
	if why == "-" {
		return ""
	}
	return why
}

// selectPath is the variable and the fields of a chain of field selections
// (data.before.id: "data", [before id]); "" when the chain does not start
// at a variable.
func selectPath(x celast.Expr) (string, []template.Segment) {
	var path []template.Segment
	for x.Kind() == celast.SelectKind {
		sel := x.AsSelect()
		if sel.IsTestOnly() {
			return "", nil
		}
		path = append(path, template.Segment{Key: sel.FieldName(), Index: -1})
		x = sel.Operand()
	}
	if x.Kind() != celast.IdentKind {
		return "", nil
	}
	slices.Reverse(path)
	return x.AsIdent(), path
}

// evalError wraps an evaluation error as template.ErrExpression, with
// CEL's message scrubbed of what may be the message's values; a failure
// to read a value is an absentError, which Explain can say more of.
func (e *Expr) evalError(err error) error {
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
		return fmt.Errorf("%w: cost limit of %d exceeded", template.ErrExpression, e.limit)
	}
	if errors.Is(err, interpreter.InterruptError{}) {
		return fmt.Errorf("%w: cost limit of %d exceeded (more than %d comprehension steps)", template.ErrExpression, e.limit, e.steps)
	}
	failed := fmt.Errorf("%w: %s", template.ErrExpression, scrub(err.Error(), e.src))
	if isResolutionError(err) {
		return &absentError{err: failed, e: e}
	}
	return failed
}

// ErrNoSuchValue marks the failure of an expression that read a value the
// message does not have: a map key or a message field that is absent (a
// JSON member, an Avro field whose union is null, an unset proto field: in
// the value model each is an absent map key), a field of a null, an index
// out of range. A column's missing-value policy applies to it as to
// template.ErrMissingField. Test with errors.Is; its text is not in the
// error's.
var ErrNoSuchValue = errors.New("no such value")

// absentError is an expression's failure (wrapping template.ErrExpression,
// with the same text) that is also ErrNoSuchValue. e is the expression
// that failed, for Explain.
type absentError struct {
	err error
	e   *Expr
}

// Explain says, when err is an expression's failure to read a value, which
// path failed and why ("data.before is null": explainAbsent); "" otherwise. act must still hold the message that
// err's evaluation read. It evaluates the expression again, so it is for
// a failure that is shown (a dead-lettered message), not for one that a
// missing-value policy swallows, which costs nothing more than before.
func Explain(err error, act *Activation) string {
	var ae *absentError
	if act == nil || !errors.As(err, &ae) || ae.e == nil {
		return ""
	}
	return ae.e.explainAbsent(act)
}

func (e *absentError) Error() string   { return e.err.Error() }
func (e *absentError) Unwrap() []error { return []error{e.err, ErrNoSuchValue} }

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
