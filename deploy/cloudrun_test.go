package deploy

import (
	"encoding/json"
	"net"
	"path"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// cloudRunManifests are the Cloud Run manifests, with what each must be.
var cloudRunManifests = []struct{ file, apiVersion, kind string }{
	{"cloudrun/workerpool.yaml", "run.googleapis.com/v1", "WorkerPool"},
	{"cloudrun/service.yaml", "serving.knative.dev/v1", "Service"},
}

const (
	runMonitoringFile = "cloudrun/rungmp-config.yaml"

	pubsinkContainer = "pubsink"
	sidecarContainer = "collector"

	// sidecarImage is the repository of Google's Managed Service for
	// Prometheus sidecar for Cloud Run, as its documentation names it
	// (cloud.google.com/run/docs/monitoring-managed-prometheus-sidecar);
	// the tag is the manifests' to choose.
	sidecarImage = "us-docker.pkg.dev/cloud-ops-agents-artifacts/cloud-run-gmp-sidecar/cloud-run-gmp-sidecar"
	// sidecarConfig is the one file the sidecar reads its RunMonitoring
	// from (userConfigFile in the sidecar's entrypoint.go).
	sidecarConfig = "/etc/rungmp/config.yaml"
	// metricsPath is where pubsink serves its metrics (docs/reference.md,
	// "HTTP endpoints").
	metricsPath = "/metrics"
)

// runMonitoring is the sidecar's configuration: a RunMonitoring resource.
// Its fields are the ones the sidecar reads (RunMonitoringConfig in the
// sidecar's confgenerator/config.go); the sidecar refuses any other, and so
// does strictUnmarshal.
type runMonitoring struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Endpoints []struct {
			Port     string `yaml:"port"`
			Scheme   string `yaml:"scheme"`
			Path     string `yaml:"path"`
			Interval string `yaml:"interval"`
			Timeout  string `yaml:"timeout"`
		} `yaml:"endpoints"`
		TargetLabels struct {
			Metadata []string `yaml:"metadata"`
		} `yaml:"targetLabels"`
	} `yaml:"spec"`
}

// readManifest parses a Cloud Run manifest as generic YAML.
func readManifest(t *testing.T, file string) object {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(readFile(t, file), &m); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return object(m)
}

// containerNamed returns the revision template's container of that name, or
// nil.
func containerNamed(o object, name string) any {
	for _, c := range asList(get(o, "spec", "template", "spec", "containers")) {
		if str(c, "name") == name {
			return c
		}
	}
	return nil
}

// containerNames lists the names of the revision template's containers.
func containerNames(o object) []string {
	var n []string
	for _, c := range asList(get(o, "spec", "template", "spec", "containers")) {
		n = append(n, str(c, "name"))
	}
	return n
}

// servedPort is the port pubsink listens on in the manifest: the port of
// http.addr as pubsink's own parser makes it, from a configuration and the
// container's environment, plus, on a service, the $PORT that Cloud Run
// sets from the container port.
func servedPort(t *testing.T, kind string, container any, configuration string) string {
	t.Helper()
	env := map[string]string{}
	for _, e := range asList(get(container, "env")) {
		env[str(e, "name")] = str(e, "value")
	}
	if kind == "Service" {
		port := 8080 // Cloud Run's, when the container names none
		if p := num(get(container, "ports", 0, "containerPort")); p != 0 {
			port = p
		}
		env["PORT"] = strconv.Itoa(port)
	}
	cfg := parseConfigEnv(t, configuration, env)
	_, port, err := net.SplitHostPort(cfg.HTTP.Addr)
	if err != nil {
		t.Fatalf("http.addr %q: %v", cfg.HTTP.Addr, err)
	}
	return port
}

