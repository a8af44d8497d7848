package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
)

// breakingStreams is a gRPC stream interceptor that can end every open
// StreamingPull stream of one subscription with Unavailable, as a reset
// connection does; the client library opens new ones by itself.
type breakingStreams struct {
	sub string

	mu     sync.Mutex
	cancel []context.CancelFunc // of the streams of sub opened so far
	broken int
}

func (b *breakingStreams) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method != streamingPull {
		return streamer(ctx, desc, cc, method, opts...)
	}
	sctx, cancel := context.WithCancel(ctx)
	cs, err := streamer(sctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return cs, err
	}
	return &breakingStream{ClientStream: cs, b: b, cancel: cancel}, nil
}

// breakAll ends the open streams of the subscription and returns how many
// it ended.
func (b *breakingStreams) breakAll() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.cancel)
	for _, c := range b.cancel {
		c()
	}
	b.cancel = nil
	b.broken += n
	return n
}

type breakingStream struct {
	grpc.ClientStream
	b      *breakingStreams
	cancel context.CancelFunc

	mu     sync.Mutex
	ours   bool // a stream of b.sub
	broken bool
}

func (s *breakingStream) SendMsg(m any) error {
	if req, ok := m.(*pubsubpb.StreamingPullRequest); ok && req.GetSubscription() == s.b.sub {
		s.mu.Lock()
		if !s.ours {
			s.ours = true
			s.b.mu.Lock()
			s.b.cancel = append(s.b.cancel, func() {
				s.mu.Lock()
				s.broken = true
				s.mu.Unlock()
				s.cancel()
			})
			s.b.mu.Unlock()
		}
		s.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

// RecvMsg reports a stream the test ended as the service would report a
// reset connection, not as the cancellation it is underneath.
func (s *breakingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.mu.Lock()
	broken := s.broken
	s.mu.Unlock()
	if err != nil && broken {
		return status.Error(codes.Unavailable, "injected: connection reset")
	}
	return err
}

// TestABreakOfTheMainStreamsKeepsTheStartupGuardOn (issue 21, item 4): the
// startup guard drops once the messages a dead process held have had a
// lease to come back (23 s with setup's subscriptions). A break of the
// main subscription's streams strands what the server had sent on them for
// a lease too, and those may have been published before the start, while
// the pipeline holds nothing old: before the fix the guard dropped on time
// regardless, and on-time records were dead-lettered as late when they
// came back. The App's stream watch now sees the break, and the guard
// stays on for the message lease after it.
func TestABreakOfTheMainStreamsKeepsTheStartupGuardOn(t *testing.T) {
	e := newEnv(t)
	_, cfg := e.writeConfig(e.watermarkYAML(config.LateAccept, ""))
	brk := &breakingStreams{sub: cfg.SubscriptionName(e.sub)}
	r := e.runWatchedApp(cfg, app.Options{PubSubOptions: []option.ClientOption{
		option.WithEndpoint(e.ps.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(brk.intercept)),
	}})
	p := r.a.Pipelines()[0]
	pollUntil(t, "the tracker's lease known", 30*time.Second, func() bool {
		st := p.Status()
		return st.Tracker != nil && st.Tracker.MessageLeaseSeconds > 0 && st.Tracker.StartupGuard
	})
	lease := time.Duration(p.Status().Tracker.MessageLeaseSeconds * float64(time.Second))
	// Break the streams well before the guard's own minimum (lease + 3 s
	// after the start), so that a guard that ignores the break drops long
	// before one that waits a lease after it.
	time.Sleep(time.Until(r.start.Add(lease / 2)))
	if n := brk.breakAll(); n == 0 {
		t.Fatal("no stream of the main subscription was open to break")
	}
	broke := time.Now()
	pollUntil(t, "the startup guard off", lease+time.Minute, func() bool { return !p.Status().Tracker.StartupGuard })
	off := time.Now()
	if min := broke.Add(lease); off.Before(min) {
		t.Errorf("the startup guard dropped %v after the main streams broke (%v after the start); want at least the message lease, %v",
			off.Sub(broke).Round(time.Millisecond), off.Sub(r.start).Round(time.Millisecond), lease)
	}
	t.Logf("message lease %v; streams broken %v after the start; guard off %v after the break", lease, broke.Sub(r.start).Round(time.Millisecond), off.Sub(broke).Round(time.Millisecond))
}

// pollUntil polls cond every 50 ms until it holds, and fails the test if it
// does not within timeout.
func pollUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
	}
}
