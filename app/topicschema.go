package app

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/mapping"
	"github.com/pubsink/pubsink/source"
)

// A pipeline that reads its topic's schema (payload.schema: topic) learns
// the schema only from its messages, so a placeholder or expression that
// does not fit it would dead-letter every message. validate and run's
// start-up fetch the topic's schema and check the mapping against every
// revision messages can still carry: every revision the schema has (Pub/Sub
// keeps at most 20; a deleted revision's messages are dead-lettered
// whatever the mapping). A problem with every revision is an error (exit
// 2); with some of them a warning that names them.

// revisionLister lists a schema's revisions (source.Schemas).
type revisionLister interface {
	List(ctx context.Context, name string) ([]source.Schema, error)
}

// topicSchemaCheck is what checking a pipeline against its topic's schema
// found: problems with every revision (errors) and with some (warnings),
// their paths in the file (pipelines[i]...).
type topicSchemaCheck struct {
	errors, warnings config.Problems
}

// checkTopicSchema checks pipeline i (pc) against schema (the full name
// its topic names; "" none) of topic.
func checkTopicSchema(ctx context.Context, revs revisionLister, i int, pc config.Pipeline, topic, schema string) (topicSchemaCheck, error) {
	var out topicSchemaCheck
	at := fmt.Sprintf("pipelines[%d].", i)
	// A topic without a schema is a warning, not an error: its messages
	// are dead-lettered as schema_unavailable, as the reference has always
	// said, and a schema may be given to the topic while run runs.
	switch schema {
	case "":
		out.warnings = append(out.warnings, config.Problem{Path: at + "payload.schema",
			Message: fmt.Sprintf("topic %s has no schema, so its messages carry none to decode them with (each is dead-lettered as schema_unavailable): give the topic a schema, or name a schema file (payload.schema: FILE)", topic)})
		return out, nil
	case source.DeletedSchema:
		out.warnings = append(out.warnings, config.Problem{Path: at + "payload.schema",
			Message: fmt.Sprintf("the schema of topic %s was deleted (its messages are dead-lettered as schema_unavailable): give the topic a schema, or name a schema file (payload.schema: FILE)", topic)})
		return out, nil
	}
	list, err := revs.List(ctx, schema)
	if err != nil {
		return out, err
	}
	if len(list) == 0 {
		return out, fmt.Errorf("schema %s has no revisions", schema)
	}
	type seen struct {
		p    config.Problem
		revs []string
	}
	var order []string
	found := map[string]*seen{}
	for _, rev := range list {
		ps, err := mapping.CheckRevision(pc, rev)
		if err != nil {
			out.warnings = append(out.warnings, config.Problem{Path: at + "payload.schema",
				Message: fmt.Sprintf("revision %s of schema %s does not compile (%v): its messages cannot be decoded", rev.Revision, schema, err)})
			continue
		}
		for _, p := range ps {
			k := p.Path + "\x00" + p.Message
			if found[k] == nil {
				found[k] = &seen{p: p}
				order = append(order, k)
			}
			found[k].revs = append(found[k].revs, rev.Revision)
		}
	}
	guarded := hasTested(pc)
	for _, k := range order {
		f := found[k]
		p := config.Problem{Path: at + f.p.Path, Message: f.p.Message}
		if m := noFieldRE.FindStringSubmatch(p.Message); m != nil && guarded[m[1]] && len(f.revs) == len(list) {
			p.Message += fmt.Sprintf(" (with every revision of the topic's schema %s; the pipeline tests the field with has(), so it is taken as ready for a revision that will have it)", schema)
			out.warnings = append(out.warnings, p)
			continue
		}
		if len(f.revs) == len(list) {
			p.Message += fmt.Sprintf(" (with every revision of the topic's schema %s: %s)", schema, strings.Join(f.revs, ", "))
			out.errors = append(out.errors, p)
			continue
		}
		p.Message += fmt.Sprintf(" (with revision %s of the %d of the topic's schema %s: messages written with it will fail)",
			strings.Join(f.revs, ", "), len(list), schema)
		out.warnings = append(out.warnings, p)
	}
	return out, nil
}

// topicSchemaTimeout bounds validate's reading of the topic schemas.
const topicSchemaTimeout = 15 * time.Second

