package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pubsink/pubsink/app"
)

// newRoot builds the command tree. ctx ends on SIGTERM or SIGINT.
func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "pubsink",
		Short: "pubsink moves Pub/Sub messages into Bigtable, exactly once in effect.",
		Long: `pubsink moves Pub/Sub messages into Bigtable, exactly once in effect: every message is
processed at least once, and its result is committed exactly once.

--config (-c) defaults to $PUBSINK_CONFIG, then /etc/pubsink/config.yaml.
Exit codes: 0 success or a clean stop, 1 runtime failure, 2 bad configuration or usage.
The whole contract: docs/reference.md.`,
		// Without a command: the help, and exit 2 (a usage error).
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("unknown command %q", args[0]), "pubsink"}
			}
			cmd.SetOut(stderr)
			cmd.Help()
			return usageError{"no command given", "pubsink"}
		},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{err.Error(), cmd.CommandPath()}
	})
	root.AddCommand(
		configCommand("run", "Run every pipeline in the file until SIGTERM or SIGINT",
			"Loads and validates the file, checks what each pipeline needs, serves HTTP (/metrics, /healthz,\n/readyz, /status and the status page at /), and runs every pipeline until SIGTERM or SIGINT.\nLogs go to stderr.",
			func(path string) error { return app.RunFile(ctx, path, stderr) }),
		configCommand("validate", "Check the file without touching the network; print every problem",
			"Loads and validates the file without touching the network. Prints \"FILE: ok (N pipelines)\", or\nevery problem (one \"path: message\" per line) to stderr and exits 2.",
			func(path string) error { return app.Validate(path, stdout) }),
		configCommand("setup", "Create the topics, subscriptions and tables the file names, if missing",
			"Creates what the file names and is missing, one line per action; idempotent.",
			func(path string) error { return app.SetupFile(ctx, path, stdout) }),
		demoCommand(ctx, stdout, stderr),
		deadLetterCommand(ctx, stdout, stderr),
		&cobra.Command{
			Use:   "version",
			Short: "Print the version, VCS revision and Go version",
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				fmt.Fprintln(cmd.OutOrStdout(), app.Version())
				return nil
			},
		},
	)
	root.Version = app.Version() // cobra adds --version (and -v) for it
	root.SetVersionTemplate("{{.Version}}\n")
	return root
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("%s: unexpected argument %q", cmd.Name(), args[0]), cmd.CommandPath()}
	}
	return nil
}

// configFlag registers --config and its short form -c.
func configFlag(fs *pflag.FlagSet) *string {
	def := os.Getenv("PUBSINK_CONFIG")
	if def == "" {
		def = "/etc/pubsink/config.yaml"
	}
	return fs.StringP("config", "c", def, "configuration `file` ($PUBSINK_CONFIG)")
}

// configCommand is a command whose only flag is --config.
func configCommand(name, short, long string, do func(path string) error) *cobra.Command {
	cmd := &cobra.Command{Use: name, Short: short, Long: long, Args: noArgs}
	path := configFlag(cmd.Flags())
	cmd.RunE = func(*cobra.Command, []string) error { return do(*path) }
	return cmd
}

func demoCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var opts app.DemoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the example pipeline fully embedded and print a summary",
		Long: "Runs the example pipeline against an in-process Pub/Sub fake and Bigtable emulator and prints a\n" +
			"summary; exits 1 if a reading was lost or doubled or a poison message was not dead-lettered.",
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			opts.Logs = stderr
			return app.Demo(ctx, stdout, opts)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&opts.Messages, "messages", 3000, "sensor readings to publish (duplicates and poison come on top)")
	fs.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "give up if not drained by then")
	fs.StringVar(&opts.Dir, "dir", "", "`directory` for the dead-letter file (default: a new temporary directory)")
	fs.Uint64Var(&opts.Seed, "seed", 1, "seed of the sample stream")
	fs.StringVar(&opts.LogLevel, "log-level", "", "log the pipeline's work to stderr at this `level` (debug, info, warn, error); default: no logs")
	return cmd
}

func deadLetterCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	dl := &cobra.Command{
		Use:   "deadletter",
		Short: "Work with a pipeline's dead letters",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{"deadletter: the subcommand is replay", cmd.CommandPath()}
		},
	}
	var req app.ReplayRequest
	replay := &cobra.Command{
		Use:   "replay",
		Short: "Republish a pipeline's dead-lettered messages to its topic",
		Long: "Republishes a pipeline's dead-lettered messages to its topic, without the pubsink_* attributes,\n" +
			"and removes each copy only after its republish was confirmed. Prints one line per copy, then a summary.",
		Args: noArgs,
	}
	path := configFlag(replay.Flags())
	fs := replay.Flags()
	fs.StringVar(&req.Pipeline, "pipeline", "", "the `pipeline` whose dead letters to replay (required)")
	fs.StringVar(&req.Reason, "reason", "", "replay only this `reason`: "+app.ReasonList())
	fs.IntVar(&req.Limit, "limit", 0, "replay at most `N` messages (0: all)")
	fs.BoolVar(&req.DryRun, "dry-run", false, "print what would be replayed; change nothing")
	replay.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case req.Pipeline == "":
			return usageError{"deadletter replay: --pipeline is required", cmd.CommandPath()}
		case req.Limit < 0:
			return usageError{"deadletter replay: --limit must not be negative", cmd.CommandPath()}
		}
		return app.ReplayFile(ctx, *path, req, stdout, stderr)
	}
	dl.AddCommand(replay)
	return dl
}
