package bigtable_test

import (
	"context"
	"errors"
	"log"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/sinks"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
)

// The pipeline checks the tables at start, writes the rows of each message
// (here a main row and an index row in another table) in one Write, and
// dead-letters only what the sink rejects.
func ExampleNew() {
	ctx := context.Background()
	client, err := cbt.NewClient(ctx, "my-project", "my-instance")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	s := btsink.New(client, zap.NewExample(), config.Sink{
		Type: config.SinkBigtable, Instance: "my-instance", Table: "orders", ColumnFamily: "d",
		Mappings: []config.Mapping{
			{RowKey: "{attributes.customer}#{attributes.order}"},
			{Table: "orders_by_day", RowKey: "{attributes.day}#{attributes.order}"},
		},
		Batch: config.Batch{MaxMessages: 500, MaxBytes: 4 << 20, MaxDelay: 20 * time.Millisecond},
	}, nil)
	if err := s.Check(ctx); err != nil {
		log.Fatal(err) // names a table that does not exist
	}

	now := time.Now() // the event time; truncated to milliseconds
	err = s.Write(ctx, []sinks.Row{{
		Key:       "customer-7#order-42",
		Cells:     []sinks.Cell{{Column: "data", Value: []byte(`{"amount":12.5}`)}},
		Timestamp: now,
	}, {
		Table:     "orders_by_day", // family: the sink's, "d"
		Key:       "2026-03-04#order-42",
		Cells:     []sinks.Cell{{Column: "customer", Value: []byte("customer-7")}},
		Timestamp: now,
	}})
	var rejected *sinks.RejectedError
	switch {
	case errors.As(err, &rejected):
		// Row rejected.Row can never be written: dead-letter the whole
		// message with reason sink_rejected, then ack it.
	case err != nil:
		// Transient: retry the whole message with backoff; never
		// dead-letter.
	}

	shutdown, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := s.Close(shutdown); err != nil {
		log.Print(err)
	}
}