// validateTopicSchemas is validate's check of the pipelines that read
// their topic's schema, against Google Cloud or the emulator the
// environment names: errors and warnings as checkTopicSchema's, and a
// warning for each pipeline it could not check (Pub/Sub unreachable, the
// subscription not made yet), which does not fail validate.
func validateTopicSchemas(ctx context.Context, cfg *config.Config) (errs, warnings config.Problems) {
	var pipelines []int
	for i, pc := range cfg.Pipelines {
		if pc.Payload.TopicSchema() {
			pipelines = append(pipelines, i)
		}
	}
	if len(pipelines) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, topicSchemaTimeout)
	defer cancel()
	notChecked := func(i int, err error) {
		warnings = append(warnings, config.Problem{Path: fmt.Sprintf("pipelines[%d].payload.schema", i),
			Message: fmt.Sprintf("the topic's schema was not checked: %v (validate --offline does not try)", err)})
	}
	ps, err := openPubSub(ctx, cfg.Project)
	if err != nil {
		for _, i := range pipelines {
			notChecked(i, err)
		}
		return nil, warnings
	}
	defer ps.Close()
	sc, err := vkit.NewSchemaClient(ctx)
	if err != nil {
		for _, i := range pipelines {
			notChecked(i, fmt.Errorf("pubsub schema client: %w", err))
		}
		return nil, warnings
	}
	defer sc.Close()
	revs := source.NewSchemas(sc)
	for _, i := range pipelines {
		pc := cfg.Pipelines[i]
		found, err := checkPipelineTopicSchema(ctx, ps, revs, cfg, i, pc)
		if err != nil {
			notChecked(i, err)
			continue
		}
		errs = append(errs, found.errors...)
		warnings = append(warnings, found.warnings...)
	}
	return errs, warnings
}

// checkPipelineTopicSchema finds pipeline i's topic (source.topic, or the
// subscription's) and its schema, and checks the pipeline against it.
func checkPipelineTopicSchema(ctx context.Context, ps *pubsub.Client, revs revisionLister, cfg *config.Config, i int, pc config.Pipeline) (topicSchemaCheck, error) {
	topic := ""
	if pc.Source.Topic != "" {
		topic = cfg.TopicName(pc.Source.Topic)
	} else {
		info, err := source.SubscriptionInfo(ctx, ps, cfg.SubscriptionName(pc.Source.Subscription))
		if err != nil {
			return topicSchemaCheck{}, err
		}
		topic = info.Topic
	}
	schema, err := source.TopicSchema(ctx, ps, topic)
	if err != nil {
		return topicSchemaCheck{}, err
	}
	return checkTopicSchema(ctx, revs, i, pc, topic, schema)
}

// checkTopicSchemaAtStart is run's check of pipeline pc (the i-th) against
// its topic's schema: problems with every revision refuse the start
// (exit 2), the others are logged by the caller.
func (a *App) checkTopicSchemaAtStart(ctx context.Context, i int, pc config.Pipeline, topic string) (config.Problems, error) {
	if !pc.Payload.TopicSchema() {
		return nil, nil
	}
	s, err := a.schemaService(ctx)
	if err != nil {
		return nil, err
	}
	revs, ok := s.(revisionLister)
	if !ok {
		return nil, nil // a test's fetcher that cannot list: nothing to check against
	}
	schema, err := source.TopicSchema(ctx, a.pubsub, topic)
	if err != nil {
		return nil, err
	}
	found, err := checkTopicSchema(ctx, revs, i, pc, topic, schema)
	if err != nil {
		return nil, err
	}
	if len(found.errors) > 0 {
		return nil, &ConfigError{found.errors}
	}
	return found.warnings, nil
}

// pipelineIndex is the index of the pipeline named name in cfg (-1: none),
// for its problems' paths.
func pipelineIndex(cfg *config.Config, name string) int {
	for i, p := range cfg.Pipelines {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// noFieldRE finds the field of a "no field" problem (mapping's text for
// a record or message without it).
var noFieldRE = regexp.MustCompile(`no field "([^"]+)" in (?:record|message) `)

// hasRE finds the last field of each has(…) or optional selection (.?f)
// in an expression's text.
var hasRE = regexp.MustCompile(`has\(\s*[\w.?\[\]'"]*?\.\??(\w+)\s*\)|\.\?(\w+)`)

// hasTested is the fields the pipeline's expressions test for presence
// (has(data.note), data.?note): a field no revision has yet, so tested, is
// a mapping written ahead of its schema (the row made only when the field
// is there, a default otherwise), not a mistake that fails every message.
func hasTested(pc config.Pipeline) map[string]bool {
	out := map[string]bool{}
	add := func(src string) {
		for _, m := range hasRE.FindAllStringSubmatch(src, -1) {
			out[m[1]+m[2]] = true
		}
	}
	add(pc.Filter)
	add(pc.Source.IDTemplate)
	add(pc.Source.TimestampTemplate)
	for _, mc := range pc.Sink.AllMappings() {
		add(mc.When)
		add(mc.Each)
		add(mc.RowKey)
		add(mc.Op)
		add(mc.Timestamp)
		for _, v := range mc.Columns {
			add(v)
		}
	}
	return out
}
