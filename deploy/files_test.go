package deploy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const dashboardFile = "grafana/pubsink.json"

// panel is what the test reads of a Grafana panel (rows hold panels too,
// when collapsed).
type panel struct {
	ID         *int   `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// TestDashboard: the dashboard is JSON, its panel ids are unique, every
// query names exported metrics by their labels through the templated
// datasource, and it has the datasource and pipeline variables.
func TestDashboard(t *testing.T) {
	var dash struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Query      any    `json:"query"`
				Definition string `json:"definition"`
				Multi      bool   `json:"multi"`
				IncludeAll bool   `json:"includeAll"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(readFile(t, dashboardFile), &dash); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("%s has no uid or title", dashboardFile)
	}

	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			if v.Type != "datasource" || v.Query != "prometheus" {
				t.Errorf("variable datasource is a %s of %v, want a datasource variable of prometheus", v.Type, v.Query)
			}
		case "pipeline":
			if v.Type != "query" || !v.Multi || !v.IncludeAll {
				t.Errorf("variable pipeline: want a query variable, multi-valued, with All")
			}
			for _, p := range queryProblems(v.Definition) {
				t.Errorf("variable pipeline: %s", p)
			}
		}
	}
	for _, v := range []string{"datasource", "pipeline"} {
		if !vars[v] {
			t.Errorf("%s has no variable %q", dashboardFile, v)
		}
	}

	ids := map[int]string{}
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			switch {
			case p.ID == nil:
				t.Errorf("panel %q has no id", p.Title)
			case ids[*p.ID] != "":
				t.Errorf("panels %q and %q share the id %d", ids[*p.ID], p.Title, *p.ID)
			default:
				ids[*p.ID] = p.Title
			}
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q does not use the datasource variable", p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			refs := map[string]bool{}
			for _, q := range p.Targets {
				queries++
				if refs[q.RefID] {
					t.Errorf("panel %q repeats refId %q", p.Title, q.RefID)
				}
				refs[q.RefID] = true
				for _, prob := range queryProblems(q.Expr) {
					t.Errorf("panel %q, query %s: %s", p.Title, q.RefID, prob)
				}
				if strings.Contains(q.Expr, "pipeline") && !strings.Contains(q.Expr, `pipeline=~"$pipeline"`) {
					t.Errorf("panel %q, query %s: uses pipeline without the $pipeline variable", p.Title, q.RefID)
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if queries < 20 {
		t.Errorf("read %d queries from %s; expected the whole dashboard", queries, dashboardFile)
	}
}

// TestCloudRun: both Cloud Run manifests stop within Cloud Run's 10 s after
// SIGTERM and probe /readyz at start and /healthz after; the worker pool is
// one, and the service keeps its CPU allocated and instances running.
// (TestCloudRunMetrics checks their sidecar.)
func TestCloudRun(t *testing.T) {
	for _, c := range cloudRunManifests {
		o := readManifest(t, c.file)
		if str(o, "apiVersion") != c.apiVersion || o.kind() != c.kind {
			t.Errorf("%s is %s %s, want %s %s", c.file, str(o, "apiVersion"), o.kind(), c.apiVersion, c.kind)
		}
		container := containerNamed(o, pubsinkContainer)
		if container == nil {
			t.Errorf("%s has no container named %q", c.file, pubsinkContainer)
			continue
		}
		var timeout time.Duration
		for _, e := range asList(get(container, "env")) {
			if str(e, "name") == "PUBSINK_SHUTDOWN_TIMEOUT" {
				timeout, _ = time.ParseDuration(str(e, "value"))
			}
		}
		if timeout <= 0 || timeout >= 10*time.Second {
			t.Errorf("%s: PUBSINK_SHUTDOWN_TIMEOUT is %v, want less than Cloud Run's 10 s after SIGTERM", c.file, timeout)
		}
		if got := str(container, "startupProbe", "httpGet", "path"); got != "/readyz" {
			t.Errorf("%s: the startup probe asks %q, want /readyz", c.file, got)
		}
		if got := str(container, "livenessProbe", "httpGet", "path"); got != "/healthz" {
			t.Errorf("%s: the liveness probe asks %q, want /healthz", c.file, got)
		}
		switch c.kind {
		case "WorkerPool":
			if n := str(o, "metadata", "annotations", "run.googleapis.com/manualInstanceCount"); n == "" || n == "0" {
				t.Errorf("%s: manualInstanceCount is %q: no instance would pull", c.file, n)
			}
		case "Service":
			a := func(k string) string { return str(o, "spec", "template", "metadata", "annotations", k) }
			if a("run.googleapis.com/cpu-throttling") != "false" {
				t.Errorf("%s: CPU is not always allocated: pulling happens outside requests", c.file)
			}
			if n := a("autoscaling.knative.dev/minScale"); n == "" || n == "0" {
				t.Errorf("%s: minScale is %q: no request will ever start an instance", c.file, n)
			}
		}
	}
}

const composeFile = "docker-compose.yaml"

// composeService is what the tests read of a compose service.
type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Command     string            `yaml:"command"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// composeBuild is a service's build, in its short form (the context alone)
// or its long one.
type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func (b *composeBuild) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&b.Context)
	}
	type plain composeBuild
	return n.Decode((*plain)(b))
}

func readCompose(t *testing.T) map[string]composeService {
	t.Helper()
	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(readFile(t, composeFile), &compose); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return compose.Services
}

// TestCompose: both emulators have health checks, and setup waits for both.
func TestCompose(t *testing.T) {
	const file = composeFile
	services := readCompose(t)
	emulators := []string{"pubsub", "bigtable"}
	for _, name := range emulators {
		s, ok := services[name]
		if !ok {
			t.Fatalf("%s: no service %s, want one for each emulator", file, name)
		}
		if !strings.Contains(s.Command, "gcloud beta emulators "+name+" start") {
			t.Errorf("%s: service %s runs %q, not the %s emulator", file, name, s.Command, name)
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
			t.Errorf("%s: emulator %s has no health check (CMD form)", file, name)
		}
	}
	for _, e := range emulators {
		if c := services["setup"].DependsOn[e].Condition; c != "service_healthy" {
			t.Errorf("%s: setup waits for %s with %q, want service_healthy", file, e, c)
		}
	}
	if c := services["pubsink"].DependsOn["setup"].Condition; c != "service_completed_successfully" {
		t.Errorf("%s: pubsink waits for setup with %q, want service_completed_successfully", file, c)
	}
}
