package dedupe

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/zap"

	"github.com/pubsink/pubsink/internal/metrics"
	"github.com/pubsink/pubsink/internal/state"
)

// rulingsOf reads the ruling row of key in pipeline's catalog: the winners
// it names.
func rulingsOf(t *testing.T, tbl *bigtable.Table, pipeline, key string) []string {
	t.Helper()
	c := newCatalog(pipeline)
	row := c.rulingRow(c.row(idOf(key), hashOf(key)))
	r, err := tbl.ReadRow(context.Background(), row)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range r[state.FamilyRulings] {
		out = append(out, strings.TrimPrefix(it.Column, state.FamilyRulings+":"+claimPrefix))
	}
	return out
}

// TestARivalsDuplicateLeavesARulingNamingTheWinner: in each way a rival
// is found a duplicate (alone, from the catalog; shared, by the conditional
// claim; waiting in this process for the winner's commit), its ruling names
// the winner before Claim returns. A redelivery of the winner, and a key
// only one message can have (ClaimOnce), leave none.
func TestARivalsDuplicateLeavesARulingNamingTheWinner(t *testing.T) {
	ctx := context.Background()
	tbl := bttestClient(t).Open(testTable)
	s := btStore{table: tbl}
	for _, tc := range []struct {
		name string
		m    Membership
	}{{"alone", nil}, {"shared", sharedView()}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTest(t, s, realClock(), Config{Pipeline: tc.name, Members: tc.m}, true)
			winner, rival := delivery(), delivery()
			c, dup, err := d.Claim(ctx, "k1", winner)
			if err != nil || dup {
				t.Fatalf("the first claim: dup %v, err %v", dup, err)
			}
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := rulingsOf(t, tbl, tc.name, "k1"); len(got) != 0 {
				t.Fatalf("a key without a rival has a ruling: %v", got)
			}
			c, dup, err = d.Claim(ctx, "k1", winner)
			if err != nil || dup || !c.Resumed() {
				t.Fatalf("the winner's redelivery: dup %v, resumed %v, err %v; want it to resume", dup, c.Resumed(), err)
			}
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := rulingsOf(t, tbl, tc.name, "k1"); len(got) != 0 {
				t.Fatalf("the winner's redelivery wrote a ruling: %v", got)
			}
			if _, dup, err := d.Claim(ctx, "k1", rival); err != nil || !dup {
				t.Fatalf("the rival: dup %v, err %v; want a duplicate", dup, err)
			}
			if got := rulingsOf(t, tbl, tc.name, "k1"); !slices.Equal(got, []string{winner}) {
				t.Fatalf("the rival's ruling names %v, want [%s]", got, winner)
			}
			if n := d.Stats().Rulings; n != 1 {
				t.Errorf("Stats().Rulings = %d, want 1", n)
			}

			// ClaimOnce: a message-ID key has no rival, and no ruling.
			id := delivery()
			c, _, err = d.ClaimOnce(ctx, id, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if _, dup, err := d.ClaimOnce(ctx, id, id); err != nil || !dup {
				t.Fatalf("ClaimOnce after its record: dup %v, err %v", dup, err)
			}
			if got := rulingsOf(t, tbl, tc.name, id); len(got) != 0 {
				t.Fatalf("a ClaimOnce key has a ruling: %v", got)
			}
		})
	}

	t.Run("waiting", func(t *testing.T) {
		d := newTest(t, s, realClock(), Config{Pipeline: "waiting"}, true)
		winner, rival := delivery(), delivery()
		c, _, err := d.Claim(ctx, "k2", winner)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan bool)
		go func() {
			_, dup, err := d.Claim(ctx, "k2", rival) // waits for the winner's outcome
			if err != nil {
				t.Error(err)
			}
			done <- dup
		}()
		time.Sleep(20 * time.Millisecond)
		if err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if !<-done {
			t.Fatal("the rival waiting for the winner's commit was not a duplicate")
		}
		if got := rulingsOf(t, tbl, "waiting", "k2"); !slices.Equal(got, []string{winner}) {
			t.Fatalf("the waiting rival's ruling names %v, want [%s]", got, winner)
		}
	})
}

