package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
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
Exit codes: 0 success or a clean stop, 1 runtime failure, 2 bad configuration or usage,
3 a reprocess, audit or try stopped before it was done (run it again to resume),
4 an audit found something missing or doubled.
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
		validateCommand(ctx, stdout),
		setupCommand(ctx, stdout),
		testCommand(ctx, stdout),
		demoCommand(ctx, stdout, stderr),
		configGroup(stdout),
		deadLetterCommand(ctx, stdout, stderr),
		reprocessCommand(ctx, stdout, stderr),
		auditCommand(ctx, stdout, stderr),
		tryCommand(ctx, stdout, stderr),
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

// noArgs refuses positional arguments as a usage error. A command that
// reads a configuration file names the flag for it: the argument is most
// likely the file, written as other tools take it.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s: unexpected argument %q", cmd.Name(), args[0])
	if f := cmd.Flags().Lookup("config"); f != nil && !f.Changed {
		msg += fmt.Sprintf(": to name the configuration file, write -c %s", args[0])
	}
	return usageError{msg, cmd.CommandPath()}
}

// commandGroup is a command that only holds subcommands (deadletter). Run
// with an unknown subcommand, none, or flags (which belong to a
// subcommand: "deadletter list -c f" when there is no list), it says which
// subcommands there are, from the tree as it is.
func commandGroup(use, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return subcommandError(cmd, args)
		},
		SuggestionsMinimumDistance: 2, // cobra's own default, which SuggestionsFor does not apply
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, _ error) error {
		return subcommandError(cmd, cmd.Flags().Args()) // the arguments read before the flag
	})
	return cmd
}

// subcommandError is the usage error of a command group run without one of
// its subcommands: the unknown one (with cobra's suggestion), and the list.
func subcommandError(cmd *cobra.Command, args []string) error {
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	msg := fmt.Sprintf("%s: a subcommand is needed", cmd.Name())
	if len(args) > 0 {
		msg = fmt.Sprintf("%s: unknown subcommand %q", cmd.Name(), args[0])
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", s[0])
		}
	}
	msg += fmt.Sprintf("; the subcommands are: %s", strings.Join(names, ", "))
	return usageError{msg, cmd.CommandPath()}
}

// configFlag registers --config and its short form -c.
func configFlag(fs *pflag.FlagSet) *string {
	def := os.Getenv("PUBSINK_CONFIG")
	if def == "" {
		def = app.DefaultConfigPath
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

func configGroup(stdout io.Writer) *cobra.Command {
	group := commandGroup("config", "Work with the configuration file's format")
	var tests bool
	schema := &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the configuration file (or, with --tests, of a tests file)",
		Long: "Prints the JSON Schema (draft-07) of the configuration file, for editors that run the YAML language\n" +
			"server: `pubsink config schema > pubsink.schema.json`, then start the file with\n" +
			"# yaml-language-server: $schema=pubsink.schema.json\n" +
			"With --tests, the schema of the tests file `pubsink test` reads (pubsink-test.schema.json).",
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if tests {
				return app.TestsSchema(stdout)
			}
			return app.ConfigSchema(stdout)
		},
	}
	schema.Flags().BoolVar(&tests, "tests", false, "print the tests file's schema instead")
	group.AddCommand(schema)
	return group
}

func deadLetterCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	dl := commandGroup("deadletter", "Work with a pipeline's dead letters")
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
	dl.AddCommand(listCommand(ctx, stdout, stderr), showCommand(ctx, stdout, stderr), replay)
	return dl
}

func listCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var req app.ListRequest
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a pipeline's dead-lettered messages, leaving them in place",
		Long: "Lists the copies in a pipeline's dead-letter output, one line each (message ID, failed at, reason,\n" +
			"payload bytes, the start of the error), then a summary line; the copies stay for replay.\n" +
			"A topic output is read through its replay subscription: the copies read are released at the end.",
		Args: noArgs,
	}
	path := configFlag(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&req.Pipeline, "pipeline", "", "the `pipeline` whose dead letters to list (required)")
	fs.StringVar(&req.Reason, "reason", "", "list only this `reason`: "+app.ReasonList())
	fs.IntVar(&req.Limit, "limit", app.DefaultListLimit, "list at most `N` copies (0: all)")
	fs.BoolVar(&req.JSON, "json", false, "print one JSON object per copy (the summary goes to stderr)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case req.Pipeline == "":
			return usageError{"deadletter list: --pipeline is required", cmd.CommandPath()}
		case req.Limit < 0:
			return usageError{"deadletter list: --limit must not be negative", cmd.CommandPath()}
		}
		return app.ListFile(ctx, *path, req, stdout, stderr)
	}
	return cmd
}

func showCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var req app.ShowRequest
	cmd := &cobra.Command{
		Use:   "show MESSAGE_ID",
		Short: "Print one dead-lettered message whole: reason, error, attributes, payload",
		Long: "Prints the copy of one message (its original message ID, as list shows it) in a pipeline's\n" +
			"dead-letter output whole: reason, error, times, attributes, and the payload as text when it is\n" +
			"UTF-8 text, else base64 (data_encoding says which). The copy stays for replay. Exits 1 if there is none.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Sprintf("deadletter show: give one message ID (got %d arguments); `pubsink deadletter list` shows them", len(args)), cmd.CommandPath()}
			}
			return nil
		},
	}
	path := configFlag(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&req.Pipeline, "pipeline", "", "the `pipeline` whose dead letter to show (required)")
	fs.BoolVar(&req.JSON, "json", false, "print the copy as one JSON object")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if req.Pipeline == "" {
			return usageError{"deadletter show: --pipeline is required", cmd.CommandPath()}
		}
		req.MessageID = args[0]
		return app.ShowFile(ctx, *path, req, stdout, stderr)
	}
	return cmd
}

func reprocessCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var req app.ReprocessRequest
	cmd := &cobra.Command{
		Use:   "reprocess",
		Short: "Rewrite a past range of a pipeline's messages with the current mapping, beside the live pipeline",
		Long: `Rewrites what a pipeline's topic carried from --from (or a snapshot) until the start (or --until)
with the current configuration's mapping, exactly once, while the live pipeline runs untouched. It takes
a snapshot of the live subscription first (the restore point, printed), reads its own subscription, and
ends by itself when the range is done, deleting the subscription. Killed or stopped, it resumes when
started again with the same arguments; a second reprocess of the pipeline meanwhile is refused.
Progress goes to stderr (a bar on a terminal, log lines otherwise), the summary to stdout.`,
		Args: noArgs,
	}
	path := configFlag(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&req.Pipeline, "pipeline", "", "the `pipeline` to reprocess (required)")
	rangeFlags(fs, "reprocess", "the first start", &req.From, &req.Snapshot, &req.Until)
	fs.BoolVar(&req.NoRestorePoint, "no-restore-point", false, "take no snapshot of the live subscription first")
	fs.BoolVar(&req.NoWait, "no-wait", false, "start at once, without waiting for a running live pipeline to finish the range")
	fs.BoolVar(&req.DryRun, "dry-run", false, "check everything and print the plan; create and change nothing")
	fs.StringVar(&req.HTTPAddr, "http-addr", "", "serve HTTP on this `address` instead of http.addr (\"-\": none), to run beside a live process on one host")
	fs.DurationVar(&req.Idle, "idle", app.DefaultReprocessIdle, "end once no message of the range arrived for this `duration` and none is in flight")
	fs.Float64Var(&req.Rate, "rate", 0, "process at most `N` messages of the range per second (0: no cap)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case req.Pipeline == "":
			return usageError{"reprocess: --pipeline is required", cmd.CommandPath()}
		case (req.From == "") == (req.Snapshot == ""):
			return usageError{"reprocess: give exactly one of --from and --snapshot", cmd.CommandPath()}
		case req.Idle <= 0:
			return usageError{"reprocess: --idle must be positive", cmd.CommandPath()}
		case req.Rate < 0:
			return usageError{"reprocess: --rate must not be negative", cmd.CommandPath()}
		}
		return app.ReprocessFile(ctx, *path, req, stdout, stderr)
	}
	return cmd
}

func auditCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var req app.AuditRequest
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check a past range of a pipeline's messages against its tables: what is missing, doubled or different",
		Long: `Reads what a pipeline's topic carried from --from (or a snapshot) until the start (or --until) on a
subscription of its own, maps each message with the current configuration's mapping, and compares with
the sink tables and the dead-letter output. It writes nothing to Bigtable and acks nothing on the live
subscription. Exits 0 when nothing is missing or doubled, 4 when something is; --report FILE writes one
JSON line per finding ("-": stdout, the summary then to stderr). Stopped, it exits 3; run again, it reads
the range again from its start. Progress goes to stderr, the summary to stdout.`,
		Args: noArgs,
	}
	path := configFlag(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&req.Pipeline, "pipeline", "", "the `pipeline` to audit (required)")
	rangeFlags(fs, "audit", "the start", &req.From, &req.Snapshot, &req.Until)
	fs.StringVar(&req.Report, "report", "", "write one JSON line per finding, and a summary line, to this `file` (\"-\": stdout)")
	fs.Float64Var(&req.Rate, "rate", 0, "read at most `N` messages, then rows, per second (0: no cap)")
	fs.StringVar(&req.HTTPAddr, "http-addr", "", "serve HTTP on this `address` instead of http.addr (\"-\": none), to run beside a live process on one host")
	fs.DurationVar(&req.Idle, "idle", app.DefaultAuditIdle, "end the read once no message of the range arrived for this `duration` and none is in flight")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case req.Pipeline == "":
			return usageError{"audit: --pipeline is required", cmd.CommandPath()}
		case (req.From == "") == (req.Snapshot == ""):
			return usageError{"audit: give exactly one of --from and --snapshot", cmd.CommandPath()}
		case req.Idle <= 0:
			return usageError{"audit: --idle must be positive", cmd.CommandPath()}
		case req.Rate < 0:
			return usageError{"audit: --rate must not be negative", cmd.CommandPath()}
		}
		return app.AuditFile(ctx, *path, req, stdout, stderr)
	}
	return cmd
}

