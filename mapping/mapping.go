package mapping

// Compiling a pipeline's configuration into a Mapper: New (and
// CheckRevision) compile its filter, event time, dedupe key and mappings
// once, against the payload's schema when it has one; the types Map fills
// and returns (Result, BadInput) are declared here, Map itself is map.go.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"golang.org/x/sync/semaphore"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping/expr"
	"github.com/pubsink/pubsink/mapping/protobuf"
	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/template"
	"github.com/pubsink/pubsink/watermark"
)

// Result is what Map makes of one message. The zero value is ready; a
// Result may be reused for another message once its rows were written (Map
// resets it).
type Result struct {
	// EventTime is the message's event time: the watermark and the late
	// check read it (also when its rows carry times of their own).
	EventTime time.Time
	// Key is the dedupe key.
	Key string
	// Filtered: the filter was false; there are no rows.
	Filtered bool
	// Rows are the rows to write, in mapping order; none is possible (a
	// when that was false, an empty list).
	Rows []sinks.Row
	// Missing counts the columns whose value was missing, by the policy
	// that applied (on_missing): those of Rows, and those of a plain
	// mapping's row that was not made because every column was skipped.
	// dead_letter ends in a BadInput.
	Missing Missing
	// MissingColumns are the indexes in Mapper.Columns of the columns
	// counted in Missing, in the order met: a column of an each mapping
	// is there once per row that missed it. A column of a made row not
	// in it was filled.
	MissingColumns []uint16

	// row and cells back Rows for a message of one row with at most two
	// columns, so that the common case costs no allocation of their own.
	row   [1]sinks.Row
	cells [2]sinks.Cell
	// missed backs MissingColumns for the common few.
	missed [4]uint16
	// in is the templates' input on Map's plain path (see Map).
	in template.Input
}

// Missing counts columns whose value was missing, by the policy applied.
type Missing struct {
	Skip, Empty, Delete int
}

// reset makes r a zero Result, field by field: a composite literal would
// be built in Map's frame first (see Map).
func (r *Result) reset() {
	r.EventTime, r.Key, r.Filtered, r.Rows, r.Missing, r.MissingColumns = time.Time{}, "", false, nil, Missing{}, nil
	r.row[0] = sinks.Row{}
	r.cells[0], r.cells[1] = sinks.Cell{}, sinks.Cell{}
	r.in = template.Input{}
}

// BadInput is a message that can never be written as it is: Map's error
// for every failure but a transient one (a schema that could not be fetched
// yet). Reason is its dead-letter reason.
type BadInput struct {
	Reason deadletter.Reason
	Err    error
}

func (b *BadInput) Error() string { return string(b.Reason) + ": " + b.Err.Error() }
func (b *BadInput) Unwrap() error { return b.Err }

// Schemas fetches a revision of a topic's Pub/Sub schema (source.Schemas).
// Its error wraps source.ErrSchemaGone when the revision can never be had;
// any other error is transient.
type Schemas interface {
	Get(ctx context.Context, name, revision string) (source.Schema, error)
}

// noSchemas stands in for the schema service where there is none (validate,
// tests): every fetch fails, transiently.
type noSchemas struct{}

func (noSchemas) Get(context.Context, string, string) (source.Schema, error) {
	return source.Schema{}, errors.New("no Pub/Sub schema service here")
}

// Mapper maps the messages of one pipeline. It is compiled once (New) and
// safe for concurrent use.
type Mapper struct {
	format     string
	fileCodec  schema.Codec // the schema file's, or nil
	fileJSON   bool         // the schema file's messages are in its JSON encoding
	topic      *schemaCache // the topic's schemas, or nil
	eventTime  *watermark.EventTime
	timeTmpl   *template.Template // source.timestamp_template, or nil
	timeExpr   *expr.Expr         // its lone expression, when it has one
	idAttr     string
	idTmpl     *template.Template // source.id_template, or nil
	filter     *expr.Expr         // or nil
	mappings   []*rowMapping
	maxRows    int
	limits     sinks.Limits
	usesDecode bool // some template or expression reads a field of a schema'd payload
	single     bool // one mapping, without when or each: one row per message
	exprs      bool // some expression is compiled: an activation is needed
	// decoding bounds the payload bytes whose decoded trees are held at
	// once (see BoundDecoding); nil until set.
	decoding *semaphore.Weighted
	budget   int64
	// columns lists the mappings' columns (Columns).
	columns []Column
}

