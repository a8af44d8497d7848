package jsontext

import "strconv"

// This file gives a number token its float64 value, as strconv.ParseFloat
// reads it, without ParseFloat's cost where the value is quick to get
// exactly.

// Float64 is the value of tok, a number token that Number accepted, as
// strconv.ParseFloat(tok, 64) reads it; false when it is out of a
// float64's range. It allocates nothing for a token of up to 15
// significant digits times a power of ten of at most 22: their value is
// quick to get exactly. The digits and the power are then exact doubles,
// and one multiplication or division rounds the result correctly, as
// strconv.ParseFloat does (Clinger's fast path); other tokens go to
// ParseFloat.
func Float64(tok []byte) (float64, bool) {
	var (
		m          uint64
		nd, frac   int // significant digits, digits after the point
		afterPoint bool
		i          int
	)
	neg := tok[0] == '-'
	if neg {
		i++
	}
	for ; i < len(tok) && tok[i] != 'e' && tok[i] != 'E'; i++ {
		c := tok[i]
		if c == '.' {
			afterPoint = true
			continue
		}
		if afterPoint {
			frac++
		}
		if m == 0 && c == '0' {
			continue // a leading zero
		}
		if nd++; nd > 15 {
			return parseFloat(tok)
		}
		m = m*10 + uint64(c-'0')
	}
	exp := 0
	if i < len(tok) {
		i++ // e
		negExp := tok[i] == '-'
		if tok[i] == '-' || tok[i] == '+' {
			i++
		}
		for ; i < len(tok); i++ {
			if exp = exp*10 + int(tok[i]-'0'); exp > 1000 {
				return parseFloat(tok)
			}
		}
		if negExp {
			exp = -exp
		}
	}
	exp -= frac
	var f float64
	switch {
	case m == 0:
	case exp == 0:
		f = float64(m)
	case exp > 0 && exp <= 22:
		f = float64(m) * exactPow10[exp]
	case exp < 0 && exp >= -22:
		f = float64(m) / exactPow10[-exp]
	default:
		return parseFloat(tok)
	}
	if neg {
		f = -f // -0 too
	}
	return f, true
}

// parseFloat is Float64 for the tokens its fast path does not read.
func parseFloat(tok []byte) (float64, bool) {
	f, err := strconv.ParseFloat(string(tok), 64)
	return f, err == nil // only ErrRange: the syntax is a subset of ParseFloat's
}

// exactPow10 are the powers of ten that are exact doubles.
var exactPow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}
