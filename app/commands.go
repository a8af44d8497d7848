package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/deadletter/inspect"
	"github.com/pubsink/pubsink/deadletter/replay"
	"github.com/pubsink/pubsink/docs"
	"github.com/pubsink/pubsink/internal/buildinfo"
	"github.com/pubsink/pubsink/internal/logging"
	"github.com/pubsink/pubsink/mapping"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
)

// The commands of the CLI, one function each. main parses the flags and
// maps the returned error to an exit code: a *ConfigError exits 2, any
// other error 1.

// ConfigError is a configuration that cannot be used: unreadable, with
// problems (config.Problems), or not matching what the command was asked
// for. The CLI exits 2 with it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// IsList reports whether the error is a list of problems, one "path:
// message" per line, which the CLI prints as it is.
func (e *ConfigError) IsList() bool {
	var ps config.Problems
	return errors.As(e.Err, &ps)
}

// LoadConfig loads and validates the file at path; every error it returns
// is a *ConfigError.
func LoadConfig(path string) (*config.Config, error) {
	f, err := loadWithWarnings(path)
	if err != nil {
		return nil, err
	}
	return f.cfg, nil
}

// loadedFile is a configuration file loaded: the configuration, its
// warnings (config.Warnings) and its bytes, which locate later problems.
type loadedFile struct {
	cfg      *config.Config
	warnings config.Problems
	data     []byte
}

// loadWithWarnings is LoadConfig, with the file's warnings and bytes.
func loadWithWarnings(path string) (*loadedFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{readError(path, err)}
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, &ConfigError{err}
	}
	cfg.ResolvePaths(filepath.Dir(path))
	ps := missingSchemaFiles(cfg)
	for _, mp := range mappingProblems(cfg) {
		// A missing file is reported once, in the words that name its directory.
		if !slices.ContainsFunc(ps, func(p config.Problem) bool { return p.Path == mp.Path }) {
			ps = append(ps, mp)
		}
	}
	if len(ps) > 0 {
		ps.Locate(data)
		return nil, &ConfigError{ps}
	}
	return &loadedFile{cfg: cfg, warnings: config.Warnings(cfg, data), data: data}, nil
}

// missingSchemaFiles reports each schema file (payload.schema, resolved
// against the configuration's directory) that does not exist, naming the
// directory it was looked for in: a path the user thought relative to the
// working directory is then plain to see.
func missingSchemaFiles(cfg *config.Config) config.Problems {
	var ps config.Problems
	for i, p := range cfg.Pipelines {
		if p.Payload.Schema == "" || p.Payload.TopicSchema() {
			continue
		}
		if _, err := os.Stat(p.Payload.Schema); errors.Is(err, fs.ErrNotExist) {
			ps = append(ps, config.Problem{Path: fmt.Sprintf("pipelines[%d].payload.schema", i),
				Message: fmt.Sprintf("no file %s in %s (a relative path is relative to the configuration file's directory)",
					filepath.Base(p.Payload.Schema), absDir(p.Payload.Schema))})
		}
	}
	return ps
}

// absDir is the directory of path, absolute when the working directory is
// known.
func absDir(path string) string {
	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// DefaultConfigPath is the configuration file of a command given neither
// --config nor $PUBSINK_CONFIG.
const DefaultConfigPath = "/etc/pubsink/config.yaml"

// readError is the failure to read the configuration file at path. The
// default path missing means that no file was named: say how to name one.
func readError(path string, err error) error {
	if path == DefaultConfigPath && errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("config: no configuration file given, and the default %s does not exist: name one with --config FILE (-c FILE) or $PUBSINK_CONFIG", path)
	}
	return fmt.Errorf("config: %w", err)
}

// Validate loads the file at path and reports it on out: its warnings, one
// "warning: path: message (line N)" per line, then "PATH: ok (N
// pipelines)" ("1 pipeline"). Warnings do not make it fail.
//
// Unless offline, it also checks the pipelines that read their topic's
// schema against every revision of it (validateTopicSchemas), reading
// Pub/Sub; what it cannot reach is a warning.
func Validate(ctx context.Context, path string, offline bool, out io.Writer) error {
	f, err := loadWithWarnings(path)
	if err != nil {
		return err
	}
	cfg, warnings := f.cfg, f.warnings
	if ps := localProblems(cfg); len(ps) > 0 {
		return &ConfigError{ps}
	}
	if !offline {
		errs, more := validateTopicSchemas(ctx, cfg)
		errs.Locate(f.data)
		more.Locate(f.data)
		if len(errs) > 0 {
			return &ConfigError{errs}
		}
		warnings = append(warnings, more...)
	} else {
		skipped := offlineSkips(cfg)
		skipped.Locate(f.data)
		warnings = append(warnings, skipped...)
	}
	for _, w := range warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	fmt.Fprintf(out, "%s: ok (%s)\n", path, plural(len(cfg.Pipelines), "pipeline"))
	return nil
}

