package watermark

import (
	"context"

	"github.com/pubsink/pubsink/source"
)

// Reader reads the tracking subscription for the tracker: a source.Puller
// (unary Pull in large batches, what app gives it) or a source.Source
// (StreamingPull). Run calls h for every message until receiveCtx ends;
// Check reads the subscription's metadata (the tracker's probe while it is
// silent); Stalled is the reader's liveness (nil while it reads, or may).
// Its breaks reach the tracker through Config.Streams (the Puller's State),
// which the caller wires.
type Reader interface {
	Run(receiveCtx, workCtx context.Context, h source.Handler) error
	Check(ctx context.Context) (source.Info, error)
	Stalled() error
}
