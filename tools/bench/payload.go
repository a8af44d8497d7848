package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Payload formats of -payload and of a connector's format suffix.
const (
	formatJSON     = "json"
	formatAvro     = "avro"
	formatProtobuf = "protobuf"
)

var formats = []string{formatJSON, formatAvro, formatProtobuf}

// shape is what the messages of a connector's runs carry and how pubsink
// maps them to rows.
type shape struct {
	// format encodes the record (fields only): json, avro or protobuf.
	format string
	// fields: the messages carry the record (order, below) in format, and
	// pubsink reads four of its fields ({data.…} placeholders: the
	// four-field mapping). Otherwise today's JSON payload (payload) and
	// today's row: one column of {data}.
	fields bool
	// elements is the length of the record's items (fields only).
	elements int
	// each: pubsink maps `each: data.items`, one row per element (a
	// pubsink connector with elements > 0); the naive connector always
	// writes one row of the raw payload.
	each bool
}

// rowsPerMessage is how many rows the connector writes per message.
func (s shape) rowsPerMessage() int {
	if s.each {
		return s.elements
	}
	return 1
}

// rowKey is the key of the row that the sampler and the latency probe
// read for message id: with each, the last element's row (a message's
// rows are written in one sink call).
func (s shape) rowKey(id string) string {
	if s.each {
		return id + "#" + strconv.Itoa(s.elements-1)
	}
	return id
}

// String describes s for the table's legend.
func (s shape) String() string {
	if !s.fields {
		return "JSON payload, one column {data}"
	}
	if s.each {
		return fmt.Sprintf("%s record with %d items, each: data.items, one row per item (key {data.id}#{item.n}, columns {item.sensor} {item.v})", s.format, s.elements)
	}
	items := ""
	if s.elements > 0 {
		items = fmt.Sprintf(" with %d items", s.elements)
	}
	return fmt.Sprintf("%s record%s, one row (key {data.id}, columns {data.customer} {data.amount} {data.currency})", s.format, items)
}

// connectorRE splits a connector's name: a kind, then optionally a format
// suffix and an _eachN suffix.
var connectorRE = regexp.MustCompile(`^(.*?)(?:_(json|avro|protobuf))?(?:_each(\d+))?$`)

// base is the kind of connector k, without its suffixes.
func (k kind) base() kind { return kind(connectorRE.FindStringSubmatch(string(k))[1]) }

// parseConnector reads a connector of -connectors: a kind, optionally
// followed by _json, _avro or _protobuf (its payload format, instead of
// -payload's) and by _eachN (N elements per message, instead of
// -elements'). A suffix implies the four-field mapping, as -fields does.
func parseConnector(name string, o options) (kind, shape, error) {
	m := connectorRE.FindStringSubmatch(name)
	base := kind(m[1])
	sh := shape{format: o.format, fields: o.fields, elements: o.elements}
	if m[2] != "" {
		sh.format, sh.fields = m[2], true
	}
	if m[3] != "" {
		n, err := strconv.Atoi(m[3])
		if err != nil || n < 1 || n > maxElements {
			return "", sh, fmt.Errorf("-connectors: %q: _eachN takes 1 to %d elements", name, maxElements)
		}
		sh.elements, sh.fields = n, true
	}
	switch base {
	case naive, atLeastOnce, exactlyOnce, exactlyOnceNoTracking, exactlyOnceShared, exactlyOnceSharedTracking, exactlyOnceBaseline, reprocessRun, besideReprocess:
	default:
		return "", sh, fmt.Errorf("-connectors: unknown connector %q (naive, at_least_once, exactly_once, exactly_once_no_tracking, exactly_once_shared, exactly_once_shared_tracking, exactly_once_baseline, reprocess, exactly_once_beside_reprocess; optionally followed by _json, _avro or _protobuf, then _eachN)", name)
	}
	sh.each = sh.elements > 0 && base != naive
	if base == exactlyOnceBaseline && (sh.format != formatJSON || sh.each) {
		// The baseline is an earlier binary: it knows only JSON and one
		// row per message.
		return "", sh, fmt.Errorf("-connectors: %q: the baseline binary runs only JSON payloads and one row per message", name)
	}
	return kind(name), sh, nil
}