// offlineSkips are the warnings of validate --offline: a pipeline that
// reads its topic's schema was not checked against it, which a plain "ok"
// would hide.
func offlineSkips(cfg *config.Config) config.Problems {
	var ps config.Problems
	for i, p := range cfg.Pipelines {
		if p.Payload.Schema == config.SchemaTopic {
			ps = append(ps, config.Problem{Path: fmt.Sprintf("pipelines[%d].payload.schema", i),
				Message: "the topic's schema was not checked (--offline): validate without --offline checks the mapping against every revision of it"})
		}
	}
	return ps
}

// plural is n with noun, in the plural unless n is 1: "1 pipeline", "3
// pipelines".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// localProblems are what validate can check on this machine beyond the
// file itself and its mapping (which every command checks), without any
// service: the directory of every dead-letter file must exist (run would
// fail to open the file; nothing creates the directory).
func localProblems(cfg *config.Config) config.Problems {
	var ps config.Problems
	for i, p := range cfg.Pipelines {
		if p.DeadLetter.File == "" {
			continue
		}
		dir := filepath.Dir(p.DeadLetter.File)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			ps = append(ps, config.Problem{Path: fmt.Sprintf("pipelines[%d].dead_letter.file", i),
				Message: fmt.Sprintf("directory %s does not exist: create it, or name a file in one that does (a relative path is relative to the configuration file's directory)", absDir(p.DeadLetter.File))})
		}
	}
	return ps
}

// mappingProblems compiles the mapping of every pipeline as run does
// (mapping.New: schema files, expressions, placeholders' paths against a
// schema file), and returns its problems with their full key paths. Every
// command that loads the file checks them, so that run refuses with exit 2
// what validate reports.
func mappingProblems(cfg *config.Config) config.Problems {
	var ps config.Problems
	for i, p := range cfg.Pipelines {
		_, err := mapping.New(p, nil, btsink.Limits)
		var mps config.Problems
		switch {
		case errors.As(err, &mps):
			for _, mp := range mps {
				mp.Path = fmt.Sprintf("pipelines[%d].%s", i, mp.Path)
				ps = append(ps, mp)
			}
		case err != nil:
			ps = append(ps, config.Problem{Path: fmt.Sprintf("pipelines[%d]", i), Message: err.Error()})
		}
	}
	return ps
}

// LoggedError is an error the command has already written to its log, as
// a JSON line when the log is JSON (Cloud Logging then sees the failure
// with its severity, not as plain text): the CLI prints nothing more and
// maps Err to the exit code.
type LoggedError struct{ Err error }

func (e *LoggedError) Error() string { return e.Err.Error() }
func (e *LoggedError) Unwrap() error { return e.Err }

// RunFile runs every pipeline of the file at path until ctx ends (SIGTERM,
// SIGINT), logging to logs; see App.Run for the order of the stop. A
// failure is logged (LoggedError): with the file's log settings once they
// are known, as JSON at info level before (a file that cannot be loaded).
func RunFile(ctx context.Context, path string, logs io.Writer) error {
	f, err := loadWithWarnings(path)
	if err != nil {
		log, _ := logging.New("info", "json", logs) // fixed arguments: cannot fail
		log.Error("cannot start: the configuration is not usable", zap.String("config", path), zap.Error(err))
		return &LoggedError{err}
	}
	cfg, warnings := f.cfg, f.warnings
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, logs)
	if err != nil {
		return err // unreachable: validation checked level and format
	}
	defer log.Sync()
	for _, w := range warnings {
		log.Warn("configuration: "+w.Message, zap.String("key", w.Path), zap.Int("line", w.Line))
	}
	offset, now, err := clockFromEnv()
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return &LoggedError{err}
	}
	if offset != 0 {
		log.Warn("the wall clock is shifted by $"+ClockOffsetEnv+" (a seam for fault campaigns): every time this process stamps into the state table or a dead-letter copy, or compares with another process's or a service's, is off by it",
			zap.String("offset", offset.String()))
	}
	limit := memoryLimit()
	setMemoryLimit(limit)

	a, err := Open(ctx, log, cfg, Options{MemoryLimit: limit, Now: now})
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM while the start-up checks waited: nothing was
			// received yet, so the stop is clean.
			log.Info("stopped during start-up", zap.Error(err))
			return nil
		}
		log.Error("cannot start", zap.Error(err))
		return &LoggedError{err}
	}
	if err := a.Run(ctx); err != nil {
		log.Error("stopped on a failure", zap.Error(err))
		return &LoggedError{err}
	}
	return nil
}

