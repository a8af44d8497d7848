package app

import (
	"errors"
	"testing"
)

// TestSpillMemoryKnob: the audit's spill bound is 64 MiB unless the test
// and measurement knob PUBSINK_AUDIT_SPILL_MEMORY sets a positive byte
// count; anything else is refused as bad usage.
func TestSpillMemoryKnob(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
		bad  bool
	}{
		{"", auditSpillMemory, false},
		{"4194304", 4 << 20, false},
		{"0", 0, true},
		{"-1", 0, true},
		{"4MiB", 0, true},
	} {
		t.Setenv(auditSpillMemoryEnv, c.env)
		got, err := spillMemory()
		var ce *ConfigError
		switch {
		case c.bad && !errors.As(err, &ce):
			t.Errorf("%s=%q: error %v, want a ConfigError", auditSpillMemoryEnv, c.env, err)
		case !c.bad && (err != nil || got != c.want):
			t.Errorf("%s=%q: %d, %v; want %d", auditSpillMemoryEnv, c.env, got, err, c.want)
		}
	}
}
