package mapping

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping/expr"
	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/template"
)

// Change mappings (docs/reference.md, "Changes"): a mapping's op, fixed or
// computed per row, its write mode, and what a column whose value is
// missing gets. The sink applies what the rows say (sinks.Change); here
// they are made.

// missingPolicy is what a column whose value is missing gets
// (config.Mapping.MissingPolicy). Its zero value is dead_letter, what a
// column got before policies.
type missingPolicy uint8

const (
	// missingDeadLetter: the message is dead-lettered, with the reason
	// its template's failure has (missing_field, expression_failed).
	missingDeadLetter missingPolicy = iota
	// missingSkip: the row has no cell of the column.
	missingSkip
	// missingEmpty: the cell is empty.
	missingEmpty
	// missingDelete: the column's cells at or before the row's time are
	// deleted (sinks.Change.Delete).
	missingDelete
)

// policyName is each policy's name in the configuration (Column.OnMissing).
var policyName = [...]string{
	missingDeadLetter: config.MissingDeadLetter,
	missingSkip:       config.MissingSkip,
	missingEmpty:      config.MissingEmpty,
	missingDelete:     config.MissingDelete,
}

// operations are the fixed ops, by sinks.Op, as config names them.
var operations = [...]string{
	sinks.OpSet:           config.OpSet,
	sinks.OpDelete:        config.OpDelete,
	sinks.OpDeleteFamily:  config.OpDeleteFamily,
	sinks.OpDeleteColumns: config.OpDeleteColumns,
}

// operationList is the operations for messages: "set, delete, …".
var operationList = strings.Join(operations[:], ", ")

// parseOp is the op that s names, if it names one.
func parseOp(s string) (sinks.Op, bool) {
	for op, name := range operations {
		if s == name {
			return sinks.Op(op), true
		}
	}
	return sinks.OpSet, false
}

// policies compiles the missing-value policy of each column of mapping mc
// at at, by name (absent: dead_letter). An unknown policy is a problem at
// the key it came from, once (config's validation reports it first; this
// is for a configuration that did not go through it).
func (c *compiler) policies(at string, mc config.Mapping, names []string) map[string]missingPolicy {
	parse := func(key, p string) missingPolicy {
		switch p {
		case config.MissingDeadLetter, "":
			return missingDeadLetter
		case config.MissingSkip:
			return missingSkip
		case config.MissingEmpty:
			return missingEmpty
		case config.MissingDelete:
			return missingDelete
		}
		c.add(key, fmt.Errorf("%q is not one of %s, %s, %s, %s", p,
			config.MissingDeadLetter, config.MissingSkip, config.MissingEmpty, config.MissingDelete))
		return missingDeadLetter
	}
	def := parse(at+".on_missing", mc.OnMissing)
	out := make(map[string]missingPolicy, len(names))
	for _, name := range names {
		out[name] = def
		if p, ok := mc.OnMissingColumns[name]; ok && p != "" {
			out[name] = parse(at+".on_missing_columns."+name, p)
		}
	}
	return out
}