// The bench's record, the same in every format: testdata/order.avsc and
// testdata/order.proto, written into the run directory for pubsink.
var (
	//go:embed testdata/order.avsc
	orderAvsc string
	//go:embed testdata/order.proto
	orderProto string
)

const orderMessage = "pubsink.bench.Order"

// maxElements bounds -elements: pubsink's default sink.max_rows.
const maxElements = 1000

type order struct {
	ID       string  `avro:"id"`
	Seq      int64   `avro:"seq"`
	Customer string  `avro:"customer"`
	Amount   float64 `avro:"amount"`
	Currency string  `avro:"currency"`
	Quantity int32   `avro:"quantity"`
	Note     string  `avro:"note"`
	Items    []item  `avro:"items"`
}

type item struct {
	N      int64   `avro:"n"`
	Sensor string  `avro:"sensor"`
	V      float64 `avro:"v"`
}

// newOrder is the record of message i: its note pads its JSON encoding,
// items left out, to about size bytes (the same note in every format).
func newOrder(i int, id string, size, elements int) *order {
	r := &order{
		ID: id, Seq: int64(i), Customer: fmt.Sprintf("c-%05d", i%50_000),
		Amount: float64(i%1000) + float64(i%100)/100, Currency: "EUR", Quantity: int32(1 + i%7),
		Items: []item{},
	}
	n := max(0, size-len(appendJSON(nil, r)))
	r.Note = strings.Repeat(string(rune('a'+i%26)), n)
	for j := range elements {
		r.Items = append(r.Items, item{N: int64(j), Sensor: fmt.Sprintf("s-%02d", (i+j)%100), V: float64((i+j)%1000) / 4})
	}
	return r
}

