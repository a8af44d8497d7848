package deploy

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite what is generated from prometheus/alerts.yaml: gke/base/rules.yaml (TestRulesResource), cloudrun/alert-policies/ (TestAlertPolicies)")

const (
	alertsFile     = "prometheus/alerts.yaml"
	alertTestsFile = "prometheus/alerts_test.yaml"
	rulesFile      = "gke/base/rules.yaml"
)

const rulesHeader = `Generated from deploy/prometheus/alerts.yaml: edit that file, then run
  go test ./deploy -run TestRulesResource -update
to rewrite this one (the test fails while they differ).

The alert rules as a Rules resource of Managed Service for Prometheus
(monitoring.googleapis.com/v1): its rule evaluator runs them on the metrics
of the Rules' namespace only (every selector gets that namespace's
matcher), and sends the alerts to the Alertmanager of managed collection.`

// rulesResource renders alerts.yaml's groups as a Rules resource. It works
// on the YAML nodes, so the comments of each rule come along.
func rulesResource(alerts []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(alerts, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping")
	}
	var groups *yaml.Node
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "groups" {
			groups = top.Content[i+1]
		}
	}
	if groups == nil {
		return nil, fmt.Errorf("no groups")
	}
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
	mapping := func(kv ...*yaml.Node) *yaml.Node {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: kv}
	}
	out := &yaml.Node{Kind: yaml.DocumentNode, HeadComment: rulesHeader, Content: []*yaml.Node{mapping(
		str("apiVersion"), str("monitoring.googleapis.com/v1"),
		str("kind"), str("Rules"),
		str("metadata"), mapping(str("name"), str("pubsink")),
		str("spec"), mapping(str("groups"), groups),
	)}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// TestRulesResource: gke/base/rules.yaml holds alerts.yaml's groups, and
// nothing else but the Rules envelope. The comparison is of the parsed
// YAML, so only a change of the rules themselves fails it.
func TestRulesResource(t *testing.T) {
	alerts := readFile(t, alertsFile)
	want, err := rulesResource(alerts)
	if err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	if *update {
		if err := os.WriteFile(rulesFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", rulesFile)
	}
	var rules struct {
		APIVersion string         `yaml:"apiVersion"`
		Kind       string         `yaml:"kind"`
		Metadata   map[string]any `yaml:"metadata"`
		Spec       struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	strictUnmarshal(t, rulesFile, readFile(t, rulesFile), &rules)
	if rules.APIVersion != "monitoring.googleapis.com/v1" || rules.Kind != "Rules" {
		t.Errorf("%s is %s %s, want monitoring.googleapis.com/v1 Rules", rulesFile, rules.APIVersion, rules.Kind)
	}
	var source struct {
		Groups any `yaml:"groups"`
	}
	strictUnmarshal(t, alertsFile, alerts, &source)
	if !reflect.DeepEqual(rules.Spec.Groups, source.Groups) {
		t.Errorf("%s's groups differ from %s's: edit %s, then run `go test ./deploy -run TestRulesResource -update`", rulesFile, alertsFile, alertsFile)
	}
}

// ruleFile is what the tests read of a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertsUseExportedMetrics: every expression of alerts.yaml and of the
// Rules resource, and every input series of the promtool unit tests, names
// metrics that pubsink exports, by their own labels. Each rule has a
// severity, and a unit test.
func TestAlertsUseExportedMetrics(t *testing.T) {
	var alerts ruleFile
	strictUnmarshal(t, alertsFile, readFile(t, alertsFile), &alerts)
	var rules struct {
		Spec ruleFile `yaml:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, rulesFile), &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	tests := string(readFile(t, alertTestsFile))
	n := 0
	for file, f := range map[string]ruleFile{alertsFile: alerts, rulesFile: rules.Spec} {
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				n++
				for _, p := range queryProblems(r.Expr) {
					t.Errorf("%s: %s %s: %s", file, g.Name, r.Alert+r.Record, p)
				}
				if r.Alert == "" {
					continue
				}
				if s := r.Labels["severity"]; s != "warning" && s != "critical" {
					t.Errorf("%s: %s has severity %q, want warning or critical", file, r.Alert, s)
				}
				if !strings.Contains(tests, "alertname: "+r.Alert+"\n") {
					t.Errorf("%s: %s has no unit test in %s", file, r.Alert, alertTestsFile)
				}
			}
		}
	}
	if n < 2*7 {
		t.Errorf("read %d rules from %s and %s; expected the 7 or more of each", n, alertsFile, rulesFile)
	}

	var unit struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal([]byte(tests), &unit); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	for _, tc := range unit.Tests {
		for _, s := range tc.InputSeries {
			for _, p := range queryProblems(s.Series) {
				t.Errorf("%s: input series %s: %s", alertTestsFile, s.Series, p)
			}
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// strictUnmarshal decodes YAML refusing keys that v has no field for.
func strictUnmarshal(t *testing.T, name string, data []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}
