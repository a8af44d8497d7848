package jsontext

import (
	"math"
	"strings"
	"testing"
)

// This file tests the scanner's tokens, its problems and where it leaves
// Pos, and the decoding of what it accepted.

func TestString(t *testing.T) {
	for _, c := range []struct {
		in    string
		flags Flags
		text  string
	}{
		{`""`, 0, ""},
		{`"abc" tail`, 0, "abc"},
		{`"a\"b"`, Escaped, `a"b`},
		{`"\\\/\b\f\n\r\t"`, Escaped, "\\/\b\f\n\r\t"},
		{`"\u00e9"`, Escaped, "é"},
		{`"\uD83D\uDE00"`, Escaped, "😀"},
		{`"\ud800"`, Escaped, "\uFFFD"},
		{`"\ud800\u0041"`, Escaped, "\uFFFDA"},
		{`"\udc00\ud800"`, Escaped, "\uFFFD\uFFFD"},
		{`"é"`, NonASCII, "é"},
		{"\"\xff\"", NonASCII, "\uFFFD"},
		{"\"\xed\xa0\x80\"", NonASCII, "\uFFFD\uFFFD\uFFFD"},
		{"\"\xc3\xa9\\n\"", NonASCII | Escaped, "é\n"},
	} {
		plain := Scanner{Data: []byte(c.in)}
		if plain.PlainString() != (c.flags == 0) {
			t.Errorf("%q: PlainString %v", c.in, c.flags == 0)
		}
		s := Scanner{Data: []byte(c.in)}
		flags, p := s.String()
		if p != OK || flags != c.flags || s.Pos != strings.LastIndex(c.in, `"`)+1 {
			t.Errorf("%q: flags %b, problem %d, Pos %d", c.in, flags, p, s.Pos)
			continue
		}
		raw := s.Data[1 : s.Pos-1]
		if got := Unquote(raw); got != c.text {
			t.Errorf("%q: Unquote %q, want %q", c.in, got, c.text)
		}
		if got := AppendUnquoted([]byte("x"), raw); string(got) != "x"+c.text {
			t.Errorf("%q: AppendUnquoted %q", c.in, got)
		}
		if !Equal(raw, flags, c.text) || Equal(raw, flags, c.text+"x") || c.text != "" && Equal(raw, flags, c.text[1:]) {
			t.Errorf("%q: Equal disagrees with %q", c.in, c.text)
		}
		if Verbatim(raw, flags) != (string(raw) == c.text) {
			t.Errorf("%q: Verbatim %v", c.in, Verbatim(raw, flags))
		}
	}
}

// TestAppendUnescaped: escapes resolved as AppendUnquoted resolves them,
// every other byte as it is, invalid UTF-8 too.
func TestAppendUnescaped(t *testing.T) {
	for raw, want := range map[string]string{
		``:                    ``,
		`abc`:                 `abc`,
		"\\u00e9\xff\\n\xc3":  "é\xff\n\xc3",
		`\ud800\u0041`:        "\uFFFDA",
		`\uD83D\uDE00\"\\\/x`: "😀\"\\/x",
		"\xed\xa0\x80\\t":     "\xed\xa0\x80\t",
	} {
		if got := AppendUnescaped([]byte("x"), []byte(raw)); string(got) != "x"+want {
			t.Errorf("%q: AppendUnescaped %q, want %q", raw, got, want)
		}
	}
}

