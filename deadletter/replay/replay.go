package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/source"
)

// Options are the choices of `pubsink deadletter replay`.
type Options struct {
	// Reason, if set, replays only copies dead-lettered for it; the others
	// are skipped and left in the output.
	Reason deadletter.Reason
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
	Skipped map[deadletter.Reason]int
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

// batchSize is how many copies are read, republished and removed at a
// time: large enough to amortise the round trips, small enough that a
// batch is done well within an ack deadline.
const batchSize = 100

// Run republishes the originals of p's dead-letter copies to p's topic
// (source.topic, else the topic of source.subscription), with their
// original data and attributes (every pubsink_* attribute removed), and
// removes each copy (acks it, deletes its row, or marks its line as
// replayed) only after Pub/Sub confirmed the republish. Copies it does not
// replay stay where they are. It reads the replay subscription of a topic
// output (dead_letter.subscription), the rows of p in a table output, or a
// file output with its marker file (FILE.replayed).
//
// It returns the summary and an error if reading or removing failed (the
// summary then says how far it got), or deadletter.ErrNoOutput. Copies
// that could not be republished are counted in Summary.Failed and are not
// an error.
// Republished originals whose copy could not be removed are republished
// again by a later replay: with an id_attribute, dedupe makes that
// harmless.
func Run(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients deadletter.Clients, opts Options) (Summary, error) {
	sum := Summary{From: deadletter.Describe(cfg, p), Skipped: map[deadletter.Reason]int{}, DryRun: opts.DryRun}
	if deadletter.Kind(p.DeadLetter) == "" {
		return sum, deadletter.ErrNoOutput
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
	rd, err := deadletter.OpenReader(ctx, log, cfg, p, clients)
	if err != nil {
		return sum, err
	}
	defer rd.Close()
	pub := clients.PubSub.Publisher(target)
	defer pub.Stop()

	r := &run{opts: opts, out: out, sum: &sum, pipeline: p.Name, replayed: map[string]bool{}}
	var runErr error
	for opts.Limit <= 0 || sum.Replayed < opts.Limit {
		n := batchSize
		if opts.Limit > 0 {
			n = min(n, opts.Limit-sum.Replayed)
		}
		es, err := rd.Next(ctx, n)
		if err != nil {
			runErr = fmt.Errorf("read %s: %w", sum.From, err)
			break
		}
		if len(es) == 0 {
			break
		}
		done := r.batch(ctx, pub, es)
		if err := rd.Remove(ctx, done); err != nil {
			runErr = fmt.Errorf("remove %d replayed copies from %s (a later replay republishes them again): %w", len(done), sum.From, err)
			break
		}
	}
	// The copies left in place go back to the output even if ctx ended.
	if err := rd.Release(context.WithoutCancel(ctx), r.keep); err != nil && runErr == nil {
		runErr = fmt.Errorf("release %d copies left in %s: %w", len(r.keep), sum.From, err)
	}
	return sum, runErr
}

// run is the state of one Run.
type run struct {
	opts     Options
	out      io.Writer
	sum      *Summary
	pipeline string
	// replayed holds the message IDs republished in this run: a second copy
	// of one is removed without republishing it again.
	replayed map[string]bool
	keep     []*deadletter.Entry // copies to leave in place
}

// batch decides the fate of each copy of es, republishes those to replay,
// and returns the copies to remove.
func (r *run) batch(ctx context.Context, pub *pubsub.Publisher, es []*deadletter.Entry) (done []*deadletter.Entry) {
	type pending struct {
		e   *deadletter.Entry
		res *pubsub.PublishResult
	}
	var sent []pending
	for _, e := range es {
		c := e.Copy
		switch {
		case e.Err != nil:
			r.fail(e, "unreadable copy %s: %v", e.Location, e.Err)
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
			fmt.Fprintf(r.out, "would replay message %s (%s, %d bytes, failed at %s)\n", c.MessageID, c.Reason, len(c.Data), c.FailedAt.UTC().Format(time.RFC3339Nano))
		default:
			// Reserve the ID now: a second copy in this same batch must
			// not be republished too. It is released if the publish fails.
			r.replayed[c.MessageID] = true
			res := pub.Publish(ctx, &pubsub.Message{Data: c.Data, Attributes: deadletter.Republishable(c.Attributes)})
			sent = append(sent, pending{e, res})
		}
	}
	for _, s := range sent {
		c := s.e.Copy
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

func (r *run) fail(e *deadletter.Entry, format string, args ...any) {
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
	info, err := source.SubscriptionInfo(ctx, client, cfg.SubscriptionName(p.Source.Subscription))
	if err != nil {
		return "", fmt.Errorf("the pipeline's topic: %w", err)
	}
	if !strings.HasPrefix(info.Topic, "projects/") { // "_deleted-topic_"
		return "", fmt.Errorf("the topic of subscription %s was deleted; set source.topic", cfg.SubscriptionName(p.Source.Subscription))
	}
	return info.Topic, nil
}
