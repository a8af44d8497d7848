package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/logging"
)

// runInproc is `bench inproc`: pubsink run, in this process, with
// profiles. It does what the pubsink binary's run command does (load the
// config, build the logger, app.Open, App.Run until SIGTERM), so a profile
// of it is a profile of pubsink.
func runInproc(args []string) int {
	var path *string
	return subcommand("inproc", args, func(fs *flag.FlagSet) {
		path = fs.String("config", "", "configuration file")
	}, func(ctx context.Context, pf *profileFlags) error {
		return inproc(ctx, *path, pf)
	})
}

// subcommand runs a helper subcommand of the bench (inproc, minimal,
// naive): its flags (define), then run with a context that SIGTERM or
// SIGINT ends and the profile flags every subcommand takes (run starts the
// profiles where its work begins). It returns the exit code: 2 for bad flags, 1 when run
// fails (its error on stderr, after the subcommand's name).
func subcommand(name string, args []string, define func(*flag.FlagSet), run func(context.Context, *profileFlags) error) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	define(fs)
	var pf profileFlags
	pf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, &pf); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

func inproc(ctx context.Context, path string, pf *profileFlags) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, os.Stderr)
	if err != nil {
		return err
	}
	defer log.Sync()
	a, err := app.Open(ctx, log, cfg, app.Options{})
	if err != nil {
		return err
	}
	stopProfiles, err := pf.start()
	if err != nil {
		return err
	}
	err = a.Run(ctx)
	return errors.Join(err, stopProfiles())
}

// profileFlags are -cpuprofile and -allocprofile.
type profileFlags struct {
	cpu, allocs string
}

func (p *profileFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile here")
	fs.StringVar(&p.allocs, "allocprofile", "", "write an alloc profile here on exit")
}

// start starts the CPU profile; the function it returns stops it and
// writes the alloc profile.
func (p *profileFlags) start() (func() error, error) {
	var cpu *os.File
	if p.cpu != "" {
		f, err := os.Create(p.cpu)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cpu = f
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if p.allocs != "" {
			f, err := os.Create(p.allocs)
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			runtime.GC()
			errs = append(errs, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		}
		return errors.Join(errs...)
	}, nil
}
