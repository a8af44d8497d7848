package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAuditsBesideOtherReadersOfTheDeadLetterTopicFindNothingMissing: two
// audits of one range started together, while `deadletter list` reads the
// same dead-letter topic again and again, each find every dead-lettered
// message's copy: no reader hides the copies it reads from the others, so
// no audit reports a false "missing".
func TestAuditsBesideOtherReadersOfTheDeadLetterTopicFindNothingMissing(t *testing.T) {
	const good, poisoned = 40, 9
	e := newEnv(t)
	yaml := e.configYAML("exactly_once", e.deadLetterYAML("topic"))
	sub := "      subscription: " + e.sub + "\n"
	yaml = strings.Replace(yaml, sub, sub+"      topic_message_retention: 1h\n", 1)
	path, _ := e.writeConfig(yaml)
	p, c := e.replicaConfig(yaml, 0)
	live := e.start(p, c)
	live.waitReady(60 * time.Second)

	from := time.Now().UTC()
	time.Sleep(100 * time.Millisecond)
	e.publish(0, good)
	for i := range poisoned {
		e.publishOne(poison, map[string]string{"id": fmt.Sprintf("p%03d", i), "ts": fmt.Sprint(eventTime(i).UnixMicro())})
	}
	e.waitRows(e.table, good, time.Minute)
	pollUntil(t, "every poison message dead-lettered", time.Minute, func() bool {
		return metric(live.metricsText(), "pubsink_messages_dead_lettered_total", map[string]string{"pipeline": "e2e"}) >= poisoned
	})
	time.Sleep(time.Second)
	until := time.Now().UTC()

	// Listers: `deadletter list` over and over while the audits read the
	// output.
	stop := make(chan struct{})
	listed := make(chan int, 1)
	go func() {
		n := 0
		defer func() { listed <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			l := e.startJob("deadletter", path, "list", "--pipeline", "e2e")
			l.wait(t, time.Minute)
			n++
		}
	}()
	var audits []*reprocessRun
	for i := range 2 {
		report := filepath.Join(e.dir, fmt.Sprintf("audit-%d.jsonl", i))
		audits = append(audits, e.startJob("audit", path, "--pipeline", "e2e", "--from", from.Format(time.RFC3339Nano),
			"--until", until.Format(time.RFC3339Nano), "--idle", "3s", "--report", report))
	}
	for i, a := range audits {
		if code := a.wait(t, 2*time.Minute); code != 0 {
			t.Errorf("audit %d beside other readers: exit %d, want 0 (clean)\n%s", i, code, a.out.String())
			continue
		}
		if want := fmt.Sprintf("dead-lettered %d", poisoned); !strings.Contains(a.out.String(), want) {
			t.Errorf("audit %d's summary lacks %q:\n%s", i, want, a.out.String())
		}
	}
	close(stop)
	if n := <-listed; n == 0 {
		t.Error("no listing ran beside the audits")
	}
}
