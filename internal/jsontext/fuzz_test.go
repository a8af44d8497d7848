package jsontext

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"
)

// This file holds the scanner to encoding/json by fuzzing: what it accepts,
// where its tokens end, and how it decodes them.
// Run: go test -fuzz=FuzzString ./internal/jsontext (likewise FuzzNumber,
// FuzzSkipValue).

// FuzzString scans inside as a string token, "inside", and compares it with
// json.Unmarshal into a string: the token is accepted whole exactly when
// encoding/json accepts it, its flags say what it holds, PlainString
// takes exactly the tokens without flags, and Unquote,
// AppendUnquoted, Equal and Verbatim read the text encoding/json reads
// (AppendUnescaped too, but for invalid UTF-8, which it keeps).
func FuzzString(f *testing.F) {
	for _, s := range []string{``, `abc`, `a\"b`, `\u00e9`, `\ud83d\ude00`, `\ud800x`, `\udc00\ud800`, "é\xff", `\x`, `\u12`, "\t", `a"b`, `\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, inside []byte) {
		data := append(append([]byte{'"'}, inside...), '"')
		plain := Scanner{Data: data}
		isPlain := plain.PlainString()
		s := Scanner{Data: data}
		flags, p := s.String()
		if isPlain != (p == OK && flags == 0) || isPlain && plain.Pos != s.Pos || !isPlain && plain.Pos != 0 {
			t.Fatalf("%q: PlainString %v at %d; String %b, %d at %d", data, isPlain, plain.Pos, flags, p, s.Pos)
		}
		var want string
		stdErr := json.Unmarshal(data, &want)
		whole := p == OK && s.Pos == len(data)
		if whole != (stdErr == nil) {
			t.Fatalf("%q: problem %d at %d; encoding/json: %v", data, p, s.Pos, stdErr)
		}
		checkStopped(t, &s, p)
		if p != OK {
			return
		}
		raw := data[1 : s.Pos-1]
		if (flags&Escaped != 0) != bytes.ContainsRune(raw, '\\') || (flags&NonASCII != 0) != (bytes.IndexFunc(raw, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0) {
			t.Fatalf("%q: flags %b", raw, flags)
		}
		if !whole {
			return // an unescaped quote inside: encoding/json read more
		}
		if got := Unquote(raw); got != want {
			t.Fatalf("%q: Unquote %q, encoding/json %q", data, got, want)
		}
		if got := AppendUnquoted([]byte("x"), raw); string(got) != "x"+want {
			t.Fatalf("%q: AppendUnquoted %q, encoding/json %q", data, got, want)
		}
		// AppendUnescaped keeps each invalid byte, which AppendUnquoted
		// (and []rune of a string) makes U+FFFD.
		if got := AppendUnescaped([]byte("x"), raw); string([]rune(string(got))) != "x"+want || flags&Escaped == 0 && string(got) != "x"+string(raw) {
			t.Fatalf("%q: AppendUnescaped %q, encoding/json %q", data, got, want)
		}
		if !Equal(raw, flags, want) || Equal(raw, flags, want+"x") {
			t.Fatalf("%q: Equal disagrees with %q", data, want)
		}
		if _, size := utf8.DecodeLastRuneInString(want); size > 0 && Equal(raw, flags, want[:len(want)-size]) {
			t.Fatalf("%q: Equal to a prefix of %q", data, want)
		}
		if Verbatim(raw, flags) && string(raw) != want {
			t.Fatalf("%q: Verbatim but decodes to %q", data, want)
		}
		if !Verbatim(raw, flags) && flags == NonASCII && utf8.Valid(raw) {
			t.Fatalf("%q: valid UTF-8 without escapes, not Verbatim", data)
		}
	})
}

// FuzzNumber scans tok as a number token and compares it with
// encoding/json: a token accepted whole is valid JSON, and Float64 reads
// it as json.Unmarshal into a float64 does (out of range alike).
func FuzzNumber(f *testing.F) {
	for _, s := range []string{`0`, `-0`, `12.50`, `1e22`, `-1.5E-3`, `01`, `-`, `1.`, `1e+`, `1e400`, `123456789012345678901`, `0.1000000000000000055511151231257827`, `.5`, `+1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, tok []byte) {
		s := Scanner{Data: tok}
		p := s.Number()
		whole := p == OK && s.Pos == len(tok)
		// A number token starts with - or a digit and ends with a digit;
		// json.Valid also takes white space around it.
		number := len(tok) > 0 && (tok[0] == '-' || isDigit(tok[0])) && isDigit(tok[len(tok)-1])
		if whole != (number && json.Valid(tok)) {
			t.Fatalf("%q: problem %d at %d; json.Valid %v", tok, p, s.Pos, json.Valid(tok))
		}
		if p == OK && !json.Valid(tok[:s.Pos]) {
			t.Fatalf("%q: token %q is not valid JSON", tok, tok[:s.Pos])
		}
		checkStopped(t, &s, p)
		if !whole {
			return
		}
		got, ok := Float64(tok)
		var want float64
		stdErr := json.Unmarshal(tok, &want)
		if ok != (stdErr == nil) || ok && math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%q: Float64 %v %v; encoding/json %v %v", tok, got, ok, want, stdErr)
		}
		if pf, err := strconv.ParseFloat(string(tok), 64); ok && math.Float64bits(pf) != math.Float64bits(got) || ok != (err == nil) {
			t.Fatalf("%q: Float64 %v %v; ParseFloat %v %v", tok, got, ok, pf, err)
		}
	})
}