// SetupFile creates what the file at path names and is missing (Setup),
// against Google Cloud or the emulators the environment names.
func SetupFile(ctx context.Context, path string, out io.Writer) error {
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	ps, admin, err := setupClients(ctx, cfg)
	if err != nil {
		return err
	}
	defer ps.Close()
	if err := Setup(ctx, cfg, ps, admin, out); err != nil {
		return err
	}
	fmt.Fprintln(out, "setup: done")
	return nil
}

// setupClients opens the Pub/Sub client and the Bigtable admin clients of
// setup and its plan, against Google Cloud or the emulators the
// environment names. The caller closes the Pub/Sub client.
func setupClients(ctx context.Context, cfg *config.Config) (*pubsub.Client, Admin, error) {
	ps, err := openPubSub(ctx, cfg.Project)
	if err != nil {
		return nil, nil, err
	}
	admin := func(ctx context.Context, instance string) (*bigtable.AdminClient, error) {
		return openBigtableAdmin(ctx, cfg.Project, instance)
	}
	return ps, admin, nil
}

// ReplayRequest is what `pubsink deadletter replay` was asked to do.
type ReplayRequest struct {
	Pipeline string // required
	Reason   string // "" replays every reason
	Limit    int    // 0 replays all
	DryRun   bool
}

