package main

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// FaultKind is one kind of fault the campaign injects.
type FaultKind uint8

const (
	// FaultKill sends SIGKILL to a pubsink process (of replica
	// Fault.Replica) and starts another in its place after Dur.
	FaultKill FaultKind = iota
	// FaultTerm sends SIGTERM to a pubsink process (of replica
	// Fault.Replica), expects exit status 0 within shutdown_timeout, and
	// starts another in its place after Dur.
	FaultTerm
	// FaultBigtableStall holds every byte to and from Bigtable for Dur.
	FaultBigtableStall
	// FaultBigtableReset resets every Bigtable connection (TCP RST).
	FaultBigtableReset
	// FaultPubSubReset resets every Pub/Sub connection: the main and the
	// tracking subscription's streams drop and reconnect, so the tracking
	// reader restarts, and acks in flight are lost.
	FaultPubSubReset
	// FaultLatency adds Latency to every chunk through one proxy (Target)
	// for Dur.
	FaultLatency
	// FaultPubSubStall holds every byte to and from Pub/Sub for Dur, then
	// lets it all through (Resume, not a reset): the streams of both
	// subscriptions and the dead-letter publishes hang, acks and lease
	// extensions wait, and nothing is delivered meanwhile.
	FaultPubSubStall
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"sigkill", "sigterm", "bigtable-stall", "bigtable-reset", "pubsub-reset", "latency", "pubsub-stall"}

func (k FaultKind) String() string { return faultNames[k] }

// Fault is one fault of the schedule.
type Fault struct {
	At   time.Duration // offset from the start of the workload; not before
	Kind FaultKind
	// Dur is how long a stall or latency lasts; for a kill or term, the
	// pause before the restart.
	Dur     time.Duration
	Latency time.Duration // FaultLatency only
	Target  string        // FaultLatency only: "bigtable" or "pubsub"
	// Replica is the replica (1..FaultConfig.Replicas) a kill or term
	// stops and restarts; 0 when one process runs, and for the proxy
	// faults, which every replica shares.
	Replica int
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultKill, FaultTerm:
		if f.Replica > 0 {
			return fmt.Sprintf("%s of replica %d, restart after %v", f.Kind, f.Replica, f.Dur.Round(time.Millisecond))
		}
		return fmt.Sprintf("%s, restart after %v", f.Kind, f.Dur.Round(time.Millisecond))
	case FaultBigtableStall, FaultPubSubStall:
		return fmt.Sprintf("%s for %v", f.Kind, f.Dur.Round(time.Millisecond))
	case FaultLatency:
		return fmt.Sprintf("%s %v on %s for %v", f.Kind, f.Latency, f.Target, f.Dur.Round(time.Millisecond))
	}
	return f.Kind.String()
}

// FaultConfig sizes a schedule.
type FaultConfig struct {
	Count    int
	Duration time.Duration // of the workload
	MaxStall time.Duration // a stall (of Bigtable or Pub/Sub) lasts 1 s to MaxStall
	Replicas int           // pubsink processes at once; 0 or 1: one
}

// faultWeights are the relative frequencies of the kinds beyond the first
// round, which has one of each.
var faultWeights = [numFaultKinds]int{FaultKill: 4, FaultTerm: 3, FaultBigtableStall: 4, FaultBigtableReset: 3, FaultPubSubReset: 3, FaultLatency: 3, FaultPubSubStall: 3}

// NewSchedule makes the fault schedule of seed: Count faults at offsets
// spread over 10%..85% of the workload, sorted. If Count is at least the
// number of kinds, every kind occurs. It draws from its own PCG stream.
// The faults run one after another: a fault whose offset comes while the
// previous one lasts waits for it (see campaign.runFaults).
func NewSchedule(seed uint64, fc FaultConfig) []Fault {
	r := rand.New(rand.NewPCG(seed, 0x6661756c7473)) // "faults"
	kinds := make([]FaultKind, 0, fc.Count)
	if fc.Count >= int(numFaultKinds) {
		for _, k := range r.Perm(int(numFaultKinds)) {
			kinds = append(kinds, FaultKind(k))
		}
	}
	total := 0
	for _, w := range faultWeights {
		total += w
	}
	for len(kinds) < fc.Count {
		x := r.IntN(total)
		k := FaultKind(0)
		for ; x >= faultWeights[k]; k++ {
			x -= faultWeights[k]
		}
		kinds = append(kinds, k)
	}
	r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })

	lo, hi := fc.Duration/10, fc.Duration*85/100
	out := make([]Fault, 0, len(kinds))
	for _, k := range kinds {
		f := Fault{Kind: k, At: lo + time.Duration(r.Int64N(int64(hi-lo)+1))}
		switch k {
		case FaultKill, FaultTerm:
			f.Dur = time.Duration(r.Int64N(int64(3 * time.Second)))
		case FaultBigtableStall, FaultPubSubStall:
			f.Dur = time.Second + time.Duration(r.Int64N(int64(max(fc.MaxStall-time.Second, 0))+1))
		case FaultLatency:
			f.Dur = 5*time.Second + time.Duration(r.Int64N(int64(15*time.Second)))
			f.Latency = time.Duration(20+r.IntN(480)) * time.Millisecond
			f.Target = []string{"bigtable", "pubsub"}[r.IntN(2)]
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	assignReplicas(seed, out, fc.Replicas)
	return out
}

// assignReplicas picks the replica of each kill and term. It draws from a
// stream of its own, so that the moments, kinds and pauses of a seed's
// faults are the same for any number of replicas (with one, exactly what
// they were before replicas existed), and it deals the replicas out in
// rounds, each a permutation, so that n process faults in a row hit n
// different replicas rather than, by chance, the same one twice.
func assignReplicas(seed uint64, faults []Fault, n int) {
	if n <= 1 {
		return
	}
	r := rand.New(rand.NewPCG(seed, 0x7265706c69636173)) // "replicas"
	var round []int
	for i := range faults {
		if faults[i].Kind != FaultKill && faults[i].Kind != FaultTerm {
			continue
		}
		if len(round) == 0 {
			round = r.Perm(n)
		}
		faults[i].Replica, round = round[0]+1, round[1:]
	}
}
