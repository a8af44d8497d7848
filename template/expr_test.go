package template

import (
	"errors"
	"strings"
	"testing"
)

type upper struct{ src string }

func (u upper) AppendTo(dst []byte, vars any) ([]byte, error) {
	if u.src == "fail" {
		return dst, ErrExpression
	}
	return append(dst, strings.ToUpper(vars.(string))+":"+u.src...), nil
}

func TestExpressionsEndAtTheirMatchingBrace(t *testing.T) {
	opts := Options{Expr: func(src string) (Expr, error) { return upper{src}, nil }}
	cases := []struct{ tmpl, want string }{
		{"{= a}", "ID:a"},
		{"x{= {'k': 1}['k']}y", "xID:{'k': 1}['k']y"},
		{`{= "}" + '{' }#`, `ID:"}" + '{'#`},
		{`{= '''a}b''' }`, `ID:'''a}b'''`},
		{`{= "a\"}" }`, `ID:"a\"}"`},
	}
	for _, c := range cases {
		tm, err := CompileWith(c.tmpl, opts)
		if err != nil {
			t.Fatalf("%q: %v", c.tmpl, err)
		}
		got, err := tm.Render(&Input{MessageID: "id", Vars: "id"})
		if err != nil || got != c.want {
			t.Errorf("%q rendered %q, %v; want %q", c.tmpl, got, err, c.want)
		}
	}
	for _, bad := range []string{"{= a", "{= 'a}", "{=}", "{=  }"} {
		if _, err := CompileWith(bad, opts); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
	tm, _ := CompileWith("k{= fail}", opts)
	if b, err := tm.AppendTo([]byte("pre"), &Input{}); !errors.Is(err, ErrExpression) || string(b) != "pre" {
		t.Errorf("a failing expression gave %q, %v", b, err)
	}
	// Without a compiler, expressions parse but do not render.
	tm, err := Compile("{= x}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Render(&Input{}); !errors.Is(err, ErrExpression) {
		t.Errorf("an uncompiled expression rendered: %v", err)
	}
	if got := tm.Expressions(); len(got) != 1 || got[0] != "x" {
		t.Errorf("Expressions() = %q", got)
	}
}

type fixed string

func (f fixed) AppendPath(dst []byte, path []Segment) ([]byte, error) {
	s := string(f)
	for _, p := range path {
		s += "/" + p.Key
	}
	return append(dst, s...), nil
}

func TestDecodedValuesAndItems(t *testing.T) {
	tm, err := Compile("{data.a.b}|{item}|{item.0}|{data}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tm.Render(&Input{Data: []byte("raw"), Decoded: fixed("d"), Item: fixed("i")})
	if err != nil || got != "d/a/b|i|i/0|raw" {
		t.Errorf("rendered %q, %v", got, err)
	}
	if _, err := tm.Render(&Input{Data: []byte(`{"a":{"b":1}}`)}); !errors.Is(err, ErrMissingField) {
		t.Errorf("{item} without an item: %v", err)
	}
	if !tm.UsesItem() || len(tm.Paths()) != 3 {
		t.Errorf("UsesItem %v, Paths %v", tm.UsesItem(), tm.Paths())
	}
}
