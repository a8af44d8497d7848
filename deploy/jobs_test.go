package deploy

import (
	"encoding/json"
	"path"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pubsink/pubsink/config"
)

// The reprocess jobs: `pubsink reprocess` as a Kubernetes Job beside the
// GKE Deployment, and as a Cloud Run job beside the Cloud Run manifests.
// They must run what the live manifests run (image, service account,
// configuration) and ask for a reprocess the command can do and resume.
// Which flags the command has is main_test.go's to check
// (TestReprocessManifestsNameTheCommandsFlags): this package may not
// import the CLI.
const (
	gkeReprocessJob      = "gke/jobs/reprocess.yaml"
	cloudRunReprocessJob = "cloudrun/reprocess-job.yaml"
	dockerfile           = "../Dockerfile"
)

// reprocessBoolFlags are the command's flags that take no value; every
// other flag takes one (as --flag=value or --flag value).
var reprocessBoolFlags = map[string]bool{"dry-run": true, "no-restore-point": true}

// entrypoint is the image's ENTRYPOINT, from the Dockerfile's exec form.
func entrypoint(t *testing.T) []string {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, dockerfile)), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENTRYPOINT "); ok {
			var ep []string
			if err := json.Unmarshal([]byte(rest), &ep); err != nil || len(ep) == 0 {
				t.Fatalf("%s: ENTRYPOINT %s is not the exec form (a JSON list): %v", dockerfile, rest, err)
			}
			return ep
		}
	}
	t.Fatalf("%s has no ENTRYPOINT", dockerfile)
	return nil
}

func strList(v any) []string {
	var out []string
	for _, s := range asList(v) {
		str, _ := s.(string)
		out = append(out, str)
	}
	return out
}

// reprocessFlags reads a container's command line as the container runtime
// builds it (command, else the image's ENTRYPOINT, then args) and returns
// the reprocess command's flags, by name without dashes (-c is config).
func reprocessFlags(t *testing.T, file string, container any) map[string][]string {
	t.Helper()
	ep := entrypoint(t)
	argv := strList(get(container, "command"))
	if get(container, "command") == nil {
		argv = ep
	}
	argv = append(argv, strList(get(container, "args"))...)
	if len(argv) < 2 || argv[0] != ep[0] || argv[1] != "reprocess" {
		t.Fatalf("%s runs %q, want %s reprocess ... (the image's ENTRYPOINT is %q, which a container without command runs with its args appended)", file, argv, ep[0], ep)
	}
	flags := map[string][]string{}
	args := argv[2:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: %q is a positional argument; reprocess takes none", file, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "c" {
			name = "config"
		}
		if !hasValue && !reprocessBoolFlags[name] {
			if i+1 == len(args) {
				t.Errorf("%s: %s has no value", file, a)
				continue
			}
			i++
			value = args[i]
		}
		flags[name] = append(flags[name], value)
	}
	return flags
}

