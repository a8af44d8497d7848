package bigtable_test

import (
	"context"
	"log"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
)

// The pipeline checks the table at start, writes each committed message's
// row, and dead-letters only what the sink rejects.
func ExampleNew() {
	ctx := context.Background()
	client, err := cbt.NewClient(ctx, "my-project", "my-instance")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	s := btsink.New(client, zap.NewExample(), config.Sink{
		Type: config.SinkBigtable, Instance: "my-instance", Table: "orders", ColumnFamily: "d",
		Batch: config.Batch{MaxMessages: 500, MaxBytes: 4 << 20, MaxDelay: 20 * time.Millisecond},
	}, nil)
	if err := s.Check(ctx); err != nil {
		log.Fatal(err) // names the table when it does not exist
	}

	err = s.Write(ctx, &sinks.Row{
		Key:       "customer-7#order-42",
		Cells:     []sinks.Cell{{Column: "data", Value: []byte(`{"amount":12.5}`)}},
		Timestamp: time.Now(), // the event time; truncated to milliseconds
	})
	switch {
	case sinks.IsRejected(err):
		// Dead-letter the message with reason sink_rejected, then ack it.
	case err != nil:
		// Transient: retry with backoff; never dead-letter.
	}

	shutdown, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := s.Close(shutdown); err != nil {
		log.Print(err)
	}
}
