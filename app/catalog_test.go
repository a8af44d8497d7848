package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestRunRefusesAWindowLongerThanTheCatalogGCRule: setup ran with the
// default window (10m: a catalog rule of 1h10m); the configuration now
// says 80m. Open refuses, naming the window,
// the rule and the fix; after setup with the new window it opens.
func TestRunRefusesAWindowLongerThanTheCatalogGCRule(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	eo := strings.Replace(yaml, "mode: at_least_once", "mode: exactly_once", 1)
	if err := Setup(ctx, parse(t, eo), f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	longer := parse(t, eo)
	for i := range longer.Pipelines {
		longer.Pipelines[i].Dedupe.Window *= 8
	}
	opts := f.opts
	opts.BigtableAdmin = f.admin
	opts.HTTPAddr = "-"
	_, err := Open(ctx, zap.NewNop(), longer, opts)
	if err == nil || !strings.Contains(err.Error(), "dedupe.window") || !strings.Contains(err.Error(), "pubsink setup") {
		t.Fatalf("Open = %v; want the window refused, with the fix", err)
	}
	if err := Setup(ctx, longer, f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	a, err := Open(ctx, zap.NewNop(), longer, opts)
	if err != nil {
		t.Fatalf("Open after setup widened the rule: %v", err)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Run(stopped); err != nil {
		t.Fatal(err)
	}
}
