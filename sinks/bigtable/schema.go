package bigtable

import (
	"context"
	"fmt"
	"sync"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A per-entry NotFound or FailedPrecondition cannot say by itself whether the
// row is at fault or the table's schema: production Bigtable refuses every
// row with NotFound when the column family is missing, however good the row.
// The sink asks Bigtable instead, with a probe of the row's (table, family)
// pair: one cell of the family, set and deleted again in the same atomic
// mutation of the row checkKey of the table. Nothing about a row can make
// that mutation fail, so when it fails, the table or the family is at fault
// and no row of the pair is rejected; and it leaves no cell behind.
//
// Everything here is per pair (a target): the rows of one message may go to
// several tables and families, and one family missing says nothing of the
// others. A row written proves its own pair usable, not its batch-mates'.
//
// The data API has no cheaper way to see a family (a read filtered on a
// missing family answers an empty row, not an error), and the sink has no
// admin client. The probe runs only on suspicion: when nothing of a pair was
// written in a batch and an entry of it failed with a code a missing family
// may cause, before rejecting a row, and from Check while a fault of the pair
// is known.

// probeColumn is the qualifier of the probe's cell, in the row checkKey.
const probeColumn = "pubsink-probe"

// faultLogEvery is how often the error log repeats a fault that lasts: the
// pipeline retries every row for as long as it lasts, and one line per row,
// or per batch, would bury everything else.
const faultLogEvery = time.Minute

// schemaFault is what the sink last found missing of a pair, the table or
// the column family, until a write or a probe of the pair succeeds again.
// Check reports it.
type schemaFault struct {
	mu     sync.Mutex
	err    error     // nil: the table and family are believed usable
	logged time.Time // the last error log of a fault
}

// mayBeSchema reports whether a per-entry error may be the table's or the
// family's rather than the row's: the permanent codes (production answers
// NotFound for a missing family), and Internal and Unknown, which bttest and
// cbtemulator answer instead.
func mayBeSchema(err error) bool {
	switch status.Code(err) {
	case codes.Internal, codes.Unknown:
		return true
	}
	return classify(err) == permanent
}

// probeSchema applies the probe of t. It returns nil when its table and
// family take a write, and otherwise an error naming them, with the probe's
// status. A failure that may be the schema's is recorded (see
// schemaFailed); one that cannot (Unavailable, a timeout) is only returned:
// it proves nothing either way.
func (s *Sink) probeSchema(ctx context.Context, t *target) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	mut := cbt.NewMutation()
	mut.Set(t.family, probeColumn, 0, nil) // explicit timestamp: idempotent, retried by the client
	mut.DeleteCellsInColumn(t.family, probeColumn)
	err := t.table.Apply(ctx, checkKey, mut)
	if err == nil {
		t.schemaUsable()
		return nil
	}
	err = fmt.Errorf("column family %q of bigtable table %q in instance %q is missing or cannot be written (pubsink setup creates it): %w",
		t.family, t.name, s.instance, err)
	if mayBeSchema(err) {
		t.schemaFailed(err)
	}
	return err
}

// schemaFailed records err, which names what is missing, for Check, and logs
// it at error level when it is new or every faultLogEvery while it lasts.
func (t *target) schemaFailed(err error) {
	f := &t.fault
	f.mu.Lock()
	defer f.mu.Unlock()
	first := f.err == nil
	f.err = err
	if now := time.Now(); first || now.Sub(f.logged) >= faultLogEvery {
		f.logged = now
		t.log.Error("Bigtable table or column family unusable: rows are retried, none is dead-lettered, until it is fixed",
			zap.Error(err))
	}
}

// schemaUsable clears the fault after a write of the pair, or its probe,
// succeeded: a row written with the family proves the table and family.
func (t *target) schemaUsable() {
	f := &t.fault
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		f.err = nil
		t.log.Info("Bigtable table and column family usable again")
	}
}

// schemaErr returns the fault recorded, or nil.
func (t *target) schemaErr() error {
	t.fault.mu.Lock()
	defer t.fault.mu.Unlock()
	return t.fault.err
}
