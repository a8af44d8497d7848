package mapping

// Mapping one message: Map decodes the payload as needed, runs the filter,
// reads the event time and the dedupe key, and renders each mapping's rows
// and cells; and the errors it returns (BadInput's causes). The Mapper it
// runs is compiled by New (mapping.go).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping/expr"
	"github.com/pubsink/pubsink/mapping/value"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/template"
)

// Map fills r from msg: event time, dedupe key, rows. It returns nil, a
// *BadInput (the message can never be written: dead-letter it with the
// reason), or a transient error (a topic schema that could not be fetched
// yet; ctx's error). r.Filtered is set when the filter said no; then
// nothing else is. It is safe for concurrent use; r is the caller's.
func (m *Mapper) Map(ctx context.Context, msg *source.Message, r *Result) error {
	r.reset()
	if m.exprs || m.usesDecode {
		return m.mapDecoded(ctx, msg, r)
	}
	// The plain path: a pipeline that reads no decoded payload and
	// evaluates no expression; the templates read JSON text directly. It is
	// kept to small frames for the goroutine it runs on: the Pub/Sub client
	// runs each message's callback in a new goroutine, whose stack starts
	// small and is copied to a larger one when a call goes past it
	// (pipeline's BenchmarkCallback counts it). So the template input is in
	// r (which the caller keeps off the stack), not in this frame.
	in := &r.in
	in.MessageID, in.PublishTime, in.Attributes, in.Data = msg.ID, msg.PublishTime, msg.Attributes, msg.Data
	if m.timeTmpl == nil {
		// The event time's parse is the deepest call of this path: it is
		// made from here, not from a frame below (attributeTime, which
		// the compiler does not inline).
		t, err := m.eventTime.Of(msg.Attributes, msg.PublishTime)
		if err != nil {
			return badEventTime(err)
		}
		r.EventTime = t
	}
	if err := m.eventAndKey(msg, r, in); err != nil {
		return err
	}
	if m.single {
		// The common case: one row, into r's own array.
		r.Rows = r.row[:1]
		return m.mappings[0].render(m, r, 0, in)
	}
	return m.rows(r, in, nil)
}

// eventAndKey sets the computed event time (source.timestamp_template) and
// the dedupe key of r, and the event time of in. Without a template, the
// caller has set r.EventTime (attributeTime), in its own frame: the parse is
// the deepest call of Map's plain path.
func (m *Mapper) eventAndKey(msg *source.Message, r *Result, in *template.Input) error {
	if m.timeTmpl != nil {
		t, err := m.computedTime(in)
		if err != nil {
			return err
		}
		r.EventTime = t
	}
	in.EventTime = r.EventTime
	switch {
	case m.idTmpl != nil:
		k, err := m.idTmpl.Render(in)
		if err != nil {
			return templateError("source.id_template", err)
		}
		if k == "" {
			return &BadInput{deadletter.MissingField, errors.New("source.id_template rendered empty")}
		}
		r.Key = k
	case m.idAttr != "":
		k, ok := msg.Attributes[m.idAttr]
		if !ok || k == "" {
			return &BadInput{deadletter.MissingField, fmt.Errorf("dedupe attribute %q is missing or empty", m.idAttr)}
		}
		r.Key = k
	default:
		r.Key = msg.ID
	}
	return nil
}

// attributeTime sets r's event time from source.timestamp_attribute, or the
// publish time without one (mapDecoded's; Map's plain path does the same in
// its own frame).
func (m *Mapper) attributeTime(msg *source.Message, r *Result) error {
	t, err := m.eventTime.Of(msg.Attributes, msg.PublishTime)
	if err != nil {
		return badEventTime(err)
	}
	r.EventTime = t
	return nil
}

// badEventTime is the failure of the event time's attribute; apart, so
// that its allocation is not in its callers' frames.
//
//go:noinline
func badEventTime(err error) error { return &BadInput{deadletter.BadEventTime, err} }

