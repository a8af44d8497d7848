package deadletter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/source"
)

// ReplayOptions are the choices of `pubsink deadletter replay`.
type ReplayOptions struct {
	// Reason, if set, replays only copies dead-lettered for it; the others
	// are skipped and left in the output.
	Reason Reason
	// Limit, if positive, stops after this many copies were replayed.
	Limit int
	// DryRun reads and reports but republishes nothing and leaves every
	// copy in place.
	DryRun bool
	// Out receives one line per copy replayed (or, with DryRun, that would
	// be) and per copy that cannot be; nil discards them. Lines name the
	// message ID, reason and size, never the payload.
	Out io.Writer
}

// Summary is what a replay did.
type Summary struct {
	// From and To name the dead-letter output and the pipeline's topic.
	From, To string
	// Replayed counts the originals republished (with DryRun: that would
	// be), one per message ID.
	Replayed int
	// Duplicates counts further copies of an original already replayed in
	// this run (a message dead-lettered twice after a redelivery); they
	// are removed without republishing.
	Duplicates int
	// Skipped counts the copies left in place by the --reason filter, by
	// reason.
	Skipped map[Reason]int
	// OtherPipelines counts copies of other pipelines sharing the output,
	// left in place.
	OtherPipelines int
	// Failed counts copies that were not replayed and are left in place:
	// unreadable, truncated, or their republish failed.
	Failed int
	DryRun bool
}

// String is the summary as the CLI prints it.
func (s Summary) String() string {
	var b strings.Builder
	verb := "replayed"
	if s.DryRun {
		verb = "would replay"
	}
	fmt.Fprintf(&b, "%s -> %s\n", s.From, s.To)
	fmt.Fprintf(&b, "%s: %d\n", verb, s.Replayed)
	if s.Duplicates > 0 {
		fmt.Fprintf(&b, "duplicate copies removed: %d\n", s.Duplicates)
	}
	skipped := "none"
	if len(s.Skipped) > 0 {
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(s.Skipped)) {
			parts = append(parts, fmt.Sprintf("%s=%d", r, s.Skipped[r]))
		}
		skipped = strings.Join(parts, " ")
	}
	fmt.Fprintf(&b, "skipped by reason: %s\n", skipped)
	if s.OtherPipelines > 0 {
		fmt.Fprintf(&b, "left for other pipelines: %d\n", s.OtherPipelines)
	}
	fmt.Fprintf(&b, "failed: %d\n", s.Failed)
	return b.String()
}

// replayBatch is how many copies are read, republished and removed at a
// time: large enough to amortise the round trips, small enough that a
// batch is done well within an ack deadline.
const replayBatch = 100

// store is the replay side of one output: a private seam, one per kind.
type store interface {
	// next returns up to n copies this replay has not returned before; none
	// once the output has no more.
	next(ctx context.Context, n int) ([]*entry, error)
	// remove acks, deletes or marks copies whose originals were republished
	// (or that duplicate one that was).
	remove(ctx context.Context, es []*entry) error
	// release leaves copies in the output for a later replay.
	release(ctx context.Context, es []*entry) error
	close() error
}

// entry is one copy read by a store.
type entry struct {
	copy *Copy
	bad  error  // not a readable copy: copy is nil
	id   string // where the copy is, for messages: ack ID, row key, line
	ref  string // the store's handle: ack ID, row key, marker key
}

