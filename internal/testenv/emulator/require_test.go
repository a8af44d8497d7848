package emulator

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
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

func TestAMissingJDKNamesWhereItLookedAndWhatToInstall(t *testing.T) {
	t.Setenv("JAVA_HOME", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	_, err := findJDKTool("javac")
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("findJDKTool without a JDK: %v, want ErrNotInstalled", err)
	}
	for _, want := range []string{"javac (a JDK 17 or newer)", "$JAVA_HOME/bin", "$PATH", "openjdk-17-jdk-headless"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