// treeAmplification is how many bytes of decoded tree one payload byte may
// make at most, measured on hostile payloads (a protobuf payload of empty
// messages: about 70 bytes a byte; Avro and JSON less): the budget of
// BoundDecoding divides the raw budget by it.
const treeAmplification = 64

// BoundDecoding bounds the memory of decoded payloads (Avro, Protocol
// Buffers, and JSON read by expressions: trees of Go values, up to about
// 64 times their payload) to about maxOutstandingBytes, the flow control's
// bound of the raw payloads: messages decode while the payload bytes
// decoded at once stay under maxOutstandingBytes/64 (a larger message
// decodes alone), and wait otherwise. New sets it from
// source.max_outstanding_bytes, or 256 MiB when that is 0; the app sets it
// from the value it derived. Call it before Map is first called.
func (m *Mapper) BoundDecoding(maxOutstandingBytes int64) {
	m.budget = max(maxOutstandingBytes/treeAmplification, 1<<20)
	m.decoding = semaphore.NewWeighted(m.budget)
}

// rowMapping is one compiled config.Mapping.
type rowMapping struct {
	// at is the mapping's key in the pipeline, as validate names it
	// ("sink", "sink.mappings[1]"): the start of its failures' texts.
	at            string
	table, family string
	rowKey        *template.Template
	// keyReadsBefore: the row key's text names before (a Debezium
	// delete's), so the hint of a delete's missing key is not given.
	keyReadsBefore bool
	columns        []column
	cellTime       string             // config.CellTimeEvent, config.CellTimePublish, or "" for timeTmpl
	timeTmpl       *template.Template // a computed cell timestamp
	when, each     *expr.Expr
	// change: a change mapping (config.Mapping.IsChange), whose rows
	// carry their op and mode (change.go); a plain mapping's rows keep
	// sinks.Change's zero value. lenient: a column's missing value has a
	// policy other than dead_letter. Either takes renderOp, not
	// renderCells.
	change, lenient bool
	op              sinks.Op   // the fixed op, when opExpr is nil
	opExpr          *expr.Expr // an op computed per row, or nil
	mode            sinks.Mode
	// deleteColumns are the qualifiers of sinks.OpDeleteColumns.
	deleteColumns []string
}

type column struct {
	name string
	key  string // its key, for its failures: sink.mappings[0].columns.temp_c
	tmpl *template.Template
	// payload: the template is a lone {data}, whose value is the message's
	// Data itself. No copy is needed: the sink copies what it batches and
	// the handler holds the message until the write returns.
	payload bool
	// policy is what a value that is missing gets (on_missing).
	policy missingPolicy
	// index is the column's in Mapper.Columns.
	index uint16
}

// Column is one column of the pipeline's mappings, as Columns lists them.
type Column struct {
	// Key is the column's key in the pipeline, as validate names it:
	// sink.columns.last_name, sink.mappings[1].columns.x.
	Key string
	// Table and Family are those of its rows (sinks.Row: empty for the
	// sink's own); Name is its qualifier.
	Table, Family, Name string
	// Template is its template as the configuration gives it.
	Template string
	// OnMissing is the policy a missing value gets: config.MissingSkip,
	// MissingEmpty, MissingDelete or MissingDeadLetter.
	OnMissing string
}

// maxColumns bounds the columns of one pipeline's mappings in all: a
// column's index in Result.MissingColumns is a uint16.
const maxColumns = 1<<16 - 1