// Replay republishes the originals of p's dead-letter copies to p's topic
// (source.topic, else the topic of source.subscription), with their
// original data and attributes (every pubsink_* attribute removed), and
// removes each copy (acks it, deletes its row, or marks its line as
// replayed) only after Pub/Sub confirmed the republish. Copies it does not
// replay stay where they are. It reads the replay subscription of a topic
// output (dead_letter.subscription), the rows of p in a table output, or a
// file output with its marker file (FILE.replayed).
//
// It returns the summary and an error if reading or removing failed (the
// summary then says how far it got), or ErrNoOutput. Copies that could not
// be republished are counted in Summary.Failed and are not an error.
// Republished originals whose copy could not be removed are republished
// again by a later replay: with an id_attribute, dedupe makes that
// harmless.
func Replay(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients Clients, opts ReplayOptions) (Summary, error) {
	sum := Summary{From: describe(cfg, p), Skipped: map[Reason]int{}, DryRun: opts.DryRun}
	if Kind(p.DeadLetter) == "" {
		return sum, ErrNoOutput
	}
	if clients.PubSub == nil {
		return sum, errors.New("replay needs a Pub/Sub client")
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	target, err := pipelineTopic(ctx, cfg, p, clients.PubSub)
	if err != nil {
		return sum, err
	}
	sum.To = "topic " + target
	st, err := openStore(ctx, log, cfg, p, clients)
	if err != nil {
		return sum, err
	}
	defer st.close()
	pub := clients.PubSub.Publisher(target)
	defer pub.Stop()

	r := &replay{opts: opts, out: out, sum: &sum, pipeline: p.Name, replayed: map[string]bool{}}
	var runErr error
	for opts.Limit <= 0 || sum.Replayed < opts.Limit {
		n := replayBatch
		if opts.Limit > 0 {
			n = min(n, opts.Limit-sum.Replayed)
		}
		es, err := st.next(ctx, n)
		if err != nil {
			runErr = fmt.Errorf("read %s: %w", sum.From, err)
			break
		}
		if len(es) == 0 {
			break
		}
		done := r.batch(ctx, pub, es)
		if err := st.remove(ctx, done); err != nil {
			runErr = fmt.Errorf("remove %d replayed copies from %s (a later replay republishes them again): %w", len(done), sum.From, err)
			break
		}
	}
	// The copies left in place go back to the output even if ctx ended.
	if err := st.release(context.WithoutCancel(ctx), r.keep); err != nil && runErr == nil {
		runErr = fmt.Errorf("release %d copies left in %s: %w", len(r.keep), sum.From, err)
	}
	return sum, runErr
}

// replay is the state of one Replay run.
type replay struct {
	opts     ReplayOptions
	out      io.Writer
	sum      *Summary
	pipeline string
	// replayed holds the message IDs republished in this run: a second copy
	// of one is removed without republishing it again.
	replayed map[string]bool
	keep     []*entry // copies to leave in place
}

// batch decides the fate of each copy of es, republishes those to replay,
// and returns the copies to remove.
func (r *replay) batch(ctx context.Context, pub *pubsub.Publisher, es []*entry) (done []*entry) {
	type pending struct {
		e   *entry
		res *pubsub.PublishResult
	}
	var sent []pending
	for _, e := range es {
		c := e.copy
		switch {
		case e.bad != nil:
			r.fail(e, "unreadable copy %s: %v", e.id, e.bad)
		case c.Pipeline != r.pipeline:
			r.sum.OtherPipelines++
			r.keep = append(r.keep, e)
		case r.opts.Reason != "" && c.Reason != r.opts.Reason:
			r.sum.Skipped[c.Reason]++
			r.keep = append(r.keep, e)
		case c.Truncated != "":
			r.fail(e, "message %s (%s): the copy is truncated (%s); it is not republished", c.MessageID, c.Reason, c.Truncated)
		case r.replayed[c.MessageID]:
			r.sum.Duplicates++
			if r.opts.DryRun {
				r.keep = append(r.keep, e)
			} else {
				done = append(done, e)
			}
		case r.opts.DryRun:
			r.replayed[c.MessageID] = true
			r.sum.Replayed++
			r.keep = append(r.keep, e)
			fmt.Fprintf(r.out, "would replay message %s (%s, %d bytes, failed at %s)\n", c.MessageID, c.Reason, len(c.Data), formatTime(c.FailedAt))
		default:
			// Reserve the ID now: a second copy in this same batch must
			// not be republished too. It is released if the publish fails.
			r.replayed[c.MessageID] = true
			res := pub.Publish(ctx, &pubsub.Message{Data: c.Data, Attributes: c.Attributes})
			sent = append(sent, pending{e, res})
		}
	}
	for _, s := range sent {
		c := s.e.copy
		id, err := s.res.Get(ctx)
		if err != nil {
			delete(r.replayed, c.MessageID)
			r.fail(s.e, "message %s (%s): republish failed: %v", c.MessageID, c.Reason, err)
			continue
		}
		r.sum.Replayed++
		done = append(done, s.e)
		fmt.Fprintf(r.out, "replayed message %s (%s, %d bytes) as %s\n", c.MessageID, c.Reason, len(c.Data), id)
	}
	return done
}

func (r *replay) fail(e *entry, format string, args ...any) {
	r.sum.Failed++
	r.keep = append(r.keep, e)
	fmt.Fprintf(r.out, "not replayed: "+format+"\n", args...)
}

// pipelineTopic is the topic p reads: source.topic, else its
// subscription's.
func pipelineTopic(ctx context.Context, cfg *config.Config, p config.Pipeline, client *pubsub.Client) (string, error) {
	if p.Source.Topic != "" {
		return cfg.TopicName(p.Source.Topic), nil
	}
	topic, err := source.SubscriptionTopic(ctx, client, cfg.SubscriptionName(p.Source.Subscription))
	if err != nil {
		return "", fmt.Errorf("the pipeline's topic: %w", err)
	}
	if !strings.HasPrefix(topic, "projects/") { // "_deleted-topic_"
		return "", fmt.Errorf("the topic of subscription %s was deleted; set source.topic", cfg.SubscriptionName(p.Source.Subscription))
	}
	return topic, nil
}

// openStore opens the replay side of p's output.
func openStore(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients Clients) (st store, err error) {
	switch Kind(p.DeadLetter) {
	case KindTopic:
		st, err = openTopicStore(ctx, log, clients.PubSub, cfg.SubscriptionName(p.DeadLetter.Subscription))
	case KindTable:
		if clients.Bigtable == nil {
			return nil, errors.New("replay of a dead_letter.bigtable_table needs a Bigtable client of state.instance")
		}
		st, err = openTableStore(ctx, clients.Bigtable, p.DeadLetter.BigtableTable, p.Name)
	case KindFile:
		st, err = openFileStore(p.DeadLetter.File)
	default:
		return nil, ErrNoOutput
	}
	if err != nil {
		return nil, err // not a typed nil in st
	}
	return st, nil
}
