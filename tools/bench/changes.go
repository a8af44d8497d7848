package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"cloud.google.com/go/bigtable"
)

// The changes_* connectors: pubsink's exactly_once pipeline whose mapping
// is a change mapping (docs/reference.md, "Changes"), with the shapes of
// their messages (_shuffled: rows that take several changes, out of
// event-time order) and the check of what their tables hold afterwards.

// Change mappings of the changes_* connectors (shape.change).
const (
	changeUpsert  = "upsert"
	changeDelete  = "delete"
	changeInsert  = "insert"
	changeReplace = "replace"
)

// shuffleVersions is how many messages of a _shuffled run share a row key.
const shuffleVersions = 10

// shuffledKeys is how many row keys the n messages of a _shuffled run go
// to: n/10, rounded up.
func shuffledKeys(n int) int { return (n + shuffleVersions - 1) / shuffleVersions }

// rowKeyIndex is the index of the row key of message i of a run of n
// messages: i itself, but for _shuffled, i modulo the run's keys (so that a
// key's ten messages are spread over the backlog, n/10 apart).
func (s shape) rowKeyIndex(i, n int) int {
	if s.shuffled {
		return i % shuffledKeys(n)
	}
	return i
}

// shuffledTime is the event time of message i of a _shuffled run of n
// messages, in milliseconds after the run's epoch: its key's j-th message
// (in publish order) gets the j-th value of a permutation of 0…9 drawn for
// the key (the same in every run), so that each key's changes arrive in a
// random event-time order.
func shuffledTime(i, n int) int64 {
	keys := shuffledKeys(n)
	k, j := i%keys, i/keys
	return int64(rand.New(rand.NewPCG(uint64(k), 0x5eed)).Perm(shuffleVersions)[j])
}

// orderingKey is the ordering key of message i of a run of n messages
// (orderingKeys > 0): its row key's index modulo K, so that the changes
// of one row share an ordering key.
func (s shape) orderingKey(i, n int) string {
	if s.orderingKeys == 0 {
		return ""
	}
	return "o" + strconv.Itoa(s.rowKeyIndex(i, n)%s.orderingKeys)
}

// rowsFor is how many rows the sink table must hold after a run that
// published n messages.
func (s shape) rowsFor(n int) int {
	if s.shuffled {
		return shuffledKeys(n) * s.rowsPerMessage()
	}
	return n * s.rowsPerMessage()
}

// tombstoneFamily is the tombstone family of the changes_* connectors'
// tables: pubsink's default (sink.tombstone_family).
const tombstoneFamily = "tombstone"

// checkChanges reads every row of a changes_* connector's table after a run
// of n messages of shape sh published from epoch (b.n, b.epoch; unused but
// for _shuffled), counts them, and checks that each is what its changes say
// whatever order they were applied in: a deleted row holds no data and its
// row tombstone; any other one cell per column (one version). With
// _shuffled, where each row took ten changes in a random order, the cells
// must be at the newest change's event time (upsert, replace_if_newer: the
// newest wins; delete: the row's tombstone), or the earliest's (insert).
func (b *bench) checkChanges(ctx context.Context, table string, sh shape, n int, epoch int64) (int, error) {
	rows := 0
	var bad []string
	failed := 0
	fail := func(key, format string, args ...any) {
		failed++
		if len(bad) < 5 {
			bad = append(bad, fmt.Sprintf("row %s: ", key)+fmt.Sprintf(format, args...))
		}
	}
	err := b.data.Open(table).ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rows++
		want := bigtable.Timestamp(-1) // not known: each row had one change, of its publish time
		if sh.shuffled {
			k, err := strconv.Atoi(strings.TrimPrefix(strings.SplitN(r.Key(), "#", 2)[0], "k"))
			if err != nil {
				fail(r.Key(), "not a _shuffled row key")
				return true
			}
			want = bigtable.Timestamp((epoch + shuffledWinner(k, n, sh.change)) * 1000)
		}
		versions := map[string]int{}
		var rowTomb []bigtable.Timestamp
		for fam, items := range r {
			for _, it := range items {
				switch {
				case fam == tombstoneFamily && it.Column == tombstoneFamily+":"+"*":
					rowTomb = append(rowTomb, it.Timestamp)
				case fam == tombstoneFamily:
				default:
					versions[it.Column]++
					if want >= 0 && sh.change != changeDelete && it.Timestamp != want {
						fail(r.Key(), "%s at %d µs, want %d (the %s change's)", it.Column, it.Timestamp, want, map[bool]string{true: "earliest", false: "newest"}[sh.change == changeInsert])
					}
				}
			}
		}
		if sh.change == changeDelete {
			if len(versions) > 0 {
				fail(r.Key(), "holds %d columns after its delete", len(versions))
			}
			if len(rowTomb) == 0 || want >= 0 && !containsTS(rowTomb, want) {
				fail(r.Key(), "row tombstones at %v, want one at %d", rowTomb, want)
			}
			return true
		}
		if len(versions) == 0 {
			fail(r.Key(), "holds no data")
		}
		for col, v := range versions {
			if v != 1 {
				fail(r.Key(), "%s has %d versions, want 1", col, v)
			}
		}
		return true
	}, bigtable.RowFilter(bigtable.StripValueFilter()))
	if err != nil {
		return rows, err
	}
	if failed > 0 {
		return rows, fmt.Errorf("%d wrong in %d rows: %w", failed, rows, errors.New(strings.Join(bad, "; ")))
	}
	return rows, nil
}

// shuffledWinner is the event time (ms after the run's epoch) of the change
// that key k's row must show after a _shuffled run of n messages of change
// mapping change: the earliest for insert, else the newest.
func shuffledWinner(k, n int, change string) int64 {
	keys := shuffledKeys(n)
	best := int64(-1)
	for i := k; i < n; i += keys {
		t := shuffledTime(i, n)
		if best < 0 || change == changeInsert && t < best || change != changeInsert && t > best {
			best = t
		}
	}
	return best
}

func containsTS(ts []bigtable.Timestamp, t bigtable.Timestamp) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}
