package config

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
)

// ByteSize is a size in bytes. In YAML it is an integer or a string with a
// binary or decimal suffix: "64MiB", "4MB", "512KiB", "1GiB".
type ByteSize int64

// Common sizes.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

// byteUnits are the suffixes ParseByteSize accepts (case-insensitively) and
// String prints, largest first within each system. A bare "K", "M" or "G" is
// refused: it is ambiguous between the two systems.
var byteUnits = []struct {
	suffix string
	size   ByteSize
}{
	{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"B", 1},
}

// ParseByteSize reads a non-negative size: an integer number of bytes, or a
// decimal number with a unit, "64MiB", "4MB", "1.5GiB", "512 KiB". A
// fraction of a byte is truncated.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	num := strings.TrimRightFunc(t, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	suffix := t[len(num):]
	num = strings.TrimSpace(num)
	unit := ByteSize(1)
	if suffix != "" {
		unit = 0
		for _, u := range byteUnits {
			if strings.EqualFold(suffix, u.suffix) {
				unit = u.size
				break
			}
		}
		if unit == 0 {
			return 0, fmt.Errorf("%q: unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s, suffix)
		}
	}
	whole, frac, hasFrac := strings.Cut(num, ".")
	if whole == "" || !digitsOnly(whole) || hasFrac && (frac == "" || !digitsOnly(frac)) {
		return 0, fmt.Errorf("%q is not a size like 64MiB", s)
	}
	// Exact arithmetic: 1.1TB must not pick up float rounding.
	r, _ := new(big.Rat).SetString(num)
	r.Mul(r, new(big.Rat).SetInt64(int64(unit)))
	n := new(big.Int).Quo(r.Num(), r.Denom()) // truncates toward zero; r >= 0
	if !n.IsInt64() {
		return 0, fmt.Errorf("%q is too large", s)
	}
	size := ByteSize(n.Int64())
	return size, nil
}

func digitsOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String prints b with the largest unit that divides it exactly, so that
// ParseByteSize reads it back unchanged: "64MiB", "4MB", "1536MiB", "0B".
func (b ByteSize) String() string {
	sign, v := "", b
	if v < 0 {
		if v == math.MinInt64 {
			return strconv.FormatInt(int64(v), 10) + "B"
		}
		sign, v = "-", -v
	}
	best := byteUnits[len(byteUnits)-1]
	for _, u := range byteUnits {
		if v != 0 && v%u.size == 0 && u.size > best.size {
			best = u
		}
	}
	return sign + strconv.FormatInt(int64(v/best.size), 10) + best.suffix
}

// byteSizeHook decodes a ByteSize from a string (ParseByteSize) or from a
// whole number. Durations and everything else pass through.
func byteSizeHook() mapstructure.DecodeHookFuncType {
	target := reflect.TypeFor[ByteSize]()
	return func(from, to reflect.Type, data any) (any, error) {
		if to != target {
			return data, nil
		}
		switch v := data.(type) {
		case string:
			return ParseByteSize(v)
		case float64:
			if v != math.Trunc(v) || math.Abs(v) > math.MaxInt64 {
				return nil, fmt.Errorf("%v is not a whole number of bytes", v)
			}
			return ByteSize(v), nil
		}
		return data, nil
	}
}
