package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/state"
)

// TestPlanAfterSetupFindsEverything: the plan and setup judge by the same
// code, so what setup created the plan finds, and a plan before setup
// creates nothing.
func TestPlanAfterSetupFindsEverything(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	cfg, err := config.Parse([]byte(setupYAML))
	if err != nil {
		t.Fatal(err)
	}
	var before bytes.Buffer
	if err := Plan(ctx, cfg, f.ps, f.admin, PlanText, &before); err != nil {
		t.Fatalf("plan: %v\n%s", err, before.String())
	}
	for _, want := range []string{
		"would create subscription projects/p/subscriptions/orders-tracking on projects/p/topics/orders\n",
		"would create column family pubsink_state:k (GC rule age() > 75m)\n",
		"setup --plan: 18 to create, 0 to widen, 0 drifted\n",
	} {
		if !strings.Contains(before.String(), want) {
			t.Errorf("plan before setup lacks %q:\n%s", want, before.String())
		}
	}
	var again bytes.Buffer
	if err := Plan(ctx, cfg, f.ps, f.admin, PlanText, &again); err != nil || again.String() != before.String() {
		t.Fatalf("a plan changed something: the second one says (%v)\n%s", err, again.String())
	}
	var out bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	var after bytes.Buffer
	if err := Plan(ctx, cfg, f.ps, f.admin, PlanText, &after); err != nil {
		t.Fatalf("plan: %v\n%s", err, after.String())
	}
	if !strings.HasSuffix(after.String(), "\nsetup --plan: nothing to create\n") || strings.Contains(after.String(), "would") {
		t.Errorf("plan after setup:\n%s", after.String())
	}
	var js bytes.Buffer
	if err := Plan(ctx, cfg, f.ps, f.admin, PlanJSON, &js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pipelines []struct {
			Subscription struct {
				Status string `json:"status"`
			} `json:"subscription"`
		} `json:"pipelines"`
		State struct {
			Families []struct {
				Name   string `json:"name"`
				Status string `json:"status"`
				GCRule struct {
					MaxAgeSeconds int64 `json:"max_age_seconds"`
				} `json:"gc_rule"`
			} `json:"column_families"`
		} `json:"state_table"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, js.String())
	}
	if len(doc.Pipelines) != 2 || doc.Pipelines[0].Subscription.Status != "exists" || len(doc.State.Families) != 4 ||
		doc.State.Families[0].Status != "exists" || doc.State.Families[0].GCRule.MaxAgeSeconds != 75*60 {
		t.Errorf("JSON plan after setup:\n%s", js.String())
	}
}

// TestPlanReportsDriftWithItsFix: a narrowed catalog rule is a widening,
// an existing subscription without the ordering asked for is drift with
// the fix, as setup refuses it; and the plan changes neither.
func TestPlanReportsDriftWithItsFix(t *testing.T) {
	ctx := context.Background()
	f := newFakes(t)
	ac := stateAdmin(t, f)
	cfg, err := config.Parse([]byte(setupYAML))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Setup(ctx, cfg, f.ps, f.admin, &out); err != nil {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	if err := ac.SetGCPolicy(ctx, "pubsink_state", state.FamilyDedupe, bigtable.MaxAgePolicy(time.Minute)); err != nil {
		t.Fatal(err)
	}
	cfg.Pipelines[0].Source.Ordering = true
	var plan bytes.Buffer
	if err := Plan(ctx, cfg, f.ps, f.admin, PlanText, &plan); err != nil {
		t.Fatalf("plan: %v\n%s", err, plan.String())
	}
	for _, want := range []string{
		"would widen the GC rule of pubsink_state:k from age() > 1m to age() > 75m\n",
		"  drift: subscription projects/p/subscriptions/orders-sub has no message ordering, and source.ordering is true (run refuses it); Pub/Sub cannot add ordering to an existing subscription: create a new one, gcloud pubsub subscriptions create NEW --topic=projects/p/topics/orders --enable-message-ordering",
		"setup --plan: 0 to create, 1 to widen, 1 drifted\n",
	} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, plan.String())
		}
	}
	info, err := ac.TableInfo(ctx, "pubsink_state")
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range info.FamilyInfos {
		if fi.Name == state.FamilyDedupe && fi.FullGCPolicy.String() != "age() > 1m" {
			t.Errorf("the plan changed the catalog rule to %v", fi.FullGCPolicy)
		}
	}
	got, err := f.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/orders-sub"})
	if err != nil || got.EnableMessageOrdering {
		t.Errorf("orders-sub after the plan: %v, %v", got, err)
	}
}