// appendJSON appends r as JSON (its strings need no escaping).
func appendJSON(b []byte, r *order) []byte {
	b = fmt.Appendf(b, `{"id":%q,"seq":%d,"customer":%q,"amount":`, r.ID, r.Seq, r.Customer)
	b = strconv.AppendFloat(b, r.Amount, 'f', -1, 64)
	b = fmt.Appendf(b, `,"currency":%q,"quantity":%d,"note":%q,"items":[`, r.Currency, r.Quantity, r.Note)
	for j, it := range r.Items {
		if j > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"n":%d,"sensor":%q,"v":`, it.N, it.Sensor)
		b = strconv.AppendFloat(b, it.V, 'f', -1, 64)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// codecs encode the record in every format, and hold the schema files
// pubsink reads.
type codecs struct {
	avro      avro.Schema
	order     protoreflect.MessageDescriptor
	avscPath  string
	protoPath string
}

// newCodecs writes the schema files into dir and compiles them.
func newCodecs(ctx context.Context, dir string) (*codecs, error) {
	c := &codecs{avscPath: filepath.Join(dir, "order.avsc"), protoPath: filepath.Join(dir, "order.proto")}
	if err := os.WriteFile(c.avscPath, []byte(orderAvsc), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.protoPath, []byte(orderProto), 0o644); err != nil {
		return nil, err
	}
	var err error
	if c.avro, err = avro.Parse(orderAvsc); err != nil {
		return nil, fmt.Errorf("order.avsc: %w", err)
	}
	comp := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"order.proto": orderProto})}}
	files, err := comp.Compile(ctx, "order.proto")
	if err != nil {
		return nil, fmt.Errorf("order.proto: %w", err)
	}
	c.order = files[0].Messages().ByName("Order")
	if c.order == nil || string(c.order.FullName()) != orderMessage {
		return nil, fmt.Errorf("order.proto: no message %s", orderMessage)
	}
	return c, nil
}

// encode encodes r in format.
func (c *codecs) encode(r *order, format string) ([]byte, error) {
	switch format {
	case formatJSON:
		return appendJSON(nil, r), nil
	case formatAvro:
		return avro.Marshal(c.avro, r)
	case formatProtobuf:
		return proto.Marshal(c.protoOrder(r))
	}
	return nil, fmt.Errorf("unknown format %q", format)
}

// protoOrder is r as a dynamic message of order.proto's Order.
func (c *codecs) protoOrder(r *order) *dynamicpb.Message {
	fs := c.order.Fields()
	m := dynamicpb.NewMessage(c.order)
	m.Set(fs.ByName("id"), protoreflect.ValueOfString(r.ID))
	m.Set(fs.ByName("seq"), protoreflect.ValueOfInt64(r.Seq))
	m.Set(fs.ByName("customer"), protoreflect.ValueOfString(r.Customer))
	m.Set(fs.ByName("amount"), protoreflect.ValueOfFloat64(r.Amount))
	m.Set(fs.ByName("currency"), protoreflect.ValueOfString(r.Currency))
	m.Set(fs.ByName("quantity"), protoreflect.ValueOfInt32(r.Quantity))
	m.Set(fs.ByName("note"), protoreflect.ValueOfString(r.Note))
	if len(r.Items) > 0 {
		itemsFD := fs.ByName("items")
		list := m.Mutable(itemsFD).List()
		ifs := itemsFD.Message().Fields()
		for _, it := range r.Items {
			e := dynamicpb.NewMessage(itemsFD.Message())
			e.Set(ifs.ByName("n"), protoreflect.ValueOfInt64(it.N))
			e.Set(ifs.ByName("sensor"), protoreflect.ValueOfString(it.Sensor))
			e.Set(ifs.ByName("v"), protoreflect.ValueOfFloat64(it.V))
			list.Append(protoreflect.ValueOfMessage(e))
		}
	}
	return m
}

// decodeOrder decodes data, encoded in format (for the tests).
func (c *codecs) decodeOrder(data []byte, format string) (*order, error) {
	r := &order{}
	switch format {
	case formatAvro:
		return r, avro.Unmarshal(c.avro, data, r)
	case formatProtobuf:
		m := dynamicpb.NewMessage(c.order)
		if err := proto.Unmarshal(data, m); err != nil {
			return nil, err
		}
		fs := c.order.Fields()
		r.ID = m.Get(fs.ByName("id")).String()
		r.Seq = m.Get(fs.ByName("seq")).Int()
		r.Customer = m.Get(fs.ByName("customer")).String()
		r.Amount = m.Get(fs.ByName("amount")).Float()
		r.Currency = m.Get(fs.ByName("currency")).String()
		r.Quantity = int32(m.Get(fs.ByName("quantity")).Int())
		r.Note = m.Get(fs.ByName("note")).String()
		r.Items = []item{}
		list := m.Get(fs.ByName("items")).List()
		for j := range list.Len() {
			e := list.Get(j).Message()
			ifs := e.Descriptor().Fields()
			r.Items = append(r.Items, item{N: e.Get(ifs.ByName("n")).Int(), Sensor: e.Get(ifs.ByName("sensor")).String(), V: e.Get(ifs.ByName("v")).Float()})
		}
		return r, nil
	}
	return nil, fmt.Errorf("decodeOrder: format %q", format)
}

// pipelineYAML is what shape s adds to a pipeline's configuration: the
// payload section (at the pipeline's indentation) and the mapping (at the
// sink's keys' indentation). Without fields, nothing: today's row.
func (s shape) pipelineYAML(c *codecs) (payload, sink string) {
	if !s.fields {
		return "", ""
	}
	switch s.format {
	case formatAvro:
		payload = fmt.Sprintf("    payload: {format: avro, schema: %q}\n", c.avscPath)
	case formatProtobuf:
		payload = fmt.Sprintf("    payload: {format: protobuf, schema: %q, message: %s}\n", c.protoPath, orderMessage)
	}
	if s.each {
		sink = `      each: data.items
      row_key: "{data.id}#{item.n}"
      columns: {sensor: "{item.sensor}", v: "{item.v}"}
`
	} else {
		sink = `      row_key: "{data.id}"
      columns: {customer: "{data.customer}", amount: "{data.amount}", currency: "{data.currency}"}
`
	}
	return payload, sink
}
