// Package dltest is the test rig of package deadletter and package
// deadletter/replay: in-process Pub/Sub and Bigtable fakes (internal/fake)
// with clients, one dead-letter output of each kind created as `pubsink
// setup` would, a test pipeline on topic orders, and the messages the tests
// dead-letter. It imports deadletter, so deadletter's tests that use it are
// external tests (package deadletter_test).
package dltest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/source"
)

// The project and the state instance of the fakes.
const (
	Project  = "p"
	Instance = "i"
)

// Fakes are in-process Pub/Sub (pstest) and Bigtable (bttest) servers with
// clients, and the names a test pipeline uses. Everything is closed when
// the test ends.
type Fakes struct {
	T      *testing.T
	PS     *pstest.Server
	PubSub *pubsub.Client
	BT     *bigtable.Client
	Admin  *bigtable.AdminClient
	Cfg    *config.Config
	Dir    string // a temporary directory, for file outputs
}

// New starts the fakes, with topic orders and its subscription orders-sub.
func New(t *testing.T) *Fakes {
	t.Helper()
	ctx := context.Background()
	f := &Fakes{T: t, Dir: t.TempDir()}

	b, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	f.PS = b.PubSub
	if f.PubSub, err = b.PubSubClient(ctx, Project); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.PubSub.Close() })
	if f.BT, err = b.BigtableClient(ctx, Project, Instance); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.BT.Close() })
	if f.Admin, err = b.BigtableAdmin(ctx, Project, Instance); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Admin.Close() })

	f.Cfg = &config.Config{Project: Project, State: config.State{Instance: Instance, Table: "state"}}
	f.Topic("orders")
	f.Subscription("orders-sub", "orders")
	return f
}

// Topic creates a topic.
func (f *Fakes) Topic(name string) {
	f.T.Helper()
	if _, err := f.PubSub.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: f.Cfg.TopicName(name)}); err != nil {
		f.T.Fatal(err)
	}
}

// Subscription creates a subscription on topic.
func (f *Fakes) Subscription(name, topic string) {
	f.T.Helper()
	_, err := f.PubSub.SubscriptionAdminClient.CreateSubscription(context.Background(), &pubsubpb.Subscription{
		Name: f.Cfg.SubscriptionName(name), Topic: f.Cfg.TopicName(topic), AckDeadlineSeconds: 60,
	})
	if err != nil {
		f.T.Fatal(err)
	}
}

// Table creates a dead-letter table, with its column family.
func (f *Fakes) Table(name string) {
	f.T.Helper()
	ctx := context.Background()
	if err := f.Admin.CreateTable(ctx, name); err != nil {
		f.T.Fatal(err)
	}
	if err := f.Admin.CreateColumnFamily(ctx, name, state.FamilyDeadLetter); err != nil {
		f.T.Fatal(err)
	}
}

// Clients are the clients of the fakes, as an output takes them.
func (f *Fakes) Clients() deadletter.Clients {
	return deadletter.Clients{PubSub: f.PubSub, Bigtable: f.BT}
}

// Pipeline is a test pipeline reading orders-sub on topic orders, with
// the given dead-letter output.
func (f *Fakes) Pipeline(name string, dl config.DeadLetter) config.Pipeline {
	return config.Pipeline{
		Name:       name,
		Source:     config.Source{Topic: "orders", Subscription: "orders-sub"},
		DeadLetter: dl,
	}
}

// Outputs configures one output of each kind, by kind, created as setup
// would.
func (f *Fakes) Outputs() map[string]config.DeadLetter {
	f.Topic("dlq")
	f.Subscription("dlq-replay", "dlq")
	f.Table("dead")
	return map[string]config.DeadLetter{
		deadletter.KindTopic: {Topic: "dlq", Subscription: "dlq-replay"},
		deadletter.KindTable: {BigtableTable: "dead"},
		deadletter.KindFile:  {File: filepath.Join(f.Dir, "dead.jsonl")},
	}
}

// Open opens p's output, closed when the test ends.
func (f *Fakes) Open(p config.Pipeline) deadletter.Output {
	f.T.Helper()
	out, err := deadletter.Open(context.Background(), zap.NewNop(), f.Cfg, p, f.Clients())
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { out.Close(context.Background()) })
	return out
}

// ReadAll returns every copy of p's that its output holds, by message ID,
// leaving them in place. A copy that does not read back fails the test.
func (f *Fakes) ReadAll(p config.Pipeline) map[string]*deadletter.Copy {
	f.T.Helper()
	ctx := context.Background()
	r, err := deadletter.OpenReader(ctx, zap.NewNop(), f.Cfg, p, f.Clients())
	if err != nil {
		f.T.Fatal(err)
	}
	defer r.Close()
	got := map[string]*deadletter.Copy{}
	var all []*deadletter.Entry
	for {
		es, err := r.Next(ctx, 7)
		if err != nil {
			f.T.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if e.Err != nil {
				f.T.Fatalf("%s: %v", e.Location, e.Err)
			}
			if e.Copy.Pipeline == p.Name {
				got[e.Copy.MessageID] = e.Copy
			}
		}
		all = append(all, es...)
	}
	if err := r.Release(ctx, all); err != nil {
		f.T.Fatal(err)
	}
	return got
}

// Republished returns the messages published to the pipeline topic.
func (f *Fakes) Republished() []*pstest.Message {
	var out []*pstest.Message
	for _, m := range f.PS.Messages() {
		if m.Topic == f.Cfg.TopicName("orders") {
			out = append(out, m)
		}
	}
	return out
}

// Message is message i of the tests: attributes, binary data, a publish
// time with nanoseconds.
func Message(i int) *source.Message {
	return &source.Message{
		ID:          fmt.Sprintf("%d", 1000+i),
		Data:        []byte(fmt.Sprintf("payload %d \x00\xff", i)),
		Attributes:  map[string]string{"id": fmt.Sprintf("r%03d", i), "kind": "test"},
		PublishTime: time.Date(2026, 6, 1, 0, 0, i, 123456789, time.UTC),
	}
}
