package emulator

import (
	"archive/zip"
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAgentJarBuildsSafelyInParallel builds the jar twice at once into the
// same place, as two test binaries on one machine do, and checks the result.
func TestAgentJarBuildsSafelyInParallel(t *testing.T) {
	_, emulatorJar, err := findPubSub()
	if err == nil {
		_, err = findJDKTool("javac")
	}
	if err != nil {
		failStart(t, err)
	}
	dir := t.TempDir()
	final := filepath.Join(dir, "agent.jar")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = buildAgent(ctx, dir, final, emulatorJar) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "emulator-agent-build-*"))
	if len(leftovers) > 0 {
		t.Errorf("build directories left behind: %v", leftovers)
	}

	zr, err := zip.OpenReader(final)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	entries := map[string]*zip.File{}
	for _, f := range zr.File {
		entries[f.Name] = f
		if strings.HasPrefix(f.Name, "io/grpc/") {
			t.Errorf("jar holds %s: the replacement must not be loadable as a class", f.Name)
		}
	}
	if zr.File[0].Name != "META-INF/MANIFEST.MF" {
		t.Errorf("first entry is %s, want the manifest", zr.File[0].Name)
	}
	for _, name := range []string{agentClass, replacementEntry} {
		if entries[name] == nil {
			t.Errorf("jar lacks %s", name)
		}
	}
	rc, err := entries["META-INF/MANIFEST.MF"].Open()
	if err != nil {
		t.Fatal(err)
	}
	manifest, _ := io.ReadAll(rc)
	rc.Close()
	if !strings.Contains(string(manifest), "Premain-Class: com.github.pubsink.emulatoragent.Agent") {
		t.Errorf("manifest has no Premain-Class:\n%s", manifest)
	}
}

func TestAgentSourcesAreEmbeddedAndKeyed(t *testing.T) {
	k1, err := agentKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := agentKey()
	if k1 != k2 || len(k1) != 16 {
		t.Fatalf("agentKey() = %q then %q; want one stable 16-digit key", k1, k2)
	}
	// The key hashes the embedded tree, so every file the build uses must be
	// in it.
	for _, name := range []string{"MANIFEST.MF", "io/grpc/InternalStatus.java", "com/github/pubsink/emulatoragent/Agent.java"} {
		if _, err := agentSources.ReadFile(agentRoot + "/" + name); err != nil {
			t.Errorf("%s is not embedded: %v", name, err)
		}
	}
}