// checkReprocessArgs checks a job's reprocess flags: --config names the
// file the mount provides (mounted), --pipeline a pipeline of every
// configuration the job may run with, and the range is one the command can
// resume. It returns the pipeline.
func checkReprocessArgs(t *testing.T, file string, container any, mounted string, configs map[string]*config.Config) string {
	t.Helper()
	flags := reprocessFlags(t, file, container)
	for name, values := range flags {
		if len(values) > 1 {
			t.Errorf("%s: --%s is given %d times", file, name, len(values))
		}
	}
	one := func(name string) string {
		if v := flags[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if got := one("config"); got != mounted {
		t.Errorf("%s: --config is %q, want %s, the file the config volume provides", file, got, mounted)
	}
	pipeline := one("pipeline")
	if pipeline == "" {
		t.Errorf("%s: no --pipeline", file)
	}
	for what, cfg := range configs {
		var pc *config.Pipeline
		var names []string
		for i := range cfg.Pipelines {
			names = append(names, cfg.Pipelines[i].Name)
			if cfg.Pipelines[i].Name == pipeline {
				pc = &cfg.Pipelines[i]
			}
		}
		switch {
		case pc == nil:
			t.Errorf("%s: --pipeline %q is not a pipeline of %s (%v)", file, pipeline, what, names)
		case pc.Sink.Type == config.SinkStdout:
			t.Errorf("%s: pipeline %q of %s writes to stdout, which reprocess refuses", file, pipeline, what)
		}
	}
	_, from := flags["from"]
	_, snapshot := flags["snapshot"]
	if from == snapshot {
		t.Errorf("%s: give exactly one of --from and --snapshot (from %v, snapshot %v)", file, from, snapshot)
	}
	// The manifests name the range's times: a reader sees which range a
	// Job rewrites (pubsink would take a duration, relative to the first
	// start).
	for _, name := range []string{"from", "until"} {
		if v, ok := flags[name]; ok {
			if _, err := time.Parse(time.RFC3339Nano, v[0]); err != nil {
				t.Errorf("%s: --%s %q is not an RFC 3339 time", file, name, v[0])
			}
		}
	}
	return pipeline
}

// configMapKeys are the keys of a ConfigMap that kustomization.yaml in dir
// generates under name.
func configMapKeys(t *testing.T, dir, name string) []string {
	t.Helper()
	var k struct {
		ConfigMapGenerator []struct {
			Name  string   `yaml:"name"`
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(readFile(t, dir+"/kustomization.yaml"), &k); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, g := range k.ConfigMapGenerator {
		if g.Name != name {
			continue
		}
		for _, f := range g.Files {
			if key, _, ok := strings.Cut(f, "="); ok {
				keys = append(keys, key)
			} else {
				keys = append(keys, path.Base(f))
			}
		}
	}
	return keys
}

// configVolume is the pod's volume that holds pubsink's configuration and
// where the container mounts it: the volume mounted at the directory of
// the default --config, /etc/pubsink.
func configVolume(t *testing.T, file string, pod, container any) (volume any, mountPath string) {
	t.Helper()
	for _, m := range asList(get(container, "volumeMounts")) {
		if str(m, "mountPath") != "/etc/pubsink" {
			continue
		}
		for _, v := range asList(get(pod, "volumes")) {
			if str(v, "name") == str(m, "name") {
				return v, str(m, "mountPath")
			}
		}
	}
	t.Fatalf("%s: the container mounts no volume at /etc/pubsink", file)
	return nil, ""
}

// selects reports whether a matchLabels selector selects labels.
func selects(selector, labels any) bool {
	sel, _ := selector.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if l[k] != v {
			return false
		}
	}
	return true
}

// TestReprocessJob: the Kubernetes Job runs the Deployment's image as its
// service account, with its ConfigMap at its path, security context and
// resources; it asks for a reprocess of a pipeline of the base's and the
// example overlay's configuration, restarts a failed process (which
// resumes), and keeps out of what selects the Deployment's pods.
func TestReprocessJob(t *testing.T) {
	const depFile = "gke/base/deployment.yaml"
	job, dep := readManifest(t, gkeReprocessJob), readManifest(t, depFile)
	if str(job, "apiVersion") != "batch/v1" || job.kind() != "Job" {
		t.Fatalf("%s is %s %s, want batch/v1 Job", gkeReprocessJob, str(job, "apiVersion"), job.kind())
	}
	pod, depPod := get(job, "spec", "template", "spec"), get(dep, "spec", "template", "spec")
	c, depC := get(pod, "containers", 0), get(depPod, "containers", 0)
	if n := len(asList(get(pod, "containers"))); n != 1 || str(c, "name") != pubsinkContainer {
		t.Fatalf("%s: %d containers, the first named %q; want one, %q", gkeReprocessJob, n, str(c, "name"), pubsinkContainer)
	}

	if got := str(pod, "restartPolicy"); got != "OnFailure" {
		t.Errorf("restartPolicy is %q, want OnFailure: a crashed process is restarted and resumes", got)
	}
	if b := get(job, "spec", "backoffLimit"); b == nil || num(b) < 1 {
		t.Errorf("backoffLimit is %v, want one of at least 1 (Kubernetes' default, 6, hides the choice)", b)
	}
	if d := get(job, "spec", "activeDeadlineSeconds"); d != nil && num(d) < 6*3600 {
		t.Errorf("activeDeadlineSeconds %v would kill a long reprocess; leave it unset or generous", d)
	}

	for _, f := range []struct {
		what     string
		got, out any
	}{
		{"serviceAccountName", get(pod, "serviceAccountName"), get(depPod, "serviceAccountName")},
		{"image", get(c, "image"), get(depC, "image")},
		{"the pod's securityContext", get(pod, "securityContext"), get(depPod, "securityContext")},
		{"the container's securityContext", get(c, "securityContext"), get(depC, "securityContext")},
		{"resources", get(c, "resources"), get(depC, "resources")},
	} {
		if f.out == nil || !reflect.DeepEqual(f.got, f.out) {
			t.Errorf("%s: %s is %v, the Deployment's %v", gkeReprocessJob, f.what, f.got, f.out)
		}
	}

	vol, mount := configVolume(t, gkeReprocessJob, pod, c)
	depVol, depMount := configVolume(t, depFile, depPod, depC)
	cm := str(vol, "configMap", "name")
	if cm == "" || cm != str(depVol, "configMap", "name") || mount != depMount {
		t.Errorf("the Job mounts ConfigMap %q at %s, the Deployment %q at %s", cm, mount, str(depVol, "configMap", "name"), depMount)
	}
	keys := configMapKeys(t, "gke/base", cm)
	if len(keys) != 1 {
		t.Fatalf("gke/base/kustomization.yaml generates ConfigMap %q with keys %v, want one", cm, keys)
	}

	configs := map[string]*config.Config{
		baseConfigFile:                  parseConfig(t, string(readFile(t, baseConfigFile))),
		exampleOverlay + "/config.yaml": parseConfig(t, string(readFile(t, exampleOverlay+"/config.yaml"))),
	}
	pipeline := checkReprocessArgs(t, gkeReprocessJob, c, path.Join(mount, keys[0]), configs)
	if want := "pubsink-reprocess-" + pipeline; job.name() != want {
		t.Errorf("the Job is named %q, want %q (its pipeline's: the comments' commands name it so)", job.name(), want)
	}

	grace := time.Duration(num(get(pod, "terminationGracePeriodSeconds"))) * time.Second
	for what, cfg := range configs {
		if cfg.ShutdownTimeout >= grace {
			t.Errorf("%s: shutdown_timeout %v is not below the Job's terminationGracePeriodSeconds (%v)", what, cfg.ShutdownTimeout, grace)
		}
	}

	// The probes ask a port the container names, and /healthz.
	ports := map[any]bool{}
	for _, p := range asList(get(c, "ports")) {
		ports[get(p, "name")], ports[get(p, "containerPort")] = true, true
	}
	for _, probe := range []string{"startupProbe", "livenessProbe"} {
		if pr := get(c, probe); pr != nil {
			if str(pr, "httpGet", "path") != "/healthz" || !ports[get(pr, "httpGet", "port")] {
				t.Errorf("%s: the %s asks %v, want /healthz on a port of the container", gkeReprocessJob, probe, get(pr, "httpGet"))
			}
		}
	}
	if get(c, "livenessProbe") != nil && get(c, "startupProbe") == nil {
		t.Errorf("%s: a liveness probe without a startup probe: the HTTP server starts only after the lock, the restore point and the subscription", gkeReprocessJob)
	}

	// Nothing that selects the Deployment's pods selects the Job's: not the
	// Deployment, not the PodDisruptionBudget, and not the PodMonitoring
	// (the alert rules would judge the run as the live pipeline).
	labels := get(job, "spec", "template", "metadata", "labels")
	for file, sel := range map[string][]any{
		depFile:                       {"spec", "selector", "matchLabels"},
		"gke/base/pdb.yaml":           {"spec", "selector", "matchLabels"},
		"gke/base/podmonitoring.yaml": {"spec", "selector", "matchLabels"},
	} {
		if selects(get(readManifest(t, file), sel...), labels) {
			t.Errorf("%s selects the Job's pods (%v)", file, labels)
		}
	}
}

// TestReprocessCloudRunJob: the Cloud Run job runs the image, service
// account and configuration secret of the Cloud Run manifests, as one task
// retried on failure (a retry resumes), within Cloud Run's 10 s after
// SIGTERM, and asks for a reprocess of a pipeline of the configuration.
func TestReprocessCloudRunJob(t *testing.T) {
	job := readManifest(t, cloudRunReprocessJob)
	if str(job, "apiVersion") != "run.googleapis.com/v1" || job.kind() != "Job" {
		t.Fatalf("%s is %s %s, want run.googleapis.com/v1 Job", cloudRunReprocessJob, str(job, "apiVersion"), job.kind())
	}
	if !regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`).MatchString(job.name()) {
		t.Errorf("%s: %q is not a Cloud Run job name", cloudRunReprocessJob, job.name())
	}
	exec := get(job, "spec", "template", "spec")
	if tc, p := num(get(exec, "taskCount")), num(get(exec, "parallelism")); tc != 1 || p != 1 {
		t.Errorf("%s: taskCount %d, parallelism %d; want one task: a reprocess is one process", cloudRunReprocessJob, tc, p)
	}
	task := get(exec, "template", "spec")
	if r := get(task, "maxRetries"); r == nil || num(r) < 1 || num(r) > 10 {
		t.Errorf("%s: maxRetries is %v, want 1 to 10: a failed task is retried, and resumes", cloudRunReprocessJob, r)
	}
	timeout := time.Duration(num(get(task, "timeoutSeconds"))) * time.Second
	if timeout < time.Hour || timeout > 168*time.Hour {
		t.Errorf("%s: timeoutSeconds is %v, want at least an hour (the default, 10 minutes, ends most ranges early) and at most Cloud Run's 168 h", cloudRunReprocessJob, timeout)
	}
	containers := asList(get(task, "containers"))
	c := get(containers, 0)
	if len(containers) != 1 || str(c, "name") != pubsinkContainer {
		t.Fatalf("%s: %d containers, the first named %q; want one, %q", cloudRunReprocessJob, len(containers), str(c, "name"), pubsinkContainer)
	}

	vol, mount := configVolume(t, cloudRunReprocessJob, task, c)
	items := asList(get(vol, "secret", "items"))
	if len(items) != 1 {
		t.Fatalf("%s: the config volume has %d items, want the secret's one version", cloudRunReprocessJob, len(items))
	}
	for _, m := range cloudRunManifests {
		live := readManifest(t, m.file)
		livePod, liveC := get(live, "spec", "template", "spec"), containerNamed(live, pubsinkContainer)
		liveVol, liveMount := configVolume(t, m.file, livePod, liveC)
		for _, f := range []struct {
			what     string
			got, out any
		}{
			{"serviceAccountName", get(task, "serviceAccountName"), get(livePod, "serviceAccountName")},
			{"image", get(c, "image"), get(liveC, "image")},
			{"the config volume", get(vol, "secret"), get(liveVol, "secret")},
			{"the config mount", mount, liveMount},
		} {
			if f.out == nil || !reflect.DeepEqual(f.got, f.out) {
				t.Errorf("%s: %s is %v, %s's %v", cloudRunReprocessJob, f.what, f.got, m.file, f.out)
			}
		}
	}
	if k := str(items[0], "key"); k != "latest" {
		t.Errorf("%s: the config volume mounts version %q of the secret, want latest, as the live manifests", cloudRunReprocessJob, k)
	}

	// The Cloud Run configuration is in Secret Manager: the base's stands
	// in for it, as in TestCloudRunMetrics, under the job's environment.
	env := map[string]string{}
	for _, e := range asList(get(c, "env")) {
		env[str(e, "name")] = str(e, "value")
	}
	base := string(readFile(t, baseConfigFile))
	cfg := parseConfigEnv(t, base, env)
	if cfg.ShutdownTimeout <= 0 || cfg.ShutdownTimeout >= 10*time.Second {
		t.Errorf("%s: shutdown_timeout is %v under the job's environment, want less than Cloud Run's 10 s after SIGTERM", cloudRunReprocessJob, cfg.ShutdownTimeout)
	}
	pipeline := checkReprocessArgs(t, cloudRunReprocessJob, c, path.Join(mount, str(items[0], "path")), map[string]*config.Config{"the configuration (" + baseConfigFile + ")": cfg})
	if want := "pubsink-reprocess-" + pipeline; job.name() != want {
		t.Errorf("the job is named %q, want %q (its pipeline's: the comments' commands name it so)", job.name(), want)
	}
}
