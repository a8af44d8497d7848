package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const alertPoliciesDir = "cloudrun/alert-policies"

const alertPolicyHeader = `Generated from deploy/prometheus/alerts.yaml: edit that file, then run
  go test ./deploy -run TestAlertPolicies -update
to rewrite this folder (the test fails while they differ).

One rule of alerts.yaml as a Cloud Monitoring alerting policy with a PromQL
condition, for pubsink on Cloud Run, where no rule evaluator runs (on GKE
the Rules resource, gke/base/rules.yaml, holds the same rules). It queries
what the metrics sidecar writes (cloudrun/rungmp-config.yaml): pubsink's
own metric names and labels. Create every policy of the folder, once:
  for f in deploy/cloudrun/alert-policies/*.yaml; do
    gcloud monitoring policies create --project=PROJECT_ID \
      --policy-from-file="$f" --notification-channels=CHANNEL_ID
  done
(gcloud monitoring channels list shows the channel IDs). Each run of
create makes another copy; after a change, replace a policy with
  gcloud monitoring policies update POLICY_ID --policy-from-file=FILE
which replaces all of it, its notification channels too.

Mapped as gcloud monitoring policies migrate maps a rule: display name
"group"/alert, the rule's labels, summary and description as subject and
content, {{ $labels.X }} as ${metric_or_resource.label.X}, {{ $value }} as
${metric.label.value}, a raw number (the rule's humanize functions have no
equivalent: a unit follows it instead). Added: evaluation every 60 s, as
the promtool tests run the rules; a severity; disableMetricValidation,
because some series appear only with their first event (a sink error's
code, a known watermark) and the policy must be creatable before. The
query spans the whole metrics scope, without the namespace matcher that
the Rules resource adds on GKE: PubsinkAbsent fires only when no pubsink
there reports at all, and a GKE deployment in the same scope is evaluated
by these policies too.`

// alertPolicy is what the tests read and write of a Cloud Monitoring
// alerting policy (projects.alertPolicies in the Monitoring API v3, as
// gcloud monitoring policies create --policy-from-file takes it). The
// fields are in the order the generated files show them.
type alertPolicy struct {
	DisplayName   string `yaml:"displayName"`
	Documentation struct {
		Subject  string `yaml:"subject"`
		Content  string `yaml:"content"`
		MimeType string `yaml:"mimeType"`
	} `yaml:"documentation"`
	Severity   string            `yaml:"severity"`
	Combiner   string            `yaml:"combiner"`
	Conditions []policyCondition `yaml:"conditions"`
}

// policyCondition is a condition of an alertPolicy: a PromQL one.
type policyCondition struct {
	DisplayName string `yaml:"displayName"`
	PromQL      struct {
		Query                   string            `yaml:"query"`
		Duration                string            `yaml:"duration,omitempty"`
		EvaluationInterval      string            `yaml:"evaluationInterval"`
		Labels                  map[string]string `yaml:"labels,omitempty"`
		RuleGroup               string            `yaml:"ruleGroup"`
		AlertRule               string            `yaml:"alertRule"`
		DisableMetricValidation bool              `yaml:"disableMetricValidation"`
	} `yaml:"conditionPrometheusQueryLanguage"`
}

// ruleEvaluation is how often the policies evaluate their query: every
// minute, the interval the promtool unit tests (alerts_test.yaml) run the
// rules at. Cloud Monitoring takes multiples of 30 s.
const ruleEvaluation = time.Minute

