package app

import (
	"context"
	"errors"
	"fmt"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// mapper compiles the mapping of pipeline pc (package mapping), with the
// Pub/Sub Schema API when it reads the topic's schemas. The file was
// checked at load (mappingProblems), so an error here is one of a schema
// file changed since.
func (a *App) mapper(ctx context.Context, pc config.Pipeline, limits sinks.Limits, maxBytes int64) (*mapping.Mapper, error) {
	var schemas mapping.Schemas
	if pc.Payload.TopicSchema() {
		s, err := a.schemaService(ctx)
		if err != nil {
			return nil, err
		}
		schemas = s
	}
	m, err := mapping.New(pc, schemas, limits)
	var ps config.Problems
	if errors.As(err, &ps) {
		return nil, &ConfigError{fmt.Errorf("pipeline %s: %w", pc.Name, err)}
	}
	if err != nil {
		return nil, err
	}
	m.BoundDecoding(maxBytes) // the flow control's bound, as derived
	return m, nil
}

// schemaService is the Schema API client, opened once for every pipeline
// that reads topic schemas, with the options of the Pub/Sub client (it
// honours PUBSUB_EMULATOR_HOST as that one does), or Options.Schemas.
func (a *App) schemaService(ctx context.Context) (mapping.Schemas, error) {
	if a.opts.Schemas != nil {
		return a.opts.Schemas, nil
	}
	if a.schemaClient == nil {
		c, err := vkit.NewSchemaClient(ctx, a.opts.PubSubOptions...)
		if err != nil {
			return nil, fmt.Errorf("pubsub schema client: %w", err)
		}
		a.schemaClient = c
	}
	return source.NewSchemas(a.schemaClient), nil
}
