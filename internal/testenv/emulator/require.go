package emulator

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"
)

// TB is the part of testing.TB that RequirePubSub and RequireBigtable use;
// *testing.T, *testing.B and *testing.F satisfy it. It is an interface so
// that the chaos and benchmark commands can import this package without
// linking the testing package into their binaries.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
	TempDir() string
}

// requireStartTimeout bounds start-up in the Require helpers.
const requireStartTimeout = 2 * time.Minute

// RequirePubSub starts a Pub/Sub emulator for this test and stops it in
// t.Cleanup; its log lives in t.TempDir() and its last lines are logged if
// the test failed (or always, with PUBSINK_EMULATOR_LOG=1). If the
// emulator or a JDK is not installed, it calls t.Fatalf when $CI is true and
// t.Skipf otherwise. Any other start-up error is fatal.
func RequirePubSub(t TB) *PubSub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requireStartTimeout)
	defer cancel()
	p, err := StartPubSub(ctx, Options{LogDir: t.TempDir()})
	if err != nil {
		failStart(t, err)
		return nil
	}
	t.Cleanup(func() { stopForTest(t, "Pub/Sub", p.proc) })
	return p
}

// RequireBigtable starts a Bigtable emulator for this test and stops it in
// t.Cleanup, as RequirePubSub does.
func RequireBigtable(t TB) *Bigtable {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requireStartTimeout)
	defer cancel()
	b, err := StartBigtable(ctx, Options{LogDir: t.TempDir()})
	if err != nil {
		failStart(t, err)
		return nil
	}
	t.Cleanup(func() { stopForTest(t, "Bigtable", b.proc) })
	return b
}

func failStart(t TB, err error) {
	t.Helper()
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("%v", err)
		return
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%v (CI=true: emulators must be installed)", err)
		return
	}
	t.Skipf("skipping: %v (with CI=true this is a failure)", err)
}

func stopForTest(t TB, name string, p *process) {
	t.Helper()
	if t.Failed() || os.Getenv("PUBSINK_EMULATOR_LOG") != "" {
		t.Logf("%s emulator log %s ends:\n%s", name, p.logPath, p.logTail(40))
	}
	if err := p.stop(); err != nil {
		t.Errorf("%v", err)
	}
}
