package hclread

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Resource is one resource block.
type Resource struct {
	Type, Name string
	Body       *hclsyntax.Body
}

// Resources parses src and returns its resource blocks, in order.
func Resources(src []byte) ([]Resource, error) {
	file, diags := hclsyntax.ParseConfig(src, "main.tf", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	var rs []Resource
	for _, b := range file.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "resource" && len(b.Labels) == 2 {
			rs = append(rs, Resource{b.Labels[0], b.Labels[1], b.Body})
		}
	}
	return rs, nil
}

// Attr reads key from body: "a", or "block.a" for the a of each nested
// block of that type, joined with commas; "" when absent. A literal gives
// its value (a number in its shortest form, a bool as true or false), a
// reference its path ("var.project", "google_pubsub_topic.t.id"), a
// template its text with each reference as ${path}
// ("serviceAccount:${google_service_account.run.email}"), a list its
// elements joined with commas.
func Attr(body *hclsyntax.Body, key string) (string, error) {
	if blockType, name, nested := strings.Cut(key, "."); nested {
		var vals []string
		for _, b := range body.Blocks {
			if b.Type == blockType {
				v, err := Attr(b.Body, name)
				if err != nil {
					return "", err
				}
				vals = append(vals, v)
			}
		}
		return strings.Join(vals, ","), nil
	}
	a, ok := body.Attributes[key]
	if !ok {
		return "", nil
	}
	return expr(key, a.Expr)
}

// expr is the text of e: a literal's value, a reference's path, a
// template's parts with each reference as ${path}, a list's elements
// joined with commas.
func expr(key string, e hclsyntax.Expression) (string, error) {
	switch e := e.(type) {
	case *hclsyntax.TemplateExpr:
		var b strings.Builder
		for _, p := range e.Parts {
			v, err := expr(key, p)
			if err != nil {
				return "", err
			}
			if _, ref := p.(*hclsyntax.ScopeTraversalExpr); ref {
				v = "${" + v + "}"
			}
			b.WriteString(v)
		}
		return b.String(), nil
	case *hclsyntax.TupleConsExpr:
		vals := make([]string, len(e.Exprs))
		for i, x := range e.Exprs {
			v, err := expr(key, x)
			if err != nil {
				return "", err
			}
			vals[i] = v
		}
		return strings.Join(vals, ","), nil
	}
	if tr, ok := e.(*hclsyntax.ScopeTraversalExpr); ok {
		var parts []string
		for _, s := range tr.Traversal {
			switch s := s.(type) {
			case hcl.TraverseRoot:
				parts = append(parts, s.Name)
			case hcl.TraverseAttr:
				parts = append(parts, s.Name)
			default:
				return "", fmt.Errorf("%s: a reference with an index", key)
			}
		}
		return strings.Join(parts, "."), nil
	}
	v, diags := e.Value(nil)
	if diags.HasErrors() {
		return "", fmt.Errorf("%s: %w", key, diags)
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), nil
	case cty.Bool:
		return fmt.Sprint(v.True()), nil
	case cty.Number:
		return v.AsBigFloat().Text('f', -1), nil
	}
	return "", fmt.Errorf("%s: a %s, not a literal", key, v.Type().FriendlyName())
}
