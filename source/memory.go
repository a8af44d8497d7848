package source

import (
	"bytes"
	"os"
	"strconv"
)

// Bounds of the derived max_outstanding_bytes budget of one pipeline.
const (
	// minOutstandingBytes keeps a tiny container able to hold a few batches.
	minOutstandingBytes = 8 << 20
	// maxOutstandingBytes is the client library's own default (1 GB): more
	// buys nothing, since flow control by count usually binds first.
	maxOutstandingBytes = 1 << 30
	// unknownLimitBytes is the budget when no memory limit can be read
	// (a bare machine, a test): generous, but far from the client's 1 GB.
	unknownLimitBytes = 256 << 20
)

// cgroupMemoryFiles are where a container's memory limit is published:
// cgroup v2 first (Cloud Run, GKE), then v1.
var cgroupMemoryFiles = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// MemoryLimit returns the container's memory limit in bytes, or 0 when there
// is none or it cannot be read.
func MemoryLimit() int64 {
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

// DefaultMaxOutstandingBytes is the flow-control budget of one pipeline when
// max_outstanding_bytes is not set: a quarter of the memory limit shared by
// the pipelines, so that messages held by the client (and their copies in
// batches and dead-letter output) cannot push a 512 MiB Cloud Run instance
// into OOM, as the client's 1 GB default would.
func DefaultMaxOutstandingBytes(memLimit int64, pipelines int) int64 {
	if pipelines < 1 {
		pipelines = 1
	}
	if memLimit <= 0 {
		return unknownLimitBytes
	}
	n := memLimit / 4 / int64(pipelines)
	return min(max(n, minOutstandingBytes), maxOutstandingBytes)
}
