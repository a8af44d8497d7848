package app

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// streamingPullResponse is a response of n messages shaped like the bench
// command's: a ~200-byte payload, an id and an event-time attribute.
func streamingPullResponse(n, dataBytes int) *pubsubpb.StreamingPullResponse {
	resp := &pubsubpb.StreamingPullResponse{}
	for i := range n {
		data := make([]byte, dataBytes)
		for j := range data {
			data[j] = byte('a' + (i+j)%26)
		}
		resp.ReceivedMessages = append(resp.ReceivedMessages, &pubsubpb.ReceivedMessage{
			AckId: fmt.Sprintf("projects/bench/subscriptions/s-%d:ack-%09d", i%7, i),
			Message: &pubsubpb.PubsubMessage{
				Data:        data,
				Attributes:  map[string]string{"id": fmt.Sprintf("m%09d", i), "ts": strconv.Itoa(1767323045678 + i)},
				MessageId:   strconv.Itoa(17_000_000_000_000_000 + i),
				PublishTime: timestamppb.New(time.Unix(1767323045, int64(i))),
			},
		})
	}
	return resp
}

// frames splits b into HTTP/2 data frames of at most 16 KiB, as gRPC
// receives them.
func frames(b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		s = append(s, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return s
}

func TestPubsubCodecUnmarshalsWhatTheProtoCodecDoes(t *testing.T) {
	// From one frame to over the largest pooled buffer, each size after a
	// larger one so that a reused buffer holds the bytes of the one before.
	for _, c := range []struct{ msgs, data int }{
		{10, 200}, {60, 200}, {200, 200}, {2000, 200}, {20, 1 << 20}, {1500, 200}, {3, 6 << 20}, {120, 200}, {1, 0},
	} {
		t.Run(fmt.Sprintf("messages=%d/data=%d", c.msgs, c.data), func(t *testing.T) {
			want := streamingPullResponse(c.msgs, c.data)
			wire, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			var got pubsubpb.StreamingPullResponse
			if err := (pubsubCodec{}).Unmarshal(frames(wire), &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, want) {
				t.Fatalf("unmarshalled %d bytes in %d frames into a different message", len(wire), len(frames(wire)))
			}
		})
	}
}

func TestPubsubCodecMarshalsAsTheProtoCodecDoes(t *testing.T) {
	req := &pubsubpb.StreamingPullRequest{Subscription: "projects/p/subscriptions/s", AckIds: []string{"a", "b"}, StreamAckDeadlineSeconds: 15}
	got, err := pubsubCodec{}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := protoCodec.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Materialize()) != string(want.Materialize()) {
		t.Fatal("Marshal differs from gRPC's proto codec")
	}
}

// subscriber answers GetSubscription with the content type of the request.
type subscriber struct {
	pubsubpb.UnimplementedSubscriberServer
}

func (subscriber) GetSubscription(ctx context.Context, _ *pubsubpb.GetSubscriptionRequest) (*pubsubpb.Subscription, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return &pubsubpb.Subscription{Name: strings.Join(md.Get("content-type"), ",")}, nil
}

func TestPubsubCodecKeepsTheContentType(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pubsubpb.RegisterSubscriberServer(srv, subscriber{})
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(pubsubCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sub, err := pubsubpb.NewSubscriberClient(conn).GetSubscription(t.Context(), &pubsubpb.GetSubscriptionRequest{Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	// Google's front ends refuse application/grpc+proto (with a 404).
	if sub.Name != "application/grpc" {
		t.Fatalf("content-type %q, want application/grpc, as without the codec", sub.Name)
	}
}

func TestBufferTiers(t *testing.T) {
	tiers := newBufferTiers(15, 17)
	for _, c := range []struct{ n, cap int }{{1, 1 << 15}, {1 << 15, 1 << 15}, {1<<15 + 1, 1 << 16}, {1 << 17, 1 << 17}, {1<<17 + 1, 1<<17 + 1}} {
		b := tiers.get(c.n)
		if len(*b) < c.n || cap(*b) != c.cap {
			t.Errorf("get(%d): len %d cap %d, want len >= %d, cap %d", c.n, len(*b), cap(*b), c.n, c.cap)
		}
		tiers.put(b)
	}
}

// BenchmarkUnmarshalStreamingPull is the decoding of one StreamingPull
// response of 200 messages (about 70 KB, five HTTP/2 frames) by gRPC's
// proto codec and by pubsubCodec.
func BenchmarkUnmarshalStreamingPull(b *testing.B) {
	wire, err := proto.Marshal(streamingPullResponse(200, 200))
	if err != nil {
		b.Fatal(err)
	}
	data := frames(wire)
	for _, c := range []struct {
		name  string
		codec interface {
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"codec=grpc", protoCodec}, {"codec=pubsub", pubsubCodec{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for b.Loop() {
				var resp pubsubpb.StreamingPullResponse
				if err := c.codec.Unmarshal(data, &resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
