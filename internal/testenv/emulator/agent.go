package emulator

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// The Java sources of the agent that fixes three defects of the Pub/Sub
// emulator (see doc.go). They are embedded, not read from the
// source tree, so that binaries built elsewhere (the chaos runner, the
// benchmark) carry them and the cache key below is the hash of exactly what
// gets compiled.
//
//go:embed javaagent
var agentSources embed.FS

const (
	agentRoot = "javaagent"
	// agentFormat is mixed into the cache key; bump it when the way the jar
	// is assembled changes without the sources changing.
	agentFormat = "pubsink-emulator-agent/1 javac --release 17"

	agentClass       = "com/github/pubsink/emulatoragent/Agent.class"
	backlogFixClass  = "com/github/pubsink/emulatoragent/BacklogFix.class"
	orderingFixClass = "com/github/pubsink/emulatoragent/OrderingFix.class"
	classPatchClass  = "com/github/pubsink/emulatoragent/ClassPatch.class"
	replacementClass = "io/grpc/InternalStatus.class"
	// replacementEntry is where the replacement class lives in the jar: next
	// to the agent class (Agent.class.getResourceAsStream resolves relative
	// names against its package) and without a .class suffix, so that no
	// class loader can define it from there.
	replacementEntry = "com/github/pubsink/emulatoragent/InternalStatus.class.bin"
)

// agentCache remembers the jar built by this process. Only success is
// remembered, so a missing javac can be installed without a restart.
var agentCache struct {
	sync.Mutex
	path string
}

// agentJar returns the path of the agent jar, building it on first use. The
// jar is compiled against emulatorJar (the replacement class needs the
// emulator's grpc classes) and cached in os.UserCacheDir()/pubsink, keyed by
// the hash of the sources, so it is built once per machine. Several processes
// may build it at the same time: each builds in its own temporary directory
// and renames the result into place, and rename is atomic, so a reader sees
// either no jar or a complete one.
func agentJar(ctx context.Context, emulatorJar string) (string, error) {
	agentCache.Lock()
	defer agentCache.Unlock()
	if agentCache.path != "" {
		return agentCache.path, nil
	}
	key, err := agentKey()
	if err != nil {
		return "", err
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, "emulator-agent-"+key+".jar")
	if fi, err := os.Stat(final); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		agentCache.path = final
		return final, nil
	}
	if err := buildAgent(ctx, dir, final, emulatorJar); err != nil {
		return "", err
	}
	agentCache.path = final
	return final, nil
}

// agentKey hashes every embedded source file, its path and agentFormat.
func agentKey() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", agentFormat)
	err := fs.WalkDir(agentSources, agentRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := agentSources.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("emulator: hash agent sources: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// cacheDir returns a writable directory for the agent jar: the user cache
// directory if there is one (CI runners and containers often lack $HOME),
// else a per-user directory under os.TempDir().
func cacheDir() (string, error) {
	if d, err := os.UserCacheDir(); err == nil {
		d = filepath.Join(d, "pubsink")
		if err := os.MkdirAll(d, 0o755); err == nil {
			return d, nil
		}
	}
	d := filepath.Join(os.TempDir(), fmt.Sprintf("pubsink-cache-%d", os.Getuid()))
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("emulator: no cache directory for the agent jar: %w", err)
	}
	return d, nil
}

func buildAgent(ctx context.Context, dir, final, emulatorJar string) error {
	javac, err := findJDKTool("javac")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, "emulator-agent-build-*")
	if err != nil {
		return fmt.Errorf("emulator: build agent: %w", err)
	}
	defer os.RemoveAll(tmp)

	src := filepath.Join(tmp, "src")
	classes := filepath.Join(tmp, "classes")
	var javaFiles []string
	var manifest []byte
	err = fs.WalkDir(agentSources, agentRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := agentSources.ReadFile(path)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path, agentRoot+"/")
		if rel == "MANIFEST.MF" {
			manifest = b
			return nil
		}
		if !strings.HasSuffix(rel, ".java") {
			return nil
		}
		out := filepath.Join(src, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		javaFiles = append(javaFiles, out)
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("emulator: build agent: write sources: %w", err)
	}
	if manifest == nil {
		return fmt.Errorf("emulator: build agent: %s/MANIFEST.MF is not embedded", agentRoot)
	}

	args := append([]string{"--release", "17", "-nowarn", "-cp", emulatorJar, "-d", classes}, javaFiles...)
	cmd := exec.CommandContext(ctx, javac, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("emulator: build agent: %s: %w\n%s", javac, err, out.Bytes())
	}

	// A jar is a zip whose first entry is the manifest; writing it here
	// spares a dependency on the jar tool.
	jarPath := filepath.Join(tmp, "agent.jar")
	if err := writeAgentJar(jarPath, manifest, classes); err != nil {
		return fmt.Errorf("emulator: build agent: %w", err)
	}
	if err := os.Rename(jarPath, final); err != nil {
		return fmt.Errorf("emulator: build agent: %w", err)
	}
	return nil
}

// writeAgentJar writes the manifest, every class javac produced except the
// replacement, and the replacement under replacementEntry.
func writeAgentJar(path string, manifest []byte, classes string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	add := func(name string, b []byte) error {
		w, err := zw.Create(name)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	if err := add("META-INF/MANIFEST.MF", manifest); err != nil {
		return err
	}
	found := map[string]bool{}
	err = filepath.WalkDir(classes, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(classes, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found[rel] = true
		if rel == replacementClass {
			return add(replacementEntry, b)
		}
		return add(rel, b)
	})
	if err != nil {
		return err
	}
	for _, want := range []string{agentClass, backlogFixClass, orderingFixClass, classPatchClass, replacementClass} {
		if !found[want] {
			return fmt.Errorf("javac produced no %s", want)
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// findJDKTool finds a JDK program as the emulator's start script finds java:
// $JAVA_HOME/bin first, then $PATH.
func findJDKTool(name string) (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s (a JDK 17 or newer) is needed to build the Pub/Sub emulator fix, and it is neither in $JAVA_HOME/bin nor on $PATH (install a JDK, e.g. the package openjdk-17-jdk-headless, or set JAVA_HOME to one): %v", ErrNotInstalled, name, err)
	}
	return p, nil
}
