package dedupe_test

import (
	"context"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/dedupe"
)

// The pipeline's use of Keys: Run in the background, then per message
// Claim, write the row, Commit; Close after the pipeline stopped.
func ExampleNew() {
	ctx := context.Background()
	client, err := bigtable.NewClient(ctx, "my-project", "my-instance")
	if err != nil {
		return
	}
	defer client.Close()
	d := dedupe.New(client, zap.NewNop(), dedupe.Config{Pipeline: "orders", Table: "pubsink_state", Window: 10 * time.Minute})
	if err := d.Check(ctx); err != nil {
		return // the state table is missing: run pubsink setup
	}
	runCtx, stop := context.WithCancel(ctx)
	go d.Run(runCtx) // rebuilds the filters from the catalog; Claims do not wait for it
	defer func() { stop(); d.Close(ctx) }()

	claim, dup, err := d.Claim(ctx, "order-1234", "message-id-1")
	defer claim.Release() // does nothing once committed, or for a duplicate
	switch {
	case err != nil:
		// transient: retry, or nack the message
	case dup:
		// ack without writing
	default:
		// write the row; once it is durable:
		if err := claim.Commit(ctx); err != nil {
			// retry Commit, or nack: the row is rewritten on redelivery
		}
	}
}
