// Command pubsink moves messages from Pub/Sub subscriptions into Bigtable
// with an exactly-once effect. See README.md and docs/reference.md.
//
// This file and cmd_*.go are the CLI alone: they parse flags (with
// github.com/spf13/cobra), turn signals into a context, and map errors to
// exit codes. Every command's work is in package app.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/pubsink/pubsink/app"
)

// Exit codes, as docs/reference.md fixes them.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure
	exitUsage   = 2 // bad configuration or usage
	exitStopped = 3 // a reprocess, an audit or a try stopped before it was done
	exitFound   = 4 // an audit found something missing or doubled
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a command-line mistake: exit 2, pointing at --help.
type usageError struct {
	msg     string
	command string // the command's path, "pubsink run"
}

func (e usageError) Error() string { return e.msg }

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	root := newRoot(ctx, stdout, stderr)
	root.SetArgs(longFlags(args))
	return exitCode(root.Execute(), stderr)
}

// exitCode prints err and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	var ce *app.ConfigError
	var logged *app.LoggedError
	code := exitFailure
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce), errors.As(err, &ue):
		code = exitUsage
	case errors.Is(err, app.ErrReprocessStopped), errors.Is(err, app.ErrAuditStopped), errors.Is(err, app.ErrTryStopped):
		return exitStopped // the command printed it
	case errors.Is(err, app.ErrAuditFindings):
		return exitFound // the summary said it
	case errors.Is(err, app.ErrTestsFailed):
		return exitFailure // the cases and the summary said it
	}
	switch {
	case errors.As(err, &logged):
		// Written to the log already (JSON for Cloud Logging).
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "pubsink: %v\nRun '%s --help' for usage.\n", err, ue.command)
	case errors.As(err, &ce) && ce.IsList():
		fmt.Fprintln(stderr, err)
	default:
		fmt.Fprintf(stderr, "pubsink: %v\n", err)
	}
	return code
}

// longFlags turns Go-flag style single-dash long flags (-config, -dry-run)
// into pflag's double-dash ones, so that command lines written for the
// flag package keep working: "-config f" would otherwise be read as -c
// with the value "onfig". Single-letter flags (-c) and values are left
// alone; everything after "--" too.
func longFlags(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && isLetter(a[1]) && isLetter(a[2]) {
			out[i] = "-" + a
		}
	}
	return out
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' }
