// Package warm runs calls on goroutines that outlive them, so that a deep
// call (a gRPC round trip through a client's interceptors and retries)
// grows a goroutine's stack once, not once per call.
//
// The Pub/Sub client runs every message's callback in a new goroutine,
// whose stack starts at a few kilobytes; a unary Bigtable call from it
// copies the stack to a larger one, twice or three times, for every
// message. Measured on exactly_once_shared (the conditional claim, one
// CheckAndMutateRow per message): runtime.copystack under the claim took
// 11% of the process's CPU. A Pool hands the call to a goroutine that has
// made such calls before, and waits for it; a limit bounds the goroutines,
// and so the calls in flight and their stacks.
package warm
