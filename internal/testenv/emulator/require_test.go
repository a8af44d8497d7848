package emulator

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// fakeTB records how failStart ended a test. Fatalf and Skipf stop the
// goroutine, as the testing package's do.
type fakeTB struct {
	TB
	ended string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.ended = "fatal: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.ended = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func endedBy(err error) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		failStart(f, err)
	}()
	<-done
	return f.ended
}

func TestRequireSkipsAMissingEmulatorOnlyOutsideCI(t *testing.T) {
	missing := fmt.Errorf("%w: cbtemulator not found", ErrNotInstalled)
	for _, tc := range []struct {
		ci   string
		err  error
		want string
	}{
		{"", missing, "skip"},
		{"false", missing, "skip"},
		{"true", missing, "fatal"},
		{"1", missing, "fatal"},
		{"", errors.New("emulator: pubsub exited during start-up"), "fatal"},
	} {
		t.Run(fmt.Sprintf("CI=%q %v", tc.ci, tc.err), func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			got := endedBy(tc.err)
			if len(got) < len(tc.want) || got[:len(tc.want)] != tc.want {
				t.Errorf("failStart ended the test with %q, want %s", got, tc.want)
			}
		})
	}
}
