package mapping

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping/avro"
	"github.com/pubsink/pubsink/mapping/jsontree"
	"github.com/pubsink/pubsink/mapping/protobuf"
	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/source"
)

// The attributes Pub/Sub sets on every message of a topic with a schema,
// and what they say once the schema or the revision was deleted.
const (
	attrSchemaName     = source.SchemaNameAttribute
	attrSchemaRevision = source.SchemaRevisionAttribute
	attrSchemaEncoding = source.SchemaEncodingAttribute
	deletedSchema      = source.DeletedSchema
	deletedRevision    = source.DeletedRevision
)

// errSchemaUnavailable marks a payload whose schema can never be had.
var errSchemaUnavailable = errors.New("schema unavailable")

// decode decodes msg's data by the pipeline's format into the value model
// (package value). Its error is a *BadInput, or transient (a topic schema not
// fetched yet, ctx's error).
func (m *Mapper) decode(ctx context.Context, msg *source.Message) (any, error) {
	switch m.format {
	case config.FormatRaw:
		return msg.Data, nil
	case config.FormatString:
		if !utf8.Valid(msg.Data) {
			return nil, &BadInput{deadletter.InvalidPayload, errors.New("string payload is not valid UTF-8")}
		}
		return string(msg.Data), nil
	case config.FormatJSON:
		v, err := jsontree.Decode(msg.Data)
		if err != nil {
			return nil, &BadInput{deadletter.InvalidPayload, err}
		}
		return v, nil
	}
	c, inJSON := m.fileCodec, m.fileJSON
	if m.topic != nil {
		e, err := m.topic.of(ctx, msg.Attributes)
		if err != nil {
			return nil, err
		}
		c, inJSON = e.codec, msg.Attributes[attrSchemaEncoding] == "JSON"
	}
	v, err := c.Decode(msg.Data, inJSON)
	if err != nil {
		return nil, &BadInput{deadletter.InvalidPayload, err}
	}
	return v, nil
}