// computedTime is the event time from source.timestamp_template: a lone
// expression's timestamp as it is, else the rendering read as
// source.timestamp_format.
func (m *Mapper) computedTime(in *template.Input) (time.Time, error) {
	if m.timeExpr != nil {
		if t, ok, err := m.timeExpr.Timestamp(in.Vars); ok || err != nil {
			if err != nil {
				return time.Time{}, templateError("source.timestamp_template", err)
			}
			if t.Before(time.Unix(0, 0)) {
				return time.Time{}, &BadInput{deadletter.BadEventTime, errors.New("source.timestamp_template: before 1970-01-01T00:00:00Z")}
			}
			return t, nil
		}
	}
	var buf [64]byte
	b, err := m.timeTmpl.AppendTo(buf[:0], in)
	if err != nil {
		return time.Time{}, templateError("source.timestamp_template", err)
	}
	t, err := m.eventTime.Parse(string(b))
	if err != nil {
		return time.Time{}, &BadInput{deadletter.BadEventTime, fmt.Errorf("source.timestamp_template: %w", err)}
	}
	return t, nil
}

// mapDecoded is Map for a pipeline that decodes its payloads or evaluates
// expressions.
func (m *Mapper) mapDecoded(ctx context.Context, msg *source.Message, r *Result) (err error) {
	in := &template.Input{
		MessageID:   msg.ID,
		PublishTime: msg.PublishTime,
		Attributes:  msg.Attributes,
		Data:        msg.Data,
	}
	if m.usesDecode {
		// The tree lives until the rows are made (their values are
		// copies): hold its share of the budget until then.
		n := min(int64(len(msg.Data))+1, m.budget)
		if err := m.decoding.Acquire(ctx, n); err != nil {
			return err
		}
		defer m.decoding.Release(n)
	}
	var decode func() (any, error)
	var decoded any
	switch {
	case !m.usesDecode:
		// Nothing reads data: it is never decoded.
	case m.format == config.FormatAvro || m.format == config.FormatProtobuf:
		// A schema'd payload is decoded before anything reads it, so that
		// a payload that does not decode is invalid_payload whatever reads
		// it first, and a schema still to fetch is fetched (or waited for)
		// before any expression runs: its transient failure is retried.
		v, err := m.decode(ctx, msg)
		if err != nil {
			return err
		}
		decoded, in.Decoded = v, value.Tree{V: v}
	default:
		// JSON, string, raw: decoded for the expressions that read data,
		// the first time one does (the templates read JSON text itself).
		decode = func() (any, error) { return m.decode(ctx, msg) }
	}
	act := expr.AcquireActivation(msg.ID, msg.PublishTime, msg.Attributes, decode)
	defer act.Release()
	defer explainAbsent(&err, act) // before the release: it reads act
	if in.Decoded != nil {
		act.SetData(decoded)
	}
	in.Vars = act
	if m.filter != nil {
		ok, err := m.filter.Bool(act)
		if err != nil {
			return exprError("filter", err)
		}
		if !ok {
			r.Filtered = true
			return nil
		}
	}
	if m.timeTmpl == nil {
		if err := m.attributeTime(msg, r); err != nil {
			return err
		}
	}
	if err := m.eventAndKey(msg, r, in); err != nil {
		return err
	}
	act.SetEventTime(r.EventTime)
	return m.rows(r, in, act)
}

// explainAbsent adds to a message's failure that an expression could not
// read a value (expression_failed, or missing_field under on_missing:
// dead_letter) which path failed and why: "no such key: id (data.before is
// null)". It runs once per dead-lettered message, while act still holds
// it; a value missing under another policy never gets here.
func explainAbsent(err *error, act *expr.Activation) {
	var bad *BadInput
	if *err == nil || !errors.As(*err, &bad) {
		return
	}
	if why := expr.Explain(bad.Err, act); why != "" {
		bad.Err = fmt.Errorf("%w (%s)", bad.Err, why)
	}
}

