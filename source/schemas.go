package source

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The attributes Pub/Sub sets on every message of a topic with a schema.
const (
	// SchemaNameAttribute holds the schema's full name,
	// projects/P/schemas/S, or DeletedSchema.
	SchemaNameAttribute = "googclient_schemaname"
	// SchemaRevisionAttribute holds the id of the revision the message was
	// validated against, or DeletedRevision.
	SchemaRevisionAttribute = "googclient_schemarevisionid"
	// SchemaEncodingAttribute holds "JSON" or "BINARY".
	SchemaEncodingAttribute = "googclient_schemaencoding"
)

// The values Pub/Sub puts in the attributes once the schema, or the
// revision, has been deleted.
const (
	DeletedSchema   = "_deleted-schema_"
	DeletedRevision = "_deleted-schema-revision_"
)

// ErrSchemaGone is wrapped by Schemas.Get when the revision a message names
// can never be had: the message says its schema or revision was deleted,
// names no usable revision, or the Schema API answers NotFound. Each of
// these is permanent; a message that needs such a revision is bad input.
var ErrSchemaGone = errors.New("schema revision is gone")

// Schema is one revision of a Pub/Sub schema.
type Schema struct {
	Name     string // projects/P/schemas/S, without a revision
	Revision string // the revision id
	// Type is "avro" or "protobuf". A type that pubsink does not know comes
	// as the API's enum name in lower case (say "type_unspecified"), for the
	// caller to refuse as it refuses a definition that does not compile: a
	// revision never changes, so neither will its type.
	Type       string
	Definition string

	created time.Time // the revision's creation time, to order List's
}

// Schemas fetches schema revisions through the Schema API. It does not
// cache: a revision never changes, so the caller caches what it built from
// one, by name and revision, and makes sure that concurrent messages of a
// new revision fetch it once. Its methods are safe for concurrent use.
type Schemas struct {
	client *vkit.SchemaClient
}

// NewSchemas returns Schemas that read through client, which the caller
// opens (vkit.NewSchemaClient with the options of the Pub/Sub client; it
// honours PUBSUB_EMULATOR_HOST as the Pub/Sub client does) and closes.
func NewSchemas(client *vkit.SchemaClient) *Schemas {
	return &Schemas{client: client}
}

// Get fetches revision revision of the schema name (a full name,
// projects/P/schemas/S), as a message's SchemaNameAttribute and
// SchemaRevisionAttribute give them.
//
// The error wraps ErrSchemaGone, without asking the API, when name is
// DeletedSchema, revision is DeletedRevision, name is not a schema's name or
// revision is empty; and when the API answers NotFound. NotFound is
// permanent: a revision id is never reused and a deleted revision never
// comes back (a schema deleted and created again under its name gets new
// ids), and the id comes from Pub/Sub, which validated the message against
// that revision, so it did exist. Any other failure (Unavailable,
// DeadlineExceeded, PermissionDenied, ...) is returned wrapped, with its
// status code, and is transient: the caller retries.
//
// The revision is fetched by the Schema API's revision syntax,
// GetSchema("NAME@REVISION"), with the full view. The answer's revision id
// is checked: should a server answer another revision (one that ignores
// the @REVISION suffix and returns the latest), Get takes the revision from
// ListSchemaRevisions instead, so a message is never decoded with a
// revision other than its own. The Pub/Sub emulator (0.8.20) and pstest
// both answer the revision asked for (docs/emulator-schemas.md).
func (s *Schemas) Get(ctx context.Context, name, revision string) (Schema, error) {
	switch {
	case name == DeletedSchema:
		return Schema{}, fmt.Errorf("schema of the message was deleted (%s=%s): %w", SchemaNameAttribute, DeletedSchema, ErrSchemaGone)
	case revision == DeletedRevision:
		return Schema{}, fmt.Errorf("schema %s: the message's revision was deleted (%s=%s): %w", name, SchemaRevisionAttribute, DeletedRevision, ErrSchemaGone)
	case !isSchemaName(name):
		return Schema{}, fmt.Errorf("%q is not a schema name (projects/P/schemas/S): %w", name, ErrSchemaGone)
	case revision == "" || strings.ContainsAny(revision, "@/"):
		return Schema{}, fmt.Errorf("schema %s: %q is not a revision id: %w", name, revision, ErrSchemaGone)
	}
	got, err := s.client.GetSchema(ctx, &pubsubpb.GetSchemaRequest{Name: name + "@" + revision, View: pubsubpb.SchemaView_FULL})
	if err != nil {
		return Schema{}, fetchError(name, revision, "get", err)
	}
	if got.GetRevisionId() != revision {
		if got, err = s.listed(ctx, name, revision); err != nil {
			return Schema{}, err
		}
	}
	return Schema{Name: name, Revision: revision, Type: schemaType(got.GetType()), Definition: got.GetDefinition()}, nil
}

