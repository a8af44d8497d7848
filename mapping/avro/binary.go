package avro

// Decoding Avro's binary encoding: Decode, the codec's entry point for both
// encodings, the errors both decoders return (with where they failed), and
// binaryDecoder, which reads a datum in the binary encoding into the value
// model, directed by the compiled schema (compile.go). The bounds it keeps
// against hostile payloads are listed in the package's doc (doc.go).

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pubsink/pubsink/internal/jsontext"
	"github.com/pubsink/pubsink/mapping/value"
)

var (
	errDeep = tooDeep{}
	errEOF  = errors.New("unexpected end of data")
)

// tooDeep is the Avro decoders' value.ErrTooDeep: to errors.Is it is that
// error, but its text leaves out the "invalid payload" that
// value.DecodeError puts in front of the path ("invalid payload: avro: at
// next.next.…: nested more than 128 levels deep").
type tooDeep struct{}

func (tooDeep) Error() string {
	return fmt.Sprintf("nested more than %d levels deep", value.MaxDepth)
}

func (tooDeep) Is(target error) bool { return target == value.ErrTooDeep }

// pathError is a decoding error and where it happened: path holds the
// steps from the failure up (reversed), added as the error returns.
type pathError struct {
	path []string
	err  error
}

func (e *pathError) Error() string {
	p := slices.Clone(e.path)
	slices.Reverse(p)
	if len(p) > 12 {
		p = append(append(p[:5:5], "…"), p[len(p)-5:]...)
	}
	return "at " + strings.Join(p, ".") + ": " + e.err.Error()
}

func (e *pathError) Unwrap() error { return e.err }

// at adds step to err's path. Map keys are payload text and are not
// named ("*"): errors do not quote payloads.
func at(err error, step string) error {
	if pe, ok := err.(*pathError); ok {
		pe.path = append(pe.path, step)
		return pe
	}
	return &pathError{path: []string{step}, err: err}
}

// Decode reads one datum of the schema from data: Avro's binary encoding,
// or its JSON encoding when json is set. The datum must take all of data.
// Errors wrap template.ErrInvalidPayload.
func (c *Codec) Decode(data []byte, isJSON bool) (any, error) {
	var (
		v   any
		err error
	)
	if isJSON {
		d := jsonDecoder{Scanner: jsontext.Scanner{Data: data}}
		v, err = d.value(c.root, 0)
		if err == nil && !d.AtEnd() {
			err = fmt.Errorf("data after the JSON value (at byte %d)", d.Pos)
		}
	} else {
		// Bytes after the datum are ignored, as Pub/Sub ignores them when
		// it validates a message against a revision: it tags a message with
		// the newest revision that reads it, and that may read only a
		// prefix of the writer's record (docs/emulator-schemas.md). A
		// message Pub/Sub accepted under a revision decodes under it.
		d := binaryDecoder{data: data, zero: len(data) + 1024}
		v, err = d.value(c.root, 0)
	}
	if err != nil {
		return nil, value.DecodeError("avro", err)
	}
	return v, nil
}

// prealloc bounds the room made for a block's items before they are
// read: a block's count, though checked against the bytes left, is the
// payload's claim; appending grows the rest as items come.
const prealloc = 1024

// binaryDecoder reads Avro's binary encoding.
type binaryDecoder struct {
	data []byte
	pos  int
	// str is data as a string, made at the first string: strings and map
	// keys are its substrings, one copy of the payload instead of one
	// allocation each.
	str string
	// zero is how many more items of types that can take no bytes may be
	// decoded.
	zero int
}

func (d *binaryDecoder) long() (int64, error) {
	if d.pos < len(d.data) {
		if b := d.data[d.pos]; b < 0x80 {
			d.pos++
			return int64(b>>1) ^ -int64(b&1), nil
		}
	}
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if d.pos >= len(d.data) {
			return 0, errEOF
		}
		b := d.data[d.pos]
		d.pos++
		if shift == 63 && b > 1 {
			return 0, errors.New("varint overflows 64 bits")
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			break
		}
	}
	return int64(v>>1) ^ -int64(v&1), nil
}

// length reads a length and checks that the payload holds that many bytes.
func (d *binaryDecoder) length(what string) (int, error) {
	n, err := d.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("negative %s length %d", what, n)
	}
	if n > int64(len(d.data)-d.pos) {
		return 0, fmt.Errorf("%s length %d is more than the %d bytes left", what, n, len(d.data)-d.pos)
	}
	return int(n), nil
}

func (d *binaryDecoder) string(n int) string {
	if d.str == "" {
		d.str = string(d.data)
	}
	s := d.str[d.pos : d.pos+n]
	d.pos += n
	return s
}

