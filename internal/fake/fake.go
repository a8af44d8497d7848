package fake

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/bigtable/bttest"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/state"
)

// Backends are an in-process Pub/Sub fake and Bigtable emulator listening
// on loopback.
type Backends struct {
	PubSub   *pstest.Server
	Bigtable *bttest.Server
}

// Start starts both backends, the Bigtable emulator with opts (such as
// RefuseConditionalMutations). Close stops them.
func Start(opts ...grpc.ServerOption) (*Backends, error) {
	bt, err := bttest.NewServer("127.0.0.1:0", opts...)
	if err != nil {
		return nil, fmt.Errorf("fake: bigtable: %w", err)
	}
	return &Backends{PubSub: pstest.NewServer(), Bigtable: bt}, nil
}

// Close stops both backends; their data is gone.
func (b *Backends) Close() {
	b.PubSub.Close()
	b.Bigtable.Close()
}

// PubSubClient returns a Pub/Sub client for project on the fake, with its
// own connection. The caller closes it.
func (b *Backends) PubSubClient(ctx context.Context, project string) (*pubsub.Client, error) {
	conn, err := dial(b.PubSub.Addr)
	if err != nil {
		return nil, err
	}
	return pubsub.NewClient(ctx, project, option.WithGRPCConn(conn), option.WithTelemetryDisabled())
}

// BigtableClient returns a data client for project/instance on the
// emulator, with its own connection and without client-side metrics
// export. The caller closes it.
func (b *Backends) BigtableClient(ctx context.Context, project, instance string) (*bigtable.Client, error) {
	return b.BigtableProfileClient(ctx, project, instance, "")
}

// BigtableProfileClient is BigtableClient whose requests name the app
// profile profile ("": the instance's default profile).
func (b *Backends) BigtableProfileClient(ctx context.Context, project, instance, profile string) (*bigtable.Client, error) {
	conn, err := dial(b.Bigtable.Addr)
	if err != nil {
		return nil, err
	}
	return bigtable.NewClientWithConfig(ctx, project, instance,
		bigtable.ClientConfig{AppProfile: profile, MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
}

// RefuseConditionalMutations is an option of Start under which the
// emulator, which runs every request, refuses single-row transactions
// (CheckAndMutateRow, ReadModifyWriteRow) as Cloud Bigtable does through an
// app profile without single-cluster routing and transactional writes:
// with FailedPrecondition, unless the request names one of the profiles
// allowed.
func RefuseConditionalMutations(allowed ...string) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch info.FullMethod {
		case bigtablepb.Bigtable_CheckAndMutateRow_FullMethodName, bigtablepb.Bigtable_ReadModifyWriteRow_FullMethodName:
			var profile string
			if r, ok := req.(interface{ GetAppProfileId() string }); ok {
				profile = r.GetAppProfileId()
			}
			if !slices.Contains(allowed, profile) {
				return nil, status.Errorf(codes.FailedPrecondition,
					"fake: app profile %q does not allow single-row transactions: they need single-cluster routing with transactional writes allowed",
					profile)
			}
		}
		return handler(ctx, req)
	})
}

// BigtableAdmin returns an admin client for project/instance on the
// emulator. The caller closes it.
func (b *Backends) BigtableAdmin(ctx context.Context, project, instance string) (*bigtable.AdminClient, error) {
	conn, err := dial(b.Bigtable.Addr)
	if err != nil {
		return nil, err
	}
	return bigtable.NewAdminClient(ctx, project, instance, option.WithGRPCConn(conn))
}

func dial(addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("fake: dial %s: %w", addr, err)
	}
	return conn, nil
}

// StateTable creates a state table named table, with the families and GC
// rules `pubsink setup` gives it for a dedupe window of window, and returns
// a data client of its instance. The caller closes the client.
func (b *Backends) StateTable(ctx context.Context, project, instance, table string, window time.Duration) (*bigtable.Client, error) {
	admin, err := b.BigtableAdmin(ctx, project, instance)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if err := CreateStateTable(ctx, admin, table, window); err != nil {
		return nil, err
	}
	return b.BigtableClient(ctx, project, instance)
}

// CreateStateTable creates a state table through admin (this package's
// emulator or any other), as StateTable does.
func CreateStateTable(ctx context.Context, admin *bigtable.AdminClient, table string, window time.Duration) error {
	if err := admin.CreateTable(ctx, table); err != nil {
		return fmt.Errorf("fake: create %s: %w", table, err)
	}
	for _, fam := range state.Families(window) {
		if err := admin.CreateColumnFamily(ctx, table, fam.Name); err != nil {
			return fmt.Errorf("fake: create %s:%s: %w", table, fam.Name, err)
		}
		if err := admin.SetGCPolicy(ctx, table, fam.Name, fam.GC); err != nil {
			return fmt.Errorf("fake: GC rule of %s:%s: %w", table, fam.Name, err)
		}
	}
	return nil
}
