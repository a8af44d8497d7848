package main

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/pubsink/pubsink/internal/demo"
)

func cmdDemo(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var opts demo.Options
	fs.IntVar(&opts.Messages, "messages", 3000, "sensor readings to publish (duplicates and poison come on top)")
	fs.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "give up if not drained by then")
	fs.StringVar(&opts.Dir, "dir", "", "directory for the dead-letter file (default: a new temporary directory)")
	fs.Uint64Var(&opts.Seed, "seed", 1, "seed of the sample stream")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return demo.Run(ctx, stdout, opts)
}
