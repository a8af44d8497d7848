package source

import (
	"fmt"
	"sync"
	"time"
)

// pullHealth is what a Puller knows of its pull loops, apart from the RPCs
// and the clock so that it can be tested with a fake one: how many are
// healthy, when a pull last failed (State), and when one last succeeded
// (Stalled). Its methods are safe for concurrent use; they run once per
// pull or batch, never per message.
type pullHealth struct {
	mu      sync.Mutex
	running bool
	open    int       // loops whose last pull did not fail
	broke   time.Time // the last failed pull, or a nack that was not sent
	// Silence, for Stalled, counts from the latest of start, lastOK and
	// lastHandled; handling counts the loops inside their handlers (which
	// may wait for room in the tracker: back-pressure, not a stall).
	start, lastOK, lastHandled time.Time
	handling                   int
	failures                   int // failed pulls since lastOK
	lastErr                    error
}

// begin is the start of Run at now; end its return.
func (h *pullHealth) begin(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.start = true, now
	h.lastOK, h.lastHandled, h.handling, h.failures, h.lastErr = time.Time{}, time.Time{}, 0, 0, nil
}

func (h *pullHealth) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.open = false, 0
}

// joined counts a loop that starts: healthy until a pull of its fails.
func (h *pullHealth) joined(healthy *bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*healthy = true
	h.open++
}

// left counts a loop that returned.
func (h *pullHealth) left(healthy *bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *healthy {
		h.open--
	}
	*healthy = false
}

// failed records a failed pull of the loop whose flag healthy is, at now,
// and reports whether it is the first since a pull last succeeded (the one
// worth a warning).
func (h *pullHealth) failed(now time.Time, err error, healthy *bool) (first bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *healthy {
		h.open--
	}
	*healthy = false
	h.broke = now
	h.failures++
	h.lastErr = err
	return h.failures == 1
}

// lost records that messages went out of sight at now for an ack deadline
// though no pull failed (a nack that was not sent).
func (h *pullHealth) lost(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broke = now
}

// pulled records a pull that the subscription answered, at now, and
// returns how many pulls had failed since the last one that succeeded.
func (h *pullHealth) pulled(now time.Time, healthy *bool) (recovered int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !*healthy {
		h.open++
	}
	*healthy = true
	h.lastOK = now
	recovered, h.failures, h.lastErr = h.failures, 0, nil
	return recovered
}

// handlingBegan and handlingEnded bracket a loop's handlers of one batch.
func (h *pullHealth) handlingBegan() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handling++
}

func (h *pullHealth) handlingEnded(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handling--
	h.lastHandled = now
}

// state is the loops' state in the shape of a StreamWatch's.
func (h *pullHealth) state() StreamState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return StreamState{Open: h.open, Broke: h.broke}
}

// stalled is Stalled's error at now, for a stall timeout of timeout (0:
// never), or nil.
func (h *pullHealth) stalled(now time.Time, timeout time.Duration, sub string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if timeout <= 0 || !h.running || h.handling > 0 {
		return nil
	}
	since := latest(h.start, h.lastOK, h.lastHandled)
	if now.Sub(since) < timeout {
		return nil
	}
	why := "a pull is still waiting for an answer"
	if h.lastErr != nil {
		why = fmt.Sprintf("%d pulls failed, the last with: %v", h.failures, h.lastErr)
	}
	return fmt.Errorf("subscription %s has answered no pull for %v (since %s): %s",
		sub, now.Sub(since).Round(time.Second), since.UTC().Format(time.RFC3339), why)
}