// FuzzSkipValue skips a document's value and compares it with
// encoding/json: it is accepted exactly when json.Valid accepts it (nested
// at most encoding/json's 10,000 levels), and a skipped object or array
// compacts as json.Compact compacts it.
func FuzzSkipValue(f *testing.F) {
	for _, s := range []string{`{}`, ` [1, "a\"", {"b": null}, true, false, -0.5e3] `, `{"a":1,}`, `[1 2]`, `{"a" 1}`, `"\u00e9"`, `[[[[]]]]`, `{"a":[{"b":"x\u00e9"},[1,2]]}`, "\"\xff\"", `nul`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := Scanner{Data: data}
		s.SkipSpace()
		start := s.Pos
		p := s.SkipValue(0, 10000)
		end := s.Pos
		if p == OK && !s.AtEnd() {
			p = Trailing
		}
		if (p == OK) != json.Valid(data) {
			t.Fatalf("%q: problem %d at %d; json.Valid %v", data, p, s.Pos, json.Valid(data))
		}
		checkStopped(t, &s, p)
		if p != OK || data[start] != '{' && data[start] != '[' {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, data); err != nil {
			t.Fatal(err)
		}
		if got := AppendCompact(nil, data[start:end]); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%q: AppendCompact %q, json.Compact %q", data, got, want.Bytes())
		}
	})
}

// checkStopped checks that a scan that failed with p left Pos where p
// says.
func checkStopped(t *testing.T, s *Scanner, p Problem) {
	t.Helper()
	at, n := s.Pos, len(s.Data)
	ok := at >= 0 && at <= n
	switch p {
	case ExpectedStringEnd:
		ok = at == n
	case ExpectedEscape:
		ok = at == n-1 && s.Data[at] == '\\'
	case InvalidEscape, InvalidHexEscape:
		ok = at < n-1 && s.Data[at] == '\\'
	case ControlChar:
		ok = at < n && s.Data[at] < 0x20
	case TooDeep:
		ok = at < n && (s.Data[at] == '{' || s.Data[at] == '[')
	case ExpectedColon, ExpectedCommaOrBrace, ExpectedCommaOrBracket, Trailing:
		ok = at == n || at < n && !isSpace(s.Data[at])
	}
	if !ok {
		t.Fatalf("%q: problem %d at %d", s.Data, p, at)
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
