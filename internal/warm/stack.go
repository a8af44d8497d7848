package warm

// Stack grows the calling goroutine's stack to StackBytes, if it is
// smaller, while the caller is still shallow. Call it first thing in a
// goroutine that will go deep and is new for every unit of work (the Pub/Sub
// client's callback goroutine, one per message).
//
// A goroutine starts with the runtime's adaptive initial stack, the average
// depth of the stacks the last GC scanned, rounded up to a power of two: a
// few kilobytes. A message's path from the callback to its dedupe claim and
// its sink batch goes deeper than that, and the runtime then copies the
// stack to one twice as large, once or twice per message, each time
// walking and adjusting every frame below (runtime.newstack and copystack,
// 5-9% of a drain's CPU in the bench's profiles, more under the claim).
// Growing it here costs one copy of a stack that holds a few frames, from
// the per-P cache of free stacks, and spares the copies of the deep one.
// Once the goroutine returns its stack goes back to that cache.
//
// The frame's bytes are zeroed at every call (Go zeroes every local): about
// 0.1 µs, against the copies it spares.
//
//go:noinline
func Stack() {
	var frame [stackFrame]byte
	keep(&frame)
}

// StackBytes is the stack Stack leaves: 16 KiB, the largest size the
// runtime's per-P caches hold (larger stacks come from a global pool under
// a lock), and more than the deepest path of a message measured with
// pipeline's BenchmarkCallback.
const StackBytes = 16 << 10

// stackFrame is Stack's frame: the runtime doubles a stack until the frame
// that overflowed fits with its guard, so a frame of more than half of
// StackBytes takes a stack of a few kilobytes to StackBytes in one step.
const stackFrame = StackBytes/2 + 1<<10

// keep uses the frame so that the compiler cannot drop it.
//
//go:noinline
func keep(b *[stackFrame]byte) { b[0] = 1 }
