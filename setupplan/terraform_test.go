package setupplan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"

	"github.com/pubsink/pubsink/internal/testenv/hclread"
)

// TestTerraformOfTheExamplesParsesAndHoldsThePlan: the .tf of examples.yaml
// is HCL that hcl/v2 parses, already formatted as terraform fmt formats it,
// with one resource per object of the plan and the settings setup gives
// them.
func TestTerraformOfTheExamplesParsesAndHoldsThePlan(t *testing.T) {
	pl := New(load(t, "../examples.yaml"))
	src := Terraform(pl, Vars{Project: "p", Instance: "i", Region: "europe-west1"})
	_, resources := parseTF(t, src)
	want := map[string]map[string]string{
		"google_pubsub_topic.orders": {"project": "var.project", "name": "orders"},
		"google_pubsub_subscription.orders-pubsink": {"name": "orders-pubsink", "topic": "google_pubsub_topic.orders.id", "ack_deadline_seconds": "60",
			"retry_policy.minimum_backoff": "1s", "retry_policy.maximum_backoff": "5s"},
		"google_pubsub_subscription.orders-pubsink-tracking":               {"ack_deadline_seconds": "10"},
		"google_pubsub_subscription.dbserver1_inventory_customers-pubsink": {"enable_message_ordering": "true"},
		"google_pubsub_subscription.orders-dlq-replay":                     {"topic": "google_pubsub_topic.orders-dlq.id"},
		"google_bigtable_table.customers":                                  {"instance_name": "var.instance", "name": "customers", "column_family.family": "d,tombstone"},
		"google_bigtable_gc_policy.customers_tombstone":                    {"column_family": "tombstone", "max_age.duration": "168h", "table": "google_bigtable_table.customers.name"},
		"google_bigtable_gc_policy.pubsink_state_k":                        {"max_age.duration": "70m"},
		"google_bigtable_gc_policy.pubsink_state_m":                        {"max_version.number": "1"},
		"google_bigtable_gc_policy.pubsink_state_r":                        {"max_age.duration": "745h"},
	}
	for addr, attrs := range want {
		b, ok := resources[addr]
		if !ok {
			t.Errorf("no resource %s in:\n%s", addr, src)
			continue
		}
		for k, v := range attrs {
			if got := attribute(t, b.Body, k); got != v {
				t.Errorf("%s: %s = %q, want %q", addr, k, got, v)
			}
		}
	}
	// No rule, no policy: a data family keeps every version.
	if _, ok := resources["google_bigtable_gc_policy.orders_d"]; ok {
		t.Error("family orders:d has a GC policy resource")
	}
	if n := strings.Count(string(src), "resource \"google_pubsub_subscription\""); n != 6 {
		t.Errorf("%d subscriptions, want 6", n)
	}
}

// parseTF parses src (hclread), failing t when it does not parse, and
// reports it when it is not formatted as terraform fmt formats it. It
// returns the resources in order and by address (TYPE.NAME).
func parseTF(t *testing.T, src []byte) ([]hclread.Resource, map[string]hclread.Resource) {
	t.Helper()
	if formatted := hclwrite.Format(src); !bytes.Equal(formatted, src) {
		t.Errorf("the .tf is not formatted as terraform fmt would:\n%s", src)
	}
	rs, err := hclread.Resources(src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	byAddr := map[string]hclread.Resource{}
	for _, r := range rs {
		byAddr[r.Type+"."+r.Name] = r
	}
	return rs, byAddr
}

// attribute reads key of body (hclread.Attr), failing t on an error.
func attribute(t *testing.T, body *hclsyntax.Body, key string) string {
	t.Helper()
	v, err := hclread.Attr(body, key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
