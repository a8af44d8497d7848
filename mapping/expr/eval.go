package expr

// Evaluating a compiled expression against one message: eval and its typed
// forms (Bool, Text, List, time, Timestamp, AppendTo), the conversion of
// CEL values to the value model (toModel) and back (modelAdapter), and the
// Activation that hands cel-go a message's values without copying them.

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"

	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// ErrTooManyElements: the list of an each expression is longer than its
// mapping allows (dead-letter reason too_many_rows). It does not wrap
// template.ErrExpression.
var ErrTooManyElements = errors.New("too many list elements")

// eval evaluates e against act. The error wraps template.ErrExpression, or
// is the payload's decode error as the activation's decode func returned it
// (invalid_payload, or a transient error) when the expression read data and
// the payload could not be decoded: that holds even if the expression caught
// the error (has(data.a) || true).
func (e *Expr) eval(act *Activation) (ref.Val, error) {
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

// Bool evaluates e as a filter or a when: its value must be a bool.
func (e *Expr) Bool(act *Activation) (bool, error) {
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

// Text evaluates e as an op: its value must be a string.
func (e *Expr) Text(act *Activation) (string, error) {
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

// List evaluates e as an each: its value must be a list of at most max
// elements (more: ErrTooManyElements), returned as values of the model. A
// list of the payload itself (each: data.readings) is returned as it is,
// without copying; the caller must not modify it.
func (e *Expr) List(act *Activation, max int) ([]any, error) {
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
		return nil, fmt.Errorf("%w: the list has %d elements, at most %d are allowed", ErrTooManyElements, n, max)
	}
	x, err := toModel(l, 0)
	if err != nil {
		return nil, err
	}
	return x.([]any), nil
}

// time evaluates e as a time: its value must be a timestamp (an int or a
// string is not converted here: write timestamp(…) or int(…) in CEL).
func (e *Expr) time(act *Activation) (time.Time, error) {
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

// Timestamp is time for a template's lone expression, reading the
// activation in in.Vars: ok is false (and err nil) when the value is not a
// timestamp, for the caller to render it instead.
func (e *Expr) Timestamp(vars any) (t time.Time, ok bool, err error) {
	act, _ := vars.(*Activation)
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
// in in.Vars (an *Activation) and appends the value as value.Append renders
// it.
// A null or an absent optional is template.ErrMissingField. On error dst is
// returned unchanged.
func (e *Expr) AppendTo(dst []byte, vars any) ([]byte, error) {
	act, _ := vars.(*Activation)
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
	out, err := value.Append(dst, x)
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

// toModel converts a CEL value to the value model (package value),
// recursively, at most value.MaxDepth levels deep. Lists and maps that are the payload's own
// ([]any, map[string]any of the model) are returned as they are.
func toModel(v ref.Val, depth int) (any, error) {
	if depth > value.MaxDepth {
		return nil, fmt.Errorf("%w: the result nests more than %d levels deep", template.ErrExpression, value.MaxDepth)
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
// value model within value.MaxDepth, so that it can be handed on without a copy.
// It does not allocate.
func isModel(v any, depth int) bool {
	if depth > value.MaxDepth {
		return false
	}
	switch x := v.(type) {
	case nil, bool, int64, uint64, float64, string, value.Decimal, []byte, time.Time, time.Duration:
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

// modelAdapter adapts the value model to CEL: value.Decimal reads as a string,
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
	case value.Decimal:
		return types.String(x)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// Activation is one message's variables for cel-go
// (interpreter.Activation). It builds no map: each variable is a field,
// boxed into a CEL value when an expression first reads it. The payload is
// decoded on first use. One Activation serves every expression of a message
// (and each element of an each list, through SetItem); Reset makes it ready
// for the next message, so that it can be kept or pooled
// (AcquireActivation). Its zero value is ready for Reset. It is not safe for
// concurrent use.
type Activation struct {
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

// newActivation returns an activation for a message (see Reset). An
// activation kept for the next message (Reset) or pooled
// (AcquireActivation) keeps the attribute values it boxed, so that a filter
// on an attribute allocates nothing; a new one boxes them anew.
func newActivation(messageID string, publish time.Time, attrs map[string]string, decode func() (any, error)) *Activation {
	a := &Activation{}
	a.Reset(messageID, publish, attrs, decode)
	return a
}

var activations = sync.Pool{New: func() any { return new(Activation) }}

// AcquireActivation is an activation from a pool, Reset for a message;
// Release returns it once nothing reads it any more (after the message's
// rows are made).
func AcquireActivation(messageID string, publish time.Time, attrs map[string]string, decode func() (any, error)) *Activation {
	a := activations.Get().(*Activation)
	a.Reset(messageID, publish, attrs, decode)
	return a
}

// Release drops a's references to its message and pools it: a is not to be
// used again.
func (a *Activation) Release() {
	a.clear()
	activations.Put(a)
}

// Reset prepares a for a message: its ID, publish time and attributes (not
// copied; not modified), and decode, which returns the decoded payload
// (the value model, package value) the first time an expression reads data
// (nil: data is invalid_payload). Its error is returned by an evaluation
// as it is, so it should be what the caller wants to see: wrapping
// template.ErrInvalidPayload, or a transient error. Event time and item are
// unset.
func (a *Activation) Reset(messageID string, publish time.Time, attrs map[string]string, decode func() (any, error)) {
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
func (a *Activation) clear() { a.Reset("", time.Time{}, nil, nil) }

// SetData sets the decoded payload, for a caller that decoded it already.
func (a *Activation) SetData(v any) {
	a.data, a.dataDone, a.dataErr = v, true, nil
}

// payload returns the decoded payload, decoding it if no expression did.
func (a *Activation) payload() (any, error) {
	if !a.dataDone {
		a.load()
	}
	return a.data, a.dataErr
}

func (a *Activation) load() {
	a.dataDone = true
	if a.decode == nil {
		a.dataErr = fmt.Errorf("%w: no payload", template.ErrInvalidPayload)
		return
	}
	a.data, a.dataErr = a.decode()
}

// SetEventTime sets event_time.
func (a *Activation) SetEventTime(t time.Time) {
	a.event, a.hasEvent, a.eventVal = t, true, nil
}

// SetItem sets item, the current element of an each list (nil: a null
// element).
func (a *Activation) SetItem(v any) { a.item, a.hasItem = v, true }

// ClearItem unsets item: reading it fails.
func (a *Activation) ClearItem() { a.item, a.hasItem = nil, false }

// ResolveName implements interpreter.Activation.
func (a *Activation) ResolveName(name string) (any, bool) {
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
func (a *Activation) Parent() interpreter.Activation { return nil }

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
