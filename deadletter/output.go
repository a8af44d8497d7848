package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/source"
)

// Output keeps durable copies of messages that can never be written. It is
// the pipeline's DeadLetter.
type Output interface {
	// Send returns nil once the output confirmed a durable copy of m with
	// reason and cause (a Topic: Pub/Sub acknowledged the publish; a Table:
	// Bigtable applied the row; a File: the line was written and fsynced).
	// Any error means the copy may not exist: the caller must not ack m, and
	// may call Send again (a retried Send may leave two copies of m, never
	// none). If ctx ends first, Send returns ctx.Err() and the copy may
	// still be made afterwards. Send is safe for concurrent use; concurrent
	// calls are batched together. It does not modify m, and keeps no
	// reference to it after returning except to m.Data, which it only reads.
	Send(ctx context.Context, m *source.Message, reason Reason, cause error) error
	// Check returns an error while Send would refuse copies for a reason
	// that is not the copy's (a Topic whose topic has no subscription); it
	// is the output's part of the pipeline's readiness. A Table and a File
	// cannot tell before they write, and return nil: their Send fails and
	// the pipeline retries it.
	Check(ctx context.Context) error
	// Close waits for the copies being made and releases the output; later
	// calls to Send fail. Like net/http's Server.Shutdown it is idempotent
	// and bounded by ctx, and returns ctx.Err() if cut short. It closes no
	// client it was given.
	Close(ctx context.Context) error
}

// Clients are the clients an output may use; Open uses only the one its
// output needs, and never closes them.
type Clients struct {
	PubSub *pubsub.Client
	// Bigtable is a data client of the state instance (state.instance),
	// where a dead_letter.bigtable_table lives.
	Bigtable *bigtable.Client
	// Now, if set, is the clock Open's output stamps its copies with
	// (pubsink_failed_at) and a topic output times its subscription checks
	// by; nil: time.Now. Readers do not use it.
	Now func() time.Time
	// Reprocess is the name of the reprocess run this output writes for
	// ("" for the live pipeline): every copy the output writes carries it
	// (AttrReprocess). Readers do not use it.
	Reprocess string
}

// The kinds of output, as their config keys name them.
const (
	KindTopic = "topic"
	KindTable = "bigtable_table"
	KindFile  = "file"
)

// Kind names the output d configures: KindTopic, KindTable, KindFile, or ""
// for none. Validation allows at most one.
func Kind(d config.DeadLetter) string {
	switch {
	case d.Topic != "":
		return KindTopic
	case d.BigtableTable != "":
		return KindTable
	case d.File != "":
		return KindFile
	}
	return ""
}

// ErrNoOutput is returned by Open and OpenReader (and so by package
// replay) for a pipeline whose configuration names no dead_letter output.
var ErrNoOutput = errors.New("no dead_letter output is configured (topic, bigtable_table or file)")

// errClosed is returned by Send after Close.
var errClosed = errors.New("dead-letter output is closed")

// Open returns the dead-letter output that p.DeadLetter names, checked to
// be usable: the topic exists and has a subscription, the table exists, the
// file can be opened for appending. It returns ErrNoOutput when p names none, so it never returns
// a nil Output without an error. log is named per output; cfg gives full
// resource names.
func Open(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients Clients) (Output, error) {
	log = log.Named("deadletter").With(zap.String("pipeline", p.Name))
	now := clients.Now
	if now == nil {
		now = time.Now
	}
	// Each case returns its own type: an error must come with an untyped
	// nil, not a nil *Topic inside a non-nil Output.
	switch Kind(p.DeadLetter) {
	case KindTopic:
		if clients.PubSub == nil {
			return nil, errors.New("dead_letter.topic needs a Pub/Sub client")
		}
		t, err := openTopic(ctx, log, clients.PubSub, cfg.TopicName(p.DeadLetter.Topic), p.Name, now)
		if err != nil {
			return nil, err
		}
		t.reprocess = clients.Reprocess
		return t, nil
	case KindTable:
		if clients.Bigtable == nil {
			return nil, errors.New("dead_letter.bigtable_table needs a Bigtable client of state.instance")
		}
		t, err := openTable(ctx, log, clients.Bigtable, p.DeadLetter.BigtableTable, cfg.State.Instance, p.Name)
		if err != nil {
			return nil, err
		}
		t.now, t.reprocess = now, clients.Reprocess
		return t, nil
	case KindFile:
		f, err := openFile(log, p.DeadLetter.File, p.Name)
		if err != nil {
			return nil, err
		}
		f.now, f.reprocess = now, clients.Reprocess
		return f, nil
	}
	return nil, ErrNoOutput
}

// sendTimeout bounds the I/O of one batched write of the Table output, and
// of one delete of its reader, the client's own retries included (the Bigtable client retries a failed
// ApplyBulk until its context ends). The pipeline retries a failed Send
// with its backoff, so one layer does not loop forever inside the other.
const sendTimeout = 30 * time.Second

// Describe names the dead-letter output of p for messages, as the replay
// summary shows it: "dead-letter topic projects/P/topics/T", "dead-letter
// table T in instance I", "dead-letter file PATH", or "no dead-letter
// output".
func Describe(cfg *config.Config, p config.Pipeline) string {
	switch Kind(p.DeadLetter) {
	case KindTopic:
		return fmt.Sprintf("dead-letter topic %s", cfg.TopicName(p.DeadLetter.Topic))
	case KindTable:
		return fmt.Sprintf("dead-letter table %s in instance %s", p.DeadLetter.BigtableTable, cfg.State.Instance)
	case KindFile:
		return fmt.Sprintf("dead-letter file %s", p.DeadLetter.File)
	}
	return "no dead-letter output"
}