// rows renders every mapping's rows into r. act is the expressions'
// activation, nil when the pipeline has none.
func (m *Mapper) rows(r *Result, in *template.Input, act *expr.Activation) error {
	if m.single {
		// The common case: one row, into r's own array.
		r.Rows = r.row[:1]
		return m.mappings[0].render(m, r, 0, in)
	}
	for _, rm := range m.mappings {
		if rm.when != nil {
			ok, err := rm.when.Bool(act)
			if err != nil {
				return exprError(rm.at+".when", err)
			}
			if !ok {
				continue
			}
		}
		if rm.each == nil {
			if err := m.addRow(r, rm, in); err != nil {
				return err
			}
			continue
		}
		items, err := rm.each.List(act, m.maxRows-len(r.Rows))
		if err != nil {
			if errors.Is(err, expr.ErrTooManyElements) {
				return m.tooManyRows(len(r.Rows))
			}
			return exprError(rm.at+".each", err)
		}
		for _, item := range items {
			in.Item = value.Tree{V: item}
			act.SetItem(item)
			if err := m.addRow(r, rm, in); err != nil {
				return err
			}
		}
		in.Item = nil
		act.ClearItem()
	}
	return nil
}

func (m *Mapper) tooManyRows(n int) error {
	return &BadInput{deadletter.TooManyRows, fmt.Errorf("the message makes more than sink.max_rows (%d) rows (%d so far)", m.maxRows, n)}
}

// addRow appends one row of rm to r.
func (m *Mapper) addRow(r *Result, rm *rowMapping, in *template.Input) error {
	if len(r.Rows) >= m.maxRows {
		return m.tooManyRows(len(r.Rows))
	}
	r.Rows = append(r.Rows, sinks.Row{})
	return rm.render(m, r, len(r.Rows)-1, in)
}

// render renders one row of rm into r.Rows[i]. The first row's cells are
// r's own array when they fit. Its arguments are few, for a small frame
// (see mapPlain).
func (rm *rowMapping) render(m *Mapper, r *Result, i int, in *template.Input) error {
	row := &r.Rows[i]
	key, err := rm.rowKey.Render(in)
	if err != nil {
		return rm.rowKeyError(in, err)
	}
	if len(key) == 0 {
		return rm.rowKeyError(in, nil)
	}
	if m.limits.MaxKeyBytes > 0 && len(key) > m.limits.MaxKeyBytes {
		return tooLarge("row key is %d bytes, the sink accepts at most %d", len(key), m.limits.MaxKeyBytes)
	}
	row.Key, row.Table, row.Family = key, rm.table, rm.family
	if rm.change || rm.lenient {
		return rm.renderOp(m, r, i, in)
	}
	return rm.renderCells(m, r, i, in)
}

// renderCells renders the cells and the timestamp of r.Rows[i], whose key
// is set: apart from render, as the pipeline's decode was apart from its
// cells, so that the row key's frame and the cells' are not on the stack at
// once (see mapPlain).
func (rm *rowMapping) renderCells(m *Mapper, r *Result, i int, in *template.Input) error {
	row := &r.Rows[i]
	if i == 0 && len(rm.columns) <= len(r.cells) {
		row.Cells = r.cells[:len(rm.columns)]
	} else {
		row.Cells = make([]sinks.Cell, len(rm.columns))
	}
	size := len(row.Key)
	// buf holds the rendered values of the columns that are not the
	// payload, one after the other: one allocation for all of them (more
	// only if it has to grow; earlier values keep the array they were
	// rendered into).
	var buf []byte
	for i := range rm.columns {
		c := &rm.columns[i]
		var v []byte
		if c.payload {
			v = in.Data
		} else {
			start := len(buf)
			var err error
			if buf, err = c.tmpl.AppendTo(buf, in); err != nil {
				return cellError(c.key, err)
			}
			v = buf[start:len(buf):len(buf)]
		}
		if m.limits.MaxCellBytes > 0 && len(v) > m.limits.MaxCellBytes {
			return cellTooLarge(c.name, len(v), m.limits.MaxCellBytes)
		}
		size += len(c.name) + len(v)
		row.Cells[i] = sinks.Cell{Column: c.name, Value: v}
	}
	if m.limits.MaxRowBytes > 0 && size > m.limits.MaxRowBytes {
		return tooLarge("row is %d bytes, the sink accepts at most %d", size, m.limits.MaxRowBytes)
	}
	switch {
	case rm.timeTmpl != nil:
		return rm.computedTimestamp(m, row, in)
	case rm.cellTime == config.CellTimePublish:
		row.Timestamp = in.PublishTime
	default:
		row.Timestamp = r.EventTime
	}
	return nil
}

