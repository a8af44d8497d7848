package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stage is a step of a message's way through the pipeline whose time
// pubsink_stage_seconds measures: where a message's latency goes, stage
// by stage, which the commit latency (publication to commit) cannot tell.
type stage uint8

const (
	// stageMap: decode, filter, event time, key and rows (retries of a
	// topic schema not fetched yet included).
	stageMap stage = iota
	// stageDedupe: the key's claim (exactly_once), its batch linger and
	// retries included.
	stageDedupe
	// stageWrite: the rows durable in the sink, the batch delay included.
	stageWrite
	// stageCommit: the end of the key's hold; for a message-ID key, its
	// record (exactly_once).
	stageCommit
	// stageReport: the finish told to the watermark tracker (with a
	// tracking subscription): a follower's batched report to the leader.
	stageReport
	numStages
)

// stageNames are pubsink_stage_seconds' stage labels.
var stageNames = [numStages]string{"map", "dedupe", "write", "commit", "report"}

// stageObservers are a pipeline's histograms of pubsink_stage_seconds,
// nil for a stage the pipeline does not have (dedupe and commit without
// exactly_once, report without a tracking subscription), so that no
// series of a stage that cannot happen is exported.
type stageObservers [numStages]prometheus.Observer

// stageSampleEvery: one message in this many is timed. Timing every one
// cost 160 ns a message in at_least_once mode (a clock read, 36 ns here,
// per stage and at the start, and an observation, 20 ns, per stage), 70%
// of the pipeline's own code (BenchmarkHandle); a sample costs an atomic
// add, and one in 16 still gives over a thousand observations a minute at
// 20 messages a second.
const stageSampleEvery = 16

// stageSampler picks the messages whose stages are timed: one in every
// (stageSampleEvery unless a test sets it).
type stageSampler struct {
	every uint32
	n     atomic.Uint32
}

// start starts the first stage of r if r is one of the sample.
func (s *stageSampler) start(r *record) {
	if s.n.Add(1)%s.every == 0 {
		r.lapped = time.Now()
	} else {
		r.lapped = time.Time{}
	}
}

// lap observes, for a message of the sample, the time since r's last lap
// as stage s, and starts the next.
func (p *Pipeline) lap(r *record, s stage) {
	if r.lapped.IsZero() {
		return
	}
	now := time.Now()
	if o := p.stages[s]; o != nil {
		o.Observe(now.Sub(r.lapped).Seconds())
	}
	r.lapped = now
}
