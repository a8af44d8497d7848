package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/setupplan"
)

// Formats of setup --plan.
const (
	PlanText      = "text"
	PlanJSON      = "json"
	PlanTerraform = "terraform"
	PlanGcloud    = "gcloud"
)

// PlanFormats are the formats setup --plan prints.
var PlanFormats = []string{PlanText, PlanJSON, PlanTerraform, PlanGcloud}

// PlanOptions is what `pubsink setup --plan` was asked for.
type PlanOptions struct {
	Format  string // one of PlanFormats
	Offline bool   // every object as new; no network
	// Accounts are the commands' service accounts (--service-account,
	// setupplan.ParseAccount) whose roles the Terraform file grants;
	// PlanTerraform only.
	Accounts []setupplan.Account
}

// ServiceAccountCommands are the commands that --service-account names
// (setupplan.Commands).
var ServiceAccountCommands = setupplan.Commands

// ParseServiceAccount reads a --service-account value, COMMAND or
// COMMAND=EMAIL (setupplan.ParseAccount).
func ParseServiceAccount(s string) (setupplan.Account, error) { return setupplan.ParseAccount(s) }

// PlanFile prints what setup would create or change for the file at path,
// changing nothing: compared with the live project (the emulators the
// environment names), or, offline, everything as new.
func PlanFile(ctx context.Context, path string, opts PlanOptions, out io.Writer) error {
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	if len(opts.Accounts) > 0 {
		if format(opts.Format) != PlanTerraform {
			return &ConfigError{errors.New("setup: --service-account is a flag of --format terraform")}
		}
		return planTerraform(cfg, opts.Accounts, out)
	}
	if f := format(opts.Format); opts.Offline || f == PlanTerraform || f == PlanGcloud {
		return Plan(ctx, cfg, nil, nil, format(opts.Format), out)
	}
	ps, admin, err := setupClients(ctx, cfg)
	if err != nil {
		return err
	}
	defer ps.Close()
	return Plan(ctx, cfg, ps, admin, format(opts.Format), out)
}

func format(f string) string {
	if f == "" {
		return PlanText
	}
	return f
}

// Plan prints the plan of setup for cfg in format (PlanFormats), changing
// nothing. PlanTerraform and PlanGcloud print the whole plan and read
// nothing. With ps nil (offline) every object is new. Each object
// is judged by the code that setup applies it with (Setup), which here
// only reads: "exists", "would create …", "would widen …", and what setup
// would refuse as "  drift: …" with its fix. The text ends with a summary
// line. It fails when the live project cannot be read.
func Plan(ctx context.Context, cfg *config.Config, ps *pubsub.Client, admin Admin, format string, out io.Writer) error {
	plan := setupplan.New(cfg)
	if format == PlanTerraform || format == PlanGcloud {
		// What setup creates, as Terraform or commands: the whole plan,
		// whatever exists (Terraform compares with the project itself).
		if err := planErr(plan); err != nil {
			return err
		}
		src := setupplan.Gcloud(plan, cfg.Project)
		if format == PlanTerraform {
			src = setupplan.Terraform(plan, setupplan.Vars{Project: cfg.Project, Instance: cfg.State.Instance, Region: setupplan.DefaultRegion})
		}
		_, err := out.Write(src)
		return err
	}
	lines := out
	if format == PlanJSON {
		lines = io.Discard
	}
	s := &setup{cfg: cfg, ps: ps, admin: admin, out: lines, admins: map[string]*bigtable.AdminClient{}, dry: true, status: map[string]string{}}
	defer s.close()
	var err error
	if ps == nil {
		err = s.offline(plan)
	} else {
		err = s.apply(ctx, plan)
	}
	if err != nil {
		return err
	}
	if format == PlanJSON {
		b, err := setupplan.JSON(plan, func(key string) string {
			if st, ok := s.status[key]; ok {
				return st
			}
			return "exists"
		})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	if s.creates+s.widens+s.drifts == 0 {
		s.say("setup --plan: nothing to create")
	} else {
		s.say("setup --plan: %d to create, %d to widen, %d drifted", s.creates, s.widens, s.drifts)
	}
	return nil
}

// offline says that every object of plan would be created, as a plan
// against an empty project would.
func (s *setup) offline(plan *setupplan.Plan) error {
	table := func(t setupplan.Table) {
		s.created("table "+t.Instance+"/"+t.Name, setupplan.DescribeTable(t))
		for _, f := range t.Families {
			s.created("family "+t.Instance+"/"+t.Name+":"+f.Name, setupplan.DescribeFamily(t.Name, f, true))
		}
	}
	topic := func(t *setupplan.Topic) {
		var schema, encoding string
		if t.Schema != nil {
			s.created("schema "+t.Schema.Name, setupplan.DescribeSchema(t.Schema))
			schema, encoding = t.Schema.Name, t.Schema.Encoding
		}
		s.created("topic "+t.Name, setupplan.DescribeTopic(t.Name, t.Retention, schema, encoding))
	}
	sub := func(sp setupplan.Subscription) {
		if sp.Topic == "" {
			s.say("subscription %s must exist (source.topic is not set to create it on)", sp.Name)
			return
		}
		s.created("subscription "+sp.Name, setupplan.DescribeSubscription(sp))
	}
	for _, p := range plan.Pipelines {
		if p.Err != nil {
			continue
		}
		if p.Topic != nil {
			topic(p.Topic)
		}
		sub(p.Subscription)
		if p.Tracking != nil {
			sub(*p.Tracking)
		}
		if p.DeadLetterTopic != nil {
			topic(p.DeadLetterTopic)
			sub(*p.DeadLetterSubscription)
		}
		for _, t := range p.Tables {
			table(t)
		}
	}
	if plan.State != nil {
		table(*plan.State)
	}
	return planErr(plan)
}

// planTerraform prints the Terraform file of cfg's plan with accounts,
// each granted the roles setupplan.Roles gives its command.
func planTerraform(cfg *config.Config, accounts []setupplan.Account, out io.Writer) error {
	plan := setupplan.New(cfg)
	if err := planErr(plan); err != nil {
		return err
	}
	accounts, err := setupplan.WithRoles(cfg, accounts)
	if err != nil {
		return err
	}
	_, err = out.Write(setupplan.Terraform(plan, setupplan.Vars{Project: cfg.Project, Instance: cfg.State.Instance, Region: setupplan.DefaultRegion, Accounts: accounts}))
	return err
}

// planErr is the error of the pipelines whose plan could not be computed.
func planErr(plan *setupplan.Plan) error {
	var errs []error
	for _, p := range plan.Pipelines {
		if p.Err != nil {
			errs = append(errs, fmt.Errorf("pipeline %s: %w", p.Name, p.Err))
		}
	}
	return errors.Join(errs...)
}
