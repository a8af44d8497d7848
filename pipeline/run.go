package pipeline

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// Run receives and processes messages until receiveCtx ends, then waits for
// the messages in flight to finish (their handlers keep workCtx, which the
// caller cancels after the shutdown timeout), and returns. The parts with
// background work (the dedupe filters, the tracker) run beside the source
// until receiveCtx ends. It does not close the parts: call Close after Run
// returns. A permanent failure of the source or of a part ends Run with an
// error.
func (p *Pipeline) Run(receiveCtx, workCtx context.Context) error {
	if p.deps.Source == nil {
		return errors.New("pipeline: Run needs a Source")
	}
	g, gctx := errgroup.WithContext(receiveCtx)
	if p.deps.Members != nil {
		// The membership renews until Close, not until receiving stops:
		// the messages in flight still claim keys while they drain, and a
		// member that stopped renewing loses the fast path and its
		// acknowledgements after three quarters of a lease.
		ctx, stop := context.WithCancel(context.WithoutCancel(receiveCtx))
		done := make(chan struct{})
		p.stopMembers = func() { stop(); <-done }
		go func() { defer close(done); p.deps.Members.Run(ctx) }()
	}
	g.Go(func() error {
		if p.deps.Members != nil {
			// A newcomer claims nothing before every live member
			// acknowledged it (package members); until then it receives
			// nothing either, and is not ready.
			p.log.Info("waiting for the other members of the pipeline to acknowledge this process")
			if err := p.deps.Members.Joined(gctx); err != nil {
				return nil // stopped before joining
			}
		}
		return p.deps.Source.Run(gctx, workCtx, p.Handle)
	})
	if p.deps.Dedupe != nil {
		g.Go(func() error { return p.deps.Dedupe.Run(gctx) })
	}
	if p.deps.Tracker != nil {
		g.Go(func() error { return p.deps.Tracker.Run(gctx) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("pipeline %s: %w", p.name, err)
	}
	return nil
}

// Close flushes and releases the parts in the order data flows: the sink
// (pending rows), the dedupe catalog (pending records), the dead-letter
// output, the tracker (which stores the final watermark), then the
// membership (the others stop counting this process). It is bounded by ctx
// and returns the first error.
func (p *Pipeline) Close(ctx context.Context) error {
	parts := []Closer{p.deps.Sink}
	if p.deps.Dedupe != nil {
		parts = append(parts, p.deps.Dedupe)
	}
	if p.deps.DeadLetter != nil {
		parts = append(parts, p.deps.DeadLetter)
	}
	if p.deps.Tracker != nil {
		parts = append(parts, p.deps.Tracker)
	}
	if p.deps.Members != nil {
		if p.stopMembers != nil {
			p.stopMembers()
		}
		parts = append(parts, p.deps.Members)
	}
	var first error
	for _, c := range parts {
		if err := c.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Stalled returns nil unless a subscription of the pipeline (the main one,
// or the tracker's) has hung streams that a reopen did not help: then an
// error naming the pipeline and the subscription. The process is then
// unhealthy (/healthz), until messages flow again.
func (p *Pipeline) Stalled() error {
	if p.deps.Source != nil {
		if err := p.deps.Source.Stalled(); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.name, err)
		}
	}
	if p.deps.Tracker != nil {
		if err := p.deps.Tracker.Stalled(); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.name, err)
		}
	}
	return nil
}

// Ready returns nil when the pipeline is receiving and not stalled, its
// sink answers, and its dead-letter output, if any, is usable.
func (p *Pipeline) Ready(ctx context.Context) error {
	if p.deps.Source == nil || !p.deps.Source.Receiving() {
		return fmt.Errorf("pipeline %s is not receiving", p.name)
	}
	if err := p.Stalled(); err != nil {
		return err
	}
	if err := p.deps.Sink.Check(ctx); err != nil {
		return fmt.Errorf("pipeline %s: sink: %w", p.name, err)
	}
	if p.deps.DeadLetter != nil {
		if err := p.deps.DeadLetter.Check(ctx); err != nil {
			return fmt.Errorf("pipeline %s: dead_letter: %w", p.name, err)
		}
	}
	return nil
}
