package audit

// The read pass: each message of the range becomes the Entries its
// mapping gives, with its role, spilled to disk in row order; what needs no
// row (filtered, a dead-lettered message) is counted or reported here.

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cbt "cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/spill"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/source"
)

// Mapper is the pipeline's mapping (mapping.(*Mapper).Map).
type Mapper interface {
	Map(ctx context.Context, msg *source.Message, r *mapping.Result) error
}

// Catalog says which messages the live pipeline's dedupe catalog names for
// a key (dedupe.(*LiveCatalog).LiveWinners): none when it has forgotten the
// key or never saw it.
type Catalog interface {
	LiveWinners(ctx context.Context, key string) ([]string, error)
}

// Config is what an Auditor reads the range with.
type Config struct {
	Pipeline config.Pipeline
	Mapper   Mapper
	// Catalog is read for a pipeline whose messages can be rivals
	// (exactly_once, keyed by source.id_attribute or id_template); nil
	// otherwise.
	Catalog Catalog
	// ClaimsSince is the oldest publish time whose key's claim the live
	// catalog still holds (claims are collected dedupe.window + 1 h after
	// they were made): only a message published since can be judged maybe
	// late by the catalog naming nothing for its key.
	ClaimsSince time.Time
	// DeadLetters are the reasons of the pipeline's dead-letter copies, by
	// the original's message ID.
	DeadLetters map[string]deadletter.Reason
	// Spill sorts the entries; Report gets the findings.
	Spill  *spill.Sorter
	Report *Report
}

// Auditor audits one range: Message for each message of it (the read
// pass), then Compare. Message is safe for concurrent use.
type Auditor struct {
	cfg         Config
	mayDropLate bool

	mu   sync.Mutex // Spill
	span struct {
		sync.Mutex
		Span
		set bool
	}
	// The read pass's counts, then the compare pass's.
	messages, winners, rivals, filtered, deadLettered atomic.Int64
	rows, checked, superseded, lateDropped            atomic.Int64
}

// New returns the Auditor of cfg.
func New(cfg Config) *Auditor {
	p := cfg.Pipeline
	return &Auditor{cfg: cfg,
		// The live pipeline drops late messages, and claims nothing for
		// them: a key its catalog names nothing for may be one.
		mayDropLate: cfg.Catalog != nil && p.Watermark.LateData == config.LateDrop && p.Source.TrackingSubscription != "",
	}
}

// Message audits one message of the range: it maps it, judges its role,
// and spills its entries. An error is transient (a schema not fetched yet,
// the catalog unreachable): the message is to be received again.
func (a *Auditor) Message(ctx context.Context, msg *source.Message) error {
	var r mapping.Result
	err := a.cfg.Mapper.Map(ctx, msg, &r)
	var bad *mapping.BadInput
	switch {
	case errors.As(err, &bad):
		a.messages.Add(1)
		return a.badInput(msg, bad)
	case err != nil:
		return err
	case r.Filtered:
		a.messages.Add(1)
		a.filtered.Add(1)
		return nil
	}
	role, mayBeLate := Winner, false
	if a.cfg.Catalog != nil {
		named, err := a.cfg.Catalog.LiveWinners(ctx, r.Key)
		if err != nil {
			return err
		}
		switch {
		case len(named) == 0:
			mayBeLate = a.mayDropLate && !msg.PublishTime.Before(a.cfg.ClaimsSince)
		case !slices.Contains(named, msg.ID):
			role = Rival
		}
	}
	a.messages.Add(1)
	if role == Rival {
		a.rivals.Add(1)
	} else if _, ok := a.cfg.DeadLetters[msg.ID]; ok {
		// The live pipeline dead-lettered it (a row the sink rejected, a
		// late message): accounted for, whatever its rows.
		a.deadLettered.Add(1)
		return nil
	} else {
		a.winners.Add(1)
	}
	return a.spill(msg, &r, role, mayBeLate)
}

// badInput accounts for a message the current mapping dead-letters: the
// output must hold a copy of it.
func (a *Auditor) badInput(msg *source.Message, bad *mapping.BadInput) error {
	if _, ok := a.cfg.DeadLetters[msg.ID]; ok {
		a.deadLettered.Add(1)
		return nil
	}
	return a.cfg.Report.Add(Finding{Kind: Missing, MessageID: msg.ID, PublishTime: msg.PublishTime.UnixMicro(),
		Detail: fmt.Sprintf("the current mapping dead-letters the message (%s), and the dead-letter output holds no copy of it", bad.Error())})
}

// spill adds the message's entries to the sorter: one per cell, or one
// for a change row with no cell (a delete).
func (a *Auditor) spill(msg *source.Message, r *mapping.Result, role Role, mayBeLate bool) error {
	p := &a.cfg.Pipeline
	var entries []Entry
	for i := range r.Rows {
		row := &r.Rows[i]
		e := Entry{
			Table: cmp.Or(row.Table, p.Sink.Table), Row: row.Key, Family: cmp.Or(row.Family, p.Sink.ColumnFamily),
			Timestamp: int64(cbt.Timestamp(row.Timestamp.UnixMicro()).TruncateToMilliseconds()),
			MessageID: msg.ID, PublishTime: msg.PublishTime.UnixMicro(), Key: r.Key, Role: role, MayBeLate: mayBeLate,
			Op: row.Change.Op, Mode: row.Change.Mode, Delete: row.Change.Delete,
		}
		if role == Winner {
			a.widen(e.Timestamp)
		}
		if len(row.Cells) == 0 {
			entries = append(entries, e)
			continue
		}
		for _, c := range row.Cells {
			e.Column, e.Value = c.Column, c.Value
			entries = append(entries, e)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range entries {
		v, err := json.Marshal(&entries[i])
		if err != nil {
			return err
		}
		if err := a.cfg.Spill.Add(sortKey(&entries[i]), v); err != nil {
			return fmt.Errorf("audit: spill: %w", err)
		}
	}
	return nil
}

// widen makes the span of the range's cell timestamps include ts.
func (a *Auditor) widen(ts int64) {
	a.span.Lock()
	defer a.span.Unlock()
	if !a.span.set {
		a.span.Span, a.span.set = Span{ts, ts}, true
		return
	}
	a.span.From, a.span.Until = min(a.span.From, ts), max(a.span.Until, ts)
}

// sortKey orders entries by table and row, so that a row's entries come
// together, then by family, column, timestamp and message. Each part but
// the last is length-prefixed, so that no row key can run into the next
// part: rows group exactly, though not in the table's own key order.
func sortKey(e *Entry) []byte {
	var k []byte
	for _, s := range []string{e.Table, e.Row, e.Family, e.Column} {
		k = binary.AppendUvarint(k, uint64(len(s)))
		k = append(k, s...)
	}
	k = binary.BigEndian.AppendUint64(k, uint64(e.Timestamp))
	return append(k, e.MessageID...)
}
