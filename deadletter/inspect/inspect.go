package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
)

// DefaultLimit is how many copies `pubsink deadletter list` prints unless
// --limit says otherwise: a screenful.
const DefaultLimit = 20

// batchSize bounds one read of the output.
const batchSize = 100

// Options are the choices of `pubsink deadletter list`.
type Options struct {
	// Reason, if set, lists only the copies dead-lettered for it.
	Reason deadletter.Reason
	// Limit, if positive, stops after this many copies; 0 lists all.
	Limit int
	// JSON prints one JSON object per copy (see record) instead of a line
	// of text, and no header.
	JSON bool
	// Out receives the copies; nil discards them.
	Out io.Writer
}

// Summary is what a List found.
type Summary struct {
	// From names the output read.
	From     string
	Pipeline string
	Reason   deadletter.Reason
	// Shown counts the copies printed, Unreadable the entries printed
	// that are not copies (see deadletter.Entry.Err).
	Shown, Unreadable int
	// Limit is Options.Limit; More says that it stopped the list while
	// the output holds further copies that would have been printed.
	Limit int
	More  bool
}

// String is the summary line the CLI prints after the copies.
func (s Summary) String() string {
	what := "copies"
	if s.Shown == 1 {
		what = "copy"
	}
	if s.Reason != "" {
		what += " with reason " + string(s.Reason)
	}
	tail := ""
	if s.Unreadable > 0 {
		tail = fmt.Sprintf("; %d unreadable", s.Unreadable)
	}
	if s.More {
		tail += fmt.Sprintf("; --limit %d reached, more follow", s.Limit)
	}
	return fmt.Sprintf("%d %s of pipeline %s in %s%s\n", s.Shown, what, s.Pipeline, s.From, tail)
}

// ErrNotFound is Show's error when the output holds no copy of the
// message.
var ErrNotFound = errors.New("no such copy")

// List prints the copies of p's dead-letter output, in the output's order
// (the table's key order, the file's line order, the order Pub/Sub delivers
// a topic's), and leaves them all in place. See the package doc for what
// it does to a topic's subscription.
func List(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients deadletter.Clients, opts Options) (sum Summary, err error) {
	sum = Summary{From: describe(cfg, p), Pipeline: p.Name, Reason: opts.Reason, Limit: opts.Limit}
	out := newPrinter(opts.Out, opts.JSON)
	err = look(ctx, log, cfg, p, clients, deadletter.ReaderOptions{Look: true}, func(e *deadletter.Entry) (bool, error) {
		if !wanted(e, p.Name, opts.Reason) {
			return true, nil
		}
		if opts.Limit > 0 && sum.Shown+sum.Unreadable == opts.Limit {
			sum.More = true
			return false, nil
		}
		if e.Err != nil {
			sum.Unreadable++
		} else {
			sum.Shown++
		}
		return true, out.line(e)
	}, func() int {
		if opts.Limit <= 0 {
			return batchSize
		}
		// One more than the limit, to tell whether more follow.
		return min(batchSize, opts.Limit-sum.Shown-sum.Unreadable+1)
	})
	return sum, err
}

// Show prints the first copy of message id (the original's message ID) in
// p's output, whole, and leaves it in place. It fails with ErrNotFound when
// there is none.
func Show(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients deadletter.Clients, id string, asJSON bool, w io.Writer) error {
	var found *deadletter.Entry
	err := look(ctx, log, cfg, p, clients, deadletter.ReaderOptions{Look: true, MessageID: id}, func(e *deadletter.Entry) (bool, error) {
		if e.Err == nil && e.Copy.Pipeline == p.Name && e.Copy.MessageID == id {
			found = e
			return false, nil
		}
		return true, nil
	}, func() int { return batchSize })
	if err != nil {
		return err
	}
	if found == nil {
		return fmt.Errorf("%w: %s holds no copy of message %s of pipeline %s (`pubsink deadletter list` shows the message IDs it holds; a replayed copy is gone)",
			ErrNotFound, describe(cfg, p), id, p.Name)
	}
	return newPrinter(w, asJSON).whole(found)
}

// look opens p's output to look, passes each entry to visit until it
// answers false, the output holds no more, or an error, and releases
// every copy read. batch says how many entries to read next.
func look(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients deadletter.Clients, ro deadletter.ReaderOptions,
	visit func(*deadletter.Entry) (bool, error), batch func() int) (err error) {
	if deadletter.Kind(p.DeadLetter) == "" {
		return deadletter.ErrNoOutput
	}
	rd, err := deadletter.OpenReaderWith(ctx, log, cfg, p, clients, ro)
	if err != nil {
		return err
	}
	defer rd.Close()
	var read []*deadletter.Entry
	defer func() {
		// Every copy goes back, even if ctx ended: a look changes nothing.
		if rerr := rd.Release(context.WithoutCancel(ctx), read); rerr != nil && err == nil {
			err = fmt.Errorf("release the %d copies read from %s: %w", len(read), describe(cfg, p), rerr)
		}
	}()
	for {
		es, err := rd.Next(ctx, batch())
		read = append(read, es...)
		if err != nil {
			return fmt.Errorf("read %s: %w", describe(cfg, p), err)
		}
		if len(es) == 0 {
			return nil
		}
		for _, e := range es {
			more, err := visit(e)
			if err != nil || !more {
				return err
			}
		}
	}
}

// wanted says whether List prints e: a copy of the pipeline with the reason
// asked for, or, without --reason, something that does not read back as a
// copy (whose pipeline is unknown; replay reports it too).
func wanted(e *deadletter.Entry, pipeline string, reason deadletter.Reason) bool {
	if e.Err != nil {
		return reason == ""
	}
	return e.Copy.Pipeline == pipeline && (reason == "" || e.Copy.Reason == reason)
}

// describe names the output for people; a topic's copies are read through
// its replay subscription, which it names too.
func describe(cfg *config.Config, p config.Pipeline) string {
	d := deadletter.Describe(cfg, p)
	if deadletter.Kind(p.DeadLetter) == deadletter.KindTopic {
		d += " (subscription " + cfg.SubscriptionName(p.DeadLetter.Subscription) + ")"
	}
	return d
}

// Each passes every copy of pipeline p's dead-letter output (the live
// pipeline's and its reprocess runs') to visit, and leaves them all in
// place, as List does; what does not read back as a copy is skipped. It is
// the audit's view of what was dead-lettered.
func Each(ctx context.Context, log *zap.Logger, cfg *config.Config, p config.Pipeline, clients deadletter.Clients, visit func(*deadletter.Copy)) error {
	return look(ctx, log, cfg, p, clients, deadletter.ReaderOptions{Look: true}, func(e *deadletter.Entry) (bool, error) {
		if wanted(e, p.Name, "") && e.Err == nil {
			visit(e.Copy)
		}
		return true, nil
	}, func() int { return batchSize })
}