// rangeFlags adds the flags of a past range (reprocess, audit, try):
// --from, --snapshot and --until, their help in the words of command verb;
// start is what --until defaults to.
func rangeFlags(fs *pflag.FlagSet, verb, start string, from, snapshot, until *string) {
	fs.StringVar(from, "from", "", verb+" what was published from this `time`: RFC 3339, or a duration before now (2h); needs the topic's message retention")
	fs.StringVar(snapshot, "snapshot", "", verb+" what this `snapshot` of the pipeline's subscription holds, instead of --from")
	fs.StringVar(until, "until", "", verb+" only what was published before this `time` (RFC 3339 or a duration before now); default: "+start)
}

func tryCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var req app.TryRequest
	cmd := &cobra.Command{
		Use:   "try",
		Short: "Map a sample of a topic's real messages with the file's mapping, writing nothing",
		Long: `Reads a sample of a pipeline's topic on a subscription of its own (created for the run, deleted at
its end, expiring after a day unused if the try is killed): what was published from --from (or a
snapshot) until the start (or --until), or with --next N the next N messages published. Maps each
message with this file's mapping, as run would, and prints its outcome and rows; then per column how
often it was filled or missing (skipped, emptied, deleted by on_missing), the dead-lettered by reason
and the filtered, and a warning for each column never filled. Writes nothing to Bigtable, publishes no
dead-letter copy, and acks nothing on the live subscription. Exits 0 (warnings included), 2 when the
sample is empty (with why) or on bad usage, 3 when stopped (the summary covers what it read).
--json: one JSON object per message and one for the summary on stdout, the other lines on stderr.`,
		Args: noArgs,
	}
	path := configFlag(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&req.Pipeline, "pipeline", "", "the `pipeline` whose topic and mapping to try (required)")
	rangeFlags(fs, "try", "the start", &req.From, &req.Snapshot, &req.Until)
	fs.IntVar(&req.Next, "next", 0, "try the next `N` messages published from the start, instead of --from (for a topic without retention)")
	fs.IntVar(&req.Limit, "limit", app.DefaultTryLimit, "with --from or --snapshot, stop once the sample has `N` messages")
	fs.BoolVar(&req.JSON, "json", false, "print one JSON object per message, and the summary as one, to stdout")
	fs.DurationVar(&req.Idle, "idle", app.DefaultTryIdle, "end the read once no message arrived for this `duration`")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		given := 0
		for _, f := range []string{"from", "snapshot", "next"} {
			if fs.Changed(f) {
				given++
			}
		}
		switch {
		case req.Pipeline == "":
			return usageError{"try: --pipeline is required", cmd.CommandPath()}
		case given != 1:
			return usageError{"try: give exactly one of --from, --snapshot and --next", cmd.CommandPath()}
		case fs.Changed("next") && req.Next <= 0:
			return usageError{"try: --next must be positive", cmd.CommandPath()}
		case fs.Changed("next") && (req.Until != "" || fs.Changed("limit")):
			return usageError{"try: --next N takes the next N messages: --until and --limit go with --from or --snapshot", cmd.CommandPath()}
		case req.Limit <= 0:
			return usageError{"try: --limit must be positive", cmd.CommandPath()}
		case req.Idle <= 0:
			return usageError{"try: --idle must be positive", cmd.CommandPath()}
		}
		return app.TryFile(ctx, *path, req, stdout, stderr)
	}
	return cmd
}

