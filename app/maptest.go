package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/maptest"
	"github.com/pubsink/pubsink/sinks"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
)

// ErrTestsFailed is a pubsink test run in which some case failed: the
// command printed each failure and the summary. The CLI exits 1.
var ErrTestsFailed = errors.New("test: some cases failed")

// TestRequest is what `pubsink test` runs.
type TestRequest struct {
	Config string // the configuration file
	Tests  string // the tests file; "" for DefaultTestsPath(Config)
	// Pipeline, Run and Verbose: maptest.Options (Run is a regular
	// expression, "" for every case).
	Pipeline string
	Run      string
	Verbose  bool
}

// DefaultTestsPath is the tests file kept beside the configuration file
// path: NAME.test.yaml for NAME.yaml (the same extension, .yml or none).
func DefaultTestsPath(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + ".test" + ext
}

// TestFile runs the mapping tests of req (package maptest) and writes one
// line per case to out, a diff under each failure, then the summary:
// "PASS: N cases (FILE, T)" or "FAIL: F of N cases failed (FILE, T)". A
// configuration with problems, a tests file with problems (each "FILE:
// path: message (line N)"), or a selection of no case is a *ConfigError;
// a failed case makes it return ErrTestsFailed. Nothing but the files is
// read: no emulator, no network.
func TestFile(ctx context.Context, req TestRequest, out io.Writer) error {
	f, err := loadWithWarnings(req.Config)
	if err != nil {
		return err
	}
	path := req.Tests
	if path == "" {
		path = DefaultTestsPath(req.Config)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if req.Tests == "" {
			err = fmt.Errorf("%w (the default tests file of %s; name another with --tests FILE)", err, req.Config)
		}
		return &ConfigError{fmt.Errorf("tests: %w", err)}
	}
	tf, err := maptest.Parse(data, filepath.Dir(path))
	if err != nil {
		return testsFileError(path, err)
	}
	suite, err := maptest.New(f.cfg, tf, data, SinkLimits)
	if err != nil {
		return testsFileError(path, err)
	}
	o := maptest.Options{Pipeline: req.Pipeline, Verbose: req.Verbose}
	if req.Pipeline != "" && pipelineIndex(f.cfg, req.Pipeline) < 0 {
		return &ConfigError{fmt.Errorf("test: --pipeline %s: no such pipeline in %s", req.Pipeline, req.Config)}
	}
	if req.Run != "" {
		re, err := regexp.Compile(req.Run)
		if err != nil {
			return &ConfigError{fmt.Errorf("test: --run: %w", err)}
		}
		o.Run = re
	}
	n := suite.Selected(o)
	if n == 0 {
		return &ConfigError{fmt.Errorf("test: no case of %s matches --pipeline and --run: nothing was tested", path)}
	}
	sum, err := suite.Run(ctx, o, out)
	if err != nil {
		return err
	}
	took := sum.Elapsed.Round(10 * time.Microsecond)
	if sum.Failed > 0 {
		fmt.Fprintf(out, "FAIL: %d of %d cases failed (%s, %s)\n", sum.Failed, n, path, took)
		return ErrTestsFailed
	}
	fmt.Fprintf(out, "PASS: %s (%s, %s)\n", plural(n, "case"), path, took)
	return nil
}

// testsFileError is the problems of the tests file at path, each line
// naming the file, as a *ConfigError; another error is a runtime failure.
func testsFileError(path string, err error) error {
	var ps config.Problems
	if !errors.As(err, &ps) {
		return err
	}
	return &ConfigError{fileProblems{path, ps}}
}

// fileProblems are the problems of a file other than the configuration:
// each line starts with the file's name.
type fileProblems struct {
	path string
	ps   config.Problems
}

func (f fileProblems) Error() string {
	lines := make([]string, len(f.ps))
	for i, p := range f.ps {
		lines[i] = f.path + ": " + p.String()
	}
	return strings.Join(lines, "\n")
}

func (f fileProblems) Unwrap() error { return f.ps }

// SinkLimits are the row size limits the sink of pc accepts, as run checks
// them before writing: Bigtable's, none for stdout.
func SinkLimits(pc config.Pipeline) sinks.Limits {
	if pc.Sink.Type == config.SinkStdout {
		return sinks.Limits{}
	}
	return btsink.Limits
}
