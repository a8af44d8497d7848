package app

import (
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimit returns the memory limit of the process's cgroup in bytes, or
// 0 when there is none or it cannot be read. The cgroup is found from
// /proc/self/cgroup and /proc/self/mountinfo, v2 or v1, and the smallest
// limit on the way from it up to the root counts: a container nested in
// another cgroup (a systemd slice, a sandbox, a pod's cgroup below the
// node's) has its limit there, not in the root's file.
func memoryLimit() int64 {
	n, err := memlimit.FromCgroup()
	if err != nil || n == 0 || n > math.MaxInt64 {
		return 0
	}
	return int64(n)
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
