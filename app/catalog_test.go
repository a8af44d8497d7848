package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/state"
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

// TestRunRefusesAStateTableWithoutTheRulingsFamily: a state table set up
// by a version before rulings (family r dropped here) is refused for a
// pipeline whose key can have rivals, naming the family and the fix; setup
// adds the family, and the pipeline opens.
func TestRunRefusesAStateTableWithoutTheRulingsFamily(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	eo := strings.Replace(yaml, "mode: at_least_once", "mode: exactly_once", 1)
	eo = strings.Replace(eo, "streams: 1}", "streams: 1, id_attribute: id}", 1)
	cfg := parse(t, eo)
	if cfg.Pipelines[0].KeyIsMessageID() {
		t.Fatalf("the test's pipeline keys by message ID: no rivals; the harness's YAML changed:\n%s", eo)
	}
	if err := Setup(ctx, cfg, f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	ac, err := f.admin(ctx, cfg.State.Instance)
	if err != nil {
		t.Fatal(err)
	}
	if err := ac.DeleteColumnFamily(ctx, cfg.State.Table, state.FamilyRulings); err != nil {
		t.Fatal(err)
	}
	opts := f.opts
	opts.BigtableAdmin = f.admin
	opts.HTTPAddr = "-"
	_, err = Open(ctx, zap.NewNop(), cfg, opts)
	if err == nil || !strings.Contains(err.Error(), "no column family r") || !strings.Contains(err.Error(), "pubsink setup") {
		t.Fatalf("Open = %v; want the missing rulings family refused, with the fix", err)
	}
	var out bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "created column family "+cfg.State.Table+":r") {
		t.Errorf("setup did not say it added the family:\n%s", out.String())
	}
	a, err := Open(ctx, zap.NewNop(), cfg, opts)
	if err != nil {
		t.Fatalf("Open after setup added the family: %v", err)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Run(stopped); err != nil {
		t.Fatal(err)
	}
}
