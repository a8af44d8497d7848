package fake

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// StateTableFor starts backends for t (stopped at its end) and returns a
// data client of a fresh state table named table in project p, instance i,
// whose catalog family keeps records for window: the state table of a
// part's unit tests.
func StateTableFor(t testing.TB, table string, window time.Duration) *bigtable.Client {
	t.Helper()
	b, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	c, err := b.StateTable(context.Background(), "p", "i", table, window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
