package source

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
)

// streamingPull is the gRPC method of the subscriber's streams.
const streamingPull = "/google.pubsub.v1.Subscriber/StreamingPull"

// StreamWatch follows the StreamingPull streams of one Pub/Sub client, per
// subscription: how many are open, and when one last broke. The client
// library reopens a broken stream by itself and says nothing, yet a break
// matters to the watermark: the messages the server had sent on the dead
// stream and the client never handed to a handler stay leased to it, and
// come back only when their lease expires (LeaseExtension), while the new
// stream already delivers newer ones.
//
// Install it when the client is created (ClientOption, or Interceptor on a
// connection of one's own), then read State. Safe for concurrent use.
type StreamWatch struct {
	mu   sync.Mutex
	subs map[string]*StreamState
}

// StreamState is what a StreamWatch knows of one subscription's streams.
type StreamState struct {
	// Open is the number of streams that sent their first request and have
	// not ended.
	Open int
	// Broke is the last time a stream ended while its caller still wanted
	// it (an error from the service or the connection, or a close by the
	// server), or the watchdog ended hung streams to reopen them
	// (MarkBroken); zero if none did. A stream the client cancels itself
	// otherwise (Run returning, or the library closing a stream it
	// reopens) is no break.
	Broke time.Time
	// Opened is when the first stream of the subscription sent its first
	// request; zero while none has. The Pub/Sub emulator leases messages
	// to a stream as it opens and may hand them over only when that lease
	// runs out (tools/chaos, "Late after a fault"): what a member could be
	// leased is out of sight until a lease after Opened.
	Opened time.Time
}

// NewStreamWatch returns a watch that knows of no stream yet.
func NewStreamWatch() *StreamWatch {
	return &StreamWatch{subs: map[string]*StreamState{}}
}

// ClientOption installs the watch on a client that dials its own
// connections (pubsub.NewClient). A client built on a given connection
// (option.WithGRPCConn) ignores it: dial that connection with Interceptor.
func (w *StreamWatch) ClientOption() option.ClientOption {
	return option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(w.Interceptor))
}

// State returns the state of the streams of subscription (a full name).
func (w *StreamWatch) State(subscription string) StreamState {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.subs[subscription]; s != nil {
		return *s
	}
	return StreamState{}
}

// Interceptor is a grpc.StreamClientInterceptor that follows StreamingPull
// streams and passes every other call through untouched. A stream costs
// one lock when its first request is sent and one when it ends; receiving
// costs nothing more than a check of the error.
func (w *StreamWatch) Interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != streamingPull {
		return cs, err
	}
	s := &watchedStream{ClientStream: cs, w: w, ctx: ctx}
	// The library cancels a stream's context to close it; a stream
	// abandoned that way ends here, without a break, even if nobody reads
	// its error.
	s.mu.Lock()
	s.stop = context.AfterFunc(ctx, func() { s.end(false) })
	s.mu.Unlock()
	return s, nil
}

type watchedStream struct {
	grpc.ClientStream
	w    *StreamWatch
	ctx  context.Context
	stop func() bool

	mu       sync.Mutex
	sub      string // from the first request; "" until then
	ended    bool
	sendDone bool // the caller closed its side: what follows is no break
}

// CloseSend marks the stream as given up by its caller. The library stops a
// stream by closing its side first and cancelling its context only after
// the server's answer, so the io.EOF that answer brings is a clean stop.
func (s *watchedStream) CloseSend() error {
	s.mu.Lock()
	s.sendDone = true
	s.mu.Unlock()
	return s.ClientStream.CloseSend()
}

func (s *watchedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if req, ok := m.(*pubsubpb.StreamingPullRequest); ok && err == nil && req.GetSubscription() != "" {
		s.mu.Lock()
		if s.sub == "" && !s.ended {
			s.sub = req.GetSubscription()
			s.w.opened(s.sub)
		}
		s.mu.Unlock()
	}
	return err
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.mu.Lock()
		wanted := !s.sendDone
		s.mu.Unlock()
		s.end(wanted && s.ctx.Err() == nil)
	}
	return err
}

// end counts the stream as ended, once; broken says whether its caller
// still wanted it.
func (s *watchedStream) end(broken bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	if s.stop != nil {
		s.stop()
	}
	if s.sub != "" {
		s.w.closed(s.sub, broken)
	}
}

// MarkBroken records a break of subscription's streams now, though none of
// them ended by itself: the caller ended streams it still wanted (the
// watchdog ends hung streams to reopen them, and what they had leased stays
// leased to them as on a broken stream). A nil watch does nothing.
func (w *StreamWatch) MarkBroken(subscription string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.subs[subscription]
	if s == nil {
		s = &StreamState{}
		w.subs[subscription] = s
	}
	s.Broke = time.Now()
}

func (w *StreamWatch) opened(sub string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.subs[sub]
	if s == nil {
		s = &StreamState{}
		w.subs[sub] = s
	}
	if s.Opened.IsZero() {
		s.Opened = time.Now()
	}
	s.Open++
}

func (w *StreamWatch) closed(sub string, broken bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.subs[sub]
	s.Open--
	if broken {
		s.Broke = time.Now()
	}
}