// validateCommand is `pubsink validate`: the file checked, and with
// payload.schema: topic its topic's schema read unless --offline.
func setupCommand(ctx context.Context, stdout io.Writer) *cobra.Command {
	var plan bool
	var opts app.PlanOptions
	var accounts []string
	var cmd *cobra.Command
	cmd = configCommand("setup", "Create the topics, subscriptions and tables the file names, if missing",
		"Creates what the file names and is missing, one line per action; idempotent.\n"+
			"With --plan, prints what it would create or change and changes nothing: compared with the live\n"+
			"project (exists, would create, would widen, drift with its fix), or with --offline everything as new,\n"+
			"as text (default) or JSON (--format json); --format terraform and gcloud print what setup creates as\na .tf file or as gcloud and cbt commands, without the network. With --format terraform,\n--service-account COMMAND[=EMAIL] adds the command's service account (created unless EMAIL is given)\nand the IAM roles it needs on each object (see the reference, \"IAM roles\").",
		func(path string) error {
			if !plan {
				for _, f := range []string{"format", "offline", "service-account"} {
					if cmd.Flags().Changed(f) {
						return usageError{fmt.Sprintf("setup: --%s is a flag of --plan", f), cmd.CommandPath()}
					}
				}
				return app.SetupFile(ctx, path, stdout)
			}
			if !slices.Contains(app.PlanFormats, opts.Format) {
				return usageError{fmt.Sprintf("setup: unknown --format %q; the formats are: %s", opts.Format, strings.Join(app.PlanFormats, ", ")), cmd.CommandPath()}
			}
			if len(accounts) > 0 && opts.Format != app.PlanTerraform {
				return usageError{"setup: --service-account is a flag of --format terraform", cmd.CommandPath()}
			}
			opts.Accounts = nil
			seen := map[string]bool{}
			for _, s := range accounts {
				a, err := app.ParseServiceAccount(s)
				if err != nil {
					return usageError{"setup: " + err.Error(), cmd.CommandPath()}
				}
				if seen[a.Command] {
					return usageError{fmt.Sprintf("setup: --service-account names %s twice", a.Command), cmd.CommandPath()}
				}
				seen[a.Command] = true
				opts.Accounts = append(opts.Accounts, a)
			}
			return app.PlanFile(ctx, path, opts, stdout)
		})
	fs := cmd.Flags()
	fs.BoolVar(&plan, "plan", false, "print what setup would create or change, and change nothing")
	fs.StringVar(&opts.Format, "format", app.PlanText, "`format` of the plan: "+strings.Join(app.PlanFormats, ", "))
	fs.BoolVar(&opts.Offline, "offline", false, "plan every object as new, without reading the project")
	fs.StringArrayVar(&accounts, "service-account", nil, "with --format terraform: `COMMAND[=EMAIL]`, the service account of a command ("+strings.Join(app.ServiceAccountCommands, ", ")+
		") granted its roles; without =EMAIL the file creates it (repeatable)")
	return cmd
}

func validateCommand(ctx context.Context, stdout io.Writer) *cobra.Command {
	var offline bool
	cmd := configCommand("validate", "Check the file; print every problem",
		"Loads and validates the file: its keys, schema files, expressions and placeholders. A pipeline with\npayload.schema: topic is also checked against every revision of its topic's schema, read from Pub/Sub\n(or the emulator PUBSUB_EMULATOR_HOST names); --offline skips that, and nothing else touches the network.\nPrints warnings and \"FILE: ok (N pipelines)\", or every problem (one \"path: message\" per line) to\nstderr and exits 2.",
		func(path string) error { return app.Validate(ctx, path, offline, stdout) })
	cmd.Flags().BoolVar(&offline, "offline", false, "do not read topic schemas from Pub/Sub")
	return cmd
}

func testCommand(ctx context.Context, stdout io.Writer) *cobra.Command {
	var req app.TestRequest
	cmd := &cobra.Command{
		Use:   "test",
		Short: "Run the mapping tests kept beside the file: messages and the rows, filter or dead letter expected",
		Long: "Runs each case of the tests file (default: NAME.test.yaml beside NAME.yaml) through its pipeline's\n" +
			"mapping, offline: no emulator, no network. Prints \"ok   [pipeline] name\" or \"FAIL [pipeline] name\"\n" +
			"with a diff per case, then a summary. Exits 0 when every case passed, 1 when one failed, 2 for a\n" +
			"configuration or tests file with problems (each \"FILE: path: message (line N)\") or no case selected.",
		Args: noArgs,
	}
	path := configFlag(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVarP(&req.Tests, "tests", "t", "", "tests `file` (default: NAME.test.yaml beside the configuration NAME.yaml)")
	fs.StringVar(&req.Pipeline, "pipeline", "", "run only the cases of this `pipeline`")
	fs.StringVar(&req.Run, "run", "", "run only the cases whose name matches this `regexp`")
	fs.BoolVarP(&req.Verbose, "verbose", "v", false, "print every case's outcome (its rows), passed or not")
	cmd.RunE = func(*cobra.Command, []string) error {
		req.Config = *path
		return app.TestFile(ctx, req, stdout)
	}
	return cmd
}
