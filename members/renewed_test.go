package members

import (
	"context"
	"testing"
	"time"
)

// TestRenewedSinceSeesARunningMemberAndNotAHaltedOne: a member that renews
// counts as running since a moment ago; once halted (no clean stop, its
// cell stays), not since after its last renewal; another pipeline's
// members do not count.
func TestRenewedSinceSeesARunningMemberAndNotAHaltedOne(t *testing.T) {
	client := stateTable(t)
	table := client.Open("state")
	ctx := context.Background()
	if ok, err := RenewedSince(ctx, table, "orders", time.Now().Add(-time.Minute)); ok || err != nil {
		t.Fatalf("no member yet: %v, %v", ok, err)
	}
	m := start(t, client, "a", nil)
	joined(t, m, 5*time.Second)
	if ok, err := RenewedSince(ctx, table, "orders", time.Now().Add(-testLease)); !ok || err != nil {
		t.Errorf("a running member: %v, %v", ok, err)
	}
	if ok, _ := RenewedSince(ctx, table, "payments", time.Now().Add(-time.Minute)); ok {
		t.Error("another pipeline's member counted")
	}
	m.halt()
	after := time.Now()
	if ok, err := RenewedSince(ctx, table, "orders", after); ok || err != nil {
		t.Errorf("a halted member counts as renewed after it halted: %v, %v", ok, err)
	}
	if ok, _ := RenewedSince(ctx, table, "orders", after.Add(-time.Minute)); !ok {
		t.Error("the halted member's last renewal is not seen")
	}
}
