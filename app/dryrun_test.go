package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pubsink/pubsink/config"
)

// reprocessFakes returns the fakes, set up for the test YAML's pipeline in
// exactly_once mode (setup creates the state table, where a reprocess
// keeps its record) on a topic with message retention, and its config.
func reprocessFakes(t *testing.T) (*fakes, *config.Config) {
	t.Helper()
	f := newFakes(t)
	withRetention := strings.Replace(yaml, "streams: 1}", "streams: 1, topic_message_retention: 24h}", 1)
	cfg := parse(t, strings.Replace(withRetention, "mode: at_least_once", "mode: exactly_once", 1))
	if err := Setup(context.Background(), cfg, f.ps, f.admin, io.Discard); err != nil {
		t.Fatal(err)
	}
	return f, cfg
}

// TestReprocessDryRunPrintsTheRangeInOnePrecision: the plan's range has
// both ends in one precision: milliseconds for a relative --from and the
// default --until (the start, which has nanoseconds), nanoseconds for both
// when a time given is finer.
func TestReprocessDryRunPrintsTheRangeInOnePrecision(t *testing.T) {
	f, cfg := reprocessFakes(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 22, 2, 59, 543138352, time.UTC)
	opts := f.opts
	opts.Now = func() time.Time { return now }
	for _, c := range []struct {
		from, until string
		want        string
	}{
		{"1h", "", "seeked from 2026-12-03T21:02:59.543Z until 2026-12-03T22:02:59.543Z\n"},
		{"2026-12-03T21:30:00.5Z", "2026-12-03T22:00:00Z", "seeked from 2026-12-03T21:30:00.500Z until 2026-12-03T22:00:00.000Z\n"},
		{"2026-12-03T21:30:00.000001Z", "", "seeked from 2026-12-03T21:30:00.000001000Z until 2026-12-03T22:02:59.543000000Z\n"},
	} {
		var out bytes.Buffer
		req := ReprocessRequest{Pipeline: "orders", From: c.from, Until: c.until, DryRun: true, Idle: time.Second}
		if err := Reprocess(ctx, zap.NewNop(), cfg, req, opts, &out, io.Discard); err != nil {
			t.Fatalf("--from %s --until %q: %v", c.from, c.until, err)
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("--from %s --until %q printed\n%s\nwant %q in it", c.from, c.until, out.String(), c.want)
		}
	}
}

// TestReprocessStoppedAtAnyMomentOfItsStartIsAStop: a reprocess stopped
// (its context cancelled) at any moment from its first call to its run is
// ErrReprocessStopped (exit 3: run it again to resume), never a failure,
// and the next start resumes it.
func TestReprocessStoppedAtAnyMomentOfItsStartIsAStop(t *testing.T) {
	f, cfg := reprocessFakes(t)
	ctx := context.Background()
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	req := ReprocessRequest{Pipeline: "orders", From: from, Until: time.Now().UTC().Format(time.RFC3339Nano), Idle: time.Hour, NoRestorePoint: true}
	for _, after := range []time.Duration{0, 100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond} {
		sctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(after, cancel)
		var out bytes.Buffer
		err := Reprocess(sctx, zap.NewNop(), cfg, req, f.opts, &out, io.Discard)
		timer.Stop()
		cancel()
		if !errors.Is(err, ErrReprocessStopped) {
			t.Errorf("stopped %v after its start: %v, want ErrReprocessStopped\n%s", after, err, out.String())
		}
		if !strings.Contains(out.String(), "run the same command again") {
			t.Errorf("stopped %v after its start, it printed\n%s\nwant how to resume", after, out.String())
		}
	}
}

// TestTwoReprocessRunsStartedInOneInstantGetTwoNames: the run's name and
// its restore point's carry a random part beside the time, so two runs
// planned at the same instant (here two dry runs, on one clock) differ.
func TestTwoReprocessRunsStartedInOneInstantGetTwoNames(t *testing.T) {
	f, cfg := reprocessFakes(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 18, 30, 0, 0, time.UTC)
	opts := f.opts
	opts.Now = func() time.Time { return now }
	plan := regexp.MustCompile(`would take the restore point (\S+)\n(?s:.*)would rewrite that range as (\S+) `)
	var seen []string
	for range 2 {
		var out bytes.Buffer
		req := ReprocessRequest{Pipeline: "orders", From: "1h", DryRun: true, Idle: time.Second}
		if err := Reprocess(ctx, zap.NewNop(), cfg, req, opts, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		m := plan.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("the plan names no restore point and run:\n%s", out.String())
		}
		if !regexp.MustCompile(`^orders~r20261207t183000z-[a-z2-7]{6}$`).MatchString(m[2]) {
			t.Errorf("run name %q, want orders~r20261207t183000z-XXXXXX", m[2])
		}
		seen = append(seen, m[1], m[2])
	}
	if seen[0] == seen[2] || seen[1] == seen[3] {
		t.Errorf("two runs planned at one instant: %v", seen)
	}
}

// TestAJobWhoseHTTPAddressIsTakenNamesTheFlag: a reprocess or an audit on
// the host of a live process finds http.addr taken; its error names
// --http-addr ADDR and --http-addr -, and the run itself fails as before.
func TestAJobWhoseHTTPAddressIsTakenNamesTheFlag(t *testing.T) {
	f, cfg := reprocessFakes(t)
	ctx := context.Background()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	opts := f.opts
	opts.HTTPAddr = taken.Addr().String()
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	until := time.Now().UTC().Format(time.RFC3339Nano)
	want := "give this command its own address with --http-addr ADDR, or serve none with --http-addr -"
	err = Reprocess(ctx, zap.NewNop(), cfg, ReprocessRequest{Pipeline: "orders", From: from, Until: until, Idle: time.Second, NoRestorePoint: true}, opts, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), opts.HTTPAddr) {
		t.Errorf("reprocess: %v\nwant the address and %q", err, want)
	}
	err = Audit(ctx, zap.NewNop(), cfg, AuditRequest{Pipeline: "orders", From: from, Until: until, Idle: time.Second}, opts, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("audit: %v\nwant %q", err, want)
	}
	if err := listenError(":8080", syscall.EADDRINUSE, false); strings.Contains(err.Error(), "--http-addr") {
		t.Errorf("run, which has no --http-addr: %v", err)
	}
}
