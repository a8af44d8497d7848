package template

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
)

// flowControlWindow is the default of source.max_outstanding_messages: the
// messages a pipeline holds at once, each rendered by a handler goroutine
// of its own.
const flowControlWindow = 1000

// stackBudget is the stack one handler may need to render a {data.…}
// placeholder over the worst payload: a full window then costs at most
// 64 MiB, where 10,000 levels of recursion cost 2 MiB a handler, 2 GiB a
// window.
const stackBudget = 64 << 10

// TestAFlowControlWindowOfDeepPayloadsStaysWithinTheStackBudget renders
// deeply nested payloads in a full window of goroutines that then wait, as
// handlers do, holding the stack they grew to, and measures the stack of
// the process.
func TestAFlowControlWindowOfDeepPayloadsStaysWithinTheStackBudget(t *testing.T) {
	tmpl, err := Compile("{data.0}")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		depth int
	}{
		{"20 KB of nested arrays", 10000},
		{"the deepest payload accepted", 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Input{Data: nestedArrays(tc.depth)}
			held, n := heldStack(func() { _, _ = tmpl.AppendTo(nil, in) })
			t.Logf("%d levels: %d goroutines hold %.1f MiB of stack, %.1f KiB each",
				tc.depth, n, float64(held)/(1<<20), float64(held)/float64(n)/(1<<10))
			if n < flowControlWindow || held > flowControlWindow*stackBudget {
				t.Errorf("%d goroutines hold %d bytes of stack: over the budget of %d KiB each", n, held, stackBudget>>10)
			}
		})
	}
}

// heldStack runs render in up to flowControlWindow goroutines, a batch at a
// time, each of which then waits until all are done. It returns the stack
// they held between them and how many ran: fewer than the window once they
// are over the budget, so that an unbounded parser fails the test without
// taking gigabytes. The collector is off meanwhile: it would shrink the
// stacks of waiting goroutines, hiding what they grew to.
func heldStack(render func()) (held int64, n int) {
	runtime.GC() // shrink what earlier tests left
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	release := make(chan struct{})
	var exited sync.WaitGroup
	defer func() {
		close(release)
		exited.Wait()
	}()
	const batch = 50
	before := stackBytes()
	for n < flowControlWindow && held <= int64(n)*stackBudget {
		var rendered sync.WaitGroup
		for range batch {
			rendered.Add(1)
			exited.Go(func() {
				render()
				rendered.Done()
				<-release
			})
		}
		rendered.Wait()
		n += batch
		held = stackBytes() - before
	}
	return held, n
}

// stackBytes is the memory the runtime holds for goroutine stacks.
func stackBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

func nestedArrays(depth int) []byte {
	return []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
}
