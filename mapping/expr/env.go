package expr

// The CEL environment of expressions: the variables and functions an
// expression may use (Options, NewEnv, NewTypedEnv), the bounded replace,
// and the cost estimators with which the checker bounds an expression's
// cost (exprCostLimit, expr.go).

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/pubsink/pubsink/mapping/schema"
)

// Options say which optional variables an environment declares.
type Options struct {
	// Item declares item: the expression is in a mapping with each.
	Item bool
	// EventTime declares event_time; false for the expression that computes
	// the event time itself.
	EventTime bool
}

// Env compiles expressions. It is immutable and safe for concurrent use.
type Env struct {
	env   *cel.Env
	names []string // the declared variables, for did-you-mean
	// schema and provider: a typed environment's (NewTypedEnv), or nil.
	schema   *schema.Types
	provider *schemaProvider
}

// Our functions' overload IDs.
const (
	overloadSHA256Bytes  = "sha256_bytes"
	overloadSHA256String = "sha256_string"
	overloadHexBytes     = "hex_bytes"
)

// NewEnv returns an environment with the variables opts declares, data
// and item of type dyn: the one every program is made in.
func NewEnv(opts Options) (*Env, error) {
	return buildExprEnv(opts, nil, nil)
}

// NewTypedEnv returns an environment for checking expressions against a
// schema (schema.Types): data is of the schema's root type, item (with
// opts.Item) of type item, or dyn when item is nil. Its expressions are
// checked, never run.
func NewTypedEnv(opts Options, s *schema.Types, item *cel.Type) (*Env, error) {
	return buildExprEnv(opts, s, item)
}

func buildExprEnv(opts Options, s *schema.Types, item *cel.Type) (*Env, error) {
	data := cel.DynType
	var provider *schemaProvider
	if s != nil {
		p, err := newSchemaProvider(s)
		if err != nil {
			return nil, fmt.Errorf("expression environment: %w", err)
		}
		data, provider = s.Root, p
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
	if opts.EventTime {
		names = append(names, "event_time")
		vars = append(vars, cel.Variable("event_time", cel.TimestampType))
	}
	if opts.Item {
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
	return &Env{env: env, names: names, schema: s, provider: provider}, nil
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
