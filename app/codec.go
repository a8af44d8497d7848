package app

import (
	"math/bits"
	"sync"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// pubsubCodec is the gRPC codec of the Pub/Sub clients the App opens: gRPC's
// proto codec, but for two steps of receiving.
//
// The responses that carry messages (StreamingPull's and Pull's) are
// decoded by decodeMessages (pullwire.go): by hand, each message into a
// copy of its own that its strings and byte slices point into.
//
// A message that arrived in more than one HTTP/2 frame is copied into one
// buffer for decodeMessages or proto.Unmarshal. gRPC's codec takes that buffer from
// its default pool, whose size above 32 KiB is 1 MiB, and zeroes the whole
// of it each time: at about 300 bytes per message on the wire, a response
// of a few hundred messages cost a 1 MiB memclr, which the bench measured
// at 0.8 µs per message (4% of the CPU of a whole drain) when the responses
// with messages went this way. This codec takes a buffer of the next power
// of two from a pool of its own and does not zero it: the copy overwrites
// every byte that Unmarshal reads, and Unmarshal copies what it keeps
// (bytes and strings are not aliased), so the buffer is reused as soon as
// it returns, as gRPC reuses its own.
//
// What is sent, and every other message received in one frame, goes
// through gRPC's codec unchanged. Its name is empty, so that the requests keep the
// content type of gRPC's default codec, application/grpc: a forced codec's
// name becomes the content subtype, and Google's front ends answer 404 to
// application/grpc+proto, though the gRPC protocol allows it.
type pubsubCodec struct{}

// pubsubCodecOption installs pubsubCodec on a client's connections.
func pubsubCodecOption() option.ClientOption {
	return option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.ForceCodecV2(pubsubCodec{})))
}

// protoCodec is gRPC's own proto codec, registered by its package.
var protoCodec = encoding.GetCodecV2(grpcproto.Name)

// Name is empty: see pubsubCodec.
func (pubsubCodec) Name() string { return "" }

func (pubsubCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

func (pubsubCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	_, pull := m.(*pubsubpb.StreamingPullResponse)
	if _, ok := m.(*pubsubpb.PullResponse); ok {
		pull = true
	}
	if len(data) <= 1 {
		if pull && len(data) == 1 {
			_, err := decodeMessages(data[0].ReadOnlyData(), m) // it copies what it keeps
			return err
		}
		return protoCodec.Unmarshal(data, v) // one frame: no copy to make
	}
	n := data.Len()
	buf := recvBuffers.get(n)
	data.CopyTo(*buf)
	var err error
	if pull {
		_, err = decodeMessages((*buf)[:n], m)
	} else {
		err = proto.Unmarshal((*buf)[:n], m)
	}
	recvBuffers.put(buf)
	return err
}

// recvBuffers are the buffers of pubsubCodec.Unmarshal, in sizes that are
// powers of two from 32 KiB to 16 MiB; a larger message (Pub/Sub's limit is
// 10 MB a message, and a response may hold several) gets one of its own.
var recvBuffers = newBufferTiers(15, 24)

// bufferTiers pools byte slices by power-of-two capacity, without zeroing
// them.
type bufferTiers struct {
	min, max int // exponents of the smallest and largest tier
	pools    []sync.Pool
}

func newBufferTiers(min, max int) *bufferTiers {
	return &bufferTiers{min: min, max: max, pools: make([]sync.Pool, max-min+1)}
}

// get returns a slice of length n or more; its bytes are not zeroed.
func (t *bufferTiers) get(n int) *[]byte {
	e := max(bits.Len(uint(n-1)), t.min) // the smallest 2^e >= n
	if e > t.max {
		b := make([]byte, n)
		return &b
	}
	if b, ok := t.pools[e-t.min].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 1<<e)
	return &b
}

// put gives back a slice that get returned.
func (t *bufferTiers) put(b *[]byte) {
	c := cap(*b)
	e := bits.Len(uint(c)) - 1
	if c != 1<<e || e < t.min || e > t.max {
		return // an exact-size one of get's: left to the GC
	}
	*b = (*b)[:c]
	t.pools[e-t.min].Put(b)
}