// change compiles what makes rm a change mapping: its mode, its op (fixed,
// or an expression with the templates' variables, opts) and the columns
// that delete_columns deletes (names: its columns, sorted).
func (c *compiler) change(at string, mc config.Mapping, rm *rowMapping, names []string, opts expr.Options) {
	rm.change = mc.IsChange()
	if rm.change {
		switch mc.WriteMode {
		case config.WriteUpsert, "":
			rm.mode = sinks.ModeUpsert
		case config.WriteInsert:
			rm.mode = sinks.ModeInsert
		case config.WriteReplaceIfNewer:
			rm.mode = sinks.ModeReplaceIfNewer
		default:
			c.add(at+".write_mode", fmt.Errorf("%q is not one of %s, %s, %s", mc.WriteMode,
				config.WriteUpsert, config.WriteInsert, config.WriteReplaceIfNewer))
		}
	}
	rm.deleteColumns = slices.Clip(slices.Clone(names))
	if len(mc.DeleteColumns) > 0 {
		rm.deleteColumns = slices.Clip(slices.Clone(mc.DeleteColumns))
	}
	if mc.Op == "" {
		rm.op = sinks.OpSet
		return
	}
	if op, ok := parseOp(mc.Op); ok {
		rm.op = op
		return
	}
	if strings.TrimSpace(mc.Op) == opDeadLetter {
		c.add(at+".op", fmt.Errorf("%s is a value an op expression gives for the messages it refuses (\"data.op == 't' ? '%s' : 'set'\"); a fixed op of %s would dead-letter every message", opDeadLetter, opDeadLetter, opDeadLetter))
		return
	}
	e, typed, err := c.compile(mc.Op, nil, opts)
	if err != nil {
		msg := err.Error()
		if bareWordRE.MatchString(strings.TrimSpace(mc.Op)) {
			// A word that CEL does not know was meant as an operation.
			if near := nearOperation(mc.Op); near != "" {
				msg += fmt.Sprintf("; did you mean %s? (the operations: %s)", near, operationList)
			} else {
				msg += fmt.Sprintf("; the operations are %s", operationList)
			}
		}
		c.add(at+".op", errors.New(msg))
		return
	}
	for _, out := range []*cel.Type{e.Type(), typed} {
		if !out.IsExactType(cel.DynType) && !cel.StringType.IsAssignableType(out) {
			c.add(at+".op", fmt.Errorf("the expression is of type %s; want string (one of %s)", cel.FormatCELType(out), operationList))
			return
		}
	}
	for _, lit := range e.ResultLiterals() {
		if _, ok := parseOp(lit); ok || lit == opDeadLetter {
			continue
		}
		// A value the expression can give that names no operation would
		// dead-letter every message that takes its branch: say it now.
		msg := fmt.Sprintf("the expression can give %q, which is not an operation", lit)
		if near := nearOperation(lit); near != "" {
			msg += fmt.Sprintf("; did you mean %s? (the operations: %s)", near, operationList)
		} else {
			msg += fmt.Sprintf("; the operations are %s", operationList)
		}
		c.add(at+".op", errors.New(msg))
	}
	c.m.exprs = true
	c.m.usesDecode = c.m.usesDecode || e.ReadsData()
	rm.opExpr = e
}