// TestProblems holds each Problem to where it leaves Pos.
func TestProblems(t *testing.T) {
	for _, c := range []struct {
		in      string
		problem Problem
		at      int
	}{
		{``, ExpectedValue, 0},
		{`  `, ExpectedValue, 2},
		{`x`, ExpectedValue, 0},
		{`tru`, ExpectedValue, 0},
		{`nul1`, ExpectedValue, 0},
		{`-`, ExpectedDigit, 1},
		{`-a`, ExpectedDigit, 1},
		{`1.`, ExpectedDigit, 2},
		{`1.e1`, ExpectedDigit, 2},
		{`1e`, ExpectedDigit, 2},
		{`1e+x`, ExpectedDigit, 3},
		{`"abc`, ExpectedStringEnd, 4},
		{`"ab\`, ExpectedEscape, 3},
		{`"a\x"`, InvalidEscape, 2},
		{`"a\u12"`, InvalidHexEscape, 2},
		{`"a\u12g4"`, InvalidHexEscape, 2},
		{"\"a\tb\"", ControlChar, 2},
		{`{1:2}`, ExpectedName, 1},
		{`{"a"}`, ExpectedColon, 4},
		{`{"a":1]`, ExpectedCommaOrBrace, 6},
		{`{"a":1`, ExpectedCommaOrBrace, 6},
		{`[1}`, ExpectedCommaOrBracket, 2},
		{`[1,]`, ExpectedValue, 3},
		{`[[[]]]`, TooDeep, 2},
		{`{"a":{"b":[]}}`, TooDeep, 10},
		{`[] x`, Trailing, 3},
	} {
		s := Scanner{Data: []byte(c.in)}
		p := s.SkipValue(0, 2)
		if p == OK && !s.AtEnd() {
			p = Trailing
		}
		if p != c.problem || s.Pos != c.at {
			t.Errorf("%q: problem %d at %d, want %d at %d", c.in, p, s.Pos, c.problem, c.at)
		}
	}
}

func TestSkipValue(t *testing.T) {
	for _, in := range []string{
		`0`, `-0.5e+3`, `"a\"b"`, `true`, `false`, `null`, `{}`, `[]`, ` { "a" : [ 1 , { } , "x" ] , "b" : null } `,
		strings.Repeat("[", 3) + strings.Repeat("]", 3),
	} {
		s := Scanner{Data: []byte(in + ",")}
		if p := s.SkipValue(0, 3); p != OK || s.Pos != len(strings.TrimRight(in, " ")) {
			t.Errorf("%q: problem %d, Pos %d", in, p, s.Pos)
		}
		if more, p := s.More(']'); !more || p != OK || s.Pos != len(s.Data) {
			t.Errorf("%q: More %v %d", in, more, p)
		}
	}
}

func TestAppendCompact(t *testing.T) {
	in := " {\t\"a b\" : [ 1 , \"x\\\" y\" ] ,\n \"c\":{ } } "
	s := Scanner{Data: []byte(in)}
	s.SkipSpace()
	start := s.Pos
	if p := s.SkipValue(0, 10); p != OK {
		t.Fatal(p)
	}
	want := `{"a b":[1,"x\" y"],"c":{}}`
	if got := AppendCompact(nil, s.Data[start:s.Pos]); string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestFloat64(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0", 0, true},
		{"-0", math.Copysign(0, -1), true},
		{"12.50", 12.5, true},
		{"1e22", 1e22, true},
		{"123456789012345678", 123456789012345678, true},
		{"0.1000000000000000055511151231257827", 0.1, true},
		{"5e-324", math.SmallestNonzeroFloat64, true},
		{"1e-400", 0, true},
		{"1e400", 0, false},
		{"-1e400", 0, false},
	} {
		got, ok := Float64([]byte(c.in))
		if ok != c.ok || ok && math.Float64bits(got) != math.Float64bits(c.want) {
			t.Errorf("%s: %v %v, want %v %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestScanningAllocatesNothing scans a document with every kind of token.
func TestScanningAllocatesNothing(t *testing.T) {
	data := []byte(`{"a": [1, -2.5e3, true, false, null, "x\u00e9\n", "é"], "b": {"c": {}}}`)
	raw := []byte(`x\u00e9\n`)
	allocs := testing.AllocsPerRun(100, func() {
		s := Scanner{Data: data}
		if s.SkipValue(0, 10) != OK || !s.AtEnd() || !Equal(raw, Escaped, "xé\n") {
			t.Fatal("not scanned")
		}
		if f, ok := Float64([]byte("-2.5e3")); !ok || f != -2500 {
			t.Fatal(f)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations", allocs)
	}
}
