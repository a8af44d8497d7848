package reprocess

import (
	"testing"
	"time"
)

// TestRateCapsEverySecondTheFirstIncluded: --rate N lets at most 1.1 N
// messages through in any second, the first included (it let about 2 N
// through the first second, its burst being N), and N a second after.
// The limiter is read at given instants, so the test does not depend on
// the machine's speed.
func TestRateCapsEverySecondTheFirstIncluded(t *testing.T) {
	for _, n := range []float64{1, 20, 148, 500, 5000} {
		lim := RateCap(n)
		t0 := time.Now()
		// Everything asks at once at the start: how many may go in each
		// of the first three seconds?
		perSecond := make([]int, 3)
		for {
			r := lim.ReserveN(t0, 1)
			at := r.DelayFrom(t0)
			if at >= 3*time.Second {
				break
			}
			perSecond[int(at/time.Second)]++
		}
		for s, got := range perSecond {
			if float64(got) > 1.1*n+1 {
				t.Errorf("--rate %v: %d messages in second %d, want at most %v", n, got, s, 1.1*n+1)
			}
			if s > 0 && float64(got) < 0.9*n {
				t.Errorf("--rate %v: %d messages in second %d, want about %v", n, got, s, n)
			}
		}
	}
	if RateCap(0) != nil {
		t.Error("--rate 0 is a cap")
	}
}
