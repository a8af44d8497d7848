package deadletter

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/source"
)

const (
	testProject  = "p"
	testInstance = "i"
)

// fakes are in-process Pub/Sub (pstest) and Bigtable (bttest) servers with
// clients, and the names a test pipeline uses.
type fakes struct {
	t       *testing.T
	ps      *pstest.Server
	pubsub  *pubsub.Client
	bt      *bigtable.Client
	admin   *bigtable.AdminClient
	cfg     *config.Config
	dir     string
	failedA time.Time
}

func newFakes(t *testing.T) *fakes {
	t.Helper()
	ctx := context.Background()
	f := &fakes{t: t, dir: t.TempDir(), failedA: time.Date(2026, 6, 2, 3, 4, 5, 6000, time.UTC)}

	b, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	f.ps = b.PubSub
	if f.pubsub, err = b.PubSubClient(ctx, testProject); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.pubsub.Close() })
	if f.bt, err = b.BigtableClient(ctx, testProject, testInstance); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.bt.Close() })
	if f.admin, err = b.BigtableAdmin(ctx, testProject, testInstance); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.admin.Close() })

	f.cfg = &config.Config{Project: testProject, State: config.State{Instance: testInstance, Table: "state"}}
	f.topic("orders")
	f.subscription("orders-sub", "orders")
	return f
}

func (f *fakes) topic(name string) {
	f.t.Helper()
	if _, err := f.pubsub.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: f.cfg.TopicName(name)}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakes) subscription(name, topic string) {
	f.t.Helper()
	_, err := f.pubsub.SubscriptionAdminClient.CreateSubscription(context.Background(), &pubsubpb.Subscription{
		Name: f.cfg.SubscriptionName(name), Topic: f.cfg.TopicName(topic), AckDeadlineSeconds: 60,
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakes) table(name string) {
	f.t.Helper()
	ctx := context.Background()
	if err := f.admin.CreateTable(ctx, name); err != nil {
		f.t.Fatal(err)
	}
	if err := f.admin.CreateColumnFamily(ctx, name, state.FamilyDeadLetter); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakes) clients() Clients { return Clients{PubSub: f.pubsub, Bigtable: f.bt} }

// pipeline is a test pipeline reading orders-sub on topic orders, with
// the given dead-letter output.
func (f *fakes) pipeline(name string, dl config.DeadLetter) config.Pipeline {
	return config.Pipeline{
		Name:       name,
		Source:     config.Source{Topic: "orders", Subscription: "orders-sub"},
		DeadLetter: dl,
	}
}

// outputs configures one output of each kind, created as setup would.
func (f *fakes) outputs() map[string]config.DeadLetter {
	f.topic("dlq")
	f.subscription("dlq-replay", "dlq")
	f.table("dead")
	return map[string]config.DeadLetter{
		KindTopic: {Topic: "dlq", Subscription: "dlq-replay"},
		KindTable: {BigtableTable: "dead"},
		KindFile:  {File: filepath.Join(f.dir, "dead.jsonl")},
	}
}

// open opens p's output with a fixed clock.
func (f *fakes) open(p config.Pipeline) Output {
	f.t.Helper()
	out, err := Open(context.Background(), zap.NewNop(), f.cfg, p, f.clients())
	if err != nil {
		f.t.Fatal(err)
	}
	now := func() time.Time { return f.failedA }
	switch o := out.(type) {
	case *Topic:
		o.now = now
	case *Table:
		o.now = now
	case *File:
		o.now = now
	}
	f.t.Cleanup(func() { out.Close(context.Background()) })
	return out
}

// readAll returns every copy of p's that its output holds, by message ID,
// leaving them in place.
func (f *fakes) readAll(p config.Pipeline) map[string]*Copy {
	f.t.Helper()
	ctx := context.Background()
	st, err := openStore(ctx, zap.NewNop(), f.cfg, p, f.clients())
	if err != nil {
		f.t.Fatal(err)
	}
	defer st.close()
	got := map[string]*Copy{}
	var all []*entry
	for {
		es, err := st.next(ctx, 7)
		if err != nil {
			f.t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if e.bad != nil {
				f.t.Fatalf("%s: %v", e.id, e.bad)
			}
			if e.copy.Pipeline == p.Name {
				got[e.copy.MessageID] = e.copy
			}
		}
		all = append(all, es...)
	}
	if err := st.release(ctx, all); err != nil {
		f.t.Fatal(err)
	}
	return got
}

// message i of the tests: attributes, binary data, a publish time with
// nanoseconds.
func message(i int) *source.Message {
	return &source.Message{
		ID:          fmt.Sprintf("%d", 1000+i),
		Data:        []byte(fmt.Sprintf("payload %d \x00\xff", i)),
		Attributes:  map[string]string{"id": fmt.Sprintf("r%03d", i), "kind": "test"},
		PublishTime: time.Date(2026, 6, 1, 0, 0, i, 123456789, time.UTC),
	}
}

// TestEveryOutputKeepsWholeCopies is the conformance test of the outputs:
// concurrent sends are all confirmed, and each copy reads back whole, with
// the original attributes apart from the pubsink_* ones.
func TestEveryOutputKeepsWholeCopies(t *testing.T) {
	f := newFakes(t)
	for kind, dl := range f.outputs() {
		t.Run(kind+" keeps every field of every copy", func(t *testing.T) {
			p := f.pipeline("orders", dl)
			out := f.open(p)
			const n = 40
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					m := message(i)
					m.Attributes[AttrReason] = "forged" // reserved: not carried over
					errs[i] = out.Send(context.Background(), m, Reasons[i%len(Reasons)], fmt.Errorf("cause %d", i))
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			got := f.readAll(p)
			if len(got) != n {
				t.Fatalf("%d copies, want %d", len(got), n)
			}
			for i := range n {
				m := message(i)
				want := &Copy{
					Pipeline:    "orders",
					MessageID:   m.ID,
					PublishTime: m.PublishTime,
					FailedAt:    f.failedA,
					Reason:      Reasons[i%len(Reasons)],
					Error:       fmt.Sprintf("cause %d", i),
					Attributes:  m.Attributes,
					Data:        m.Data,
				}
				if c := got[m.ID]; !reflect.DeepEqual(c, want) {
					t.Errorf("copy of %s:\n got %+v\nwant %+v", m.ID, c, want)
				}
			}
		})
		t.Run(kind+" refuses sends after Close, which is idempotent", func(t *testing.T) {
			out := f.open(f.pipeline("closing", dl))
			if err := out.Send(context.Background(), message(1), Late, nil); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := out.Close(context.Background()); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			if err := out.Send(context.Background(), message(2), Late, nil); err == nil {
				t.Fatal("Send after Close succeeded")
			}
		})
	}
}

func TestOpenNamesWhatIsMissing(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		dl   config.DeadLetter
		want string
	}{
		{"no output", config.DeadLetter{}, ErrNoOutput.Error()},
		{"a topic that does not exist", config.DeadLetter{Topic: "nope"}, "dead-letter topic projects/p/topics/nope does not exist"},
		{"a table that does not exist", config.DeadLetter{BigtableTable: "nope"}, "dead-letter table nope in instance i does not exist"},
		{"a file in a missing directory", config.DeadLetter{File: filepath.Join(f.dir, "no", "dead.jsonl")}, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Open(ctx, zap.NewNop(), f.cfg, f.pipeline("orders", tc.dl), f.clients())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want an error containing %q", err, tc.want)
			}
			if out != nil {
				t.Fatalf("Open returned %#v with its error", out)
			}
		})
	}
}
