package expr

// CEL's checker's view of a schema: a type provider that knows its records
// and messages (schemaProvider) and remembers the fields it did not find,
// for errors.go's did-you-mean; and which errors of a typed check are not
// the schema's verdict (onlyLenient).

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/pubsink/pubsink/mapping/schema"
)

// schemaProvider is a cel-go type provider that knows a schema's records
// and messages besides CEL's own types. It records the fields the checker
// looked for and did not find, so that the error can say which record lacks
// them and suggest one it has (the checker says only "undefined field").
type schemaProvider struct {
	*types.Registry
	s *schema.Types

	mu     sync.Mutex
	misses []schema.FieldMiss
}

func newSchemaProvider(s *schema.Types) (*schemaProvider, error) {
	reg, err := types.NewRegistry()
	if err != nil {
		return nil, err
	}
	return &schemaProvider{Registry: reg, s: s}, nil
}

func (p *schemaProvider) FindStructType(name string) (*types.Type, bool) {
	if _, _, ok := p.s.Describe(name); ok {
		return types.NewTypeTypeWithParam(types.NewObjectType(name)), true
	}
	return p.Registry.FindStructType(name)
}

func (p *schemaProvider) FindStructFieldNames(name string) ([]string, bool) {
	if _, fields, ok := p.s.Describe(name); ok {
		return slices.Clone(fields), true
	}
	return p.Registry.FindStructFieldNames(name)
}

func (p *schemaProvider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if _, _, ok := p.s.Describe(name); !ok {
		return p.Registry.FindStructFieldType(name, field)
	}
	t, ok := p.s.FieldType(name, field)
	if !ok {
		p.mu.Lock()
		p.misses = append(p.misses, schema.FieldMiss{Struct: name, Field: field})
		p.mu.Unlock()
		return nil, false
	}
	// Never read: the typed check makes no program (see schema.Types).
	return &types.FieldType{
		Type:    t,
		IsSet:   func(any) bool { return false },
		GetFrom: func(any) (any, error) { return nil, fmt.Errorf("field %s of %s is only type-checked", field, name) },
	}, true
}

// NewValue refuses to make a record: expressions read payloads, they do not
// build them (CEL's Reading{...} syntax).
func (p *schemaProvider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	if what, _, ok := p.s.Describe(name); ok {
		return types.NewErr("a %s cannot be made in an expression", what)
	}
	return p.Registry.NewValue(name, fields)
}

// takeMisses returns the fields not found since the last call, and forgets
// them.
func (p *schemaProvider) takeMisses() []schema.FieldMiss {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.misses
	p.misses = nil
	return m
}

// onlyLenient reports whether every error of a typed check is one that
// evaluation does not make, so that the check must not refuse the
// expression (it then gives no verdict, as an expression over dyn data):
// numbers of different kinds compared for equality (CEL's runtime compares
// 1 == 1.0 by value; its checker refuses it), and a record indexed by a
// string (data['in']: a field whose name CEL reserves can be read no other
// way), and an optional value's default of null (data.?f.orValue(null):
// a missing value, for the column's on_missing policy).
func onlyLenient(s *schema.Types, iss *cel.Issues) bool {
	for _, err := range iss.Errors() {
		fn, args, ok := overloadArgs(err.Message)
		if !ok || len(args) != 2 {
			return false
		}
		switch fn {
		case "_==_", "_!=_":
			if !mixedNumbers(args) {
				return false
			}
		case "_[_]", "_[?_]":
			if _, _, record := s.Describe(args[0]); !record || args[1] != "string" {
				return false
			}
		case "orValue":
			if !strings.HasPrefix(args[0], "optional_type(") || args[1] != "null" {
				return false
			}
		default:
			return false
		}
	}
	return true
}