// bareWordRE is an identifier, or identifiers joined by -: what a
// misspelled operation looks like.
var bareWordRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z_][A-Za-z0-9_]*)*$`)

// nearOperation is the operation that the word w is probably a misspelling
// of: the same but for case, - for _, a prefix of at least 3 letters, or
// an edit distance of at most a third of the operation's length; "" if
// none.
func nearOperation(w string) string {
	lower := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(w)), "-", "_")
	for _, op := range operations {
		if lower == op || len(lower) >= 3 && strings.HasPrefix(op, lower) ||
			schema.EditDistance(lower, op) <= min(3, max(1, len(op)/3)) {
			return op
		}
	}
	return ""
}

// renderOp renders r.Rows[i], whose key is set, for a change mapping or one
// with a missing-value policy other than dead_letter (render sends the
// others to renderCells, whose frame stays as small as it was): the row's
// op and mode, then the cells of a set (renderPolicyCells), or for a
// delete no cell, only the columns it deletes and the timestamp.
func (rm *rowMapping) renderOp(m *Mapper, r *Result, i int, in *template.Input) error {
	row := &r.Rows[i]
	op := rm.op
	if rm.opExpr != nil {
		var err error
		if op, err = rm.evalOp(in); err != nil {
			return err
		}
	}
	row.Change.Op, row.Change.Mode = op, rm.mode // a plain mapping's: set, plain
	if op == sinks.OpSet {
		if !rm.lenient {
			return rm.renderCells(m, r, i, in)
		}
		return rm.renderPolicyCells(m, r, i, in)
	}
	row.Cells = nil
	size := len(row.Key)
	if op == sinks.OpDeleteColumns {
		row.Change.Delete = rm.deleteColumns
		for _, name := range rm.deleteColumns {
			size += len(name)
		}
	}
	if m.limits.MaxRowBytes > 0 && size > m.limits.MaxRowBytes {
		return tooLarge("row is %d bytes, the sink accepts at most %d", size, m.limits.MaxRowBytes)
	}
	return rm.timestamp(m, r, row, in)
}

// renderPolicyCells is renderCells for a mapping with a missing-value
// policy other than dead_letter: a column whose value is missing gets its
// policy (missingCell), and a plain mapping's row whose every column was
// skipped is not made (r.Rows loses it: it is the last). A change
// mapping's row is made even without cells.
func (rm *rowMapping) renderPolicyCells(m *Mapper, r *Result, i int, in *template.Input) error {
	row := &r.Rows[i]
	if i == 0 && len(rm.columns) <= len(r.cells) {
		row.Cells = r.cells[:len(rm.columns)]
	} else {
		row.Cells = make([]sinks.Cell, len(rm.columns))
	}
	size := len(row.Key)
	var buf []byte // as renderCells'
	n := 0         // the cells made: a skipped or deleted column makes none
	for j := range rm.columns {
		c := &rm.columns[j]
		var v []byte
		if c.payload {
			v = in.Data
		} else {
			start := len(buf)
			var err error
			if buf, err = c.tmpl.AppendTo(buf, in); err != nil {
				if err = missingCell(r, row, c, err); err != nil {
					return err
				}
				if c.policy != missingEmpty {
					continue
				}
				v = emptyValue
			} else {
				v = buf[start:len(buf):len(buf)]
			}
		}
		if m.limits.MaxCellBytes > 0 && len(v) > m.limits.MaxCellBytes {
			return cellTooLarge(c.name, len(v), m.limits.MaxCellBytes)
		}
		size += len(c.name) + len(v)
		row.Cells[n] = sinks.Cell{Column: c.name, Value: v}
		n++
	}
	row.Cells = row.Cells[:n]
	if n == 0 && len(rm.columns) > 0 && !rm.change {
		r.Rows = r.Rows[:i]
		return nil
	}
	for _, name := range row.Change.Delete {
		size += len(name)
	}
	if m.limits.MaxRowBytes > 0 && size > m.limits.MaxRowBytes {
		return tooLarge("row is %d bytes, the sink accepts at most %d", size, m.limits.MaxRowBytes)
	}
	return rm.timestamp(m, r, row, in)
}

// emptyValue is the value of a missing column under the policy empty.
var emptyValue = []byte{}

// timestamp sets row's timestamp, as renderCells does.
func (rm *rowMapping) timestamp(m *Mapper, r *Result, row *sinks.Row, in *template.Input) error {
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

// evalOp evaluates rm's op expression against the message (in.Vars, its
// activation): a failure, or a value that names no operation, is
// expression_failed.
func (rm *rowMapping) evalOp(in *template.Input) (sinks.Op, error) {
	act, _ := in.Vars.(*expr.Activation)
	s, err := rm.opExpr.Text(act)
	if err != nil {
		return sinks.OpSet, exprError(rm.at+".op", err)
	}
	op, ok := parseOp(s)
	if !ok {
		if s == opDeadLetter {
			return sinks.OpSet, unsupportedChange(rm.at)
		}
		return sinks.OpSet, notAnOperation(rm.at, s)
	}
	return op, nil
}

// opDeadLetter is what an op expression gives for a change the mapping
// does not apply (a Debezium truncate, which names no row): the message is
// dead-lettered as unsupported_change, never acked unwritten in silence.
// It is no operation of a fixed op: a fixed one would refuse every message.
const opDeadLetter = "dead_letter"

//go:noinline
func unsupportedChange(at string) error {
	return &BadInput{deadletter.UnsupportedChange, fmt.Errorf("%s.op gave %q: the mapping does not apply this change", at, opDeadLetter)}
}

// rowKeyError is the failure of rm's row key (err, or nil when it rendered
// empty), unless the op expression dead-letters the message as an
// unsupported change: such a change (a truncate) often has no row key at
// all, and its reason is the op's, not the key's.
//
//go:noinline
func (rm *rowMapping) rowKeyError(in *template.Input, err error) error {
	op := rm.op
	if rm.opExpr != nil {
		var bad *BadInput
		var opErr error
		if op, opErr = rm.evalOp(in); errors.As(opErr, &bad) && bad.Reason == deadletter.UnsupportedChange {
			return opErr
		}
	}
	if err == nil {
		return emptyRowKey(rm.at)
	}
	out := keyError(rm.at, "row_key", err)
	if bad, ok := out.(*BadInput); ok && op != sinks.OpSet && !rm.keyReadsBefore && isMissing(err) && bad.Err != err {
		// A delete carries the row it deletes in another place than a
		// set (Debezium: before, with after null).
		bad.Err = fmt.Errorf("%w (this row's op is %s: a delete's key must come from what it carries, such as Debezium's before: {= data.op == 'd' ? data.before.id : data.after.id})", bad.Err, operations[op])
	}
	return out
}

// maxOpQuote bounds what an error quotes of an op's value: it is the
// message's, so no more of it than an operation's name needs.
const maxOpQuote = 64

// notAnOperation is the failure of the op expression of the mapping at
// whose value s is not an operation: it quotes s, at most maxOpQuote bytes
// of it.
func notAnOperation(at, s string) error {
	q := s
	if len(s) > maxOpQuote {
		k := maxOpQuote
		for k > maxOpQuote-utf8.UTFMax && !utf8.RuneStart(s[k]) { // not a rune cut in two
			k--
		}
		q = s[:k]
	}
	quoted := strconv.Quote(q)
	if len(q) < len(s) {
		quoted += fmt.Sprintf("… (%d bytes)", len(s))
	}
	return &BadInput{deadletter.ExpressionFailed, fmt.Errorf("%s.op gave %s: not an operation (%s)", at, quoted, operationList)}
}

// missingCell is what becomes of column c of row, whose template failed
// with err: nil when the column's value is missing (isMissing) and its
// policy applies, counted in r.Missing (skip: no cell; empty: an empty
// cell, which the caller makes; delete: no cell, the column in
// row.Change.Delete); else the message's error, as it was before policies
// (cellError). Apart from renderCells, and never inlined, so that
// renderCells' frame stays as small as it was.
//
//go:noinline
func missingCell(r *Result, row *sinks.Row, c *column, err error) error {
	if c.policy == missingDeadLetter || !isMissing(err) {
		return cellError(c.key, err)
	}
	if r.MissingColumns == nil {
		r.MissingColumns = r.missed[:0]
	}
	r.MissingColumns = append(r.MissingColumns, c.index)
	switch c.policy {
	case missingSkip:
		r.Missing.Skip++
	case missingEmpty:
		r.Missing.Empty++
	default:
		r.Missing.Delete++
		row.Change.Delete = append(row.Change.Delete, c.name)
	}
	return nil
}

// isMissing reports whether a column's template failed because the value
// it reads is missing: a placeholder's template.ErrMissingField (an absent
// or null field, an absent attribute, an absent item field, an expression
// whose value is null or an empty optional), or an expression that read an
// absent key or field (expr.ErrNoSuchValue). A payload that does not decode, a
// time out of range or any other failure of an expression is not.
func isMissing(err error) bool {
	if errors.Is(err, template.ErrInvalidPayload) || errors.Is(err, errSchemaUnavailable) {
		return false
	}
	return errors.Is(err, template.ErrMissingField) || errors.Is(err, expr.ErrNoSuchValue)
}
