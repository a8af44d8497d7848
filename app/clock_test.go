package app

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/deadletter"
	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/members"
)

func TestClockFromEnv(t *testing.T) {
	for _, c := range []struct {
		value string
		want  time.Duration
		clock bool
	}{
		{"", 0, false},
		{"0s", 0, false},
		{"-3s", -3 * time.Second, true},
		{"+250ms", 250 * time.Millisecond, true},
		{"1h30m", 90 * time.Minute, true},
	} {
		t.Setenv(ClockOffsetEnv, c.value)
		off, now, err := clockFromEnv()
		if err != nil || off != c.want || (now != nil) != c.clock {
			t.Errorf("%q: offset %v, clock %v, error %v; want %v, clock %v, no error", c.value, off, now != nil, err, c.want, c.clock)
			continue
		}
		if now != nil {
			if d := now().Sub(time.Now()) - c.want; d < -time.Second || d > time.Second {
				t.Errorf("%q: the clock is off by %v more than asked", c.value, d)
			}
		}
	}
	for _, bad := range []string{"3", "three seconds", "-", "2s3"} {
		t.Setenv(ClockOffsetEnv, bad)
		_, _, err := clockFromEnv()
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), ClockOffsetEnv) || !strings.Contains(err.Error(), "not a Go duration") {
			t.Errorf("%q: error %v; want a configuration error naming $%s and what it takes", bad, err, ClockOffsetEnv)
		}
	}
}

func TestRunFileRefusesAnUnparsableClockOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ClockOffsetEnv, "soon")
	err := RunFile(context.Background(), path, &bytes.Buffer{})
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `"soon" is not a Go duration`) {
		t.Fatalf("RunFile = %v; want a configuration error (exit 2) naming the value", err)
	}
}

// clockYAML is an exactly_once pipeline with a file output, so that the
// parts Options.Now reaches all stamp something: the membership cell, the
// catalog record, the copy's failed_at.
const clockYAML = `
project: p
http: {addr: "127.0.0.1:0"}
shutdown_timeout: 5s
state: {instance: i}
pipelines:
  - name: orders
    source: {topic: orders, subscription: orders-sub, streams: 1}
    sink: {table: orders, row_key: "{message_id}", columns: {n: "{data.n}"}, batch: {max_delay: 1ms}}
    dead_letter: {file: %FILE%}
`

// TestOptionsNowStampsTheStateAndTheCopies: a process whose clock is
// Options.Now writes its membership, its catalog records and its copies'
// failed_at at that clock's times, not the host's.
func TestOptionsNowStampsTheStateAndTheCopies(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "dlq.jsonl")
	cfg := parse(t, strings.Replace(clockYAML, "%FILE%", file, 1))
	if err := Setup(ctx, cfg, f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	// Far enough to tell from the host's clock, within the catalog's GC
	// rule (window + 1 h), which the fake applies.
	const offset = -20 * time.Minute
	opts := f.opts
	opts.Now = offsetClock(offset)
	opts.HTTPAddr = "-"
	a, err := Open(ctx, zap.NewNop(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	f.psSrv.Publish("projects/p/topics/orders", []byte(`{"n":1}`), nil)
	f.psSrv.Publish("projects/p/topics/orders", []byte(`not json`), nil)

	bt, err := f.opts.Bigtable(ctx, "i")
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Close()
	skewed := func(what string, at time.Time) {
		t.Helper()
		if d := time.Until(at) - offset; d < -time.Minute || d > time.Minute {
			t.Errorf("%s stamped %v, %v from the skewed clock", what, at, d)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	var record, member bigtable.Timestamp
	for (record == 0 || member == 0) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		tbl := bt.Open("pubsink_state")
		tbl.ReadRows(ctx, bigtable.PrefixRange("dedupe#orders#"), func(r bigtable.Row) bool {
			for _, it := range r[state.FamilyDedupe] {
				if it.Column == state.FamilyDedupe+":c" || strings.HasPrefix(it.Column, state.FamilyDedupe+":w/") { // a record or a claim
					record = it.Timestamp
				}
			}
			return true
		})
		if row, err := tbl.ReadRow(ctx, members.Row("orders")); err == nil {
			for _, it := range row[state.FamilyMeta] {
				member = it.Timestamp
			}
		}
	}
	if record == 0 || member == 0 {
		t.Fatalf("after 15 s: catalog record or claim at %d, membership cell at %d; want both", record, member)
	}
	skewed("the catalog record or claim", record.Time())
	skewed("the membership cell", member.Time())

	var copies []*deadletter.Entry
	for len(copies) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		r, err := deadletter.OpenReader(ctx, zap.NewNop(), cfg, cfg.Pipelines[0], deadletter.Clients{})
		if err != nil {
			continue // the file appears with the first copy
		}
		copies, _ = r.Next(ctx, 10)
		r.Close()
	}
	if len(copies) != 1 || copies[0].Copy == nil {
		t.Fatalf("copies %v; want the one of the invalid payload", copies)
	}
	skewed("the copy's failed_at", copies[0].Copy.FailedAt)

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
