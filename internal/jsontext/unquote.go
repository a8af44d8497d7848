package jsontext

import (
	"bytes"
	"unicode/utf8"
)

// This file decodes the inside of a string token that String accepted, as
// json.Unmarshal decodes it: escapes resolved, a surrogate pair joined, a
// lone surrogate and an invalid UTF-8 byte U+FFFD (or, for AppendUnescaped,
// the invalid byte as it is).

// Verbatim reports whether raw, the inside of a string token String
// accepted with flags, is its own text: no escapes and valid UTF-8, so
// that it needs no decoding.
func Verbatim(raw []byte, flags Flags) bool {
	return flags == 0 || flags == NonASCII && utf8.Valid(raw)
}

// Equal reports whether raw, the inside of a string token String accepted
// with flags, decodes to exactly want. It allocates nothing.
func Equal(raw []byte, flags Flags, want string) bool {
	if flags == 0 {
		return string(raw) == want
	}
	return equalDecoded(raw, want)
}

func equalDecoded(raw []byte, want string) bool {
	var buf [utf8.UTFMax]byte
	for len(raw) > 0 {
		r, n := nextRune(raw)
		raw = raw[n:]
		w := utf8.EncodeRune(buf[:], r)
		if len(want) < w || string(buf[:w]) != want[:w] {
			return false
		}
		want = want[w:]
	}
	return want == ""
}

// Unquote is the decoded text of raw, the inside of a string token that
// String accepted.
func Unquote(raw []byte) string {
	return string(AppendUnquoted(make([]byte, 0, len(raw)), raw))
}

// AppendUnquoted appends the decoded text of raw, the inside of a string
// token that String accepted.
func AppendUnquoted(dst []byte, raw []byte) []byte {
	for len(raw) > 0 {
		// Copy runs that need no decoding in one go.
		i := 0
		for i < len(raw) && raw[i] < utf8.RuneSelf && raw[i] != '\\' {
			i++
		}
		dst = append(dst, raw[:i]...)
		raw = raw[i:]
		if len(raw) == 0 {
			break
		}
		r, n := nextRune(raw)
		dst = utf8.AppendRune(dst, r)
		raw = raw[n:]
	}
	return dst
}

// AppendUnescaped appends raw, the inside of a string token that String
// accepted, with its escapes resolved as AppendUnquoted resolves them (a
// lone surrogate U+FFFD), but its other bytes as they are: invalid UTF-8
// stays invalid. The Avro-JSON decoder reads strings so.
func AppendUnescaped(dst []byte, raw []byte) []byte {
	for {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:i]...)
		r, n := nextRune(raw[i:])
		dst = utf8.AppendRune(dst, r)
		raw = raw[i+n:]
	}
}

// nextRune decodes the character at the start of s, the inside of a string
// that String accepted, the way encoding/json does: escapes are resolved, a
// surrogate pair joins, and a lone surrogate or an invalid UTF-8 byte
// becomes U+FFFD. It returns the rune and the number of bytes it used.
func nextRune(s []byte) (rune, int) {
	c := s[0]
	if c < utf8.RuneSelf && c != '\\' {
		return rune(c), 1
	}
	if c != '\\' {
		return utf8.DecodeRune(s) // RuneError, 1 for an invalid byte
	}
	switch s[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r := hex4(s[2:])
		if r < 0xD800 || r > 0xDFFF {
			return r, 6
		}
		if r < 0xDC00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if r2 := hex4(s[8:]); r2 >= 0xDC00 && r2 <= 0xDFFF {
				return (r-0xD800)<<10 | (r2 - 0xDC00) + 0x10000, 12
			}
		}
		return utf8.RuneError, 6
	default: // " \ /
		return rune(s[1]), 2
	}
}
