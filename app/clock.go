package app

import (
	"fmt"
	"os"
	"time"
)

// ClockOffsetEnv names the environment variable that shifts the wall clock
// of `pubsink run` by a Go duration ("-3s", "+250ms"): a seam for fault
// campaigns (tools/chaos), which run processes with skewed clocks against
// one another, since Go reads the clock through the vDSO and libfaketime
// cannot shift it. Unset or empty: the real clock.
const ClockOffsetEnv = "PUBSINK_CLOCK_OFFSET"

// clockFromEnv reads ClockOffsetEnv: the offset (0 when unset or empty)
// and the clock it makes (nil: time.Now). A value that is not a Go
// duration is a *ConfigError.
func clockFromEnv() (time.Duration, func() time.Time, error) {
	v := os.Getenv(ClockOffsetEnv)
	if v == "" {
		return 0, nil, nil
	}
	off, err := time.ParseDuration(v)
	if err != nil {
		return 0, nil, &ConfigError{fmt.Errorf("$%s: %q is not a Go duration (for example -3s, +250ms, 0s)", ClockOffsetEnv, v)}
	}
	if off == 0 {
		return 0, nil, nil
	}
	return off, offsetClock(off), nil
}

// offsetClock is time.Now shifted by off. time.Time.Add moves the
// monotonic reading with the wall clock, so differences between two of its
// readings (leases, lapses) stay exact; only the wall clock, what is
// stamped into the state table and compared across processes, is off.
func offsetClock(off time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(off) }
}

// now is the clock of the parts: Options.Now, or time.Now.
func (a *App) now() func() time.Time {
	if a.opts.Now != nil {
		return a.opts.Now
	}
	return time.Now
}
