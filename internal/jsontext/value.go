package jsontext

// This file handles whole values: skipping one, validated, with a bound on
// its nesting, and writing an object or array compact.

// SkipValue skips white space and one whole value, validated as encoding/json
// validates it, and leaves Pos after it. depth is how many objects and
// arrays enclose the value; an object or array at more than maxDepth levels
// (counting itself) is TooDeep, with Pos at its { or [. On failure, Pos is
// where the Problem says. It recurses once a level of nesting.
func (s *Scanner) SkipValue(depth, maxDepth int) Problem {
	switch c := s.Next(); {
	case c == '{':
		return s.skipObject(depth+1, maxDepth)
	case c == '[':
		return s.skipArray(depth+1, maxDepth)
	case c == '"':
		_, p := s.String()
		return p
	case c == 't':
		return s.Literal("true")
	case c == 'f':
		return s.Literal("false")
	case c == 'n':
		return s.Literal("null")
	case c == '-' || isDigit(c):
		return s.Number()
	}
	return ExpectedValue
}

// skipObject skips the object at Pos, its {, at depth levels.
func (s *Scanner) skipObject(depth, maxDepth int) Problem {
	if depth > maxDepth {
		return TooDeep
	}
	s.Pos++ // {
	if s.Next() == '}' {
		s.Pos++
		return OK
	}
	for {
		if s.Next() != '"' {
			return ExpectedName
		}
		if _, p := s.String(); p != OK {
			return p
		}
		if s.Next() != ':' {
			return ExpectedColon
		}
		s.Pos++
		if p := s.SkipValue(depth, maxDepth); p != OK {
			return p
		}
		if more, p := s.More('}'); !more {
			return p
		}
	}
}

// skipArray skips the array at Pos, its [, at depth levels.
func (s *Scanner) skipArray(depth, maxDepth int) Problem {
	if depth > maxDepth {
		return TooDeep
	}
	s.Pos++ // [
	if s.Next() == ']' {
		s.Pos++
		return OK
	}
	for {
		if p := s.SkipValue(depth, maxDepth); p != OK {
			return p
		}
		if more, p := s.More(']'); !more {
			return p
		}
	}
}

// More scans what follows a member of an object (end '}') or an element of
// an array (end ']'): after a comma it returns true, with Pos after the
// comma; after the end it returns false and OK, with Pos after the end;
// otherwise false and ExpectedCommaOrBrace or ExpectedCommaOrBracket, with
// Pos at the byte (or the end of the data).
func (s *Scanner) More(end byte) (bool, Problem) {
	switch s.Next() {
	case ',':
		s.Pos++
		return true, OK
	case end:
		s.Pos++
		return false, OK
	}
	if end == '}' {
		return false, ExpectedCommaOrBrace
	}
	return false, ExpectedCommaOrBracket
}

// AppendCompact appends v, an object or array that the scanner accepted,
// with the white space between its tokens removed, as json.Compact does.
func AppendCompact(dst []byte, v []byte) []byte {
	for i := 0; i < len(v); {
		switch c := v[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j := i + 1
			for v[j] != '"' {
				if v[j] == '\\' {
					j++
				}
				j++
			}
			dst = append(dst, v[i:j+1]...)
			i = j + 1
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}