// blockCount reads an array or map block's count (skipping the byte size of
// a negative count) and checks it against the bytes left: items of at least
// size bytes, or, for size 0, against the budget of zero-byte items.
func (d *binaryDecoder) blockCount(size int) (int, error) {
	n, err := d.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == math.MinInt64 {
			return 0, errors.New("invalid block count")
		}
		n = -n
		if bytes, err := d.long(); err != nil {
			return 0, err
		} else if bytes < 0 {
			return 0, fmt.Errorf("negative block size %d", bytes)
		}
	}
	left := int64(len(d.data) - d.pos)
	if size > 0 {
		if n > left/int64(size) {
			return 0, fmt.Errorf("block of %d items of %d+ bytes is more than the %d bytes left", n, size, left)
		}
		return int(n), nil
	}
	if n > int64(d.zero) {
		return 0, fmt.Errorf("block of %d items that take no bytes: more than a payload of %d bytes may hold", n, len(d.data))
	}
	d.zero -= int(n)
	return int(n), nil
}

func (d *binaryDecoder) value(n *node, depth int) (any, error) {
	if depth > value.MaxDepth {
		return nil, errDeep
	}
	switch n.kind {
	case avroNull:
		return nil, nil
	case avroBoolean:
		if d.pos >= len(d.data) {
			return nil, errEOF
		}
		b := d.data[d.pos]
		if b > 1 {
			return nil, fmt.Errorf("invalid boolean byte %d", b)
		}
		d.pos++
		return b == 1, nil
	case avroInt, avroLong:
		v, err := d.long()
		if err != nil {
			return nil, err
		}
		if n.kind == avroInt && int64(int32(v)) != v {
			return nil, errors.New("int value out of range")
		}
		if n.logical == logicalNone {
			return v, nil
		}
		return n.fromLong(v)
	case avroFloat:
		if len(d.data)-d.pos < 4 {
			return nil, errEOF
		}
		b := d.data[d.pos:]
		d.pos += 4
		return widenFloat32(math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)), nil
	case avroDouble:
		if len(d.data)-d.pos < 8 {
			return nil, errEOF
		}
		b := d.data[d.pos:]
		d.pos += 8
		return math.Float64frombits(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56), nil
	case avroString:
		l, err := d.length("string")
		if err != nil {
			return nil, err
		}
		return d.string(l), nil
	case avroBytes:
		l, err := d.length("bytes")
		if err != nil {
			return nil, err
		}
		b := d.data[d.pos : d.pos+l]
		d.pos += l
		return n.fromBytes(b)
	case avroFixed:
		if len(d.data)-d.pos < n.size {
			return nil, fmt.Errorf("fixed %s of %d bytes: %w", n.name, n.size, errEOF)
		}
		b := d.data[d.pos : d.pos+n.size]
		d.pos += n.size
		return n.fromBytes(b)
	case avroEnum:
		i, err := d.long()
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(n.symbols)) {
			return nil, fmt.Errorf("enum %s has no symbol %d", n.name, i)
		}
		return n.symbols[i], nil
	case avroUnion:
		i, err := d.long()
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(n.branches)) {
			return nil, fmt.Errorf("%s has no branch %d", n.describe(), i)
		}
		return d.value(n.branches[i], depth) // a union is its branch: no level
	case avroRecord:
		m := make(map[string]any, len(n.fields))
		for i := range n.fields {
			f := &n.fields[i]
			v, err := d.value(f.node, depth+1)
			if err != nil {
				return nil, at(err, f.name)
			}
			if v != nil { // a null field is absent (doc.go's (3))
				m[f.name] = v
			}
		}
		return m, nil
	case avroArray:
		var l []any
		for {
			count, err := d.blockCount(n.elem.minSize)
			if err != nil {
				return nil, at(err, strconv.Itoa(len(l)))
			}
			if count == 0 {
				break
			}
			l = slices.Grow(l, min(count, prealloc))
			for range count {
				v, err := d.value(n.elem, depth+1)
				if err != nil {
					return nil, at(err, strconv.Itoa(len(l)))
				}
				l = append(l, v)
			}
		}
		if l == nil {
			l = []any{}
		}
		return l, nil
	case avroMap:
		var m map[string]any
		for {
			count, err := d.blockCount(1 + n.elem.minSize) // a key takes a byte at least
			if err != nil {
				return nil, at(err, "*")
			}
			if count == 0 {
				break
			}
			if m == nil {
				m = make(map[string]any, min(count, prealloc))
			}
			for range count {
				l, err := d.length("map key")
				if err != nil {
					return nil, at(err, "*")
				}
				k := d.string(l)
				v, err := d.value(n.elem, depth+1)
				if err != nil {
					return nil, at(err, "*")
				}
				m[k] = v
			}
		}
		if m == nil {
			m = map[string]any{}
		}
		return m, nil
	}
	return nil, fmt.Errorf("unknown type %s", n.describe()) // unreachable: Compile sets every kind
}