// compileFile reads and compiles a schema file.
func compileFile(format, path, message string) (schema.Codec, error) {
	switch format {
	case config.FormatAvro:
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		c, err := avro.Compile(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return c, nil
	case config.FormatProtobuf:
		c, err := protobuf.CompileFile(path, message)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("a %s payload has no schema", format)
}

// compileRevision compiles a revision of a topic schema. On an error the
// Codec is nil itself, not an interface holding a nil *Codec.
func compileRevision(s source.Schema) (schema.Codec, error) {
	var c schema.Codec
	var err error
	switch s.Type {
	case "avro":
		c, err = avro.Compile(s.Definition)
	case "protobuf":
		c, err = protobuf.CompileDefinition(s.Definition)
	default:
		err = fmt.Errorf("schema type %q", s.Type)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// schemaCache holds the compiled revisions of topic schemas, each fetched
// once: concurrent messages of a new revision wait for one fetch. A fetch
// that fails transiently is not kept (the next message tries again); a
// revision that can never be had is kept as such (it never comes back).
type schemaCache struct {
	schemas Schemas
	mu      sync.Mutex
	entries map[string]*schemaEntry // by NAME@REVISION
}

// maxRevisions bounds the cache: a topic has few revisions in use at once
// (Pub/Sub keeps at most 20 per schema), but a stream of made-up attribute
// values must not grow it for ever. Past it, unknown revisions are fetched
// for each message (slow, still correct).
const maxRevisions = 1024

type schemaEntry struct {
	ready    chan struct{} // closed once codec or err is set
	codec    schema.Codec
	err      error // permanent (a *BadInput) or, before ready, transient
	schema   source.Schema
	messages atomic.Int64
}

func newSchemaCache(s Schemas) *schemaCache {
	return &schemaCache{schemas: s, entries: map[string]*schemaEntry{}}
}

// of returns the compiled revision that attrs name.
func (c *schemaCache) of(ctx context.Context, attrs map[string]string) (*schemaEntry, error) {
	name, rev := attrs[attrSchemaName], attrs[attrSchemaRevision]
	switch {
	case name == "" || rev == "":
		return nil, &BadInput{deadletter.SchemaUnavailable, fmt.Errorf("%w: the message has no %s and %s attributes: its topic has no schema (payload.schema: topic reads the topic's; name a schema file otherwise)", errSchemaUnavailable, attrSchemaName, attrSchemaRevision)}
	case name == deletedSchema || rev == deletedRevision:
		return nil, &BadInput{deadletter.SchemaUnavailable, fmt.Errorf("%w: the topic's schema or this revision was deleted (%s=%s, %s=%s)", errSchemaUnavailable, attrSchemaName, name, attrSchemaRevision, rev)}
	}
	for {
		key := name + "@" + rev
		c.mu.Lock()
		e, ok := c.entries[key]
		if !ok {
			e = &schemaEntry{ready: make(chan struct{})}
			if len(c.entries) < maxRevisions {
				c.entries[key] = e
			}
			c.mu.Unlock()
			c.fetch(ctx, key, e, name, rev)
		} else {
			c.mu.Unlock()
		}
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.codec != nil {
			e.messages.Add(1)
			return e, nil
		}
		var bad *BadInput
		if errors.As(e.err, &bad) {
			return nil, e.err
		}
		if !ok {
			return nil, e.err // this caller's own fetch failed: transient, retried by the pipeline
		}
		// Another caller's fetch failed transiently and dropped the entry:
		// fetch again (the loop makes a new one).
	}
}

// fetch fetches and compiles the revision of e, then releases its waiters.
func (c *schemaCache) fetch(ctx context.Context, key string, e *schemaEntry, name, rev string) {
	defer close(e.ready)
	s, err := c.schemas.Get(ctx, name, rev)
	switch {
	case errors.Is(err, source.ErrSchemaGone):
		e.err = &BadInput{deadletter.SchemaUnavailable, fmt.Errorf("%w: %s@%s: %v", errSchemaUnavailable, name, rev, err)}
	case err != nil:
		e.err = fmt.Errorf("fetching schema %s@%s: %w", name, rev, err)
		c.mu.Lock()
		if c.entries[key] == e {
			delete(c.entries, key)
		}
		c.mu.Unlock()
		return
	default:
		e.schema = s
		e.codec, err = compileRevision(s)
		if err != nil {
			e.codec = nil
			e.err = &BadInput{deadletter.SchemaUnavailable, fmt.Errorf("%w: %s@%s does not compile: %v", errSchemaUnavailable, name, rev, err)}
		}
	}
}

// Revision is one topic-schema revision the pipeline met, for /status.
type Revision struct {
	Schema   string `json:"schema"`
	Revision string `json:"revision"`
	Type     string `json:"type,omitempty"`
	Messages int64  `json:"messages"`
	Error    string `json:"error,omitempty"`
}

// Stats are the mapping's figures, for /status.
type Stats struct {
	Format string `json:"format"`
	// Schema is "topic", the schema file, or "".
	Schema    string     `json:"schema,omitempty"`
	Revisions []Revision `json:"revisions,omitempty"`
}

// Stats reports the format and the revisions met so far. Safe for
// concurrent use.
func (m *Mapper) Stats() Stats {
	st := Stats{Format: m.format}
	if m.topic == nil {
		return st
	}
	st.Schema = config.SchemaTopic
	m.topic.mu.Lock()
	for key, e := range m.topic.entries {
		select {
		case <-e.ready:
		default:
			continue
		}
		name, rev := splitKey(key)
		r := Revision{Schema: name, Revision: rev, Type: e.schema.Type, Messages: e.messages.Load()}
		if e.err != nil {
			r.Error = e.err.Error()
		}
		st.Revisions = append(st.Revisions, r)
	}
	m.topic.mu.Unlock()
	sort.Slice(st.Revisions, func(i, j int) bool {
		a, b := st.Revisions[i], st.Revisions[j]
		return a.Schema < b.Schema || a.Schema == b.Schema && a.Revision < b.Revision
	})
	return st
}

func splitKey(key string) (string, string) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '@' {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}
