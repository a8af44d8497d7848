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
	"github.com/pubsink/pubsink/setupplan"
)

// The jobs: `pubsink reprocess` and `pubsink audit`, each as a Kubernetes
// Job beside the GKE Deployment and as a Cloud Run job beside the Cloud Run
// manifests. They must run what the live manifests run (image,
// configuration, and the service account, or the audit's own) and ask for
// a run the command can do: a reprocess it can resume, an audit whose
// restart covers the same range. Which flags the commands have is
// main_test.go's to check (TestJobManifestsNameTheCommandsFlags):
// this package may not import the CLI.
const (
	gkeReprocessJob      = "gke/jobs/reprocess.yaml"
	cloudRunReprocessJob = "cloudrun/reprocess-job.yaml"
	gkeAuditJob          = "gke/jobs/audit.yaml"
	cloudRunAuditJob     = "cloudrun/audit-job.yaml"
	dockerfile           = "../Dockerfile"
)

// reprocessBoolFlags and auditBoolFlags are the commands' flags that take
// no value; every other flag takes one (as --flag=value or --flag value).
var (
	reprocessBoolFlags = map[string]bool{"dry-run": true, "no-restore-point": true}
	auditBoolFlags     = map[string]bool{}
)

// jobCommand is a pubsink command that a job runs, as these tests read its
// command line.
type jobCommand struct {
	name      string
	boolFlags map[string]bool
}

var (
	reprocessCommand = jobCommand{"reprocess", reprocessBoolFlags}
	auditCommand     = jobCommand{"audit", auditBoolFlags}
)

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

// commandFlags reads a container's command line as the container runtime
// builds it (command, else the image's ENTRYPOINT, then args), checks that
// it runs cmd, and returns cmd's flags, by name without dashes (-c is
// config).
func commandFlags(t *testing.T, file string, container any, cmd jobCommand) map[string][]string {
	t.Helper()
	ep := entrypoint(t)
	argv := strList(get(container, "command"))
	if get(container, "command") == nil {
		argv = ep
	}
	argv = append(argv, strList(get(container, "args"))...)
	if len(argv) < 2 || argv[0] != ep[0] || argv[1] != cmd.name {
		t.Fatalf("%s runs %q, want %s %s ... (the image's ENTRYPOINT is %q, which a container without command runs with its args appended)", file, argv, ep[0], cmd.name, ep)
	}
	flags := map[string][]string{}
	args := argv[2:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: %q is a positional argument; %s takes none", file, a, cmd.name)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "c" {
			name = "config"
		}
		if !hasValue && !cmd.boolFlags[name] {
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

// checkJobArgs checks a job's flags for cmd: --config names the file the
// mount provides (mounted), --pipeline a pipeline of every configuration
// the job may run with, and the range is one of --from and --snapshot,
// with absolute times. It returns the flags and the pipeline.
func checkJobArgs(t *testing.T, file string, container any, cmd jobCommand, mounted string, configs map[string]*config.Config) (map[string][]string, string) {
	t.Helper()
	flags := commandFlags(t, file, container, cmd)
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
			t.Errorf("%s: pipeline %q of %s writes to stdout, which %s refuses", file, pipeline, what, cmd.name)
		}
	}
	_, from := flags["from"]
	_, snapshot := flags["snapshot"]
	if from == snapshot {
		t.Errorf("%s: give exactly one of --from and --snapshot (from %v, snapshot %v)", file, from, snapshot)
	}
	// The manifests name the range's times: a reader sees which range a
	// job covers (pubsink would take a duration, relative to a start).
	for _, name := range []string{"from", "until"} {
		if v, ok := flags[name]; ok {
			if _, err := time.Parse(time.RFC3339Nano, v[0]); err != nil {
				t.Errorf("%s: --%s %q is not an RFC 3339 time", file, name, v[0])
			}
		}
	}
	if want := "pubsink-" + cmd.name + "-" + pipeline; jobName(t, file) != want {
		t.Errorf("%s: the job is named %q, want %q (its pipeline's: the comments' commands name it so)", file, jobName(t, file), want)
	}
	return flags, pipeline
}

