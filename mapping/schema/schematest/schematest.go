// Package schematest is the conformance suite of the payload formats, as
// gocloud.dev's drivertest is of its drivers: one reading, encoded by each
// format in each of its encodings, must decode into trees that read the
// same through the value model (what a template renders of each path), and
// a format's compiled schema must check paths and give types alike. Each
// format's package runs it from its tests (Run); mapping's own conformance
// test then maps the same reading through the whole Mapper.
package schematest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/template"
)

// Reading is the one record that every format encodes. Its schema, in each
// format's language, is mapping/testdata/conformance/reading.*:
//
//	id     string   "r1"
//	kind   string   Kind
//	sensor string   "s1"
//	value  double   12.5
//	ts     timestamp 2026-12-01T10:00:00.123Z (Avro timestamp-millis, google.protobuf.Timestamp, JSON text)
//	site   optional string: Site, absent when ""
//	points list of {n long, v double}: [{1, 0.5}, {2, 1.5}]
type Reading struct {
	Kind string
	Site string
}

// Payload is a reading in one of a format's encodings.
type Payload struct {
	Encoding string // "binary", "json": for messages
	JSON     bool   // Decode's json argument
	Data     []byte
}

// Format is what a format gives the suite.
type Format struct {
	Name string
	// Decode decodes a payload of the Reading schema.
	Decode func(data []byte, json bool) (any, error)
	// Codec is the format's compiled Reading schema; nil for a format
	// without schemas (JSON), whose paths and types are not checked.
	Codec schema.Codec
	// Encode encodes r in each of the format's encodings.
	Encode func(t testing.TB, r Reading) []Payload
	// Deep, when not nil, is a payload nested deeper than value.MaxDepth
	// that the format reads (with a schema of its own where it needs one:
	// DeepDecode), which must fail with value.ErrTooDeep.
	Deep       *Payload
	DeepDecode func(data []byte, json bool) (any, error)
}

// renderings is what a template renders of each path of the reading.
func renderings(r Reading) map[string]string {
	want := map[string]string{
		"id": "r1", "kind": r.Kind, "sensor": "s1", "value": "12.5",
		"ts":         "2026-12-01T10:00:00.123Z",
		"points.0.n": "1", "points.0.v": "0.5", "points.1.n": "2", "points.1.v": "1.5",
		"points": `[{"n":1,"v":0.5},{"n":2,"v":1.5}]`,
	}
	if r.Site != "" {
		want["site"] = r.Site
	}
	return want
}

// segments is a dotted path as a placeholder's segments.
func segments(path string) []template.Segment {
	var segs []template.Segment
	for _, s := range strings.Split(path, ".") {
		seg := template.Segment{Key: s, Index: -1}
		if n, err := strconv.Atoi(s); err == nil && strings.Trim(s, "0123456789") == "" {
			seg.Index = n
		}
		segs = append(segs, seg)
	}
	return segs
}

// render is what a template renders of path in tree v.
func render(v any, path string) (string, error) {
	b, err := value.Tree{V: v}.AppendPath(nil, segments(path))
	return string(b), err
}

// Run runs the suite against f.
func Run(t *testing.T, f Format) {
	t.Run("EveryEncodingReadsTheSame", func(t *testing.T) { everyEncodingReadsTheSame(t, f) })
	t.Run("AnAbsentFieldIsMissing", func(t *testing.T) { anAbsentFieldIsMissing(t, f) })
	t.Run("TheTreeOwnsItsMemory", func(t *testing.T) { theTreeOwnsItsMemory(t, f) })
	t.Run("DecodingIsSafeConcurrently", func(t *testing.T) { decodingIsSafeConcurrently(t, f) })
	t.Run("TruncatedPayloadsAreInvalidNeverAPanic", func(t *testing.T) { truncatedPayloadsAreInvalid(t, f) })
	if f.Deep != nil {
		t.Run("TooDeepIsRefused", func(t *testing.T) { tooDeepIsRefused(t, f) })
	}
	if f.Codec != nil {
		t.Run("PathsAreCheckedAgainstTheSchema", func(t *testing.T) { pathsAreChecked(t, f) })
		t.Run("TypesAreTheValueModels", func(t *testing.T) { typesAreTheValueModels(t, f) })
	}
}

var readings = []Reading{{Kind: "temp", Site: "plant-3"}, {Kind: "humidity"}}

func everyEncodingReadsTheSame(t *testing.T, f Format) {
	for _, r := range readings {
		want := renderings(r)
		for _, p := range f.Encode(t, r) {
			v, err := f.Decode(p.Data, p.JSON)
			if err != nil {
				t.Fatalf("%s %s: %v", f.Name, p.Encoding, err)
			}
			for path, w := range want {
				got, err := render(v, path)
				if err != nil || got != w {
					t.Errorf("%s %s of %+v: {data.%s} renders %q, %v; want %q", f.Name, p.Encoding, r, path, got, err, w)
				}
			}
		}
	}
}

func anAbsentFieldIsMissing(t *testing.T, f Format) {
	for _, p := range f.Encode(t, Reading{Kind: "temp"}) {
		v, err := f.Decode(p.Data, p.JSON)
		if err != nil {
			t.Fatalf("%s %s: %v", f.Name, p.Encoding, err)
		}
		for _, path := range []string{"site", "points.2.n"} {
			if got, err := render(v, path); !errors.Is(err, template.ErrMissingField) {
				t.Errorf("%s %s: {data.%s} renders %q, %v; want template.ErrMissingField", f.Name, p.Encoding, path, got, err)
			}
		}
	}
}

