package bigtable

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cbt "cloud.google.com/go/bigtable"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/sinks"
)

// TestATableOrFamilyMissingAfterWritesIsRetriedNeverRejected is the
// hardening issue: writes have succeeded, then the table or its family goes.
// Every row must fail transiently, keeping Bigtable's code, however many
// writes succeeded before; Check must name what is missing; the error log
// say it once, not per row or batch; the metric count the rows. Once it is
// back, the same rows are written and Check passes.
func TestATableOrFamilyMissingAfterWritesIsRetriedNeverRejected(t *testing.T) {
	for _, c := range []struct {
		name    string
		breakIt func(context.Context, *cbt.AdminClient) error
		fix     func(context.Context, *cbt.AdminClient) error
		missing string // what Check and the error log say
	}{
		{
			name:    "the family dropped",
			breakIt: func(ctx context.Context, a *cbt.AdminClient) error { return a.DeleteColumnFamily(ctx, table, family) },
			fix:     createFamily,
			missing: `column family "d" of bigtable table "events" in instance "inst" is missing`,
		},
		{
			name:    "the table recreated without the family",
			breakIt: recreateTable,
			fix:     createFamily,
			missing: `column family "d" of bigtable table "events" in instance "inst" is missing`,
		},
		{
			name:    "the table deleted",
			breakIt: func(ctx context.Context, a *cbt.AdminClient) error { return a.DeleteTable(ctx, table) },
			fix: func(ctx context.Context, a *cbt.AdminClient) error {
				if err := a.CreateTable(ctx, table); err != nil {
					return err
				}
				return createFamily(ctx, a)
			},
			missing: `table "events" in instance "inst"`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFake(t)
			core, logs := observer.New(zap.InfoLevel)
			m := metrics.New().Pipeline("p")
			s := New(f.client, zap.New(core), sinkConfig(config.Batch{MaxMessages: 4, MaxBytes: 4 << 20, MaxDelay: time.Hour}),
				&Metrics{WriteErrors: m.SinkWriteErrors})
			t.Cleanup(func() { s.Close(context.Background()) })
			writeAll(t, s, 4)
			if err := c.breakIt(ctx, f.admin); err != nil {
				t.Fatal(err)
			}

			for round := range 2 { // two batches of 4: the pipeline retrying
				for i, err := range writeRows(ctx, s, 4) {
					if err == nil || sinks.IsRejected(err) || status.Code(err) != codes.NotFound {
						t.Errorf("round %d: Write k-%02d = %v, want a transient NotFound", round, i, err)
					}
				}
			}
			if got := f.requestSizes(); fmt.Sprint(got) != "[4 4 4]" {
				t.Errorf("MutateRows requests of %v entries, want [4 4 4]: no row is retried alone", got)
			}
			if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), c.missing) {
				t.Errorf("Check = %v, want it to say %s", err, c.missing)
			}
			if errs := logs.FilterLevelExact(zapcore.ErrorLevel).All(); len(errs) != 1 || !strings.Contains(fmt.Sprint(errs[0].ContextMap()["error"]), c.missing) {
				t.Errorf("error logs %+v, want one saying %s", errs, c.missing)
			}
			if n := metrics.Value(m.SinkWriteErrors("NotFound")); n != 8 {
				t.Errorf("pubsink_sink_write_errors_total{code=NotFound} = %v, want 8", n)
			}

			if err := c.fix(ctx, f.admin); err != nil {
				t.Fatal(err)
			}
			writeAll(t, s, 4)
			if err := s.Check(ctx); err != nil {
				t.Errorf("Check = %v once fixed", err)
			}
			if logs.FilterMessageSnippet("usable again").Len() != 1 {
				t.Errorf("no log said the table and family are usable again")
			}
		})
	}
}

func createFamily(ctx context.Context, a *cbt.AdminClient) error {
	return a.CreateColumnFamily(ctx, table, family)
}

func recreateTable(ctx context.Context, a *cbt.AdminClient) error {
	if err := a.DeleteTable(ctx, table); err != nil {
		return err
	}
	return a.CreateTable(ctx, table)
}

// TestCheckRecoversWithoutWrites: readiness must come back when the family
// does, even if no row is retried meanwhile (the pipeline backing off, or
// only rows that fail for their own reasons).
func TestCheckRecoversWithoutWrites(t *testing.T) {
	ctx := t.Context()
	f := newFake(t)
	s := newSink(t, f, sinkConfig(defaultBatch))
	if err := f.admin.DeleteColumnFamily(ctx, table, family); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, msg(testRow("k"))); err == nil || sinks.IsRejected(err) {
		t.Fatalf("Write = %v, want a transient error", err)
	}
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check passed with the family missing")
	}
	if err := createFamily(ctx, f.admin); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check = %v once the family is back", err)
	}
	before := f.probeCount()
	if err := s.Check(ctx); err != nil || f.probeCount() != before {
		t.Errorf("Check = %v, with %d probes, want none: the family is proven again", err, f.probeCount()-before)
	}
}

// TestARowRefusedTwiceIsRejectedOnlyIfTheProbeThenSucceeds: the solo retry
// proves the row is at fault rather than its batch; the probe after it, that
// the table and family are not. A batch-mate written proves nothing then: the
// family may have been dropped between the batch and the retry alone.
func TestARowRefusedTwiceIsRejectedOnlyIfTheProbeThenSucceeds(t *testing.T) {
	for _, c := range []struct {
		name      string
		probe     codes.Code
		rejection bool
	}{
		{"the probe succeeds", codes.OK, true},
		{"the probe is refused with NotFound", codes.NotFound, false},
		{"the probe times out", codes.Unavailable, false}, // the client retries Unavailable
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t)
			s := newSink(t, f, sinkConfig(config.Batch{MaxMessages: 2, MaxBytes: 4 << 20, MaxDelay: time.Hour}))
			s.timeout = 200 * time.Millisecond
			f.mu.Lock()
			f.inject["bad"] = []codes.Code{codes.InvalidArgument, codes.InvalidArgument}
			f.probeCode = c.probe
			f.mu.Unlock()
			var err error
			done := make(chan struct{})
			go func() { defer close(done); err = s.Write(t.Context(), msg(testRow("bad"))) }()
			writeAll(t, s, 1)
			<-done
			if err == nil || sinks.IsRejected(err) != c.rejection || status.Code(err) != codes.InvalidArgument {
				t.Errorf("Write = %v, want an InvalidArgument, rejected: %v", err, c.rejection)
			}
			if got := f.requestSizes(); fmt.Sprint(got) != "[2 1]" {
				t.Errorf("MutateRows requests of %v entries, want [2 1]: the batch, then the row alone", got)
			}
			if f.probeCount() == 0 {
				t.Error("no probe before rejecting")
			}
		})
	}
}

func TestCodeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("wrapped: %w", status.Error(codes.NotFound, "x")), codes.NotFound},
		{&sinks.RejectedError{Err: status.Error(codes.InvalidArgument, "x")}, codes.InvalidArgument},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("connection reset by peer"), codes.Unknown},
	} {
		if got := codeOf(c.err); got != c.want {
			t.Errorf("codeOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
