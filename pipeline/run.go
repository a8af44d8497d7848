package pipeline

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// runner is a part with background work of its own (the watermark tracker
// reading its subscription, the dedupe filters rotating). Run blocks until
// ctx ends.
type runner interface {
	Run(ctx context.Context) error
}

// closer is a part that holds buffered work or connections.
type closer interface {
	Close(ctx context.Context) error
}

// checker is a part that can tell whether its backend is reachable.
type checker interface {
	Check(ctx context.Context) error
}

// Run receives and processes messages until receiveCtx ends, then waits for
// the messages in flight to finish (their handlers keep workCtx, which the
// caller cancels after the shutdown timeout), and returns. It does not close
// the parts: call Close after Run returns. A permanent failure of the source
// or of a background part ends Run with an error.
func (p *Pipeline) Run(receiveCtx, workCtx context.Context) error {
	if p.deps.Source == nil {
		return errors.New("pipeline: Run needs a Source")
	}
	g, gctx := errgroup.WithContext(receiveCtx)
	g.Go(func() error {
		return p.deps.Source.Run(gctx, workCtx, p.Handle)
	})
	for _, part := range p.parts() {
		if r, ok := part.(runner); ok {
			g.Go(func() error { return r.Run(gctx) })
		}
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("pipeline %s: %w", p.name, err)
	}
	return nil
}

// Close flushes and releases the parts in the order data flows: the sink
// (pending rows), the dedupe catalog (pending records), the dead-letter
// output, then the tracker (which stores the final watermark). It is bounded
// by ctx and returns the first error.
func (p *Pipeline) Close(ctx context.Context) error {
	var first error
	for _, part := range p.parts() {
		if c, ok := part.(closer); ok {
			if err := c.Close(ctx); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Ready returns nil when the pipeline is receiving and its sink answers.
func (p *Pipeline) Ready(ctx context.Context) error {
	if p.deps.Source == nil || !p.deps.Source.Receiving() {
		return fmt.Errorf("pipeline %s is not receiving", p.name)
	}
	if c, ok := p.deps.Sink.(checker); ok {
		if err := c.Check(ctx); err != nil {
			return fmt.Errorf("pipeline %s: sink: %w", p.name, err)
		}
	}
	return nil
}

// parts lists the optional parts in data-flow order.
func (p *Pipeline) parts() []any {
	parts := []any{p.deps.Sink}
	if p.deps.Dedupe != nil {
		parts = append(parts, p.deps.Dedupe)
	}
	if p.deps.DeadLetter != nil {
		parts = append(parts, p.deps.DeadLetter)
	}
	if p.deps.Tracker != nil {
		parts = append(parts, p.deps.Tracker)
	}
	return parts
}