// jobName is the name of the job in file.
func jobName(t *testing.T, file string) string {
	t.Helper()
	return readManifest(t, file).name()
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

// gkeJob is a Kubernetes Job of gke/jobs, read beside the Deployment.
type gkeJob struct {
	job            object
	pod, container any
	// The Deployment's pod spec.
	depPod   any
	flags    map[string][]string
	pipeline string
}

// checkGKEJob checks what every Kubernetes Job shares: it runs the
// Deployment's image with its ConfigMap at its path, security context and
// resources; it runs cmd on a pipeline of the base's and the example
// overlay's configuration, within its grace period; it is retried a
// bounded number of times and not cut short; its probes ask /healthz; and
// it keeps out of what selects the Deployment's pods. Its restart policy
// and service account are each job's own.
func checkGKEJob(t *testing.T, file string, cmd jobCommand) gkeJob {
	t.Helper()
	const depFile = "gke/base/deployment.yaml"
	job, dep := readManifest(t, file), readManifest(t, depFile)
	if str(job, "apiVersion") != "batch/v1" || job.kind() != "Job" {
		t.Fatalf("%s is %s %s, want batch/v1 Job", file, str(job, "apiVersion"), job.kind())
	}
	pod, depPod := get(job, "spec", "template", "spec"), get(dep, "spec", "template", "spec")
	c, depC := get(pod, "containers", 0), get(depPod, "containers", 0)
	if n := len(asList(get(pod, "containers"))); n != 1 || str(c, "name") != pubsinkContainer {
		t.Fatalf("%s: %d containers, the first named %q; want one, %q", file, n, str(c, "name"), pubsinkContainer)
	}

	if b := get(job, "spec", "backoffLimit"); b == nil || num(b) < 1 {
		t.Errorf("%s: backoffLimit is %v, want one of at least 1 (Kubernetes' default, 6, hides the choice)", file, b)
	}
	if d := get(job, "spec", "activeDeadlineSeconds"); d != nil && num(d) < 6*3600 {
		t.Errorf("%s: activeDeadlineSeconds %v would kill a long range; leave it unset or generous", file, d)
	}

	for _, f := range []struct {
		what     string
		got, out any
	}{
		{"image", get(c, "image"), get(depC, "image")},
		{"the pod's securityContext", get(pod, "securityContext"), get(depPod, "securityContext")},
		{"the container's securityContext", get(c, "securityContext"), get(depC, "securityContext")},
		{"resources", get(c, "resources"), get(depC, "resources")},
	} {
		if f.out == nil || !reflect.DeepEqual(f.got, f.out) {
			t.Errorf("%s: %s is %v, the Deployment's %v", file, f.what, f.got, f.out)
		}
	}

	vol, mount := configVolume(t, file, pod, c)
	depVol, depMount := configVolume(t, depFile, depPod, depC)
	cm := str(vol, "configMap", "name")
	if cm == "" || cm != str(depVol, "configMap", "name") || mount != depMount {
		t.Errorf("%s mounts ConfigMap %q at %s, the Deployment %q at %s", file, cm, mount, str(depVol, "configMap", "name"), depMount)
	}
	keys := configMapKeys(t, "gke/base", cm)
	if len(keys) != 1 {
		t.Fatalf("gke/base/kustomization.yaml generates ConfigMap %q with keys %v, want one", cm, keys)
	}

	configs := map[string]*config.Config{
		baseConfigFile:                  parseConfig(t, string(readFile(t, baseConfigFile))),
		exampleOverlay + "/config.yaml": parseConfig(t, string(readFile(t, exampleOverlay+"/config.yaml"))),
	}
	flags, pipeline := checkJobArgs(t, file, c, cmd, path.Join(mount, keys[0]), configs)

	grace := time.Duration(num(get(pod, "terminationGracePeriodSeconds"))) * time.Second
	for what, cfg := range configs {
		if cfg.ShutdownTimeout >= grace {
			t.Errorf("%s: shutdown_timeout %v is not below %s's terminationGracePeriodSeconds (%v)", what, cfg.ShutdownTimeout, file, grace)
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
				t.Errorf("%s: the %s asks %v, want /healthz on a port of the container", file, probe, get(pr, "httpGet"))
			}
		}
	}
	if get(c, "livenessProbe") != nil && get(c, "startupProbe") == nil {
		t.Errorf("%s: a liveness probe without a startup probe: the HTTP server starts only after the run's subscription", file)
	}

	// Nothing that selects the Deployment's pods selects the Job's: not the
	// Deployment, not the PodDisruptionBudget, and not the PodMonitoring
	// (the alert rules would judge the run as the live pipeline).
	labels := get(job, "spec", "template", "metadata", "labels")
	for selFile, sel := range map[string][]any{
		depFile:                       {"spec", "selector", "matchLabels"},
		"gke/base/pdb.yaml":           {"spec", "selector", "matchLabels"},
		"gke/base/podmonitoring.yaml": {"spec", "selector", "matchLabels"},
	} {
		if selects(get(readManifest(t, selFile), sel...), labels) {
			t.Errorf("%s selects the pods of %s (%v)", selFile, file, labels)
		}
	}
	return gkeJob{job: job, pod: pod, container: c, depPod: depPod, flags: flags, pipeline: pipeline}
}