// A message's buffer is the client's: a tree must not change when it is
// reused.
func theTreeOwnsItsMemory(t *testing.T, f Format) {
	r := Reading{Kind: "temp", Site: "plant-3"}
	want := renderings(r)
	for _, p := range f.Encode(t, r) {
		data := slices.Clone(p.Data)
		v, err := f.Decode(data, p.JSON)
		if err != nil {
			t.Fatalf("%s %s: %v", f.Name, p.Encoding, err)
		}
		for i := range data {
			data[i] = 'x'
		}
		for path, w := range want {
			if got, err := render(v, path); err != nil || got != w {
				t.Errorf("%s %s: after the payload's bytes changed, {data.%s} renders %q, %v; want %q", f.Name, p.Encoding, path, got, err, w)
			}
		}
	}
}

func decodingIsSafeConcurrently(t *testing.T, f Format) {
	r := Reading{Kind: "temp", Site: "plant-3"}
	want := renderings(r)
	payloads := f.Encode(t, r)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				p := payloads[(g+i)%len(payloads)]
				v, err := f.Decode(p.Data, p.JSON)
				if err != nil {
					errs <- err
					return
				}
				if got, err := render(v, "points.1.v"); err != nil || got != want["points.1.v"] {
					errs <- fmt.Errorf("%s: points.1.v is %q, %v", p.Encoding, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%s, decoding on 8 goroutines: %v", f.Name, err)
	}
}

// Every prefix of a payload either decodes (a binary format may end at a
// field's boundary) or is template.ErrInvalidPayload: never a panic, never
// another error.
func truncatedPayloadsAreInvalid(t *testing.T, f Format) {
	for _, p := range f.Encode(t, Reading{Kind: "temp", Site: "plant-3"}) {
		invalid := 0
		for n := range len(p.Data) {
			_, err := f.Decode(p.Data[:n], p.JSON)
			if err == nil {
				continue
			}
			invalid++
			if !errors.Is(err, template.ErrInvalidPayload) {
				t.Errorf("%s %s cut to %d bytes: %v, want template.ErrInvalidPayload", f.Name, p.Encoding, n, err)
			}
		}
		if invalid == 0 {
			t.Errorf("%s %s: no prefix of the payload was refused", f.Name, p.Encoding)
		}
	}
}

func tooDeepIsRefused(t *testing.T, f Format) {
	decode := f.Decode
	if f.DeepDecode != nil {
		decode = f.DeepDecode
	}
	if _, err := decode(f.Deep.Data, f.Deep.JSON); !errors.Is(err, value.ErrTooDeep) || !errors.Is(err, template.ErrInvalidPayload) {
		t.Errorf("%s %s nested past %d levels: %v, want value.ErrTooDeep", f.Name, f.Deep.Encoding, value.MaxDepth, err)
	}
}

func pathsAreChecked(t *testing.T, f Format) {
	for path := range renderings(Reading{Site: "x"}) {
		if err := f.Codec.CheckPath(segments(path)); err != nil {
			t.Errorf("%s: {data.%s}: %v", f.Name, path, err)
		}
	}
	for path, want := range map[string]string{
		"valeu":        `"value"`, // a typo: the nearest field is named
		"sensr":        `"sensor"`,
		"points.0.nn":  `"nn"`, // in the list's records
		"id.x":         "",
		"points.first": "",
	} {
		err := f.Codec.CheckPath(segments(path))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: {data.%s}: %v, want an error naming %s", f.Name, path, err, want)
		}
	}
}

// The schema's types follow the value model, whatever the format's own
// convention: a timestamp is a timestamp, a long an int, a record an object
// whose fields are the schema's.
func typesAreTheValueModels(t *testing.T, f Format) {
	ts := f.Codec.Types()
	if ts == nil || ts.Root == nil || ts.Root.Kind() != types.StructKind {
		t.Fatalf("%s: the root type is %v, want a record or message", f.Name, ts)
	}
	root := ts.Root.TypeName()
	_, fields, ok := ts.Describe(root)
	if !ok || !slices.Equal(fields, []string{"id", "kind", "sensor", "value", "ts", "site", "points"}) {
		t.Errorf("%s: %s has fields %v, want the reading's in their order", f.Name, root, fields)
	}
	for field, want := range map[string]*cel.Type{
		"id": cel.StringType, "value": cel.DoubleType, "ts": cel.TimestampType, "site": cel.StringType,
	} {
		if got, ok := ts.FieldType(root, field); !ok || !got.IsExactType(want) {
			t.Errorf("%s: %s.%s is %v, want %v", f.Name, root, field, got, want)
		}
	}
	points, ok := ts.FieldType(root, "points")
	if !ok || points.Kind() != types.ListKind {
		t.Fatalf("%s: %s.points is %v, want a list", f.Name, root, points)
	}
	point := points.Parameters()[0].TypeName()
	for field, want := range map[string]*cel.Type{"n": cel.IntType, "v": cel.DoubleType} {
		if got, ok := ts.FieldType(point, field); !ok || !got.IsExactType(want) {
			t.Errorf("%s: %s.%s is %v, want %v", f.Name, point, field, got, want)
		}
	}
}
