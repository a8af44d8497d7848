package emulator

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNotInstalled is wrapped by the errors of StartPubSub and StartBigtable
// when a prerequisite is missing: the emulator itself, or the JDK that builds
// the Pub/Sub fix. RequirePubSub and RequireBigtable skip on it outside CI.
var ErrNotInstalled = errors.New("emulator: not installed")

// sdkRoots lists where a Google Cloud SDK may be installed, most likely
// first: the Debian/Ubuntu package (the CI image), the RPM and the
// tarball layouts, and the SDK that owns the gcloud on $PATH.
func sdkRoots() []string {
	roots := []string{"/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/google-cloud-sdk"}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, "google-cloud-sdk"))
	}
	if g, err := exec.LookPath("gcloud"); err == nil {
		if real, err := filepath.EvalSymlinks(g); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(real))) // ROOT/bin/gcloud
		}
	}
	return roots
}

// findPubSub returns the Pub/Sub emulator's start script and its jar.
func findPubSub() (script, jar string, err error) {
	var looked []string
	for _, root := range sdkRoots() {
		dir := filepath.Join(root, "platform", "pubsub-emulator")
		script = filepath.Join(dir, "bin", "cloud-pubsub-emulator")
		looked = append(looked, script)
		if !isExecutable(script) {
			continue
		}
		jars, _ := filepath.Glob(filepath.Join(dir, "lib", "cloud-pubsub-emulator-*.jar"))
		if len(jars) == 0 {
			return "", "", fmt.Errorf("%w: %s has no lib/cloud-pubsub-emulator-*.jar", ErrNotInstalled, dir)
		}
		sort.Strings(jars)
		return script, jars[len(jars)-1], nil
	}
	return "", "", fmt.Errorf("%w: Pub/Sub emulator not found at %s (install the package google-cloud-cli-pubsub-emulator, or run gcloud components install pubsub-emulator)", ErrNotInstalled, strings.Join(looked, ", "))
}

// findBigtable returns the path of cbtemulator.
func findBigtable() (string, error) {
	var looked []string
	for _, root := range sdkRoots() {
		p := filepath.Join(root, "platform", "bigtable-emulator", "cbtemulator")
		looked = append(looked, p)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: Bigtable emulator not found at %s (install the package google-cloud-cli-bigtable-emulator, or run gcloud components install bigtable)", ErrNotInstalled, strings.Join(looked, ", "))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