// ReasonList names the dead-letter reasons, for help texts.
func ReasonList() string {
	names := make([]string, len(deadletter.Reasons))
	for i, r := range deadletter.Reasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// ReplayFile republishes a pipeline's dead-lettered messages to its topic.
// It prints one line per message to out, then the summary, and fails when
// some could not be replayed. A request that does not fit the file (no such
// pipeline, no output, an unknown reason) is a *ConfigError.
func ReplayFile(ctx context.Context, path string, req ReplayRequest, out, logs io.Writer) error {
	const command = "deadletter replay"
	var opts replay.Options
	var err error
	if opts.Reason, err = parseReason(command, req.Reason); err != nil {
		return err
	}
	opts.Limit, opts.DryRun, opts.Out = req.Limit, req.DryRun, out
	// Replay republishes to the pipeline's topic whatever the output.
	job, err := openDeadLetter(ctx, command, path, req.Pipeline, true, logs)
	if err != nil {
		return err
	}
	defer job.close()

	sum, err := replay.Run(ctx, job.log, job.cfg, job.p, job.clients, opts)
	if sum.To != "" { // the replay started
		fmt.Fprint(out, sum)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if sum.Failed > 0 {
		return fmt.Errorf("%s: %d dead letters could not be replayed and were left in place", command, sum.Failed)
	}
	return nil
}

// DefaultListLimit is the default of `deadletter list --limit`.
const DefaultListLimit = inspect.DefaultLimit

// ListRequest is what `pubsink deadletter list` was asked to do.
type ListRequest struct {
	Pipeline string // required
	Reason   string // "" lists every reason
	Limit    int    // 0 lists all
	JSON     bool
}

// ListFile prints the copies in a pipeline's dead-letter output, one line
// (or, with JSON, one JSON object) per copy to out, and leaves them in
// place (see package deadletter/inspect for what a look does to a topic's
// subscription). The summary line goes to out after the copies, or to logs
// with JSON, so that out holds JSON objects only. A request that does not
// fit the file is a *ConfigError, as for ReplayFile.
func ListFile(ctx context.Context, path string, req ListRequest, out, logs io.Writer) error {
	const command = "deadletter list"
	opts := inspect.Options{Limit: req.Limit, JSON: req.JSON, Out: out}
	var err error
	if opts.Reason, err = parseReason(command, req.Reason); err != nil {
		return err
	}
	job, err := openDeadLetter(ctx, command, path, req.Pipeline, false, logs)
	if err != nil {
		return err
	}
	defer job.close()
	sum, err := inspect.List(ctx, job.log, job.cfg, job.p, job.clients, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	summaryTo := out
	if req.JSON {
		summaryTo = logs
	}
	fmt.Fprint(summaryTo, sum)
	return nil
}

// ShowRequest is what `pubsink deadletter show` was asked to do.
type ShowRequest struct {
	Pipeline  string // required
	MessageID string // the original's message ID, as list prints it
	JSON      bool
}

// ShowFile prints the copy of one message in a pipeline's dead-letter
// output whole, and leaves it in place. It fails (inspect.ErrNotFound) when
// the output holds none.
func ShowFile(ctx context.Context, path string, req ShowRequest, out, logs io.Writer) error {
	const command = "deadletter show"
	job, err := openDeadLetter(ctx, command, path, req.Pipeline, false, logs)
	if err != nil {
		return err
	}
	defer job.close()
	if err := inspect.Show(ctx, job.log, job.cfg, job.p, job.clients, req.MessageID, req.JSON, out); err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	return nil
}

// parseReason reads a --reason: "" is none, a name not among the reasons is
// a *ConfigError naming them.
func parseReason(command, s string) (deadletter.Reason, error) {
	if s == "" {
		return "", nil
	}
	r, ok := deadletter.ParseReason(s)
	if !ok {
		return "", &ConfigError{fmt.Errorf("%s: --reason %q is not one of %s", command, s, ReasonList())}
	}
	return r, nil
}

// deadLetterJob is what a deadletter command works on: the pipeline, the
// log, and the clients its output needs, which close closes.
type deadLetterJob struct {
	cfg     *config.Config
	p       config.Pipeline
	log     *zap.Logger
	clients deadletter.Clients
	closers []func() error
}

func (j *deadLetterJob) close() {
	for _, c := range j.closers {
		c()
	}
	j.log.Sync()
}

// openDeadLetter loads the file at path, finds pipeline and its dead-letter
// output, and opens the clients the command needs: Pub/Sub for a topic
// output or when needPubSub (replay republishes), Bigtable (state.instance,
// through state.app_profile) for a table output. A file output needs none,
// so that looking at one needs no credentials. A pipeline the file lacks,
// or one without an output, is a *ConfigError.
func openDeadLetter(ctx context.Context, command, path, pipeline string, needPubSub bool, logs io.Writer) (*deadLetterJob, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	var p *config.Pipeline
	for i := range cfg.Pipelines {
		if cfg.Pipelines[i].Name == pipeline {
			p = &cfg.Pipelines[i]
		}
	}
	if p == nil {
		return nil, &ConfigError{fmt.Errorf("%s: %s has no pipeline %q", command, path, pipeline)}
	}
	kind := deadletter.Kind(p.DeadLetter)
	if kind == "" {
		return nil, &ConfigError{fmt.Errorf("%s: pipeline %q: %w", command, pipeline, deadletter.ErrNoOutput)}
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, logs)
	if err != nil {
		return nil, err
	}
	job := &deadLetterJob{cfg: cfg, p: *p, log: log}
	if needPubSub || kind == deadletter.KindTopic {
		ps, err := openPubSub(ctx, cfg.Project)
		if err != nil {
			job.close()
			return nil, err
		}
		job.clients.PubSub = ps
		job.closers = append(job.closers, ps.Close)
	}
	if kind == deadletter.KindTable {
		bt, err := openBigtable(ctx, cfg.Project, cfg.State.Instance, cfg.State.AppProfile, nil)
		if err != nil {
			job.close()
			return nil, err
		}
		job.clients.Bigtable = bt
		job.closers = append(job.closers, bt.Close)
	}
	return job, nil
}

// ConfigSchema writes the JSON Schema of the configuration file (draft-07)
// to out: docs/pubsink.schema.json as the binary was built with it.
func ConfigSchema(out io.Writer) error {
	_, err := out.Write(docs.ConfigSchema)
	return err
}

// TestsSchema writes the JSON Schema of pubsink test's tests file
// (docs/pubsink-test.schema.json) to out.
func TestsSchema(out io.Writer) error {
	_, err := out.Write(docs.TestsSchema)
	return err
}

// Version is the line `pubsink version` prints: the module version, the
// VCS revision and the Go version of the binary.
func Version() string { return buildinfo.Read().String() }
