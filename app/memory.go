package app

import (
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
)

// cgroupMemoryFiles are where a container's memory limit is published:
// cgroup v2 first (Cloud Run, GKE), then v1.
var cgroupMemoryFiles = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// memoryLimit returns the container's memory limit in bytes, or 0 when there
// is none or it cannot be read.
func memoryLimit() int64 {
	for _, f := range cgroupMemoryFiles {
		if n := readLimit(f); n > 0 {
			return n
		}
	}
	return 0
}

func readLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 0
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	// cgroup v1 reports "no limit" as a huge page-aligned number.
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0
	}
	return n
}

// setMemoryLimit tells the Go runtime about the container's memory limit
// (90% of it, leaving room for what the runtime does not count), unless
// GOMEMLIMIT says otherwise: the GC then works harder near the limit
// instead of letting the container be killed.
func setMemoryLimit(limit int64) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit / 10 * 9)
	}
}
