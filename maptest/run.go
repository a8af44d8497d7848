package maptest

// Running a tests file: each case's pipeline compiled once, as run
// compiles it, each case's message mapped, its outcome compared with the
// expectation, and one line per case written, with a diff for a failure.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/mapping/schema"
	"github.com/pubsink/pubsink/sinks"
	"github.com/pubsink/pubsink/source"
)

// Options select the cases to run and how much to print.
type Options struct {
	// Pipeline, when set, runs only the cases of this pipeline.
	Pipeline string
	// Run, when set, runs only the cases whose name it matches.
	Run *regexp.Regexp
	// Verbose prints each case's outcome under its line, passed or not.
	Verbose bool
}

// Summary counts the cases run.
type Summary struct {
	Passed, Failed int
	Elapsed        time.Duration
}

// Suite is a tests file compiled against a configuration: the mapping of
// every pipeline its cases name, compiled once. It is not safe for
// concurrent use.
type Suite struct {
	cases   []Case
	pipes   map[string]*config.Pipeline
	mappers map[string]*mapping.Mapper
}

// New compiles the mappings of the pipelines f's cases name, with the
// sizes limits gives (those run uses, so that a too_large case is what run
// would do). Its error is config.Problems (a case naming no pipeline of
// cfg, a schema revision given to a pipeline that reads none) when the
// tests do not fit the configuration; data is the tests file, which
// locates them. cfg must have been validated (app's loading does).
func New(cfg *config.Config, f *File, data []byte, limits func(config.Pipeline) sinks.Limits) (*Suite, error) {
	s := &Suite{cases: f.Cases, pipes: map[string]*config.Pipeline{}, mappers: map[string]*mapping.Mapper{}}
	var names []string
	for i := range cfg.Pipelines {
		s.pipes[cfg.Pipelines[i].Name] = &cfg.Pipelines[i]
		names = append(names, cfg.Pipelines[i].Name)
	}
	var ps config.Problems
	revs := revisions{}
	for _, c := range f.Cases {
		pc, ok := s.pipes[c.Pipeline]
		if !ok {
			msg := fmt.Sprintf("no pipeline %q in the configuration; its pipelines are: %s", c.Pipeline, strings.Join(names, ", "))
			if near := schema.Closest(c.Pipeline, names); near != "" {
				msg = fmt.Sprintf("no pipeline %q in the configuration (did you mean %s?)", c.Pipeline, near)
			}
			ps = append(ps, config.Problem{Path: c.path + ".pipeline", Message: msg})
			continue
		}
		if r := c.Message.Schema; r != nil {
			if !pc.Payload.TopicSchema() {
				ps = append(ps, config.Problem{Path: c.path + ".message.schema",
					Message: fmt.Sprintf("pipeline %s does not read its topic's schema (payload.schema: topic): its messages name no revision", pc.Name)})
				continue
			}
			if err := revs.add(r); err != nil {
				ps = append(ps, config.Problem{Path: c.path + ".message.schema.revision", Message: err.Error()})
			}
		}
	}
	if len(ps) > 0 {
		ps.Locate(data)
		return nil, ps
	}
	for _, c := range f.Cases {
		if s.mappers[c.Pipeline] != nil {
			continue
		}
		pc := s.pipes[c.Pipeline]
		var schemas mapping.Schemas
		if pc.Payload.TopicSchema() {
			schemas = revs
		}
		m, err := mapping.New(*pc, schemas, limits(*pc))
		if err != nil {
			// Not the tests file's problems (%v, not %w): the configuration
			// was validated, so this is a schema file changed since.
			return nil, fmt.Errorf("pipeline %s: %v", pc.Name, err)
		}
		s.mappers[c.Pipeline] = m
	}
	return s, nil
}

// Selected counts the cases o selects.
func (s *Suite) Selected(o Options) int {
	n := 0
	for i := range s.cases {
		if o.selects(&s.cases[i]) {
			n++
		}
	}
	return n
}

func (o Options) selects(c *Case) bool {
	return (o.Pipeline == "" || c.Pipeline == o.Pipeline) && (o.Run == nil || o.Run.MatchString(c.Name))
}

// Run runs the cases o selects, in the file's order, and writes one line
// per case to out ("ok   [pipeline] name" or "FAIL [pipeline] name", a
// failure followed by its diff), but no summary: the caller writes it. It
// returns when every case ran, or ctx ended.
func (s *Suite) Run(ctx context.Context, o Options, out io.Writer) (Summary, error) {
	var sum Summary
	start := time.Now()
	for i := range s.cases {
		c := &s.cases[i]
		if !o.selects(c) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		got := s.outcome(ctx, c)
		diff := compare(c, s.pipes[c.Pipeline], got)
		status := "ok  "
		if len(diff) > 0 {
			status = "FAIL"
			sum.Failed++
		} else {
			sum.Passed++
		}
		fmt.Fprintf(out, "%s [%s] %s\n", status, c.Pipeline, c.Name)
		for _, d := range diff {
			fmt.Fprintf(out, "    %s\n", d)
		}
		if o.Verbose {
			fmt.Fprintln(out, "    got:")
			for _, l := range got.lines(s.pipes[c.Pipeline]) {
				fmt.Fprintf(out, "      %s\n", l)
			}
		}
	}
	sum.Elapsed = time.Since(start)
	return sum, nil
}

// outcome maps the case's message as the pipeline's run would.
func (s *Suite) outcome(ctx context.Context, c *Case) *outcome {
	m := &c.Message
	attrs := make(map[string]string, len(m.Attributes)+3)
	for k, v := range m.Attributes {
		attrs[k] = v
	}
	if r := m.Schema; r != nil {
		attrs[source.SchemaNameAttribute] = r.Name
		attrs[source.SchemaRevisionAttribute] = r.Revision
		attrs[source.SchemaEncodingAttribute] = map[string]string{"json": "JSON", "binary": "BINARY"}[r.Encoding]
	}
	msg := &source.Message{ID: m.MessageID, Data: m.Payload, Attributes: attrs, PublishTime: m.published}
	var r mapping.Result
	err := s.mappers[c.Pipeline].Map(ctx, msg, &r)
	got := &outcome{result: r}
	var bad *mapping.BadInput
	switch {
	case errors.As(err, &bad):
		// The text the dead-letter copy's pubsink_error holds.
		got.deadLetter, got.errText = bad.Reason, deadletter.ErrorText(bad.Err)
	case err != nil:
		got.err = err
	}
	return got
}

// revisions are the topic schema revisions the cases give, as
// mapping.Schemas: the mapping fetches them here, not from Pub/Sub.
type revisions map[string]source.Schema

func (rs revisions) add(r *Revision) error {
	key := r.Name + "@" + r.Revision
	s := source.Schema{Name: r.Name, Revision: r.Revision, Type: r.kind, Definition: r.definition}
	if old, ok := rs[key]; ok && old != s {
		return fmt.Errorf("revision %s of %s is given by another case with another file: a revision never changes", r.Revision, r.Name)
	}
	rs[key] = s
	return nil
}

// Get returns the revision a case gave; any other is gone, as the Schema
// API's NotFound would say.
func (rs revisions) Get(_ context.Context, name, revision string) (source.Schema, error) {
	s, ok := rs[name+"@"+revision]
	if !ok {
		return source.Schema{}, fmt.Errorf("%w: no case of the tests file gives revision %s of %s", source.ErrSchemaGone, revision, name)
	}
	return s, nil
}
