package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/logging"
)

// cmdDeadLetter runs `pubsink deadletter SUBCOMMAND`; replay is the only
// one.
func cmdDeadLetter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "replay" {
		return usageError{"deadletter: the subcommand is replay"}
	}
	return cmdReplay(ctx, args[1:], stdout, stderr)
}

// cmdReplay republishes a pipeline's dead-lettered messages to its topic
// (package deadletter, Replay). It prints one line per message to stdout,
// then the summary, and fails (exit 1) when some could not be replayed.
func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("deadletter replay", flag.ContinueOnError)
	path := configFlag(fs)
	name := fs.String("pipeline", "", "the `pipeline` whose dead letters to replay (required)")
	reason := fs.String("reason", "", "replay only this `reason`: "+reasonList())
	limit := fs.Int("limit", 0, "replay at most `N` messages (0: all)")
	dryRun := fs.Bool("dry-run", false, "print what would be replayed; change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var opts deadletter.ReplayOptions
	switch {
	case *name == "":
		return usageError{"deadletter replay: --pipeline is required"}
	case *limit < 0:
		return usageError{"deadletter replay: --limit must not be negative"}
	case *reason != "":
		r, ok := deadletter.ParseReason(*reason)
		if !ok {
			return usageError{fmt.Sprintf("deadletter replay: --reason %q is not one of %s", *reason, reasonList())}
		}
		opts.Reason = r
	}
	opts.Limit, opts.DryRun, opts.Out = *limit, *dryRun, stdout

	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	var p *config.Pipeline
	for i := range cfg.Pipelines {
		if cfg.Pipelines[i].Name == *name {
			p = &cfg.Pipelines[i]
		}
	}
	if p == nil {
		return usageError{fmt.Sprintf("deadletter replay: %s has no pipeline %q", *path, *name)}
	}
	if deadletter.Kind(p.DeadLetter) == "" {
		return usageError{fmt.Sprintf("deadletter replay: pipeline %q: %v", *name, deadletter.ErrNoOutput)}
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, stderr)
	if err != nil {
		return err
	}
	defer log.Sync()

	ps, err := pubsub.NewClient(ctx, cfg.Project)
	if err != nil {
		return fmt.Errorf("pubsub client: %w", err)
	}
	defer ps.Close()
	clients := deadletter.Clients{PubSub: ps}
	if deadletter.Kind(p.DeadLetter) == deadletter.KindTable {
		bt, err := bigtable.NewClient(ctx, cfg.Project, cfg.State.Instance)
		if err != nil {
			return fmt.Errorf("bigtable client for instance %s: %w", cfg.State.Instance, err)
		}
		defer bt.Close()
		clients.Bigtable = bt
	}

	sum, err := deadletter.Replay(ctx, log, cfg, *p, clients, opts)
	if sum.To != "" { // the replay started
		fmt.Fprint(stdout, sum)
	}
	if err != nil {
		return fmt.Errorf("deadletter replay: %w", err)
	}
	if sum.Failed > 0 {
		return fmt.Errorf("deadletter replay: %d dead letters could not be replayed and were left in place", sum.Failed)
	}
	return nil
}

func reasonList() string {
	names := make([]string, len(deadletter.Reasons))
	for i, r := range deadletter.Reasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}
