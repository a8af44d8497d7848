package main

import (
	"context"
	"fmt"
	"io"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"

	"github.com/pubsink/pubsink/internal/setup"
)

func cmdSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, _, err := configCommand("setup", args)
	if err != nil {
		return err
	}
	ps, err := pubsub.NewClient(ctx, cfg.Project)
	if err != nil {
		return fmt.Errorf("pubsub client: %w", err)
	}
	defer ps.Close()
	admin := func(ctx context.Context, instance string) (*bigtable.AdminClient, error) {
		return bigtable.NewAdminClient(ctx, cfg.Project, instance)
	}
	if err := setup.Run(ctx, cfg, ps, admin, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "setup: done")
	return nil
}
