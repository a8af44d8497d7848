// Command pubsink moves messages from Pub/Sub subscriptions into Bigtable
// with an exactly-once effect. See README.md and docs/reference.md.
//
// This file is the CLI alone: it parses flags, turns signals into a
// context, and maps errors to exit codes. Every command's work is in
// package app.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pubsink/pubsink/app"
)

// Exit codes, as docs/reference.md fixes them.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure
	exitUsage   = 2 // bad configuration or usage
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

const usage = `pubsink moves Pub/Sub messages into Bigtable, exactly once in effect.

Usage:
  pubsink run      --config FILE   run every pipeline in FILE until SIGTERM/SIGINT
  pubsink validate --config FILE   check FILE; print every problem; exit 2 if any
  pubsink setup    --config FILE   create the topics, subscriptions and tables FILE names, if missing
  pubsink demo                     run the example pipeline fully embedded and print a summary
  pubsink deadletter replay --config FILE --pipeline P [--reason R] [--limit N] [--dry-run]
  pubsink version

-c is short for --config, which defaults to $PUBSINK_CONFIG, then /etc/pubsink/config.yaml.
Exit codes: 0 clean stop, 1 runtime failure, 2 bad config or usage.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a command-line mistake: exit 2 with the usage text.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		var path string
		if path, err = configOnly("run", rest); err == nil {
			err = app.RunFile(ctx, path, stderr)
		}
	case "validate":
		var path string
		if path, err = configOnly("validate", rest); err == nil {
			err = app.Validate(path, stdout)
		}
	case "setup":
		var path string
		if path, err = configOnly("setup", rest); err == nil {
			err = app.SetupFile(ctx, path, stdout)
		}
	case "demo":
		err = cmdDemo(ctx, rest, stdout)
	case "deadletter":
		err = cmdDeadLetter(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "pubsink", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	return exitCode(err, stderr)
}

// exitCode prints err and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	var ce *app.ConfigError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "pubsink: %v\n\n%s", err, usage)
		return exitUsage
	case errors.As(err, &ce) && ce.IsList():
		fmt.Fprintln(stderr, err)
		return exitUsage
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "pubsink: %v\n", err)
		return exitUsage
	case errors.Is(err, flag.ErrHelp):
		return exitUsage
	}
	fmt.Fprintf(stderr, "pubsink: %v\n", err)
	return exitFailure
}

// configFlag registers --config and its short form -c on fs.
func configFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("PUBSINK_CONFIG")
	if def == "" {
		def = "/etc/pubsink/config.yaml"
	}
	path := fs.String("config", def, "configuration `file`")
	fs.StringVar(path, "c", def, "short for --config")
	return path
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("%s: %v", fs.Name(), err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}

// configOnly parses the flags of a command that takes only --config and
// returns the file's path.
func configOnly(name string, args []string) (string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	path := configFlag(fs)
	return *path, parseFlags(fs, args)
}

func cmdDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var opts app.DemoOptions
	fs.IntVar(&opts.Messages, "messages", 3000, "sensor readings to publish (duplicates and poison come on top)")
	fs.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "give up if not drained by then")
	fs.StringVar(&opts.Dir, "dir", "", "directory for the dead-letter file (default: a new temporary directory)")
	fs.Uint64Var(&opts.Seed, "seed", 1, "seed of the sample stream")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return app.Demo(ctx, stdout, opts)
}

// cmdDeadLetter runs `pubsink deadletter SUBCOMMAND`; replay is the only
// one.
func cmdDeadLetter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "replay" {
		return usageError{"deadletter: the subcommand is replay"}
	}
	fs := flag.NewFlagSet("deadletter replay", flag.ContinueOnError)
	path := configFlag(fs)
	var req app.ReplayRequest
	fs.StringVar(&req.Pipeline, "pipeline", "", "the `pipeline` whose dead letters to replay (required)")
	fs.StringVar(&req.Reason, "reason", "", "replay only this `reason`: "+app.ReasonList())
	fs.IntVar(&req.Limit, "limit", 0, "replay at most `N` messages (0: all)")
	fs.BoolVar(&req.DryRun, "dry-run", false, "print what would be replayed; change nothing")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case req.Pipeline == "":
		return usageError{"deadletter replay: --pipeline is required"}
	case req.Limit < 0:
		return usageError{"deadletter replay: --limit must not be negative"}
	}
	return app.ReplayFile(ctx, *path, req, stdout, stderr)
}
