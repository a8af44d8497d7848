package watermark

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/internal/metrics"
)

// failingPulls makes the Pulls of one subscription fail with Unavailable
// while on is set, as a reset connection does.
type failingPulls struct {
	sub    string
	on     atomic.Bool
	failed atomic.Int64
}

func (f *failingPulls) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*pubsubpb.PullRequest); ok && r.GetSubscription() == f.sub && f.on.Load() {
		f.failed.Add(1)
		return status.Error(codes.Unavailable, "injected: connection reset")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// clientThrough is a client of ps's server whose unary calls go through
// intercept.
func (f *fakePubSub) clientThrough(t *testing.T, intercept grpc.UnaryClientInterceptor) *pubsub.Client {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(intercept))
	if err != nil {
		t.Fatal(err)
	}
	client, err := pubsub.NewClient(context.Background(), project, option.WithGRPCConn(conn), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// TestAFailedPullOfTheTrackingSubscriptionIsABreak: the tracker reads its
// subscription with a Puller and is told its breaks (Config.Streams, as app
// wires them): failed Pulls hold the tracker's frontier for a lease
// (Stats counts the break and says until when), and the watermark goes on
// once they answer again.
func TestAFailedPullOfTheTrackingSubscriptionIsABreak(t *testing.T) {
	ps := newFakePubSub(t)
	faults := &failingPulls{sub: ps.tracking}
	cfg := fastConfig(metrics.New().Pipeline("orders"))
	puller := ps.puller(ps.tracking, 0, ps.clientThrough(t, faults.intercept))
	cfg.Streams = puller.State
	tr, err := NewTracker(puller, nil, zap.NewNop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.WatchInFlight(func() (time.Time, bool) { return time.Time{}, false })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := tr.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, "the startup guard off and a watermark", 10*time.Second, func() bool {
		return !tr.Stats().StartupGuard && !tr.Watermark().IsZero()
	})
	if st := tr.Stats(); st.StreamBreaks != 0 {
		t.Fatalf("stats %+v before any fault: want no break", st)
	}
	faults.on.Store(true)
	waitFor(t, "pulls failing", 5*time.Second, func() bool { return faults.failed.Load() > 0 })
	broke := time.Now()
	waitFor(t, "the break seen", 5*time.Second, func() bool { return tr.Stats().StreamBreaks >= 1 })
	if st := tr.Stats(); !st.HeldUntil.After(broke) {
		t.Errorf("stats %+v: the frontier must hold past the break at %v", st, broke)
	}
	faults.on.Store(false)
	wm := tr.Watermark()
	waitFor(t, "the watermark moves on after the hold", 10*time.Second, func() bool { return tr.Watermark().After(wm) })
}
