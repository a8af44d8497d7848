package app

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/state"
)

// checkCatalogGC refuses to start when an exactly_once pipeline's
// dedupe.window is longer than the max-age rule of the state table's
// catalog family: Bigtable would collect a key's record before its window
// ends, and a duplicate arriving after that would be written again. The
// rule is set by `pubsink setup` from the longest window, and widened by a
// later setup; a window lengthened without re-running setup is what this
// catches. Reading the rule needs bigtable.tables.get: without it (or any
// other failure to read it) the check is skipped with a warning, since the
// catalog itself is checked just before.
//
// It also refuses a state table without the rulings family (r) when an
// exactly_once pipeline's key can have rivals (source.id_attribute or
// source.id_template): a rival's duplicate writes its ruling there, and a
// write to a missing family would be retried for ever.
func (a *App) checkCatalogGC(ctx context.Context) error {
	var longest time.Duration
	var pipeline, rivals string
	for _, p := range a.cfg.Pipelines {
		if p.ExactlyOnce() && p.Dedupe.Window > longest {
			longest, pipeline = p.Dedupe.Window, p.Name
		}
		if p.ExactlyOnce() && !p.KeyIsMessageID() && rivals == "" {
			rivals = p.Name
		}
	}
	if longest == 0 {
		return nil
	}
	open := a.opts.BigtableAdmin
	if open == nil {
		if a.opts.Bigtable != nil {
			return nil // clients given, no admin client to read the rule with
		}
		open = func(ctx context.Context, instance string) (*bigtable.AdminClient, error) {
			return openBigtableAdmin(ctx, a.cfg.Project, instance)
		}
	}
	table := a.cfg.State.Table
	rctx, cancel := context.WithTimeout(ctx, catalogCheckTimeout)
	defer cancel()
	have, rulings, err := catalogMaxAge(rctx, open, a.cfg.State.Instance, table)
	switch {
	case err != nil:
		a.log.Warn("cannot read the GC rule of the dedupe catalog; not checked against dedupe.window",
			zap.String("table", table), zap.String("family", state.FamilyDedupe), zap.Error(err))
		return nil
	case have > 0 && have < longest:
		return fmt.Errorf("pipeline %s: dedupe.window %v is longer than the GC rule of the state table's catalog (%s:%s, max age %v): "+
			"Bigtable would collect records before their window ends; run `pubsink setup` with this configuration to widen the rule",
			pipeline, longest, table, state.FamilyDedupe, have)
	case rivals != "" && !rulings:
		return fmt.Errorf("pipeline %s: the state table %s has no column family %s, where the winner of a key that had a rival is kept for reprocess: "+
			"run `pubsink setup` with this configuration to add it", rivals, table, state.FamilyRulings)
	}
	return nil
}

// catalogCheckTimeout bounds the read of the rule: the check is advice
// against a mistake, not worth holding a start-up through a slow Bigtable.
const catalogCheckTimeout = 10 * time.Second

// catalogMaxAge reads the max age of the catalog family's GC rule (0 when
// the family has no max-age rule: nothing collects its records by age),
// and whether the table has the rulings family.
func catalogMaxAge(ctx context.Context, open Admin, instance, table string) (age time.Duration, rulings bool, err error) {
	ac, err := open(ctx, instance)
	if err != nil {
		return 0, false, err
	}
	defer ac.Close()
	info, err := ac.TableInfo(ctx, table)
	if err != nil {
		if status.Code(err) == codes.PermissionDenied {
			return 0, false, fmt.Errorf("%w (reading it needs bigtable.tables.get)", err)
		}
		return 0, false, err
	}
	for _, fi := range info.FamilyInfos {
		switch fi.Name {
		case state.FamilyDedupe:
			age, _ = state.MaxAge(fi.FullGCPolicy)
		case state.FamilyRulings:
			rulings = true
		}
	}
	return age, rulings, nil
}
