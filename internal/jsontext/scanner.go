package jsontext

import "unicode/utf8"

// This file scans JSON text one token at a time: white space, the
// literals, numbers and strings, and says what is wrong where a token is
// not valid.

// Scanner reads JSON text: Data, from Pos on. Its methods move Pos past
// what they accept. The zero value with Data set reads Data from the start;
// a reader keeps its Scanner on its own stack (usually embedded), so that
// scanning allocates nothing.
type Scanner struct {
	Data []byte
	Pos  int
}

// Problem says why JSON text is not valid where a scan stopped; OK when it
// is. The scanner leaves Pos where the problem is, as each constant says.
type Problem uint8

const (
	// OK: the text is valid as far as the scan went.
	OK Problem = iota
	// ExpectedValue: no value starts at Pos: the data ends there, or it
	// holds a byte that starts none, or a literal misspelt (Pos at its
	// first byte).
	ExpectedValue
	// ExpectedDigit: a number lacks a digit at Pos (which may be the end
	// of the data).
	ExpectedDigit
	// ExpectedStringEnd: the data ends inside a string (Pos is len(Data)).
	ExpectedStringEnd
	// ExpectedEscape: the data ends after a string's backslash (Pos at the
	// backslash).
	ExpectedEscape
	// InvalidEscape: a backslash followed by a byte that makes no escape
	// (Pos at the backslash).
	InvalidEscape
	// InvalidHexEscape: \u not followed by four hex digits (Pos at the
	// backslash).
	InvalidHexEscape
	// ControlChar: a byte below 0x20 inside a string (Pos at it).
	ControlChar
	// ExpectedName: an object's member does not start with a string (Pos
	// at the byte, or the end of the data).
	ExpectedName
	// ExpectedColon: a member's name is not followed by a colon.
	ExpectedColon
	// ExpectedCommaOrBrace: an object's member is followed by neither a
	// comma nor a }.
	ExpectedCommaOrBrace
	// ExpectedCommaOrBracket: an array's element is followed by neither a
	// comma nor a ].
	ExpectedCommaOrBracket
	// TooDeep: an object or array nests deeper than SkipValue's bound (Pos
	// at its { or [).
	TooDeep
	// Trailing: something other than white space follows a document's
	// value (Pos at it; see AtEnd).
	Trailing
	// OutOfRange: a number token's value is beyond the range its reader
	// reads it in (Float64's false for a float64). The scanner never
	// returns it; a reader that converts numbers may, with Pos at the
	// token.
	OutOfRange
)

// SkipSpace moves Pos past JSON white space.
func (s *Scanner) SkipSpace() {
	for s.Pos < len(s.Data) {
		switch s.Data[s.Pos] {
		case ' ', '\t', '\n', '\r':
			s.Pos++
		default:
			return
		}
	}
}

// Next skips white space and returns the byte at Pos, the first of the next
// token, or 0 at the end of the data (a 0 byte outside a string is no
// token either).
func (s *Scanner) Next() byte {
	s.SkipSpace()
	if s.Pos < len(s.Data) {
		return s.Data[s.Pos]
	}
	return 0
}

// AtEnd skips white space and reports whether the data ends there: the
// check after a document's value (when it does not, the problem is
// Trailing, at Pos).
func (s *Scanner) AtEnd() bool {
	s.SkipSpace()
	return s.Pos == len(s.Data)
}

// Literal scans word (true, false or null) at Pos. When the data does not
// spell it there, it returns ExpectedValue with Pos unchanged.
func (s *Scanner) Literal(word string) Problem {
	if len(s.Data)-s.Pos < len(word) || string(s.Data[s.Pos:s.Pos+len(word)]) != word {
		return ExpectedValue
	}
	s.Pos += len(word)
	return OK
}

// Number scans the number token at Pos,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and leaves Pos after it;
// the token is Data[start:Pos] for the Pos it started at. It returns
// ExpectedDigit with Pos where a digit is missing.
func (s *Scanner) Number() Problem {
	data, i := s.Data, s.Pos
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		s.Pos = i
		return ExpectedDigit
	case data[i] == '0':
		i++
	case isDigit(data[i]):
		i = digits(data, i+1)
	default:
		s.Pos = i
		return ExpectedDigit
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			s.Pos = i
			return ExpectedDigit
		}
		i = digits(data, i+1)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			s.Pos = i
			return ExpectedDigit
		}
		i = digits(data, i+1)
	}
	s.Pos = i
	return OK
}

// digits is where the run of digits from i on ends.
func digits(data []byte, i int) int {
	for i < len(data) && isDigit(data[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Flags say what a string token's inside holds, and so what reading its
// text needs (see Verbatim).
type Flags uint8

const (
	// Escaped: the string holds a backslash escape.
	Escaped Flags = 1 << iota
	// NonASCII: the string holds a byte of 0x80 or above, which may be
	// invalid UTF-8.
	NonASCII
)

// PlainString scans the string token whose opening quote is at Pos when
// its inside is printable ASCII without escapes, the common case, and
// reports whether it did (Pos is then after the closing quote, and the
// token has no Flags). It is small enough to be inlined, so that the
// common case costs its callers no call; when it returns false, Pos is
// unchanged and String reads the token.
func (s *Scanner) PlainString() bool {
	i := s.Pos + 1
	for i < len(s.Data) && plainASCII[s.Data[i]] {
		i++
	}
	if i < len(s.Data) && s.Data[i] == '"' {
		s.Pos = i + 1
		return true
	}
	return false
}

// String scans the string token whose opening quote is at Pos, and leaves
// Pos after its closing quote: its inside is Data[start+1:Pos-1] for the
// Pos it started at. It validates escapes as encoding/json does (invalid
// UTF-8 is not an error) and reports in Flags what the inside holds. On
// failure, Pos is where its Problem says.
func (s *Scanner) String() (Flags, Problem) {
	data, i := s.Data, s.Pos+1
	var flags Flags
	for {
		// Skip plain ASCII in a tight loop: most of a payload is string
		// text.
		for i < len(data) && plainASCII[data[i]] {
			i++
		}
		if i >= len(data) {
			s.Pos = len(data)
			return flags, ExpectedStringEnd
		}
		switch c := data[i]; {
		case c == '"':
			s.Pos = i + 1
			return flags, OK
		case c == '\\':
			flags |= Escaped
			if i+1 >= len(data) {
				s.Pos = i
				return flags, ExpectedEscape
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if hex4(data[i+2:]) < 0 {
					s.Pos = i
					return flags, InvalidHexEscape
				}
				i += 6
			default:
				s.Pos = i
				return flags, InvalidEscape
			}
		case c < 0x20:
			s.Pos = i
			return flags, ControlChar
		default: // c >= utf8.RuneSelf
			flags |= NonASCII
			i++
		}
	}
}

// plainASCII marks the bytes a string holds as themselves: printable ASCII
// other than the quote and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hex4 is the value of the four hex digits at the start of b, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
