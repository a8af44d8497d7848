package source

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

// DefaultMaxOutstandingBytes is the flow-control budget of one pipeline when
// max_outstanding_bytes is not set, given the container's memory limit (0:
// unknown; package app reads it from the cgroup): a quarter of the memory limit shared by
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
