package source

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsink/pubsink/config"
)

// TestStreamWatchSeesABreakAndTheReconnect lets the fake end every stream
// after 300ms, as the service does now and then (and a reset connection
// does at once): the library reopens the streams without a word, and the
// watch reports the break, then the streams open again. A clean stop is no
// break.
func TestStreamWatchSeesABreakAndTheReconnect(t *testing.T) {
	f := newFake(t)
	w := NewStreamWatch()
	conn, err := grpc.NewClient("passthrough:///"+f.srv.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainStreamInterceptor(w.Interceptor))
	if err != nil {
		t.Fatal(err)
	}
	client, err := pubsub.NewClient(context.Background(), project, option.WithGRPCConn(conn), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := New(client, zap.NewNop(), f.sub, config.Source{Streams: 2, MaxOutstandingMessages: 100}, 1<<20)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	f.srv.SetStreamTimeout(300 * time.Millisecond)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Run(ctx, ctx, func(context.Context, *Message) bool { return true }); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitState := func(what string, cond func(StreamState) bool) StreamState {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := w.State(f.sub)
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: state %+v", what, st)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	st := waitState("a break", func(st StreamState) bool { return !st.Broke.IsZero() })
	if st.Broke.Before(start.Add(300 * time.Millisecond)) {
		t.Fatalf("break at %v, before the streams' timeout", st.Broke.Sub(start))
	}
	firstOpened := st.Opened
	if firstOpened.Before(start) || !firstOpened.Before(st.Broke) {
		t.Fatalf("streams first opened at %v, want after the start and before the break at %v", firstOpened.Sub(start), st.Broke.Sub(start))
	}
	if other := w.State("projects/p/subscriptions/other"); other != (StreamState{}) {
		t.Fatalf("another subscription: %+v", other)
	}
	// Streams reopened from now on live on.
	f.srv.SetStreamTimeout(0)
	time.Sleep(time.Second)
	st = waitState("both streams open again", func(st StreamState) bool { return st.Open == 2 })

	cancel()
	wg.Wait()
	end := waitState("every stream closed", func(st StreamState) bool { return st.Open == 0 })
	if !end.Broke.Equal(st.Broke) {
		t.Errorf("stopping Run counted as a break at %v", end.Broke.Sub(start))
	}
	if !end.Opened.Equal(firstOpened) {
		t.Errorf("Opened moved from %v to %v: it is when the first stream opened", firstOpened.Sub(start), end.Opened.Sub(start))
	}
}

// TestStreamWatchTakesACloseSendForAStop follows how the library stops a
// stream: it closes its own side, waits for the server's io.EOF, and only
// then cancels the stream's context. That io.EOF is a clean stop; the same
// io.EOF without a CloseSend is the server ending a stream that was still
// wanted.
func TestStreamWatchTakesACloseSendForAStop(t *testing.T) {
	const sub = "projects/p/subscriptions/s"
	for _, closeSend := range []bool{true, false} {
		w := NewStreamWatch()
		ctx, cancel := context.WithCancel(context.Background())
		cs, err := w.Interceptor(ctx, &grpc.StreamDesc{}, nil, streamingPull,
			func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
				return eofStream{}, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(&pubsubpb.StreamingPullRequest{Subscription: sub}); err != nil {
			t.Fatal(err)
		}
		if closeSend {
			cs.CloseSend()
		}
		if err := cs.RecvMsg(&pubsubpb.StreamingPullResponse{}); err != io.EOF {
			t.Fatalf("RecvMsg: %v", err)
		}
		cancel()
		st := w.State(sub)
		if st.Open != 0 || st.Broke.IsZero() != closeSend {
			t.Errorf("CloseSend %v: state %+v", closeSend, st)
		}
	}
}

// eofStream is a stream whose server has ended it.
type eofStream struct{ grpc.ClientStream }

func (eofStream) SendMsg(any) error { return nil }
func (eofStream) RecvMsg(any) error { return io.EOF }
func (eofStream) CloseSend() error  { return nil }
