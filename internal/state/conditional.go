package state

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ProbeRow is the row of the state table that CheckConditionalWrites
// probes. Nothing is ever stored in it.
const ProbeRow = "probe#conditional"

// ErrConditionalWritesRefused is wrapped by the error of
// CheckConditionalWrites when the server refuses conditional mutations.
var ErrConditionalWritesRefused = errors.New("Bigtable refused a conditional mutation")

// CheckConditionalWrites reports whether the state table runs conditional
// mutations (CheckAndMutateRow), which the dedupe of exactly_once pipelines
// needs. table is the state table, opened through a client of instance whose
// requests name the app profile profile ("": the instance's default
// profile).
//
// It applies one conditional mutation to ProbeRow whose predicate never
// matches, so its false branch runs: it deletes ProbeRow, which holds
// nothing. The probe is idempotent, needs no column family and leaves
// nothing behind.
//
// Cloud Bigtable runs conditional mutations only through an app profile
// with single-cluster routing that allows transactional writes: they are
// not replicated atomically across clusters, so with multi-cluster routing
// two clusters could each decide a different branch. Through any other
// profile the server refuses them. When it answers FailedPrecondition,
// InvalidArgument or PermissionDenied, the error wraps
// ErrConditionalWritesRefused and the server's error, and names
// state.app_profile, the profile in use and the fix. Any other error
// (Unavailable, DeadlineExceeded, NotFound for a missing table, ...) is
// returned as it is: the client does not retry conditional mutations, so
// the caller decides whether to retry or fail.
func CheckConditionalWrites(ctx context.Context, table *bigtable.Table, instance, profile string) error {
	del := bigtable.NewMutation()
	del.DeleteRow()
	err := table.Apply(ctx, ProbeRow, bigtable.NewCondMutation(bigtable.BlockAllFilter(), nil, del))
	code := status.Code(err)
	switch code {
	case codes.OK:
		return nil
	case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied:
	default:
		return err
	}
	using := fmt.Sprintf("app profile %q", profile)
	if profile == "" {
		using = "the instance's default profile"
	}
	hint := ""
	if code == codes.PermissionDenied {
		hint = " (if the profile is right, the service account may lack roles/bigtable.user on the instance)"
	}
	return fmt.Errorf("state.app_profile: %w through %s of instance %s: %w%s; "+
		"exactly_once dedupe needs conditional mutations, which Bigtable runs only through an app profile "+
		"with single-cluster routing and transactional writes allowed: create one with "+
		"`gcloud bigtable app-profiles create pubsink-state --instance=%s --route-to=CLUSTER --transactional-writes` "+
		"and set `state.app_profile: pubsink-state`",
		ErrConditionalWritesRefused, using, instance, err, hint, instance)
}
