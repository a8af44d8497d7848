package app

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// childLimitEnv asks the test binary, run again inside a cgroup, to print
// what memoryLimit finds there and exit.
const childLimitEnv = "PUBSINK_TEST_PRINT_MEMORY_LIMIT"

func TestMain(m *testing.M) {
	if os.Getenv(childLimitEnv) != "" {
		fmt.Println(memoryLimit())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMemoryLimitIsFoundInANestedCgroup runs this test binary again in a
// cgroup of its own, created below the test's cgroup (nested, as in a
// sandbox or a pod below the node's slice) with a 384 MiB limit, and
// expects memoryLimit to find that limit: the root cgroup's file, which an
// earlier reader read, says "unlimited" there. It needs a writable cgroup
// memory hierarchy (root on a machine such as CI's); elsewhere it says why
// it cannot run.
func TestMemoryLimitIsFoundInANestedCgroup(t *testing.T) {
	const limit = 384 << 20
	dir, file, err := ownMemoryCgroup()
	if err != nil {
		t.Skipf("no writable cgroup memory hierarchy here (%v): the nested-cgroup reader cannot be tested", err)
	}
	child := filepath.Join(dir, fmt.Sprintf("pubsink-test-%d", os.Getpid()))
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Skipf("cannot create a cgroup below %s (%v): the nested-cgroup reader cannot be tested", dir, err)
	}
	defer os.Remove(child) // a cgroup is removed with rmdir once its processes left
	if err := os.WriteFile(filepath.Join(child, file), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatalf("set the limit of %s: %v", child, err)
	}
	// The shell joins the cgroup, then becomes the test binary, so that
	// the binary starts inside it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run '^$'`, "sh", child, self)
	cmd.Env = append(os.Environ(), childLimitEnv+"=1", "GOMEMLIMIT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child in %s: %v\n%s", child, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != strconv.Itoa(limit) {
		t.Fatalf("memoryLimit in a nested cgroup limited to %d bytes = %s", limit, got)
	}
	if root := memoryLimit(); root == limit {
		t.Fatalf("the parent process found the child's limit too (%d): the test proves nothing", root)
	}
}

// ownMemoryCgroup returns the directory of this process's memory cgroup
// and the name of its limit file: cgroup v1's memory controller, or the
// unified (v2) hierarchy when it has the memory controller.
func ownMemoryCgroup() (dir, limitFile string, err error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "" && dir == "":
			for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
				if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
					dir, limitFile = filepath.Join(root, parts[2]), "memory.max"
					break
				}
			}
		}
	}
	if dir == "" {
		return "", "", fmt.Errorf("no memory cgroup in /proc/self/cgroup")
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", "", fmt.Errorf("memory cgroup %s: %v", dir, err)
	}
	return dir, limitFile, nil
}