// Filled counts the cells of column c (the i-th of Columns) that r's rows
// hold with a value: those in rows of c's table and family with c's
// qualifier, less the empty cells its on_missing: empty policy made for
// the rows that missed it. 0 when the message filled the column nowhere.
func (r *Result) Filled(i int, c Column) int {
	n := 0
	for j := range r.Rows {
		row := &r.Rows[j]
		if row.Table != c.Table || row.Family != c.Family {
			continue
		}
		for k := range row.Cells {
			if row.Cells[k].Column == c.Name {
				n++
			}
		}
	}
	if n > 0 && c.OnMissing == config.MissingEmpty {
		for _, m := range r.MissingColumns {
			if int(m) == i {
				n--
			}
		}
	}
	return n
}

// Columns lists every column of the pipeline's mappings, in mapping order
// and by name within a mapping: Result.MissingColumns indexes it. The
// slice is the Mapper's; do not change it.
func (m *Mapper) Columns() []Column { return m.columns }

// New compiles the mapping of pipeline cfg: its schema file (read from
// disk), expressions and templates. schemas fetches topic schemas; it may be
// nil when cfg does not read them. limits are the sink's, checked before a
// row is written. Every problem is reported, as config.Problems with key
// paths relative to the pipeline ("sink.columns.x", "filter").
func New(cfg config.Pipeline, schemas Schemas, limits sinks.Limits) (*Mapper, error) {
	return newMapper(cfg, schemas, limits, nil)
}

// CheckRevision compiles the mapping of cfg, whose payload is read by its
// topic's schema (payload.schema: topic), against one revision of that
// schema, as New compiles it against a schema file: its problems are what
// messages of that revision would fail on (a field the revision lacks, an
// expression of the wrong type over its fields), with key paths relative
// to the pipeline. The error is the revision's own: it does not compile.
func CheckRevision(cfg config.Pipeline, rev source.Schema) (config.Problems, error) {
	c, err := compileRevision(rev)
	if err != nil {
		return nil, err
	}
	_, err = newMapper(cfg, nil, sinks.Limits{}, c)
	var ps config.Problems
	if errors.As(err, &ps) {
		return ps, nil
	}
	return nil, err
}

// newMapper is New; with revision, the mapping's expressions and paths are
// checked against that compiled revision of the topic's schema.
func newMapper(cfg config.Pipeline, schemas Schemas, limits sinks.Limits, revision schema.Codec) (*Mapper, error) {
	var ps config.Problems
	add := func(path string, err error) {
		var located *protobuf.LocatedError
		ps = append(ps, config.Problem{Path: path, Message: err.Error(), Elsewhere: errors.As(err, &located)})
	}
	m := &Mapper{
		format:  cfg.Payload.Format,
		idAttr:  cfg.Source.IDAttribute,
		maxRows: cfg.Sink.MaxRows,
		limits:  limits,
	}
	if m.format == "" {
		m.format = config.FormatJSON
	}
	if m.maxRows <= 0 {
		m.maxRows = 1000
	}
	var checker schema.Codec
	var typed *schema.Types
	switch {
	case cfg.Payload.TopicSchema():
		if schemas == nil {
			schemas = noSchemas{} // validate: nothing is fetched
		}
		m.topic = newSchemaCache(schemas)
		if revision != nil {
			checker, typed = revision, revision.Types()
		}
	case cfg.Payload.Schema != "":
		c, err := compileFile(m.format, cfg.Payload.Schema, cfg.Payload.Message)
		var noMessage *protobuf.MessageError
		switch {
		case errors.As(err, &noMessage):
			add("payload.message", err)
		case err != nil:
			add("payload.schema", err)
		default:
			m.fileCodec, checker = c, c
			typed = c.Types()
		}
		m.fileJSON = cfg.Payload.Encoding == config.EncodingJSON
	}

	et, err := watermark.NewEventTime(cfg.Source.TimestampAttribute, cfg.Source.TimestampFormat)
	if err != nil {
		add("source.timestamp_format", err)
	}
	m.eventTime = et

	c := &compiler{m: m, checker: checker, schema: typed, add: add}
	if cfg.Filter != "" {
		m.filter = c.expr("filter", cfg.Filter, cel.BoolType, expr.Options{})
	}
	if cfg.Source.TimestampTemplate != "" {
		m.timeTmpl = c.template("source.timestamp_template", cfg.Source.TimestampTemplate, expr.Options{})
		if m.timeTmpl != nil {
			m.timeExpr, _ = m.timeTmpl.Lone().(*expr.Expr)
		}
	}
	if cfg.Source.IDTemplate != "" {
		m.idTmpl = c.template("source.id_template", cfg.Source.IDTemplate, expr.Options{EventTime: true})
	}
	for i, mc := range cfg.Sink.AllMappings() {
		at := "sink"
		if len(cfg.Sink.Mappings) > 0 {
			at = fmt.Sprintf("sink.mappings[%d]", i)
		}
		m.mappings = append(m.mappings, c.mapping(at, mc))
	}
	m.columns = c.columns
	if len(ps) > 0 {
		return nil, ps
	}
	m.single = len(m.mappings) == 1 && m.mappings[0].each == nil && m.mappings[0].when == nil
	raw := int64(cfg.Source.MaxOutstandingBytes)
	if raw <= 0 {
		raw = 256 << 20 // the default flow control when no memory limit is known
	}
	m.BoundDecoding(raw)
	return m, nil
}