// TestCloudRunMetrics: both Cloud Run manifests run Google's Managed
// Service for Prometheus sidecar beside pubsink, started after it and
// reading rungmp-config.yaml from the place the sidecar reads; that file
// scrapes /metrics on the port pubsink serves under the manifest, whatever
// http.addr the configuration secret sets; pubsink is the service's ingress
// container.
func TestCloudRunMetrics(t *testing.T) {
	var rm runMonitoring
	strictUnmarshal(t, runMonitoringFile, readFile(t, runMonitoringFile), &rm)
	if rm.APIVersion != "monitoring.googleapis.com/v1beta" || rm.Kind != "RunMonitoring" {
		t.Errorf("%s is %s %s, want monitoring.googleapis.com/v1beta RunMonitoring (the sidecar refuses anything else)", runMonitoringFile, rm.APIVersion, rm.Kind)
	}
	if rm.Metadata.Name == "" {
		t.Errorf("%s has no name (it becomes the series' job label)", runMonitoringFile)
	}
	if len(rm.Spec.Endpoints) != 1 {
		t.Fatalf("%s has %d endpoints, want pubsink's one", runMonitoringFile, len(rm.Spec.Endpoints))
	}
	ep := rm.Spec.Endpoints[0]
	if ep.Path != metricsPath {
		t.Errorf("%s scrapes path %q, want %s", runMonitoringFile, ep.Path, metricsPath)
	}
	interval, err := time.ParseDuration(ep.Interval)
	if err != nil || interval <= 0 {
		t.Errorf("%s: interval %q is not a positive duration", runMonitoringFile, ep.Interval)
	}
	if timeout, err := time.ParseDuration(ep.Timeout); ep.Timeout != "" && (err != nil || timeout > interval) {
		t.Errorf("%s: timeout %q is not a duration within the interval %v", runMonitoringFile, ep.Timeout, interval)
	}

	// The Cloud Run configuration is in Secret Manager, so the repository
	// holds none: the base's stands in, as it is (no http key: the default
	// address) and with an http.addr of its own, which the manifest must
	// override, or the secret would move pubsink away from its probes and
	// the sidecar.
	base := string(readFile(t, baseConfigFile))
	configurations := map[string]string{
		"with the default http.addr":   base,
		"with an http.addr of its own": base + "\nhttp:\n  addr: \":9999\"\n",
	}

	secrets := map[string]string{}
	for _, c := range cloudRunManifests {
		t.Run(c.file, func(t *testing.T) {
			o := readManifest(t, c.file)
			pubsink, sidecar := containerNamed(o, pubsinkContainer), containerNamed(o, sidecarContainer)
			if pubsink == nil || sidecar == nil {
				t.Fatalf("the containers are %q, want %q and %q", containerNames(o), pubsinkContainer, sidecarContainer)
			}

			image := str(sidecar, "image")
			repo, tag := image, ""
			if i := strings.LastIndexAny(image, ":@"); i > strings.LastIndex(image, "/") {
				repo, tag = image[:i], image[i+1:]
			}
			if repo != sidecarImage {
				t.Errorf("the sidecar runs %q, want Google's %s", image, sidecarImage)
			}
			if tag == "" || tag == "latest" {
				t.Errorf("the sidecar's image %q is not pinned: a deploy would take whatever collector is newest", image)
			}

			deps := str(o, "spec", "template", "metadata", "annotations", "run.googleapis.com/container-dependencies")
			var got map[string][]string
			if err := json.Unmarshal([]byte(deps), &got); err != nil || !reflect.DeepEqual(got, map[string][]string{sidecarContainer: {pubsinkContainer}}) {
				t.Errorf("container-dependencies is %q, want the sidecar to start after pubsink: {%q:[%q]}", deps, sidecarContainer, pubsinkContainer)
			}

			if get(sidecar, "ports") != nil {
				t.Errorf("the sidecar has ports: on a service that makes it the ingress container instead of pubsink")
			}
			if c.kind == "Service" && num(get(pubsink, "ports", 0, "containerPort")) == 0 {
				t.Errorf("pubsink has no container port: on a service it must be the ingress container, whose port is $PORT")
			}

			// The RunMonitoring file is mounted where the sidecar reads it.
			secret := ""
			for _, m := range asList(get(sidecar, "volumeMounts")) {
				for _, v := range asList(get(o, "spec", "template", "spec", "volumes")) {
					if str(v, "name") != str(m, "name") {
						continue
					}
					for _, item := range asList(get(v, "secret", "items")) {
						if path.Join(str(m, "mountPath"), str(item, "path")) == sidecarConfig && str(item, "key") == "latest" {
							secret = str(v, "secret", "secretName")
						}
					}
				}
			}
			if secret == "" {
				t.Errorf("the sidecar mounts no secret's latest version at %s, where it reads its RunMonitoring", sidecarConfig)
			}
			secrets[c.file] = secret

			// pubsink serves the port the sidecar scrapes and its probes ask.
			for what, configuration := range configurations {
				port := servedPort(t, c.kind, pubsink, configuration)
				if ep.Port != port {
					t.Errorf("%s: pubsink serves on port %s; %s scrapes %s", what, port, runMonitoringFile, ep.Port)
				}
				for _, probe := range []string{"startupProbe", "livenessProbe"} {
					if p := num(get(pubsink, probe, "httpGet", "port")); p != 0 && strconv.Itoa(p) != port {
						t.Errorf("%s: pubsink serves on port %s; its %s asks %d", what, port, probe, p)
					}
				}
			}
		})
	}
	// One file, one secret (an empty one is reported above).
	one := secrets[cloudRunManifests[0].file]
	for _, secret := range secrets {
		if one != "" && secret != "" && secret != one {
			t.Errorf("the manifests mount different RunMonitoring secrets (%v); %s is one file", secrets, runMonitoringFile)
			break
		}
	}
}