// MaxRevisions is how many revisions Pub/Sub keeps of a schema: a commit
// past it is refused (ResourceExhausted), so List never reads more.
const MaxRevisions = 20

// TopicSchema is the schema settings of topic (a full name): the schema's
// full name, or "" when the topic has none. DeletedSchema when the schema
// was deleted.
func TopicSchema(ctx context.Context, client *pubsub.Client, topic string) (string, error) {
	got, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if err != nil {
		return "", fmt.Errorf("get topic %s: %w", topic, err)
	}
	return got.GetSchemaSettings().GetSchema(), nil
}

// List fetches every revision of the schema name (a full name), newest
// first, with their definitions: the revisions messages of a topic with
// that schema can carry (a revision that was deleted is gone from them,
// Get's ErrSchemaGone). At most MaxRevisions.
func (s *Schemas) List(ctx context.Context, name string) ([]Schema, error) {
	it := s.client.ListSchemaRevisions(ctx, &pubsubpb.ListSchemaRevisionsRequest{Name: name, View: pubsubpb.SchemaView_FULL})
	var out []Schema
	for len(out) < 10*MaxRevisions { // a server that pages for ever must not hold us
		r, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, fetchError(name, "*", "list revisions of", err)
		}
		out = append(out, Schema{Name: name, Revision: r.GetRevisionId(), Type: schemaType(r.GetType()), Definition: r.GetDefinition(),
			created: r.GetRevisionCreateTime().AsTime()})
	}
	// Newest first: the API's order is not documented (the emulator lists
	// oldest first).
	sort.SliceStable(out, func(i, j int) bool { return out[i].created.After(out[j].created) })
	if len(out) > MaxRevisions {
		out = out[:MaxRevisions]
	}
	return out, nil
}

// listed finds revision among the revisions of name.
func (s *Schemas) listed(ctx context.Context, name, revision string) (*pubsubpb.Schema, error) {
	it := s.client.ListSchemaRevisions(ctx, &pubsubpb.ListSchemaRevisionsRequest{Name: name, View: pubsubpb.SchemaView_FULL})
	for {
		r, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil, fmt.Errorf("schema %s has no revision %s: %w", name, revision, ErrSchemaGone)
		}
		if err != nil {
			return nil, fetchError(name, revision, "list revisions of", err)
		}
		if r.GetRevisionId() == revision {
			return r, nil
		}
	}
}

// fetchError classifies a failed call: NotFound is permanent, the rest
// transient.
func fetchError(name, revision, op string, err error) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("schema %s@%s: %w: %w", name, revision, ErrSchemaGone, err)
	}
	return fmt.Errorf("%s schema %s@%s: %w", op, name, revision, err)
}

// isSchemaName reports whether name has the form projects/P/schemas/S.
func isSchemaName(name string) bool {
	p := strings.Split(name, "/")
	return len(p) == 4 && p[0] == "projects" && p[1] != "" && p[2] == "schemas" && p[3] != "" && !strings.Contains(name, "@")
}

func schemaType(t pubsubpb.Schema_Type) string {
	switch t {
	case pubsubpb.Schema_AVRO:
		return "avro"
	case pubsubpb.Schema_PROTOCOL_BUFFER:
		return "protobuf"
	}
	return strings.ToLower(t.String())
}
