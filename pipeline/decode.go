package pipeline

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
	"github.com/pubsink/pubsink/template"
	"github.com/pubsink/pubsink/watermark"
)

// record is what decoding makes of one message.
type record struct {
	eventTime time.Time
	key       string // dedupe key
	row       sinks.Row
	// cells backs row.Cells when there are at most two columns, so that
	// the cells cost no allocation of their own.
	cells [2]sinks.Cell
	// reason is why the message was dead-lettered, once its copy was
	// confirmed (outcome DeadLettered).
	reason deadletter.Reason
}

// decoder turns a message into a record: event time, dedupe key, row. It is
// compiled once per pipeline and safe for concurrent use.
type decoder struct {
	eventTime   *watermark.EventTime
	idAttribute string
	rowKey      *template.Template
	columns     []column
	cellTime    string // config.CellTimeEvent or config.CellTimePublish
	limits      sinks.Limits
}

type column struct {
	name string
	tmpl *template.Template
	// payload: the template is a lone {data}, whose value is the message's
	// Data itself. No copy is needed: the sink must not retain the row after
	// Write returns (the Bigtable sink copies the values it batches), and
	// the handler holds the message until then.
	payload bool
}

func newDecoder(cfg config.Pipeline, limits sinks.Limits) (*decoder, error) {
	et, err := watermark.NewEventTime(cfg.Source.TimestampAttribute, cfg.Source.TimestampFormat)
	if err != nil {
		return nil, fmt.Errorf("source.timestamp_format: %w", err)
	}
	rowKey, err := template.Compile(cfg.Sink.RowKey)
	if err != nil {
		return nil, fmt.Errorf("sink.row_key: %w", err)
	}
	d := &decoder{
		eventTime:   et,
		idAttribute: cfg.Source.IDAttribute,
		rowKey:      rowKey,
		cellTime:    cfg.Sink.Timestamp,
		limits:      limits,
	}
	names := make([]string, 0, len(cfg.Sink.Columns))
	for name := range cfg.Sink.Columns {
		names = append(names, name)
	}
	sort.Strings(names) // a stable cell order makes rows comparable in tests and logs
	for _, name := range names {
		t, err := template.Compile(cfg.Sink.Columns[name])
		if err != nil {
			return nil, fmt.Errorf("sink.columns.%s: %w", name, err)
		}
		d.columns = append(d.columns, column{name: name, tmpl: t, payload: t.Payload()})
	}
	return d, nil
}

// badInput is a message that can never be written as it is.
type badInput struct {
	reason deadletter.Reason
	err    error
}

func (b *badInput) Error() string { return string(b.reason) + ": " + b.err.Error() }
func (b *badInput) Unwrap() error { return b.err }

// decode fills r from m. A returned error is always a *badInput.
//
// It is split in two, with the errors' formatting in functions of their
// own, to keep each frame small (see Pipeline.process): the event time's
// parse and the templates' rendering are not on the stack at once.
func (d *decoder) decode(m *source.Message, r *record) error {
	et, err := d.eventTime.Of(m.Attributes, m.PublishTime)
	if err != nil {
		return &badInput{deadletter.BadEventTime, err}
	}
	r.eventTime = et

	r.key = m.ID
	if d.idAttribute != "" {
		k, ok := m.Attributes[d.idAttribute]
		if !ok || k == "" {
			return d.missingID()
		}
		r.key = k
	}
	return d.decodeRow(m, r)
}

// decodeRow renders the row key and the cells of r, whose event time is set.
func (d *decoder) decodeRow(m *source.Message, r *record) error {
	in := template.Input{
		MessageID:   m.ID,
		PublishTime: m.PublishTime,
		EventTime:   r.eventTime,
		Attributes:  m.Attributes,
		Data:        m.Data,
	}
	// A row key that is a lone attribute or the message ID is that string
	// itself: no allocation.
	key, err := d.rowKey.Render(&in)
	if err != nil {
		return templateError("row_key", err)
	}
	if len(key) == 0 {
		return errEmptyRowKey
	}
	if d.limits.MaxKeyBytes > 0 && len(key) > d.limits.MaxKeyBytes {
		return tooLarge("row key is %d bytes, the sink accepts at most %d", len(key), d.limits.MaxKeyBytes)
	}
	r.row.Key = key
	if err := d.decodeCells(m, r, &in); err != nil {
		return err
	}
	r.row.Timestamp = r.eventTime
	if d.cellTime == config.CellTimePublish {
		r.row.Timestamp = m.PublishTime
	}
	return nil
}

// decodeCells renders the cells of r, whose row key is set.
func (d *decoder) decodeCells(m *source.Message, r *record, in *template.Input) error {
	if len(d.columns) <= len(r.cells) {
		r.row.Cells = r.cells[:len(d.columns)]
	} else {
		r.row.Cells = make([]sinks.Cell, len(d.columns))
	}
	size := len(r.row.Key)
	// buf holds the rendered values of the columns that are not the
	// payload, one after the other: one allocation for all of them (more
	// only if it has to grow; earlier values keep the array they were
	// rendered into).
	var buf []byte
	for i := range d.columns {
		c := &d.columns[i]
		var v []byte
		if c.payload {
			v = m.Data
		} else {
			start := len(buf)
			var err error
			if buf, err = c.tmpl.AppendTo(buf, in); err != nil {
				return templateError("columns."+c.name, err)
			}
			v = buf[start:len(buf):len(buf)]
		}
		if d.limits.MaxCellBytes > 0 && len(v) > d.limits.MaxCellBytes {
			return cellTooLarge(c.name, len(v), d.limits.MaxCellBytes)
		}
		size += len(c.name) + len(v)
		r.row.Cells[i] = sinks.Cell{Column: c.name, Value: v}
	}
	if d.limits.MaxRowBytes > 0 && size > d.limits.MaxRowBytes {
		return tooLarge("row is %d bytes, the sink accepts at most %d", size, d.limits.MaxRowBytes)
	}
	return nil
}

var errEmptyRowKey = &badInput{deadletter.MissingField, errors.New("row_key rendered empty")}

func (d *decoder) missingID() error {
	return &badInput{deadletter.MissingField, fmt.Errorf("dedupe attribute %q is missing or empty", d.idAttribute)}
}

func tooLarge(format string, n, limit int) error {
	return &badInput{deadletter.TooLarge, fmt.Errorf(format, n, limit)}
}

func cellTooLarge(column string, n, limit int) error {
	return &badInput{deadletter.TooLarge, fmt.Errorf("column %s is %d bytes, the sink accepts at most %d", column, n, limit)}
}

// templateError maps a template failure to its dead-letter reason.
func templateError(where string, err error) error {
	reason := deadletter.MissingField
	switch {
	case errors.Is(err, template.ErrInvalidPayload):
		reason = deadletter.InvalidPayload
	case errors.Is(err, template.ErrBadTime):
		reason = deadletter.BadEventTime
	}
	return &badInput{reason, fmt.Errorf("%s: %w", where, err)}
}
