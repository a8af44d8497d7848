package deploy

import (
	"archive/zip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
)

const (
	// agentSources is where the agent's Java sources live, from the
	// repository root (the compose build context of the Pub/Sub emulator).
	agentSources = "internal/testenv/emulator/javaagent"
	// agentScript builds the agent jar in the image, from the repository root.
	agentScript = "deploy/pubsub-emulator/build-agent.sh"
)

var javaAgentOpt = regexp.MustCompile(`(?:^|\s)-javaagent:(\S+)`)

// TestComposePubSubRunsTheEmulatorFix: the compose Pub/Sub emulator is
// built from a context that holds the agent's sources, its Dockerfile
// compiles them with the build script and puts the jar where JAVA_OPTS names
// it, and the build's ignore file sends what the build reads. The stock
// image alone loses delayed redeliveries on the subscriptions setup creates.
func TestComposePubSubRunsTheEmulatorFix(t *testing.T) {
	ps := readCompose(t)["pubsub"]
	if ps.Build == nil || ps.Build.Dockerfile == "" {
		t.Fatalf("%s: service pubsub has no build with a dockerfile (image %q): the stock emulator lacks the fix", composeFile, ps.Image)
	}
	root := ps.Build.Context // relative to deploy/, where the compose file is
	if fi, err := os.Stat(filepath.Join(root, agentSources, "MANIFEST.MF")); err != nil || fi.IsDir() {
		t.Errorf("%s: pubsub's build context %q does not hold the agent's sources %s: %v", composeFile, root, agentSources, err)
	}
	m := javaAgentOpt.FindStringSubmatch(ps.Environment["JAVA_OPTS"])
	if m == nil {
		t.Fatalf("%s: pubsub's JAVA_OPTS %q loads no -javaagent", composeFile, ps.Environment["JAVA_OPTS"])
	}
	jarInImage := m[1]

	dockerfile := filepath.Join(root, ps.Build.Dockerfile)
	text := string(readFile(t, dockerfile))
	for _, want := range []struct{ what, re string }{
		{"copies the agent's sources", `(?m)^COPY\s+` + regexp.QuoteMeta(agentSources) + `/?\s`},
		{"copies the build script", `(?m)^COPY\s+` + regexp.QuoteMeta(agentScript) + `\s`},
		{"runs the build script", `(?m)^RUN\s.*build-agent\.sh\s`},
		{"puts the jar where JAVA_OPTS names it", `(?m)^COPY\s+--from=\S+\s+\S+\s+` + regexp.QuoteMeta(jarInImage) + `\s*$`},
		{"ends on the emulators image", `(?s)FROM\s+gcr\.io/google\.com/cloudsdktool/google-cloud-cli:emulators\s*\n[^F]*$`},
	} {
		if !regexp.MustCompile(want.re).MatchString(text) {
			t.Errorf("%s: no line that %s (want /%s/)", dockerfile, want.what, want.re)
		}
	}
	// The root .dockerignore leaves deploy/ out; BuildKit reads
	// DOCKERFILE.dockerignore instead of it when that exists.
	ignore := string(readFile(t, dockerfile+".dockerignore"))
	for _, path := range []string{agentSources, agentScript} {
		if !strings.Contains(ignore, "\n!"+path+"\n") {
			t.Errorf("%s.dockerignore does not send %s (want a line !%s)", dockerfile, path, path)
		}
	}
}

// TestComposePubSubAgentBuildsAndLoads runs the image's build script here,
// against the installed emulator, and starts the emulator with its jar: the
// start fails unless the emulator's log shows the agent installed.
func TestComposePubSubAgentBuildsAndLoads(t *testing.T) {
	emulatorJar, err := emulator.PubSubJar()
	for _, tool := range []string{"javac", "jar"} {
		if err == nil {
			_, err = exec.LookPath(tool)
		}
	}
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("%v (CI=true: the emulator and a JDK must be installed)", err)
		}
		t.Skipf("skipping: %v (with CI=true this is a failure)", err)
	}
	jar := filepath.Join(t.TempDir(), "emulator-agent.jar")
	build := exec.Command("sh", filepath.Join("..", agentScript), filepath.Join("..", agentSources), emulatorJar, jar)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", agentScript, err, out)
	}

	zr, err := zip.OpenReader(jar)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]bool{}
	for _, f := range zr.File {
		entries[f.Name] = true
	}
	zr.Close()
	for _, want := range []string{"META-INF/MANIFEST.MF", "com/github/pubsink/emulatoragent/Agent.class", "com/github/pubsink/emulatoragent/BacklogFix.class", "com/github/pubsink/emulatoragent/InternalStatus.class.bin"} {
		if !entries[want] {
			t.Errorf("the script's jar has no %s", want)
		}
	}
	if entries["io/grpc/InternalStatus.class"] {
		t.Error("the script's jar holds io/grpc/InternalStatus.class as a class: a class loader could define it from the jar")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps, err := emulator.StartPubSub(ctx, emulator.Options{AgentJar: jar})
	if errors.Is(err, emulator.ErrNotInstalled) {
		t.Fatalf("%v", err) // found above: installed
	}
	if err != nil {
		t.Fatalf("the emulator with the script's agent: %v", err)
	}
	if err := ps.Stop(); err != nil {
		t.Error(err)
	}
}