var (
	// promLabel and promValue are the Prometheus template constructs that
	// have a Cloud Monitoring documentation variable (gcloud's
	// TranslatePromQLTemplateToDocumentVariables maps them the same way).
	promLabel = regexp.MustCompile(`\{\{\s*(?:humanize\s+)?\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	promValue = regexp.MustCompile(`\{\{\s*(?:humanize\s+)?\$value\s*(?:\|\s*([a-zA-Z]+)\s*)?\}\}`)
)

// valueUnits says what a raw value is where the rule's humanize function
// would have written the unit.
var valueUnits = map[string]string{
	"":                   "",
	"humanize":           "",
	"humanizeDuration":   " s",
	"humanizePercentage": " (1 = 100%)",
}

// documentVariables translates a rule's annotation into a policy's
// documentation, failing on a template construct it cannot translate.
func documentVariables(annotation string) (string, error) {
	var unknown []string
	s := promValue.ReplaceAllStringFunc(annotation, func(v string) string {
		unit, ok := valueUnits[promValue.FindStringSubmatch(v)[1]]
		if !ok {
			unknown = append(unknown, v)
		}
		return "${metric.label.value}" + unit
	})
	s = promLabel.ReplaceAllString(s, "${metric_or_resource.label.$1}")
	if len(unknown) > 0 || strings.Contains(s, "{{") {
		return "", fmt.Errorf("a template construct with no Cloud Monitoring variable: %q", annotation)
	}
	return s, nil
}

// alertPolicyFile names the policy file of an alert rule.
func alertPolicyFile(alert string) string {
	return filepath.Join(alertPoliciesDir, alert+".yaml")
}

// alertPolicies renders every alert rule of alerts.yaml as a policy file,
// by file name.
func alertPolicies(alerts ruleFile) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				return nil, fmt.Errorf("%s: recording rule %s: Cloud Monitoring has no recording rules, and the policies could not use it", g.Name, r.Record)
			}
			var p alertPolicy
			p.DisplayName = fmt.Sprintf("%q/%s", g.Name, r.Alert)
			var err error
			if p.Documentation.Subject, err = documentVariables(r.Annotations["summary"]); err != nil {
				return nil, fmt.Errorf("%s: summary: %w", r.Alert, err)
			}
			description, err := documentVariables(r.Annotations["description"])
			if err != nil {
				return nil, fmt.Errorf("%s: description: %w", r.Alert, err)
			}
			p.Documentation.Content = description + "\n\n" + fmt.Sprintf(
				"Alert rule %s (group %s) of deploy/prometheus/alerts.yaml: docs/reference.md, \"Alert rules\", says what it fires on.",
				r.Alert, g.Name)
			p.Documentation.MimeType = "text/markdown"
			switch r.Labels["severity"] {
			case "warning":
				p.Severity = "WARNING"
			case "critical":
				p.Severity = "CRITICAL"
			default:
				return nil, fmt.Errorf("%s: severity %q has no Cloud Monitoring severity", r.Alert, r.Labels["severity"])
			}
			p.Combiner = "OR"
			p.Conditions = make([]policyCondition, 1)
			c := &p.Conditions[0]
			c.DisplayName = r.Alert
			c.PromQL.Query = r.Expr
			d, err := forDuration(r.For)
			if err != nil {
				return nil, fmt.Errorf("%s: for: %w", r.Alert, err)
			}
			if d > 0 {
				c.PromQL.Duration = seconds(d)
			}
			c.PromQL.EvaluationInterval = seconds(ruleEvaluation)
			c.PromQL.Labels = r.Labels
			c.PromQL.RuleGroup = g.Name
			c.PromQL.AlertRule = r.Alert
			c.PromQL.DisableMetricValidation = true

			var body yaml.Node
			if err := body.Encode(p); err != nil {
				return nil, err
			}
			var b bytes.Buffer
			enc := yaml.NewEncoder(&b)
			enc.SetIndent(2)
			if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, HeadComment: alertPolicyHeader, Content: []*yaml.Node{&body}}); err != nil {
				return nil, err
			}
			if err := enc.Close(); err != nil {
				return nil, err
			}
			name := alertPolicyFile(r.Alert)
			if files[name] != nil {
				return nil, fmt.Errorf("two rules named %s", r.Alert)
			}
			files[name] = b.Bytes()
		}
	}
	return files, nil
}

// forDuration reads a rule's for, or a condition's duration: none is zero.
// Go's parser reads every duration alerts.yaml has; one in days or weeks,
// which Prometheus takes and Go does not, fails here, loudly.
func forDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// seconds writes a duration as the Monitoring API's JSON does.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int64(d/time.Second))
}

// TestAlertPolicies: cloudrun/alert-policies holds one policy per alert
// rule of alerts.yaml and nothing else, each with the rule's name, group,
// PromQL expression, for-duration and labels, a query that names only
// exported metrics by their own labels, and, as a whole, what alertPolicies
// renders from alerts.yaml (`-update` rewrites the folder).
func TestAlertPolicies(t *testing.T) {
	var alerts ruleFile
	strictUnmarshal(t, alertsFile, readFile(t, alertsFile), &alerts)
	want, err := alertPolicies(alerts)
	if err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	if *update {
		old, _ := filepath.Glob(filepath.Join(alertPoliciesDir, "*.yaml"))
		for _, f := range old {
			if want[f] == nil {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.MkdirAll(alertPoliciesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, b := range want {
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote %d policies to %s", len(want), alertPoliciesDir)
	}

	have, _ := filepath.Glob(filepath.Join(alertPoliciesDir, "*.yaml"))
	for _, f := range have {
		if want[f] == nil {
			t.Errorf("%s is the policy of no alert rule of %s: remove it, or run `go test ./deploy -run TestAlertPolicies -update`", f, alertsFile)
		}
	}

	n := 0
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			n++
			file := alertPolicyFile(r.Alert)
			if !slices.Contains(have, file) {
				t.Errorf("%s: alert rule %s has no policy %s", alertsFile, r.Alert, file)
				continue
			}
			var p alertPolicy
			strictUnmarshal(t, file, readFile(t, file), &p)

			// The rule itself, compared field by field, so that a fault of
			// alertPolicies cannot hide a difference.
			if len(p.Conditions) != 1 {
				t.Errorf("%s: %d conditions, want the rule's one", file, len(p.Conditions))
				continue
			}
			q := p.Conditions[0].PromQL
			if q.AlertRule != r.Alert || q.RuleGroup != g.Name {
				t.Errorf("%s: the condition is rule %q of group %q, want %q of %q", file, q.AlertRule, q.RuleGroup, r.Alert, g.Name)
			}
			if q.Query != r.Expr {
				t.Errorf("%s: the query differs from %s's expression of %s:\n%s\nwant:\n%s", file, alertsFile, r.Alert, q.Query, r.Expr)
			}
			gotFor, errGot := forDuration(q.Duration)
			wantFor, errWant := forDuration(r.For)
			if errGot != nil || errWant != nil || gotFor != wantFor {
				t.Errorf("%s: duration %q, want the rule's for: %s", file, q.Duration, r.For)
			}
			if !reflect.DeepEqual(q.Labels, r.Labels) {
				t.Errorf("%s: labels %v, want the rule's %v", file, q.Labels, r.Labels)
			}
			if every, err := time.ParseDuration(q.EvaluationInterval); err != nil || every <= 0 || every%(30*time.Second) != 0 {
				t.Errorf("%s: evaluationInterval %q is not a positive multiple of 30 s", file, q.EvaluationInterval)
			}
			for _, prob := range queryProblems(q.Query) {
				t.Errorf("%s: %s", file, prob)
			}

			// And the whole file, as alertPolicies renders it (comments
			// aside).
			var gotDoc, wantDoc any
			if err := yaml.Unmarshal(readFile(t, file), &gotDoc); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if err := yaml.Unmarshal(want[file], &wantDoc); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotDoc, wantDoc) {
				t.Errorf("%s differs from what %s renders: edit %s, then run `go test ./deploy -run TestAlertPolicies -update`", file, alertsFile, alertsFile)
			}
		}
	}
	if n < 7 {
		t.Errorf("read %d rules from %s; expected the 7 or more", n, alertsFile)
	}
}