// cloudRunJob is a Cloud Run job of cloudrun/.
type cloudRunJob struct {
	// task is the task template's spec, container its pubsink container.
	task, container any
	flags           map[string][]string
	pipeline        string
}

// checkCloudRunJob checks what every Cloud Run job shares: one task, a
// timeout that fits a long range, the image and configuration secret of
// the Cloud Run manifests, a stop within Cloud Run's 10 s after SIGTERM,
// and cmd on a pipeline of the configuration. Its retries and service
// account are each job's own.
func checkCloudRunJob(t *testing.T, file string, cmd jobCommand) cloudRunJob {
	t.Helper()
	job := readManifest(t, file)
	if str(job, "apiVersion") != "run.googleapis.com/v1" || job.kind() != "Job" {
		t.Fatalf("%s is %s %s, want run.googleapis.com/v1 Job", file, str(job, "apiVersion"), job.kind())
	}
	if !regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`).MatchString(job.name()) {
		t.Errorf("%s: %q is not a Cloud Run job name", file, job.name())
	}
	exec := get(job, "spec", "template", "spec")
	if tc, p := num(get(exec, "taskCount")), num(get(exec, "parallelism")); tc != 1 || p != 1 {
		t.Errorf("%s: taskCount %d, parallelism %d; want one task: the %s is one process", file, tc, p, cmd.name)
	}
	task := get(exec, "template", "spec")
	if r := get(task, "maxRetries"); r == nil || num(r) < 0 || num(r) > 10 {
		t.Errorf("%s: maxRetries is %v, want 0 to 10, given (the default, 3, hides the choice)", file, r)
	}
	timeout := time.Duration(num(get(task, "timeoutSeconds"))) * time.Second
	if timeout < time.Hour || timeout > 168*time.Hour {
		t.Errorf("%s: timeoutSeconds is %v, want at least an hour (the default, 10 minutes, ends most ranges early) and at most Cloud Run's 168 h", file, timeout)
	}
	containers := asList(get(task, "containers"))
	c := get(containers, 0)
	if len(containers) != 1 || str(c, "name") != pubsinkContainer {
		t.Fatalf("%s: %d containers, the first named %q; want one, %q", file, len(containers), str(c, "name"), pubsinkContainer)
	}

	vol, mount := configVolume(t, file, task, c)
	items := asList(get(vol, "secret", "items"))
	if len(items) != 1 {
		t.Fatalf("%s: the config volume has %d items, want the secret's one version", file, len(items))
	}
	for _, m := range cloudRunManifests {
		live := readManifest(t, m.file)
		livePod, liveC := get(live, "spec", "template", "spec"), containerNamed(live, pubsinkContainer)
		liveVol, liveMount := configVolume(t, m.file, livePod, liveC)
		for _, f := range []struct {
			what     string
			got, out any
		}{
			{"image", get(c, "image"), get(liveC, "image")},
			{"the config volume", get(vol, "secret"), get(liveVol, "secret")},
			{"the config mount", mount, liveMount},
		} {
			if f.out == nil || !reflect.DeepEqual(f.got, f.out) {
				t.Errorf("%s: %s is %v, %s's %v", file, f.what, f.got, m.file, f.out)
			}
		}
	}
	if k := str(items[0], "key"); k != "latest" {
		t.Errorf("%s: the config volume mounts version %q of the secret, want latest, as the live manifests", file, k)
	}

	// The Cloud Run configuration is in Secret Manager: the base's stands
	// in for it, as in TestCloudRunMetrics, under the job's environment.
	env := map[string]string{}
	for _, e := range asList(get(c, "env")) {
		env[str(e, "name")] = str(e, "value")
	}
	cfg := parseConfigEnv(t, string(readFile(t, baseConfigFile)), env)
	if cfg.ShutdownTimeout <= 0 || cfg.ShutdownTimeout >= 10*time.Second {
		t.Errorf("%s: shutdown_timeout is %v under the job's environment, want less than Cloud Run's 10 s after SIGTERM", file, cfg.ShutdownTimeout)
	}
	flags, pipeline := checkJobArgs(t, file, c, cmd, path.Join(mount, str(items[0], "path")), map[string]*config.Config{"the configuration (" + baseConfigFile + ")": cfg})
	return cloudRunJob{task: task, container: c, flags: flags, pipeline: pipeline}
}

// liveCloudRunServiceAccounts are the service accounts of the Cloud Run
// manifests, by file.
func liveCloudRunServiceAccounts(t *testing.T) map[string]string {
	t.Helper()
	sas := map[string]string{}
	for _, m := range cloudRunManifests {
		sas[m.file] = str(readManifest(t, m.file), "spec", "template", "spec", "serviceAccountName")
	}
	return sas
}

// TestReprocessJob: the Kubernetes Job (checkGKEJob) runs as the
// reprocess's own service account (the plan's, which deploy/terraform binds
// by Workload Identity), not the Deployment's, and restarts a failed
// process in its pod, which resumes.
func TestReprocessJob(t *testing.T) {
	j := checkGKEJob(t, gkeReprocessJob, reprocessCommand)
	if got := str(j.pod, "restartPolicy"); got != "OnFailure" {
		t.Errorf("%s: restartPolicy is %q, want OnFailure: a crashed process is restarted and resumes", gkeReprocessJob, got)
	}
	if got, dep := str(j.pod, "serviceAccountName"), str(j.depPod, "serviceAccountName"); got != setupplan.AccountID(setupplan.CommandReprocess) || got == dep {
		t.Errorf("%s: serviceAccountName is %q, want the reprocess's own, %q (the Deployment's is %q)", gkeReprocessJob, got, setupplan.AccountID(setupplan.CommandReprocess), dep)
	}
}

// TestReprocessCloudRunJob: the Cloud Run job (checkCloudRunJob) runs as
// the reprocess's own service account (the plan's), not the live
// manifests', and is retried on failure (a retry resumes).
func TestReprocessCloudRunJob(t *testing.T) {
	j := checkCloudRunJob(t, cloudRunReprocessJob, reprocessCommand)
	if r := num(get(j.task, "maxRetries")); r < 1 {
		t.Errorf("%s: maxRetries is %d, want at least 1: a failed task is retried, and resumes", cloudRunReprocessJob, r)
	}
	got := str(j.task, "serviceAccountName")
	if want := planAccount(setupplan.CommandReprocess); got != want {
		t.Errorf("%s: serviceAccountName is %q, want the reprocess's own, %q", cloudRunReprocessJob, got, want)
	}
	for file, sa := range liveCloudRunServiceAccounts(t) {
		if got == sa {
			t.Errorf("%s: serviceAccountName is %s's, the live pipeline's", cloudRunReprocessJob, file)
		}
	}
}

// checkAuditRange checks an audit job's range and report: a restart audits
// the range again from its start (the audit keeps no record), so --from
// needs an --until for the restart to audit the same range; and the
// findings go to stdout, the job's log.
func checkAuditRange(t *testing.T, file string, flags map[string][]string) {
	t.Helper()
	_, from := flags["from"]
	_, until := flags["until"]
	if from && !until {
		t.Errorf("%s: --from without --until: a restarted audit would end at its own start, another range", file)
	}
	if r := flags["report"]; len(r) != 1 || r[0] != "-" {
		t.Errorf("%s: --report is %q, want \"-\": the findings to stdout, which the job's log keeps", file, r)
	}
}

// auditServiceAccount is the audit's own service account: a Kubernetes
// one on GKE, the Google one on Cloud Run; neither is the live pipeline's,
// which may write to Bigtable.
const (
	auditServiceAccount       = "pubsink-audit"
	auditGoogleServiceAccount = auditServiceAccount + "@PROJECT_ID.iam.gserviceaccount.com"
	// the base's Kubernetes service account, which the Deployment runs as
	runServiceAccount = "pubsink"
)

// podFailureAction is what a Job's podFailurePolicy does when container
// exits with code: the action of the first rule on exit codes that
// matches, or "" when none does (the failure counts against backoffLimit).
func podFailureAction(job object, container string, code int) string {
	for _, r := range asList(get(job, "spec", "podFailurePolicy", "rules")) {
		on := get(r, "onExitCodes")
		if on == nil || (str(on, "containerName") != "" && str(on, "containerName") != container) {
			continue
		}
		in := false
		for _, v := range asList(get(on, "values")) {
			in = in || num(v) == code
		}
		if in == (str(on, "operator") == "In") {
			return str(r, "action")
		}
	}
	return ""
}

// TestAuditJob: the Kubernetes Job (checkGKEJob) audits a range that a
// restart audits again whole, runs as the audit's own service account,
// which the header's commands create, fails at once on a finished audit
// with findings (exit 4) and on bad usage (2) and retries the rest, and
// has a writable temporary directory for its spill beside a read-only root
// file system.
func TestAuditJob(t *testing.T) {
	j := checkGKEJob(t, gkeAuditJob, auditCommand)
	checkAuditRange(t, gkeAuditJob, j.flags)

	sa := str(j.pod, "serviceAccountName")
	if sa != auditServiceAccount || sa == str(j.depPod, "serviceAccountName") {
		t.Errorf("%s: serviceAccountName is %q, want the audit's own, %q (the Deployment's is %q)", gkeAuditJob, sa, auditServiceAccount, str(j.depPod, "serviceAccountName"))
	}
	header := string(readFile(t, gkeAuditJob))
	for _, want := range []string{"create serviceaccount " + sa + "\n", "iam.gke.io/gcp-service-account=" + auditGoogleServiceAccount, "[NAMESPACE/" + sa + "]"} {
		if !strings.Contains(header, want) {
			t.Errorf("%s: the header's commands do not set up the Job's service account: no %q", gkeAuditJob, want)
		}
	}

	// podFailurePolicy needs restartPolicy Never (the API refuses it with
	// OnFailure): each attempt is a new pod.
	if got := str(j.pod, "restartPolicy"); got != "Never" {
		t.Errorf("%s: restartPolicy is %q, want Never: the podFailurePolicy needs it", gkeAuditJob, got)
	}
	for code, want := range map[int]string{
		4: "FailJob", // findings: a retry finds the same
		2: "FailJob", // bad usage: a retry fails the same
		1: "",        // a runtime failure: retried
		3: "",        // stopped by SIGTERM: retried
	} {
		if got := podFailureAction(j.job, pubsinkContainer, code); got != want {
			t.Errorf("%s: on exit %d the podFailurePolicy's action is %q, want %q", gkeAuditJob, code, got, want)
		}
	}

	// The spill's directory: os.TempDir, $TMPDIR or /tmp.
	if get(j.container, "securityContext", "readOnlyRootFilesystem") == true {
		tmp := "/tmp"
		for _, e := range asList(get(j.container, "env")) {
			if str(e, "name") == "TMPDIR" {
				tmp = str(e, "value")
			}
		}
		writable := false
		for _, m := range asList(get(j.container, "volumeMounts")) {
			if str(m, "mountPath") != tmp || get(m, "readOnly") == true {
				continue
			}
			for _, v := range asList(get(j.pod, "volumes")) {
				writable = writable || (str(v, "name") == str(m, "name") && get(v, "emptyDir") != nil)
			}
		}
		if !writable {
			t.Errorf("%s: the root file system is read-only and no emptyDir is mounted writable at %s, where the audit spills", gkeAuditJob, tmp)
		}
	}
}

// TestAuditCloudRunJob: the Cloud Run job (checkCloudRunJob) audits a
// range that a new execution audits again whole, runs as the audit's own
// service account, and is not retried: Cloud Run cannot tell a finished
// audit with findings (exit 4) from a failure, and would audit the range
// again for nothing.
func TestAuditCloudRunJob(t *testing.T) {
	j := checkCloudRunJob(t, cloudRunAuditJob, auditCommand)
	checkAuditRange(t, cloudRunAuditJob, j.flags)
	if r := get(j.task, "maxRetries"); r == nil || num(r) != 0 {
		t.Errorf("%s: maxRetries is %v, want 0: a retry of exit 4 audits the whole range again and finds the same", cloudRunAuditJob, r)
	}
	got := str(j.task, "serviceAccountName")
	if got != auditGoogleServiceAccount {
		t.Errorf("%s: serviceAccountName is %q, want the audit's own, %q", cloudRunAuditJob, got, auditGoogleServiceAccount)
	}
	for file, sa := range liveCloudRunServiceAccounts(t) {
		if got == sa {
			t.Errorf("%s: serviceAccountName is %s's, which may write to Bigtable", cloudRunAuditJob, file)
		}
	}
}
