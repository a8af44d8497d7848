package deadletter

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
)

// Reader is the read side of one dead-letter output, as OpenReader returns
// it: package replay walks it to republish the originals and remove their
// copies. A Reader serves one pass over the output, from one goroutine: its
// methods are not safe for concurrent use.
//
// For as long as it is open, a Reader keeps a small record of each copy it
// returned (the topic reader: its Pub/Sub and ack IDs; the file reader: the
// marks of FILE.replayed), so that it never returns one twice. It keeps no
// reference to an Entry nor to a slice passed to it.
type Reader interface {
	// Next returns up to n copies this Reader has not returned before, in
	// the output's order (the table's key order, the file's line order),
	// and none, with a nil error, once the output holds no more: an empty
	// result is the end, a short one is not. What is not a readable
	// pubsink copy (a malformed line, a foreign message, a row with a bad
	// column) comes as an Entry with Err set, not as an error; an error
	// means the output could not be read.
	//
	// The table reader returns only the pipeline's rows; the topic and file
	// readers return the copies of every pipeline sharing the output. The
	// topic reader pulls until two pulls in a row (3 s each; 1 s for a
	// look) bring nothing new, and fails with ctx.Err() if ctx ends; it
	// holds each copy it returns (ack deadline 600 s, Pub/Sub's maximum; a
	// look: the subscription's own, see ReaderOptions) until Remove or
	// Release, so that it is not delivered again meanwhile, and a copy
	// delivered again anyway is not returned twice. The file reader stops
	// at the file's current end, without waiting on ctx: a last line
	// without its newline is not a copy yet and is not returned, nor are
	// lines whose pipeline and message ID FILE.replayed marks.
	Next(ctx context.Context, n int) ([]*Entry, error)
	// Remove takes es out of the output for good, once their originals
	// were republished: the topic reader acks them, the table reader
	// deletes their rows (one ApplyBulk, within 30 s), and the file reader
	// appends a mark for each to FILE.replayed and fsyncs it (the daemon
	// may be appending to the file, so it only appends too). It returns
	// once the output confirmed; after an error, some of es may be removed
	// and others not. es must come from this Reader's Next, each with a
	// Copy (Err nil); an empty es does nothing.
	Remove(ctx context.Context, es []*Entry) error
	// Release gives es back to the output for a later pass: the topic
	// reader ends their lease, and that of the copies it was delivered
	// again and held, so that Pub/Sub delivers them anew at once (copies it
	// holds and does not release come back when their lease ends). The
	// table and file readers hold nothing and do nothing. Call it once,
	// when done, with every Entry not removed. Like Remove it needs a live
	// ctx: to release after ctx ended, pass context.WithoutCancel(ctx), as
	// replay does.
	Release(ctx context.Context, es []*Entry) error
	// Close releases what the Reader holds open (the file reader's file and
	// marker file). It neither removes nor releases any copy and closes no
	// client. Call it once, last.
	Close() error
}

// Entry is one copy a Reader returned.
type Entry struct {
	// Copy is the copy read back, or nil when Err is set.
	Copy *Copy
	// Err says why what was read is not a pubsink dead-letter copy; nil
	// for a copy.
	Err error
	// Location says where the copy is, for messages: "dead-letter message
	// ID", "row KEY" or "FILE line N".
	Location string
	// ref is the reader's handle on the copy: its ack ID or row key.
	ref string
}

// OpenReader returns the Reader of the output that p.DeadLetter names,
// checked to be readable: a topic output's replay subscription
// (dead_letter.subscription) exists, a table output's table exists, a file
// output's file can be opened and its marker file FILE.replayed, if any,
// read. It returns ErrNoOutput when p names none, so it never returns a nil
// Reader without an error. The Reader uses only the client its output
// needs, and closes none. It reads as replay does; OpenReaderWith reads
// for a caller that only looks.
func OpenReader(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients Clients) (Reader, error) {
	return OpenReaderWith(ctx, log, cfg, p, clients, ReaderOptions{})
}

// ReaderOptions adapt a Reader to its caller. The zero value is replay's.
type ReaderOptions struct {
	// Look is for a caller that only looks at the copies (`pubsink
	// deadletter list` and `show`, an audit). The topic reader then
	// releases what it pulls at once instead of holding it for replay's
	// 600 s, so that another reader of the subscription (a second look, a
	// replay) is kept from a copy only for that instant; and it counts
	// the subscription drained after two pulls in a row of up to 1 s each
	// (lookPullWait), the second after a jittered pause of about 1 s
	// (lookPause), bring nothing new. Table and file readers read as
	// they always do: they hold nothing.
	Look bool
	// MessageID, if set, is the one original message the caller wants the
	// copies of. The table reader, whose row key holds the message ID,
	// then reads that one row instead of the pipeline's prefix; the topic
	// and file readers, which cannot seek, still return every copy.
	MessageID string
}

// OpenReaderWith is OpenReader with options; see ReaderOptions.
func OpenReaderWith(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients Clients, opts ReaderOptions) (r Reader, err error) {
	switch Kind(p.DeadLetter) {
	case KindTopic:
		if clients.PubSub == nil {
			return nil, errors.New("reading a dead_letter.topic needs a Pub/Sub client")
		}
		r, err = openTopicReader(ctx, log, clients.PubSub, cfg.SubscriptionName(p.DeadLetter.Subscription), opts.Look)
	case KindTable:
		if clients.Bigtable == nil {
			return nil, errors.New("reading a dead_letter.bigtable_table needs a Bigtable client of state.instance")
		}
		r, err = openTableReader(ctx, clients.Bigtable, p.DeadLetter.BigtableTable, p.Name, opts.MessageID)
	case KindFile:
		r, err = openFileReader(p.DeadLetter.File)
	default:
		return nil, ErrNoOutput
	}
	if err != nil {
		return nil, err // not a typed nil in r
	}
	return r, nil
}
