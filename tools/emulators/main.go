package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

// Exit codes (docs/reference.md, "Local emulators").
const (
	exitStopped = 0 // stopped by SIGINT or SIGTERM, both emulators ended
	exitFailed  = 1 // an emulator could not start, or exited on its own
	exitUsage   = 2 // bad flags
)

// startTimeout bounds the start of both emulators: the first start on a
// machine also compiles the Pub/Sub fix (a few seconds of javac).
const startTimeout = 2 * time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// errReported is a usage error that the flag package has printed already.
var errReported = errors.New("usage error reported")

type flags struct {
	host                     string
	pubsubPort, bigtablePort int
	logDir                   string
	printOnly                bool
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("emulators", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./tools/emulators [--host H] [--pubsub-port P] [--bigtable-port B] [--log-dir D] [--print-only]")
		fmt.Fprintln(stderr, "Starts the Pub/Sub emulator (with pubsink's fix) and the Bigtable emulator, prints their export lines, runs until SIGINT/SIGTERM.")
		fs.PrintDefaults()
	}
	fs.StringVar(&f.host, "host", "127.0.0.1", "address both emulators listen on (0.0.0.0: every interface)")
	fs.IntVar(&f.pubsubPort, "pubsub-port", 0, "port of the Pub/Sub emulator (0: a free port)")
	fs.IntVar(&f.bigtablePort, "bigtable-port", 0, "port of the Bigtable emulator (0: a free port)")
	fs.StringVar(&f.logDir, "log-dir", "", "directory that keeps the emulators' logs (default: temporary files, removed at the stop)")
	fs.BoolVar(&f.printOnly, "print-only", false, "print the export lines of --pubsub-port and --bigtable-port (both needed) and exit; start nothing")
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			err = errReported // the flag package printed it and the usage
		}
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q: the tool takes flags only (see --help)", fs.Arg(0))
	}
	for _, p := range []struct {
		name string
		port int
	}{{"--pubsub-port", f.pubsubPort}, {"--bigtable-port", f.bigtablePort}} {
		if p.port < 0 || p.port > 65535 {
			return f, fmt.Errorf("%s %d: a port is 1-65535, or 0 for a free one", p.name, p.port)
		}
		if f.printOnly && p.port == 0 {
			return f, fmt.Errorf("--print-only needs %s: a free port is known only once the emulator runs", p.name)
		}
	}
	return f, nil
}

// run is the whole command: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitStopped
	}
	if errors.Is(err, errReported) {
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "emulators: %v\n", err)
		return exitUsage
	}
	psOpts := emulator.Options{ListenHost: f.host, Port: f.pubsubPort, LogDir: f.logDir}
	btOpts := emulator.Options{ListenHost: f.host, Port: f.bigtablePort, LogDir: f.logDir}
	if f.printOnly {
		printExports(stdout, psOpts.Addr(strconv.Itoa(f.pubsubPort)), btOpts.Addr(strconv.Itoa(f.bigtablePort)))
		return exitStopped
	}

	ps, bt, err := start(ctx, psOpts, btOpts)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "emulators: stopped during start-up")
			return exitStopped
		}
		fmt.Fprintf(stderr, "emulators: %v\n", explain(err))
		return exitFailed
	}
	fmt.Fprintf(stderr, "emulators: Pub/Sub (with the fix) on %s, pid %d, log %s\n", ps.Host, ps.PID(), ps.LogPath())
	fmt.Fprintf(stderr, "emulators: Bigtable on %s, pid %d, log %s\n", bt.Host, bt.PID(), bt.LogPath())
	fmt.Fprintln(stderr, "emulators: with the gcloud line exported: gcloud pubsub topics publish TOPIC --project=PROJECT --message='...'")
	fmt.Fprintln(stderr, "emulators: running; SIGINT (Ctrl-C) or SIGTERM stops both")
	// Last, so that whoever waits for these lines finds the above said.
	printExports(stdout, ps.Host, bt.Host)

	code := exitStopped
	select {
	case <-ctx.Done():
	case <-ps.Exited():
		fmt.Fprintf(stderr, "emulators: the Pub/Sub emulator exited on its own; log %s\n", ps.LogPath())
		code = exitFailed
	case <-bt.Exited():
		fmt.Fprintf(stderr, "emulators: the Bigtable emulator exited on its own; log %s\n", bt.LogPath())
		code = exitFailed
	}
	// Stop reports an emulator that had already exited; that was said above.
	psErr, btErr := ps.Stop(), bt.Stop()
	if code == exitStopped {
		for _, err := range []error{psErr, btErr} {
			if err != nil {
				fmt.Fprintf(stderr, "emulators: %v\n", err)
				code = exitFailed
			}
		}
	}
	fmt.Fprintln(stderr, "emulators: stopped")
	return code
}

// start starts Bigtable (quick) and then Pub/Sub, and stops the first when
// the second fails, so that a failure leaves nothing running.
func start(ctx context.Context, psOpts, btOpts emulator.Options) (*emulator.PubSub, *emulator.Bigtable, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	bt, err := emulator.StartBigtable(ctx, btOpts)
	if err != nil {
		return nil, nil, err
	}
	ps, err := emulator.StartPubSub(ctx, psOpts)
	if err != nil {
		_ = bt.Stop()
		return nil, nil, err
	}
	return ps, bt, nil
}

// explain adds what the user can do to an error that has a remedy here.
func explain(err error) error {
	switch {
	case errors.Is(err, emulator.ErrPortInUse):
		return fmt.Errorf("%w (give another port with --pubsub-port or --bigtable-port, or 0 for a free one)", err)
	default:
		return err
	}
}

// printExports writes the lines a shell evaluates: the emulator variables
// that pubsink's clients read, and the gcloud endpoint override that makes
// `gcloud pubsub ...` talk to the emulator without credentials. They are
// written at once, so that a reader sees both lines or none.
func printExports(w io.Writer, pubsubHost, bigtableHost string) {
	fmt.Fprintf(w, "export PUBSUB_EMULATOR_HOST=%s BIGTABLE_EMULATOR_HOST=%s\nexport CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=http://%s/ CLOUDSDK_AUTH_DISABLE_CREDENTIALS=true\n",
		pubsubHost, bigtableHost, pubsubHost)
}
