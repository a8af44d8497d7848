package state_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/state"
)

// stateTable starts the fakes with opts, creates the state table "st" in
// instance i, and returns it through a client whose requests name profile.
func stateTable(t *testing.T, profile string, opts ...grpc.ServerOption) *bigtable.Table {
	t.Helper()
	ctx := context.Background()
	b, err := fake.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	defaultClient, err := b.StateTable(ctx, "p", "i", "st", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defaultClient.Close()
	c, err := b.BigtableProfileClient(ctx, "p", "i", profile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.Open("st")
}

func TestCheckConditionalWritesPassesAndLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name, profile string
		opts          []grpc.ServerOption
	}{
		{name: "bttest takes them through any profile"},
		{name: "through a transactional profile", profile: "pubsink-state",
			opts: []grpc.ServerOption{fake.RefuseConditionalMutations("pubsink-state")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tbl := stateTable(t, tc.profile, tc.opts...)
			for i := range 2 { // idempotent
				if err := state.CheckConditionalWrites(ctx, tbl, "i", tc.profile); err != nil {
					t.Fatalf("probe %d: %v", i, err)
				}
			}
			row, err := tbl.ReadRow(ctx, state.ProbeRow)
			if err != nil || len(row) != 0 {
				t.Errorf("probe row after the check = %v, %v; want nothing", row, err)
			}
		})
	}
}

func TestCheckConditionalWritesNamesTheProfileAndTheFix(t *testing.T) {
	for _, tc := range []struct{ profile, using string }{
		{"", "the instance's default profile"},
		{"multi", `app profile "multi"`},
	} {
		t.Run(tc.using, func(t *testing.T) {
			tbl := stateTable(t, tc.profile, fake.RefuseConditionalMutations("pubsink-state"))
			err := state.CheckConditionalWrites(context.Background(), tbl, "i", tc.profile)
			if !errors.Is(err, state.ErrConditionalWritesRefused) || status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("CheckConditionalWrites = %v; want a refusal wrapping FailedPrecondition", err)
			}
			for _, want := range []string{
				"state.app_profile: ", tc.using + " of instance i", "single-cluster routing and transactional writes allowed",
				"`gcloud bigtable app-profiles create pubsink-state --instance=i --route-to=CLUSTER --transactional-writes`",
				"`state.app_profile: pubsink-state`",
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestCheckConditionalWritesReturnsOtherErrorsAsTheyAre(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "try again")
	tbl := stateTable(t, "", grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/CheckAndMutateRow") {
			return nil, unavailable
		}
		return handler(ctx, req)
	}))
	err := state.CheckConditionalWrites(context.Background(), tbl, "i", "")
	if status.Code(err) != codes.Unavailable || errors.Is(err, state.ErrConditionalWritesRefused) {
		t.Errorf("CheckConditionalWrites = %v; want Unavailable, not a refusal", err)
	}

	ctx := context.Background()
	b, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := b.BigtableClient(ctx, "p", "i")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := state.CheckConditionalWrites(ctx, c.Open("missing"), "i", ""); status.Code(err) != codes.NotFound {
		t.Errorf("CheckConditionalWrites on a missing table = %v; want NotFound", err)
	}
}