// compiler compiles one pipeline's templates and expressions, reporting
// each problem at its key.
type compiler struct {
	m       *Mapper
	checker schema.Codec // the schema file's, to check paths against; or nil
	// schema is the schema's types, to check expressions against; nil
	// when the payload has no schema (JSON: data stays dyn). item is the
	// type of each's elements while a mapping with each compiles (nil:
	// dyn).
	schema *schema.Types
	item   *cel.Type
	add    func(path string, err error)
	envs   map[expr.Options]*expr.Env
	typed  map[typedKey]*expr.Env
	// columns collects the mappings' columns, in order (Mapper.Columns).
	columns []Column
}

type typedKey struct {
	opts expr.Options
	item *cel.Type
}

func (c *compiler) env(opts expr.Options) *expr.Env {
	if e, ok := c.envs[opts]; ok {
		return e
	}
	e, err := expr.NewEnv(opts)
	if err != nil {
		panic("mapping: the expression environment does not build: " + err.Error()) // a bug, not a config problem
	}
	if c.envs == nil {
		c.envs = map[expr.Options]*expr.Env{}
	}
	c.envs[opts] = e
	return e
}

// typedCheck checks src against the schema's types (when there is a
// schema) and returns its type there; without a schema, dyn.
func (c *compiler) typedCheck(src string, want *cel.Type, opts expr.Options) (*cel.Type, error) {
	if c.schema == nil {
		return cel.DynType, nil
	}
	k := typedKey{opts, nil}
	if opts.Item {
		k.item = c.item
	}
	e, ok := c.typed[k]
	if !ok {
		var err error
		if e, err = expr.NewTypedEnv(opts, c.schema, k.item); err != nil {
			panic("mapping: the typed expression environment does not build: " + err.Error()) // a bug
		}
		if c.typed == nil {
			c.typed = map[typedKey]*expr.Env{}
		}
		c.typed[k] = e
	}
	return e.Check(src, want)
}

// compile compiles src for evaluation and checks it against the schema.
func (c *compiler) compile(src string, want *cel.Type, opts expr.Options) (*expr.Expr, *cel.Type, error) {
	e, err := c.env(opts).Compile(src, want)
	if err != nil {
		return nil, nil, err
	}
	t, err := c.typedCheck(src, want, opts)
	if err != nil {
		return nil, nil, err
	}
	return e, t, nil
}

func (c *compiler) expr(at, src string, want *cel.Type, opts expr.Options) *expr.Expr {
	e, _ := c.exprTyped(at, src, want, opts)
	return e
}

