package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzRender renders an arbitrary template, and {data.PATH}, over an
// arbitrary payload. It checks that rendering never panics, that a failure
// leaves dst exactly as given, and that every {data.…} placeholder reads what
// encoding/json reads from the same payload, but for a payload nested deeper
// than maxDepth, which is invalid. Seeds: testdata/fuzz/FuzzRender.
// Run: go test -fuzz=FuzzRender ./template
func FuzzRender(f *testing.F) {
	f.Add("{attributes.customer_id}#{event_time:reverse}", "amount", []byte(`{"amount": 12.5}`))
	f.Add("{data.a.0.b}", "a.1", []byte(`{"a": [{"b": "x\u00e9"}, [1, 2]]}`))
	f.Add("{=0}", "a", []byte(`{}`)) // an expression compiled without Options.Expr: ErrExpression
	f.Fuzz(func(t *testing.T, src, path string, data []byte) {
		in := &Input{
			MessageID:   "m-1",
			PublishTime: time.Unix(1767225600, 123_000_000),
			EventTime:   time.Unix(1767225599, 999_999_999),
			Attributes:  map[string]string{"customer_id": "c-42", "empty": ""},
			Data:        data,
		}
		if tmpl, err := Compile(src); err == nil {
			checkRender(t, tmpl, in)
		}
		if tmpl, err := Compile("{data." + path + "}"); err == nil {
			checkRender(t, tmpl, in)
		}
	})
}

func checkRender(t *testing.T, tmpl *Template, in *Input) {
	t.Helper()
	// A full dst: any append reallocates, so returning the grown slice on
	// error would show.
	dst := []byte("keep")[:4:4]
	out, err := tmpl.AppendTo(dst, in)

	// Render each part alone, and check {data.…} parts against encoding/json.
	var want []byte
	var firstErr error
	for i := range tmpl.parts {
		p := &tmpl.parts[i]
		got, perr := p.appendTo(nil, in)
		if p.kind == kindDataPath {
			checkField(t, p, in.Data, got, perr)
		}
		if perr != nil {
			if firstErr == nil {
				firstErr = perr
			}
			continue
		}
		want = append(want, got...)
	}

	if firstErr != nil {
		if err == nil || err.Error() != firstErr.Error() {
			t.Fatalf("%q: AppendTo error = %v, want the first part's %v", tmpl.src, err, firstErr)
		}
		if len(out) != len(dst) || cap(out) != cap(dst) || string(out) != "keep" {
			t.Fatalf("%q: AppendTo failed but returned %q (len %d cap %d), want dst unchanged", tmpl.src, out, len(out), cap(out))
		}
		if !errors.Is(err, ErrMissingField) && !errors.Is(err, ErrInvalidPayload) && !errors.Is(err, ErrBadTime) && !errors.Is(err, ErrExpression) {
			t.Fatalf("%q: AppendTo error %v wraps no sentinel", tmpl.src, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: AppendTo error %v, but every part renders alone", tmpl.src, err)
	}
	if string(out) != "keep"+string(want) {
		t.Fatalf("%q: AppendTo = %q, want %q", tmpl.src, out, "keep"+string(want))
	}
}

// checkField compares what p rendered from data with encoding/json's reading.
func checkField(t *testing.T, p *part, data, got []byte, err error) {
	t.Helper()
	want, wantErr := referenceField(data, p.path)
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Fatalf("%s over %q: got %q, %v; encoding/json says %v", p.placeholder, data, got, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s over %q: error %v; encoding/json reads %#v", p.placeholder, data, err, want)
	}
	switch w := want.(type) {
	case string:
		if string(got) != w {
			t.Fatalf("%s over %q = %q, encoding/json reads %q", p.placeholder, data, got, w)
		}
	case json.Number:
		if string(got) != string(w) {
			t.Fatalf("%s over %q = %q, encoding/json reads %q", p.placeholder, data, got, w)
		}
	case bool:
		if string(got) != map[bool]string{true: "true", false: "false"}[w] {
			t.Fatalf("%s over %q = %q, encoding/json reads %v", p.placeholder, data, got, w)
		}
	default: // object or array: compact JSON of the same value
		var compact bytes.Buffer
		if err := json.Compact(&compact, got); err != nil || !bytes.Equal(compact.Bytes(), got) {
			t.Fatalf("%s over %q = %q, not compact JSON (%v)", p.placeholder, data, got, err)
		}
		back, err := decodeJSON(got)
		if err != nil || !reflect.DeepEqual(back, want) {
			t.Fatalf("%s over %q = %q, reads back as %#v (%v), encoding/json reads %#v", p.placeholder, data, got, back, err, want)
		}
	}
}

// referenceField is the contract of {data.…} written with encoding/json.
func referenceField(data []byte, path []Segment) (any, error) {
	if !json.Valid(data) || nestingDepth(data) > maxDepth {
		return nil, ErrInvalidPayload
	}
	cur, err := decodeJSON(data)
	if err != nil {
		return nil, ErrInvalidPayload
	}
	for level, seg := range path {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[seg.Key]
			if !ok {
				return nil, ErrMissingField
			}
			cur = v
		case []any:
			if seg.Index < 0 {
				return nil, ErrInvalidPayload
			}
			if seg.Index >= len(c) {
				return nil, ErrMissingField
			}
			cur = c[seg.Index]
		case nil:
			if level == 0 {
				return nil, ErrInvalidPayload // the payload itself is null
			}
			return nil, ErrMissingField // a null on the way
		default:
			return nil, ErrInvalidPayload
		}
	}
	if cur == nil {
		return nil, ErrMissingField
	}
	return cur, nil
}

// nestingDepth is how deeply objects and arrays nest in valid JSON data,
// counted from encoding/json's tokens.
func nestingDepth(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// FuzzCompile checks that Compile never panics, that String returns the
// source, and that the parts it found print back to a source that compiles
// to the same parts. Seeds: testdata/fuzz/FuzzCompile.
func FuzzCompile(f *testing.F) {
	f.Add("{attributes.customer_id}#{event_time:reverse}")
	f.Add("{{literal}}#{data.a.0}")
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Compile(src)
		if err != nil {
			if tmpl != nil {
				t.Fatalf("Compile(%q) returned a template and error %v", src, err)
			}
			return
		}
		if tmpl.String() != src {
			t.Fatalf("String() = %q, want %q", tmpl.String(), src)
		}
		again, err := Compile(printParts(tmpl.parts))
		if err != nil {
			t.Fatalf("Compile(%q) = %v, but it printed from the parts of %q", printParts(tmpl.parts), err, src)
		}
		if !reflect.DeepEqual(again.parts, tmpl.parts) {
			t.Fatalf("%q -> %#v -> %q -> %#v", src, tmpl.parts, printParts(tmpl.parts), again.parts)
		}
		// Rendering a compiled template with empty input never panics.
		_, _ = tmpl.AppendTo(nil, &Input{})
	})
}

// printParts writes parts back as template source.
func printParts(parts []part) string {
	var b strings.Builder
	for _, p := range parts {
		if p.kind == kindLiteral {
			b.WriteString(strings.NewReplacer("{", "{{", "}", "}}").Replace(p.text))
			continue
		}
		b.WriteString(p.placeholder)
	}
	return b.String()
}
