package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// rival is version v ("a" or "b") of key's payload, n its number, at
// event time ts: one message of a rival pair.
func rival(key, v string, n int, ts time.Time) dupMsg {
	return dupMsg{id: key, data: fmt.Sprintf(`{"n":%d,"v":%q}`, n, v), ts: ts}
}

// TestReprocessKeepsTheLiveWinnerOfEveryKey: beside two live replicas, a
// range of rival pairs (two messages of one dedupe key, another payload
// each), with one event time and with event times 7 ms apart:
//
//   - "s" keys straddle the range's start: the live pipeline wrote the
//     first version, published before the range; only its rival is in the
//     range;
//   - "p" keys have both versions in the range, published together, so
//     that which one wins live is a race.
//
// For half of the keys the live catalog's claim is deleted before the
// reprocess, as Bigtable collects it an hour past the window: only the
// ruling the rival left says which message won. A reprocess with the
// unchanged mapping leaves the table exactly as it was (no key changes
// payload, no cell gains a version); one with a changed mapping rewrites
// each key's live winner, and nothing else, in place.
func TestReprocessKeepsTheLiveWinnerOfEveryKey(t *testing.T) {
	const straddling, pairs = 200, 300
	e := newEnv(t)
	yaml := e.configYAML("exactly_once", "")
	sub := "      subscription: " + e.sub + "\n"
	yaml = strings.Replace(yaml, sub, sub+"      topic_message_retention: 1h\n", 1)
	e.writeConfig(yaml)
	var live []*child
	for i := range 2 {
		path, c := e.replicaConfig(yaml, i)
		live = append(live, e.start(path, c))
		live[i].waitReady(60 * time.Second)
	}
	duplicates := func() int {
		n := 0.0
		for _, c := range live {
			n += metric(c.metricsText(), "pubsink_messages_duplicate_total", map[string]string{"pipeline": "e2e"})
		}
		return int(n)
	}

	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	at := func(i int, apart bool) time.Time {
		ts := base.Add(time.Duration(i) * time.Second)
		if apart {
			ts = ts.Add(7 * time.Millisecond)
		}
		return ts
	}
	var before, inRange []dupMsg
	for i := range straddling {
		key := fmt.Sprintf("s%04d", i)
		before = append(before, rival(key, "a", i, at(i, false)))
		inRange = append(inRange, rival(key, "b", i, at(i, i%2 == 1)))
	}
	for i := range pairs {
		key := fmt.Sprintf("p%04d", i)
		inRange = append(inRange, rival(key, "a", i, at(i, false)), rival(key, "b", i, at(i, i%2 == 1)))
	}
	e.publishDup(before)
	e.waitRows(e.table, straddling, time.Minute)
	time.Sleep(time.Second)
	from := time.Now().UTC()
	time.Sleep(100 * time.Millisecond)
	e.publishDup(inRange)
	// Every key has one rival: the live pipeline is done when each was
	// a duplicate.
	pollUntil(t, "a duplicate for every key", 2*time.Minute, func() bool { return duplicates() >= straddling+pairs })
	time.Sleep(time.Second)
	until := time.Now().UTC()

	// Bigtable's collection of half of the claims (family k, an hour past
	// the window).
	tbl := e.bigtable.Open(e.stateTable)
	collected := 0
	err := tbl.ReadRows(context.Background(), bigtable.PrefixRange("dedupe#e2e#"), func(r bigtable.Row) bool {
		rest := strings.TrimPrefix(r.Key(), "dedupe#e2e#")
		if strings.HasPrefix(rest, "~") || len(rest) < 4 || (rest[len(rest)-1]-'0')%2 != 0 {
			return true
		}
		m := bigtable.NewMutation()
		m.DeleteCellsInFamily("k")
		if err := tbl.Apply(context.Background(), r.Key(), m); err != nil {
			t.Fatal(err)
		}
		collected++
		return true
	})
	if err != nil || collected < (straddling+pairs)/3 {
		t.Fatalf("deleted the claims of %d keys (err %v); want about half of %d", collected, err, straddling+pairs)
	}
	if n := e.countRowsIn(e.stateTable, bigtable.PrefixRange("dedupe#e2e#~r#")); n != straddling+pairs {
		t.Errorf("%d rulings, want one per key: %d", n, straddling+pairs)
	}
	rows := e.readTable(e.table)
	if len(rows) != straddling+pairs {
		t.Fatalf("%d rows live, want %d", len(rows), straddling+pairs)
	}
	args := []string{"--pipeline", "e2e", "--from", from.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano), "--idle", "4s", "--no-restore-point"}

	// The same mapping: the table as it was, to the cell.
	same, _ := e.replicaConfig(yaml, 8)
	if code := e.startReprocess(same, args...).wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("reprocess with the same mapping: exit %d", code)
	}
	after := e.readTable(e.table)
	if diff := diffRows(rows, after); len(diff) > 0 {
		t.Errorf("a reprocess with the same mapping changed %d rows (switched winners or new versions), first: %v", len(diff), diff[:min(5, len(diff))])
	}

	// A changed mapping: each key's live winner rewritten in place; the
	// straddling keys, whose winner is before the range, as they were.
	changed := strings.Replace(yaml, `n: "{data.n}"`, `n: "v2-{data.n}-{data.v}"`, 1)
	if changed == yaml {
		t.Fatalf("the harness's YAML changed: no column n in\n%s", yaml)
	}
	path, _ := e.replicaConfig(changed, 9)
	if code := e.startReprocess(path, args...).wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("reprocess with a changed mapping: exit %d", code)
	}
	after = e.readTable(e.table)
	var bad []string
	for key, cols := range rows {
		got := after[key]
		d, n := cols["data"], got["n"]
		switch {
		case len(got["data"]) != 1 || got["data"][0] != d[0]:
			bad = append(bad, fmt.Sprintf("%s: data %v, live %v", key, got["data"], d))
		case strings.HasPrefix(key, "s"):
			if len(n) != 1 || n[0] != cols["n"][0] {
				bad = append(bad, fmt.Sprintf("%s (winner before the range): n %v, live %v", key, n, cols["n"]))
			}
		default:
			i, _ := strconv.Atoi(key[1:])
			want := fmt.Sprintf("v2-%d-%s", i, winnerOf(d[0].value))
			if len(n) != 1 || n[0].value != want || n[0].ts != d[0].ts {
				bad = append(bad, fmt.Sprintf("%s: n %v, want %q at %d", key, n, want, d[0].ts))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d rows not the live winner with the new mapping, first: %v", len(bad), bad[:min(5, len(bad))])
	}
	// Every cell the live replicas and the runs wrote is in the
	// reference's State table (the runs' holds of live winners included).
	e.requireStateRowsDocumented()
}

// winnerOf is the version ("a" or "b") of the payload in a row's data.
func winnerOf(data string) string {
	if strings.Contains(data, `"v":"b"`) {
		return "b"
	}
	return "a"
}