// computedTimestamp sets row's timestamp from rm's timestamp template: its
// rendering read as source.timestamp_format. Apart from render, so that its
// buffer is not in render's frame (see mapPlain).
func (rm *rowMapping) computedTimestamp(m *Mapper, row *sinks.Row, in *template.Input) error {
	var tb [64]byte
	b, err := rm.timeTmpl.AppendTo(tb[:0], in)
	if err != nil {
		return keyError(rm.at, "timestamp", err)
	}
	t, err := m.eventTime.Parse(string(b))
	if err != nil {
		return &BadInput{deadletter.BadEventTime, fmt.Errorf("%s.timestamp: %w", rm.at, err)}
	}
	row.Timestamp = t
	return nil
}

// cellError and cellTooLarge are the failures of a column, made apart so
// that their formatting is not in renderCells' frame.
//
//go:noinline
func cellError(key string, err error) error {
	out := templateError(key, err)
	if bad, ok := out.(*BadInput); ok && isMissing(err) && bad.Err != err {
		// A value that is null in some messages (a Debezium column, a
		// delete's after) is what on_missing is for: say so where the
		// dead-lettered copy says what was missing.
		bad.Err = fmt.Errorf("%w (%s)", bad.Err, missingHint)
	}
	return out
}

// missingHint follows the failure of a column whose value is missing under
// on_missing: dead_letter.
const missingHint = "if the value may be null or absent, set on_missing or on_missing_columns to skip, empty or delete"

// keyError is templateError at key of the mapping at (at.key), made apart
// so that its formatting is not in render's frame.
//
//go:noinline
func keyError(at, key string, err error) error { return templateError(at+"."+key, err) }

//go:noinline
func cellTooLarge(column string, n, limit int) error {
	return &BadInput{deadletter.TooLarge, fmt.Errorf("column %s is %d bytes, the sink accepts at most %d", column, n, limit)}
}

//go:noinline
func emptyRowKey(at string) error {
	return &BadInput{deadletter.MissingField, fmt.Errorf("%s.row_key rendered empty", at)}
}

func tooLarge(format string, n, limit int) error {
	return &BadInput{deadletter.TooLarge, fmt.Errorf(format, n, limit)}
}

// templateError maps a template failure to its dead-letter reason.
func templateError(where string, err error) error {
	reason := deadletter.MissingField
	switch {
	case errors.Is(err, template.ErrInvalidPayload):
		reason = deadletter.InvalidPayload
	case errors.Is(err, template.ErrBadTime):
		reason = deadletter.BadEventTime
	case errors.Is(err, template.ErrExpression):
		reason = deadletter.ExpressionFailed
	case errors.Is(err, errSchemaUnavailable):
		reason = deadletter.SchemaUnavailable
	}
	var bad *BadInput
	switch {
	case errors.As(err, &bad):
		return bad
	case !isBadInput(err):
		return err // transient: a schema not fetched yet, ctx's error
	}
	return &BadInput{reason, fmt.Errorf("%s: %w", where, err)}
}

// isBadInput reports whether err wraps one of the sentinels that say the
// message itself is at fault.
func isBadInput(err error) bool {
	for _, s := range []error{template.ErrMissingField, template.ErrInvalidPayload, template.ErrBadTime, template.ErrExpression, errSchemaUnavailable} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// exprError maps the failure of a filter, when or each expression: a
// payload that does not decode is invalid_payload (or its schema's
// reason), an expression's failure expression_failed; any other error is
// transient and returned as it is.
func exprError(where string, err error) error {
	var bad *BadInput
	switch {
	case errors.As(err, &bad):
		return bad
	case errors.Is(err, template.ErrInvalidPayload):
		return &BadInput{deadletter.InvalidPayload, fmt.Errorf("%s: %w", where, err)}
	case errors.Is(err, template.ErrExpression), errors.Is(err, template.ErrMissingField), errors.Is(err, template.ErrBadTime):
		return &BadInput{deadletter.ExpressionFailed, fmt.Errorf("%s: %w", where, err)}
	}
	return err
}
