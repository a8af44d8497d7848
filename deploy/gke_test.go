package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pubsink/pubsink/config"
)

const (
	exampleOverlay   = "gke/overlays/example"
	backlogComponent = "gke/components/hpa-pubsub-backlog"
	baseConfigFile   = "gke/base/config.yaml"
)

// object is one Kubernetes object (of a kustomize build, or a Cloud Run
// manifest), as generic YAML.
type object map[string]any

func (o object) kind() string      { return str(o, "kind") }
func (o object) name() string      { return str(o, "metadata", "name") }
func (o object) namespace() string { return str(o, "metadata", "namespace") }

// get walks maps by key and lists by index (an int).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				if o, isObj := v.(object); isObj {
					m, ok = map[string]any(o), true
				}
			}
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

// kustomize builds dir with `kubectl kustomize`; without kubectl the test
// skips (CI installs it).
func kustomize(t *testing.T, dir string) ([]object, string) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: the kustomize build is not checked")
	}
	cmd := exec.Command(kubectl, "kustomize", dir)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(out.Bytes()))
	for {
		// Into a plain map: decoding into object would make every nested
		// map an object too.
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		objs = append(objs, object(m))
	}
	return objs, out.String()
}

// byKind returns the one object of the kind, failing if there is not
// exactly one.
func byKind(t *testing.T, objs []object, kind string) object {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.kind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the build has %d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

// TestExampleOverlay builds deploy/gke/overlays/example and checks what it
// makes hangs together.
func TestExampleOverlay(t *testing.T) {
	objs, text := kustomize(t, exampleOverlay)

	var overlay struct {
		Namespace string `yaml:"namespace"`
	}
	if err := yaml.Unmarshal(readFile(t, exampleOverlay+"/kustomization.yaml"), &overlay); err != nil || overlay.Namespace == "" {
		t.Fatalf("%s/kustomization.yaml: no namespace (%v)", exampleOverlay, err)
	}
	ns := overlay.Namespace

	kinds := []string{"Namespace", "ServiceAccount", "ConfigMap", "Deployment", "PodMonitoring", "Rules", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
	for _, k := range kinds {
		byKind(t, objs, k)
	}
	for _, o := range objs {
		switch {
		case !slices.Contains(kinds, o.kind()):
			t.Errorf("unexpected %s %s in the build: add it to this test's kinds", o.kind(), o.name())
		case o.kind() == "Namespace" && o.name() != ns:
			t.Errorf("Namespace %s, want the overlay's %s", o.name(), ns)
		case o.kind() != "Namespace" && o.namespace() != ns:
			t.Errorf("%s %s is in namespace %q, want the overlay's %s", o.kind(), o.name(), o.namespace(), ns)
		}
	}
	for _, placeholder := range []string{"PROJECT_ID", "REGION"} {
		if strings.Contains(text, placeholder) {
			t.Errorf("the build still contains the placeholder %s", placeholder)
		}
	}

	sa := byKind(t, objs, "ServiceAccount")
	if gsa := str(sa, "metadata", "annotations", "iam.gke.io/gcp-service-account"); !strings.HasSuffix(gsa, ".iam.gserviceaccount.com") {
		t.Errorf("ServiceAccount's Workload Identity annotation is %q, want a Google service account", gsa)
	}

	dep := byKind(t, objs, "Deployment")
	pod := get(dep, "spec", "template", "spec")
	if got := str(pod, "serviceAccountName"); got != sa.name() {
		t.Errorf("the pods run as %q, want the ServiceAccount %s", got, sa.name())
	}
	podLabels, _ := get(dep, "spec", "template", "metadata", "labels").(map[string]any)
	selects := func(what string, sel any) {
		m, _ := sel.(map[string]any)
		if len(m) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range m {
			if podLabels[k] != v {
				t.Errorf("%s selects %s=%v, which the pods do not have (%v)", what, k, v, podLabels)
			}
		}
	}
	selects("the Deployment's selector", get(dep, "spec", "selector", "matchLabels"))
	selects("the PodMonitoring", get(byKind(t, objs, "PodMonitoring"), "spec", "selector", "matchLabels"))
	selects("the PodDisruptionBudget", get(byKind(t, objs, "PodDisruptionBudget"), "spec", "selector", "matchLabels"))

	container := get(pod, "containers", 0)
	ports := map[string]bool{}
	for _, p := range asList(get(container, "ports")) {
		ports[str(p, "name")] = true
	}
	pm := byKind(t, objs, "PodMonitoring")
	for _, ep := range asList(get(pm, "spec", "endpoints")) {
		if port := str(ep, "port"); !ports[port] {
			t.Errorf("the PodMonitoring scrapes port %q, which the container does not name (%v)", port, ports)
		}
		if str(ep, "path") != "/metrics" {
			t.Errorf("the PodMonitoring scrapes %q, want /metrics", str(ep, "path"))
		}
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if got := str(container, probe, "httpGet", "path"); got != path {
			t.Errorf("%s is %q, want %s", probe, got, path)
		}
	}

	hpa := byKind(t, objs, "HorizontalPodAutoscaler")
	if str(hpa, "spec", "scaleTargetRef", "kind") != "Deployment" || str(hpa, "spec", "scaleTargetRef", "name") != dep.name() {
		t.Errorf("the autoscaler scales %v, want the Deployment %s", get(hpa, "spec", "scaleTargetRef"), dep.name())
	}
	if lo, hi := num(get(hpa, "spec", "minReplicas")), num(get(hpa, "spec", "maxReplicas")); lo < 1 || lo > hi {
		t.Errorf("the autoscaler's bounds are %v to %v", lo, hi)
	}
	if get(dep, "spec", "replicas") != nil {
		t.Errorf("the Deployment sets replicas, which the autoscaler owns")
	}

	// The configuration: the ConfigMap the pods mount, valid for pubsink,
	// and a shutdown that ends before Kubernetes kills the pod.
	cm := byKind(t, objs, "ConfigMap")
	var mounted string
	for _, v := range asList(get(pod, "volumes")) {
		if n := str(v, "configMap", "name"); n != "" {
			mounted = n
		}
	}
	if mounted != cm.name() {
		t.Errorf("the pods mount ConfigMap %q, the build has %q", mounted, cm.name())
	}
	cfg := parseConfig(t, str(cm, "data", "config.yaml"))
	grace := time.Duration(num(get(pod, "terminationGracePeriodSeconds"))) * time.Second
	if cfg.ShutdownTimeout >= grace {
		t.Errorf("shutdown_timeout %v is not below terminationGracePeriodSeconds (%v): Kubernetes would kill pubsink before it left its membership", cfg.ShutdownTimeout, grace)
	}

	// The Rules are alerts.yaml's (TestRulesResource checks the file; this
	// checks that the build carries it).
	var source struct {
		Groups any `yaml:"groups"`
	}
	strictUnmarshal(t, alertsFile, readFile(t, alertsFile), &source)
	if got := get(byKind(t, objs, "Rules"), "spec", "groups"); !reflect.DeepEqual(got, source.Groups) {
		t.Errorf("the build's Rules differ from %s", alertsFile)
	}
}

// TestBacklogComponent builds the example overlay with the backlog
// component: the autoscaler gets the subscription's backlog in front of its
// CPU metric, for a main subscription of the configuration.
func TestBacklogComponent(t *testing.T) {
	dir := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(dir, abs)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.ToSlash(r)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" +
		"resources:\n  - " + rel(exampleOverlay) + "\n" +
		"components:\n  - " + rel(backlogComponent) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, _ := kustomize(t, dir)
	metrics := asList(get(byKind(t, objs, "HorizontalPodAutoscaler"), "spec", "metrics"))
	if len(metrics) != 2 || str(metrics[0], "type") != "External" || str(metrics[1], "type") != "Resource" || str(metrics[1], "resource", "name") != "cpu" {
		t.Fatalf("the autoscaler's metrics are %v, want the backlog, then CPU", metrics)
	}
	sub := str(metrics[0], "external", "metric", "selector", "matchLabels", "resource.labels.subscription_id")
	cfg := parseConfig(t, str(byKind(t, objs, "ConfigMap"), "data", "config.yaml"))
	var main []string
	for _, p := range cfg.Pipelines {
		main = append(main, p.Source.Subscription)
	}
	if !slices.Contains(main, sub) {
		t.Errorf("the backlog metric reads subscription %q; the configuration's main subscriptions are %v", sub, main)
	}
}

// parseConfig loads a configuration with pubsink's parser, without the
// test's environment overriding it.
func parseConfig(t *testing.T, data string) *config.Config {
	t.Helper()
	return parseConfigEnv(t, data, nil)
}

// parseConfigEnv loads a configuration with pubsink's parser under the
// environment a manifest gives the process (its PUBSINK_* variables and
// $PORT; the rest of env is ignored): the test's own such variables are
// cleared first, so only the manifest's override the file.
func parseConfigEnv(t *testing.T, data string, env map[string]string) *config.Config {
	t.Helper()
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); strings.HasPrefix(k, "PUBSINK_") || k == "PORT" {
			t.Setenv(k, "")
		}
	}
	for k, v := range env {
		if strings.HasPrefix(k, "PUBSINK_") || k == "PORT" {
			t.Setenv(k, v)
		}
	}
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		t.Fatalf("pubsink refuses the configuration: %v", err)
	}
	return cfg
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func num(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return 0
}

// TestBaseConfig: the base's own config.yaml (an overlay that does not
// replace it runs with it) is one pubsink accepts. It needs no kubectl.
func TestBaseConfig(t *testing.T) {
	cfg := parseConfig(t, string(readFile(t, baseConfigFile)))
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Grace int `yaml:"terminationGracePeriodSeconds"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, "gke/base/deployment.yaml"), &dep); err != nil {
		t.Fatal(err)
	}
	if grace := time.Duration(dep.Spec.Template.Spec.Grace) * time.Second; cfg.ShutdownTimeout >= grace {
		t.Errorf("gke/base/config.yaml: shutdown_timeout %v is not below the pods' terminationGracePeriodSeconds (%v)", cfg.ShutdownTimeout, grace)
	}
}