// TestARerunWritesWhatTheLivePipelineWrote: the live pipeline decided k1
// for m1 within its window, k2 for m2 whose claim the catalog has since
// collected (its ruling stays, from m2's rival), k4 for both its messages
// more than a window apart, and never saw k3. The run writes m1 and m2 and
// finds their rivals duplicates whatever the order it receives them in,
// writes both messages of k4, decides k3 for the first it receives, writes
// each message once whatever its redeliveries, and writes nothing into the
// live pipeline's rows.
func TestARerunWritesWhatTheLivePipelineWrote(t *testing.T) {
	ctx := context.Background()
	client := bttestClient(t)
	tbl := client.Open(testTable)
	s := btStore{table: tbl}
	live := newTest(t, s, realClock(), Config{Pipeline: "orders"}, true)
	claim := func(key, msg string, wantDup bool) {
		t.Helper()
		c, dup, err := live.Claim(ctx, key, msg)
		if err != nil || dup != wantDup {
			t.Fatalf("live claim of %s by %s: dup %v, err %v; want dup %v", key, msg, dup, err, wantDup)
		}
		if !dup {
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim("k1", "m1", false)
	claim("k1", "m1-rival", true)
	claim("k2", "m2", false)
	claim("k2", "m2-rival", true)
	// k4: a claim by m4 older than the window, then one by m4-later.
	c4 := newCatalog("orders").row(idOf("k4"), hashOf("k4"))
	old := bigtable.NewMutation()
	old.Set(state.FamilyDedupe, claimPrefix+"m4", bigtable.Time(time.Now().Add(-2*DefaultWindow)).TruncateToMilliseconds(), nil)
	if err := tbl.Apply(ctx, c4, old); err != nil {
		t.Fatal(err)
	}
	claim("k4", "m4-later", false)
	// The catalog collected k2's claim (family k's max age): only the
	// ruling tells.
	c := newCatalog("orders")
	del := bigtable.NewMutation()
	del.DeleteCellsInFamily(state.FamilyDedupe)
	if err := tbl.Apply(ctx, c.row(idOf("k2"), hashOf("k2")), del); err != nil {
		t.Fatal(err)
	}
	before := rowsUnder(t, tbl, "dedupe#orders#")

	run := newRerun(s, zap.NewNop(), Config{Pipeline: "orders~r1", Table: testTable, Now: realClock().Now, Metrics: metrics.New().Pipeline("orders~r1")}, "orders")
	t.Cleanup(func() { run.Close(context.Background()) })
	for _, tc := range []struct {
		key, msg string
		dup      bool
	}{
		{"k1", "m1-rival", true}, {"k1", "m1", false}, {"k1", "m1", true},
		{"k2", "m2-rival", true}, {"k2", "m2", false},
		{"k3", "m3", false}, {"k3", "m3-rival", true}, {"k3", "m3", false}, // its redelivery resumes, as live
		{"k4", "m4-later", false}, {"k4", "m4", false}, {"k4", "m4", true}, {"k4", "m4-rival", true},
	} {
		c, dup, err := run.Claim(ctx, tc.key, tc.msg)
		if err != nil || dup != tc.dup {
			t.Errorf("run's claim of %s by %s: dup %v, err %v; want dup %v", tc.key, tc.msg, dup, err, tc.dup)
			continue
		}
		if !dup {
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := run.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if after := rowsUnder(t, tbl, "dedupe#orders#"); !slices.Equal(after, before) {
		t.Errorf("the run changed the live pipeline's rows:\nbefore %v\nafter  %v", before, after)
	}
}

// rowsUnder lists the cells of the rows under prefix, one string each.
func rowsUnder(t *testing.T, tbl *bigtable.Table, prefix string) []string {
	t.Helper()
	var out []string
	err := tbl.ReadRows(context.Background(), bigtable.PrefixRange(prefix), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				out = append(out, r.Key()+" "+it.Column)
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
