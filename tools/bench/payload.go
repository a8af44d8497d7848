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
	// pubsink connector with elements > 0); the minimal and naive
	// connectors always write one row of the raw payload.
	each bool
	// change is the change mapping of a changes_* connector (upsert,
	// delete, insert, replace), "" for a plain mapping.
	change string
	// shuffled (_shuffled): the n messages of a run go to n/10 row keys
	// (the attribute key), ten per key, with the key's event times in a
	// shuffled order, so that changes meet newer cells.
	shuffled bool
	// orderingKeys (_ordered_keysK): the messages carry ordering keys, K of
	// them, and the subscription orders them (source.ordering); 0: none.
	orderingKeys int
}

// plain reports whether s is today's payload and row, unordered.
func (s shape) plain() bool {
	return !s.fields && s.change == "" && !s.shuffled && s.orderingKeys == 0
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
	key := "{data.id}"
	if s.shuffled {
		key = "{attributes.key}"
	}
	var d string
	switch {
	case !s.fields && s.shuffled:
		d = "JSON payload, one column {data}, key {attributes.key}"
	case !s.fields:
		d = "JSON payload, one column {data}"
	case s.each:
		d = fmt.Sprintf("%s record with %d items, each: data.items, one row per item (key %s#{item.n}, columns {item.sensor} {item.v})", s.format, s.elements, key)
	default:
		items := ""
		if s.elements > 0 {
			items = fmt.Sprintf(" with %d items", s.elements)
		}
		d = fmt.Sprintf("%s record%s, one row (key %s, columns {data.customer} {data.amount} {data.currency})", s.format, items, key)
	}
	switch s.change {
	case changeUpsert:
		d += "; change mapping op: set, write_mode: upsert"
	case changeDelete:
		d += "; change mapping op: delete"
	case changeInsert:
		d += "; change mapping write_mode: insert"
	case changeReplace:
		d += "; change mapping write_mode: replace_if_newer"
	}
	if s.shuffled {
		d += fmt.Sprintf("; N/%d row keys, %d messages each, spread over the backlog, event times shuffled", shuffleVersions, shuffleVersions)
	}
	if s.orderingKeys > 0 {
		d += fmt.Sprintf("; %d ordering keys (row key mod %d), ordered subscription (source.ordering)", s.orderingKeys, s.orderingKeys)
	}
	return d
}

// connectorRE splits a connector's name: a kind, then optionally
// _shuffled, _ordered_keysK, a format suffix and an _eachN suffix, in that
// order.
var connectorRE = regexp.MustCompile(`^(.*?)(_shuffled)?(?:_ordered_keys(\d+))?(?:_(json|avro|protobuf))?(?:_each(\d+))?$`)

// base is the kind of connector k, without its suffixes.
func (k kind) base() kind { return kind(connectorRE.FindStringSubmatch(string(k))[1]) }

