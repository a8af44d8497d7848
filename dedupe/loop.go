package dedupe

// The background loop (Run): the start-up rebuild, then the ring's
// rotation, the gauges, the journal marker and the membership checks.

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"
)

// statsInterval is how often Run refreshes the filter gauges and rotates
// the ring when no message does.
const statsInterval = 10 * time.Second

// Run rebuilds the filters from the catalog, then rotates them and
// refreshes the gauges until ctx ends; it returns nil then. Claims are
// answered meanwhile, from the catalog until the rebuild is done. A failed
// scan is retried (with backoff, from where it stopped) until ctx ends.
// Call Run once.
func (d *Keys) Run(ctx context.Context) error {
	d.mark(ctx)
	d.rebuildFilters(ctx)
	d.refresh()
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	epoch := time.NewTicker(epochCheck)
	defer epoch.Stop()
	marker := time.NewTicker(sinceRefresh)
	defer marker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.refresh()
		case <-marker.C:
			d.mark(ctx)
		case <-epoch.C:
			older, compat := d.peerVersions()
			d.compat.Store(compat)
			if older {
				d.mark(ctx)
			}
			// Alone again after others ran: their commits are not in the
			// filters, which must be rebuilt before they answer "new".
			v := d.cfg.Members.View()
			d.mu.Lock()
			stale := v.Alone && v.AloneEpoch != d.rebuiltEpoch && !d.rebuilding
			d.mu.Unlock()
			if stale {
				d.log.Info("alone again: rebuilding the filters", zap.Uint64("epoch", v.AloneEpoch))
				d.rebuildFilters(ctx)
			}
		}
	}
}

// mark writes the journal marker (markJournal), logging a failure: the
// next refresh tries again, and until then the marker may only be older
// than it should, which costs a scan at a restart, never a missed key.
func (d *Keys) mark(ctx context.Context) {
	if err := d.markJournal(ctx); err != nil && ctx.Err() == nil {
		d.log.Warn("the journal marker could not be written", zap.Error(err))
	}
}

// olderPeer reports whether a live peer runs a version without the
// journal.
func (d *Keys) olderPeer() bool {
	older, _ := d.peerVersions()
	return older
}

// peerVersions looks at the live peers' member IDs: older, one runs a
// version without the journal (its ID lacks JournalTag); compat, one runs
// a version whose rivals wait for a record (its ID lacks MemberTag).
func (d *Keys) peerVersions() (older, compat bool) {
	for _, p := range d.cfg.Members.Peers() {
		older = older || !strings.HasSuffix(p, JournalTag)
		compat = compat || !strings.HasSuffix(p, MemberTag)
	}
	return older, compat
}

// epochCheck is how often Run looks whether the filters must be rebuilt
// for a new membership epoch.
const epochCheck = time.Second

// refresh rotates the ring to the current time, counts the filters' bits
// (about a millisecond per 10 MB of filters, under the lock Claims take:
// once per statsInterval, never per request) and updates the gauges and
// the figures Stats serves.
func (d *Keys) refresh() {
	d.mu.Lock()
	d.ring.advance(d.now().UnixNano())
	st := d.ring.stats()
	d.mu.Unlock()
	d.ringStats.Store(&st)
	d.cfg.Metrics.FilterFill.Set(st.fill)
	d.cfg.Metrics.FilterFPRate.Set(st.fpRate)
}
