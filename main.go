// Command pubsink moves messages from Pub/Sub subscriptions into Bigtable
// with an exactly-once effect. See README.md and DESIGN.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/source"
)

// Exit codes, as DESIGN.md fixes them.
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

// configError is a configuration that cannot be used (unreadable, or with
// problems): exit 2.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// loadConfig loads and validates the file at path; its errors exit 2.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, configError{err}
	}
	return cfg, nil
}

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
		err = cmdRun(ctx, rest, stderr)
	case "validate":
		err = cmdValidate(rest, stdout)
	case "setup":
		err = cmdSetup(ctx, rest, stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, rest, stdout, stderr)
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
	var problems config.Problems
	var ce configError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "pubsink: %v\n\n%s", err, usage)
		return exitUsage
	case errors.As(err, &problems):
		fmt.Fprintln(stderr, problems.Error())
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

// configCommand parses the flags of a command that takes only --config,
// and loads the file.
func configCommand(name string, args []string) (cfg *config.Config, path string, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	p := configFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, "", err
	}
	cfg, err = loadConfig(*p)
	return cfg, *p, err
}

func cmdValidate(args []string, stdout io.Writer) error {
	cfg, path, err := configCommand("validate", args)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok (%d pipelines)\n", path, len(cfg.Pipelines))
	return nil
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, _, err := configCommand("run", args)
	if err != nil {
		return err
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, stderr)
	if err != nil {
		return err
	}
	defer log.Sync()
	setMemoryLimit()

	a, err := app.Open(ctx, log, cfg, app.Options{})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// setMemoryLimit tells the Go runtime about the container's memory limit
// (90% of it, leaving room for what the runtime does not count), unless
// GOMEMLIMIT says otherwise: the GC then works harder near the limit
// instead of letting the container be killed.
func setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if limit := source.MemoryLimit(); limit > 0 {
		debug.SetMemoryLimit(limit / 10 * 9)
	}
}