// exprTyped is expr, with the expression's type against the schema (dyn
// without one).
func (c *compiler) exprTyped(at, src string, want *cel.Type, opts expr.Options) (*expr.Expr, *cel.Type) {
	e, t, err := c.compile(src, want, opts)
	if err != nil {
		c.add(at, err)
		return nil, nil
	}
	c.m.exprs = true
	c.m.usesDecode = c.m.usesDecode || e.ReadsData()
	return e, t
}

func (c *compiler) template(at, src string, opts expr.Options) *template.Template {
	t, err := template.CompileWith(src, template.Options{Expr: func(s string) (template.Expr, error) {
		e, _, err := c.compile(s, nil, opts)
		if err != nil {
			return nil, err
		}
		c.m.exprs = true
		c.m.usesDecode = c.m.usesDecode || e.ReadsData()
		return e, nil
	}})
	if err != nil {
		c.add(at, err)
		return nil
	}
	for _, fp := range t.Paths() {
		switch fp.Root {
		case "data":
		case "item":
			if c.schema != nil && c.item != nil {
				if err := c.schema.CheckPath(c.item, "item", fp.Path); err != nil {
					c.add(at, fmt.Errorf("%s: %w", fp.Placeholder, err))
				}
			}
			continue
		default:
			continue
		}
		switch {
		case c.m.format == config.FormatRaw || c.m.format == config.FormatString:
			c.add(at, fmt.Errorf("%s: a %s payload has no fields (use {data})", fp.Placeholder, c.m.format))
		case c.m.format == config.FormatAvro || c.m.format == config.FormatProtobuf:
			c.m.usesDecode = true
			if c.checker != nil {
				if err := c.checker.CheckPath(fp.Path); err != nil {
					c.add(at, fmt.Errorf("%s: %w", fp.Placeholder, err))
				}
			}
		}
	}
	return t
}

func (c *compiler) mapping(at string, mc config.Mapping) *rowMapping {
	rm := &rowMapping{at: at, table: mc.Table, family: mc.ColumnFamily}
	opts := expr.Options{EventTime: true, Item: mc.Each != ""}
	if mc.When != "" {
		rm.when = c.expr(at+".when", mc.When, cel.BoolType, expr.Options{EventTime: true})
	}
	if mc.Each != "" {
		var t *cel.Type
		rm.each, t = c.exprTyped(at+".each", mc.Each, cel.ListType(cel.DynType), expr.Options{EventTime: true})
		if t != nil && t.Kind() == types.ListKind {
			c.item = t.Parameters()[0] // item's type, for this mapping's expressions and paths
			defer func() { c.item = nil }()
		}
	}
	rm.rowKey = c.template(at+".row_key", mc.RowKey, opts)
	rm.keyReadsBefore = strings.Contains(mc.RowKey, "before")
	names := make([]string, 0, len(mc.Columns))
	for name := range mc.Columns {
		names = append(names, name)
	}
	sort.Strings(names) // a stable cell order makes rows comparable in tests and logs
	policies := c.policies(at, mc, names)
	for _, name := range names {
		key := at + ".columns." + name
		if len(c.columns) == maxColumns {
			c.add(key, fmt.Errorf("more than %d columns in all the pipeline's mappings", maxColumns))
			break
		}
		if t := c.template(key, mc.Columns[name], opts); t != nil {
			index := uint16(len(c.columns))
			c.columns = append(c.columns, Column{Key: key, Table: mc.Table, Family: mc.ColumnFamily, Name: name, Template: mc.Columns[name], OnMissing: policyName[policies[name]]})
			rm.columns = append(rm.columns, column{name: name, key: key, tmpl: t, payload: t.Payload(), policy: policies[name], index: index})
			rm.lenient = rm.lenient || policies[name] != missingDeadLetter
		}
	}
	c.change(at, mc, rm, names, opts)
	switch mc.Timestamp {
	case config.CellTimeEvent, config.CellTimePublish, "":
		rm.cellTime = mc.Timestamp
		if rm.cellTime == "" {
			rm.cellTime = config.CellTimeEvent
		}
	default:
		rm.timeTmpl = c.template(at+".timestamp", mc.Timestamp, opts)
	}
	return rm
}
