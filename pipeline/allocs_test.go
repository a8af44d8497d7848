package pipeline_test

import (
	"testing"

	"github.com/pubsink/pubsink/config"
)

// allocBudgets are the heap allocations a message may cost on pubsink's
// path from the Pub/Sub callback to the ack (BenchmarkCallback), by mode,
// as measured when they were set (18, 18 and 33-34), plus two for the
// batches' allocations, which the messages of a batch share and whose
// number per message grows as a loaded machine makes the batches smaller. naive's is its figure, for comparison:
// the Bigtable client's mutation and ApplyBulk entry alone are 9.
//
// A change that makes a message allocate more fails here: lower a budget
// when a change saves allocations, raise one only with a reason in the
// commit (docs/performance.md has the figures).
var allocBudgets = []struct {
	connector string
	mode      string // "" for naive
	budget    int64
}{
	{"naive", "", 20},
	{"at_least_once", config.ModeAtLeastOnce, 20},
	{"exactly_once", config.ModeExactlyOnce, 35},
}

// TestAllocationsPerMessageStayWithinBudget runs BenchmarkCallback's
// connectors and fails when a message allocates more than its budget.
func TestAllocationsPerMessageStayWithinBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of benchmarks; not in -short")
	}
	for _, c := range allocBudgets {
		t.Run(c.connector, func(t *testing.T) {
			bench := benchmarkNaiveCallback
			if c.mode != "" {
				bench = func(b *testing.B) { benchmarkPipelineCallback(b, c.mode) }
			}
			r := testing.Benchmark(func(b *testing.B) {
				b.N = max(b.N, 20000) // enough messages that the batches' share is per message
				bench(b)
			})
			if r.N == 0 {
				t.Fatal("the benchmark failed (see its output above)")
			}
			got := r.AllocsPerOp()
			t.Logf("%s: %d allocations per message (budget %d), %d bytes", c.connector, got, c.budget, r.AllocedBytesPerOp())
			if got > c.budget {
				t.Errorf("%s allocates %d times per message, over its budget of %d: what allocates more (go test ./pipeline -run '^$' -bench Callback/connector=%s -memprofile m.out)?", c.connector, got, c.budget, c.connector)
			}
		})
	}
}
