package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pubsink/pubsink/app"
)

// TestTwoAuditsStartedInOneInstantReadTheRangeEachOnItsOwn: two audits of
// one range started at the same instant (one clock for both: the same
// second, the same millisecond) get different names and subscriptions,
// each reads the whole range and reports the same findings (no live
// process ran, so every message is missing), and both subscriptions are
// gone after.
func TestTwoAuditsStartedInOneInstantReadTheRangeEachOnItsOwn(t *testing.T) {
	const n = 40
	e := newEnv(t)
	_, cfg := e.writeConfig(e.snapshotYAML())
	from := time.Now().UTC()
	time.Sleep(100 * time.Millisecond)
	e.publish(0, n)
	time.Sleep(100 * time.Millisecond)
	until := time.Now().UTC()

	start := time.Now()
	opts := e.reprocessOptions()
	type result struct {
		out    string
		err    error
		report string
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			report := filepath.Join(e.dir, fmt.Sprintf("audit-%d.jsonl", i))
			var out bytes.Buffer
			req := app.AuditRequest{Pipeline: "e2e", From: from.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), Idle: 3 * time.Second, Report: report}
			o := opts
			o.Now = sameStartThenRunning(start) // the name's stamp: the same instant for both
			err := app.Audit(context.Background(), nopLogger(), cfg, req, o, &out, io.Discard)
			results[i] = result{out.String(), err, report}
		}()
	}
	wg.Wait()
	reading := regexp.MustCompile(`audit (\S+): reading .* on (\S+)\n`)
	var names, subs []string
	for i, r := range results {
		if !errors.Is(r.err, app.ErrAuditFindings) {
			t.Fatalf("audit %d: %v, want its findings (every message missing)\n%s", i, r.err, r.out)
		}
		m := reading.FindStringSubmatch(r.out)
		if m == nil {
			t.Fatalf("audit %d printed no reading line:\n%s", i, r.out)
		}
		names, subs = append(names, m[1]), append(subs, m[2])
		if !strings.Contains(r.out, fmt.Sprintf("messages   %d", n)) {
			t.Errorf("audit %d did not read the whole range (%d messages):\n%s", i, n, r.out)
		}
	}
	if names[0] == names[1] || subs[0] == subs[1] {
		t.Errorf("two audits started in one instant share a name or a subscription: %v, %v", names, subs)
	}
	a, b := readReport(t, results[0].report), readReport(t, results[1].report)
	if len(a) != 2*n || !slices.Equal(a, b) {
		t.Errorf("the two audits' findings differ or are not every message's two cells missing (%d, %d findings, want %d each)", len(a), len(b), 2*n)
	}
	if left := e.auditSubscriptions(); len(left) > 0 {
		t.Errorf("the audits left their subscriptions %v", left)
	}
}

// sameStartThenRunning is a clock whose first reading is start, for every
// caller (the name's stamp), and that runs from there.
func sameStartThenRunning(start time.Time) func() time.Time {
	var once sync.Once
	var since time.Time
	return func() time.Time {
		first := false
		once.Do(func() { since, first = time.Now(), true })
		if first {
			return start
		}
		return start.Add(time.Since(since))
	}
}