// parseConnector reads a connector of -connectors: a kind, optionally
// followed by _shuffled (changes_* only: N/10 row keys, event times
// shuffled), _ordered_keysK (ordering keys, K of them, on an ordered
// subscription), _json, _avro or _protobuf (its payload format, instead of
// -payload's) and _eachN (N elements per message, instead of -elements').
// A format or _eachN suffix implies the four-field mapping, as -fields
// does.
func parseConnector(name string, o options) (kind, shape, error) {
	m := connectorRE.FindStringSubmatch(name)
	base := kind(m[1])
	sh := shape{format: o.format, fields: o.fields, elements: o.elements, shuffled: m[2] != ""}
	if m[3] != "" {
		n, err := strconv.Atoi(m[3])
		if err != nil || n < 1 || n > maxOrderingKeys {
			return "", sh, fmt.Errorf("-connectors: %q: _ordered_keysK takes 1 to %d keys", name, maxOrderingKeys)
		}
		sh.orderingKeys = n
	}
	if m[4] != "" {
		sh.format, sh.fields = m[4], true
	}
	if m[5] != "" {
		n, err := strconv.Atoi(m[5])
		if err != nil || n < 1 || n > maxElements {
			return "", sh, fmt.Errorf("-connectors: %q: _eachN takes 1 to %d elements", name, maxElements)
		}
		sh.elements, sh.fields = n, true
	}
	switch base {
	case minimal, naive, atLeastOnce, exactlyOnce, exactlyOnceNoTracking, exactlyOnceShared, exactlyOnceSharedTracking, exactlyOnceBaseline, reprocessRun, besideReprocess:
	case changesUpsert, changesDelete, changesInsert, changesReplace:
		sh.change = strings.TrimPrefix(string(base), "changes_")
	default:
		return "", sh, fmt.Errorf("-connectors: unknown connector %q (minimal, naive, at_least_once, exactly_once, exactly_once_no_tracking, exactly_once_shared, exactly_once_shared_tracking, exactly_once_baseline, reprocess, exactly_once_beside_reprocess, changes_upsert, changes_delete, changes_insert, changes_replace; optionally followed by _shuffled (changes_* only), _ordered_keysK, _json, _avro or _protobuf, then _eachN)", name)
	}
	sh.each = sh.elements > 0 && !base.own()
	switch {
	case base == exactlyOnceBaseline && (sh.each || sh.orderingKeys > 0):
		// The baseline is an earlier binary: one row per message, and no
		// source.ordering. A format other than JSON needs a binary that
		// has it (payload.format: any commit since Avro and Protocol
		// Buffers came): an older one refuses its configuration.
		return "", sh, fmt.Errorf("-connectors: %q: the baseline binary runs one row per message, unordered", name)
	case sh.shuffled && sh.change == "":
		return "", sh, fmt.Errorf("-connectors: %q: _shuffled is for the changes_* connectors (a plain mapping would write versions)", name)
	case sh.orderingKeys > 0 && (base == reprocessRun || base == besideReprocess):
		return "", sh, fmt.Errorf("-connectors: %q: _ordered_keysK is not for the reprocess connectors", name)
	}
	return kind(name), sh, nil
}

// maxOrderingKeys bounds _ordered_keysK.
const maxOrderingKeys = 1_000_000

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
// sink's keys' indentation). Without fields, the mapping is today's row
// (row key {attributes.id}, one column {data}) but for what a change
// mapping or _shuffled adds.
func (s shape) pipelineYAML(c *codecs) (payload, sink string) {
	var b strings.Builder
	key := "{data.id}"
	if s.shuffled {
		key = "{attributes.key}"
	}
	switch {
	case s.fields && s.each:
		fmt.Fprintf(&b, "      each: data.items\n      row_key: \"%s#{item.n}\"\n      columns: {sensor: \"{item.sensor}\", v: \"{item.v}\"}\n", key)
	case s.fields:
		fmt.Fprintf(&b, "      row_key: \"%s\"\n      columns: {customer: \"{data.customer}\", amount: \"{data.amount}\", currency: \"{data.currency}\"}\n", key)
	case s.shuffled:
		fmt.Fprintf(&b, "      row_key: \"%s\"\n", key)
	}
	switch s.change {
	case changeUpsert:
		// A fixed op makes the mapping a change mapping; upsert is the
		// default write mode.
		b.WriteString("      op: set\n")
	case changeDelete:
		b.WriteString("      op: delete\n")
	case changeInsert:
		b.WriteString("      write_mode: insert\n")
	case changeReplace:
		b.WriteString("      write_mode: replace_if_newer\n")
	}
	if s.fields {
		switch s.format {
		case formatAvro:
			payload = fmt.Sprintf("    payload: {format: avro, schema: %q}\n", c.avscPath)
		case formatProtobuf:
			payload = fmt.Sprintf("    payload: {format: protobuf, schema: %q, message: %s}\n", c.protoPath, orderMessage)
		}
	}
	return payload, b.String()
}
