package app

import (
	"bytes"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decodeBoth decodes wire as a StreamingPullResponse and a PullResponse,
// with decodeMessages and with proto.Unmarshal, and fails unless both give
// the same error-ness and equal messages.
func decodeBoth(t *testing.T, wire []byte) {
	t.Helper()
	for _, pair := range [][2]proto.Message{
		{new(pubsubpb.StreamingPullResponse), new(pubsubpb.StreamingPullResponse)},
		{new(pubsubpb.PullResponse), new(pubsubpb.PullResponse)},
	} {
		got, want := pair[0], pair[1]
		handled, gotErr := decodeMessages(bytes.Clone(wire), got)
		if !handled {
			t.Fatalf("%T not handled", got)
		}
		wantErr := proto.Unmarshal(wire, want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%T: error %v, proto.Unmarshal's %v", got, gotErr, wantErr)
		}
		if wantErr == nil && !proto.Equal(got, want) {
			t.Fatalf("%T: decoded %v, proto.Unmarshal %v", got, got, want)
		}
	}
}

func TestDecodeMessagesIsProtoUnmarshal(t *testing.T) {
	full, err := proto.Marshal(streamingPullResponse(3, 10))
	if err != nil {
		t.Fatal(err)
	}
	withConfirmations, err := proto.Marshal(&pubsubpb.StreamingPullResponse{
		ReceivedMessages:        streamingPullResponse(1, 5).ReceivedMessages,
		AcknowledgeConfirmation: &pubsubpb.StreamingPullResponse_AcknowledgeConfirmation{AckIds: []string{"a"}},
		ModifyAckDeadlineConfirmation: &pubsubpb.StreamingPullResponse_ModifyAckDeadlineConfirmation{
			InvalidAckIds: []string{"b"},
		},
		SubscriptionProperties: &pubsubpb.StreamingPullResponse_SubscriptionProperties{MessageOrderingEnabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	field := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	message := func(fields ...[]byte) []byte { return bytes.Join(fields, nil) }
	received := func(msg []byte) []byte {
		return field(nil, 1, field(field(nil, 1, []byte("ack")), 2, msg))
	}
	for _, c := range []struct {
		name string
		wire []byte
	}{
		{"messages", full},
		{"empty", nil},
		{"exactly-once confirmations and properties", withConfirmations},
		{"a message with nothing set", received(nil)},
		{"an unknown field in a message", received(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7))},
		{"an unknown top-level field", protowire.AppendVarint(protowire.AppendTag(full, 9, protowire.VarintType), 7)},
		{"the publish time given twice (merged)", received(message(field(nil, 4, []byte{0x08, 0x01}), field(nil, 4, []byte{0x10, 0x02})))},
		{"an attribute given twice (the last wins)", received(message(field(nil, 2, message(field(nil, 1, []byte("k")), field(nil, 2, []byte("1")))), field(nil, 2, message(field(nil, 1, []byte("k")), field(nil, 2, []byte("2"))))))},
		{"an attribute without a key", received(field(nil, 2, field(nil, 2, []byte("v"))))},
		{"the data given twice (the last wins)", received(message(field(nil, 1, []byte("one")), field(nil, 1, []byte("two"))))},
		{"invalid UTF-8 in the message ID", received(field(nil, 3, []byte{0xff}))},
		{"invalid UTF-8 in an attribute", received(field(nil, 2, field(nil, 1, []byte{0xc3})))},
		{"a message ID with a varint's wire type", received(protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1))},
		{"a truncated message", full[:len(full)-3]},
		{"a negative delivery attempt", field(nil, 1, protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), ^uint64(0)))},
	} {
		t.Run(c.name, func(t *testing.T) { decodeBoth(t, c.wire) })
	}
}

func TestDecodeMessagesLeavesOtherTypes(t *testing.T) {
	var sub pubsubpb.Subscription
	if handled, err := decodeMessages([]byte{0x0a, 0x01, 'x'}, &sub); handled || err != nil || sub.Name != "" {
		t.Fatalf("handled %v, err %v, %v: want a Subscription left to the caller, unchanged", handled, err, &sub)
	}
}

func TestDecodedMessagesOutliveTheReceiveBuffer(t *testing.T) {
	wire, err := proto.Marshal(streamingPullResponse(50, 200))
	if err != nil {
		t.Fatal(err)
	}
	want := streamingPullResponse(50, 200)
	data := frames(bytes.Clone(wire))
	var got pubsubpb.StreamingPullResponse
	if err := (pubsubCodec{}).Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for _, b := range data { // gRPC reuses its receive buffers
		clear(b.ReadOnlyData())
	}
	if !proto.Equal(&got, want) {
		t.Fatal("the decoded messages changed with the buffers they were received in")
	}
}

// FuzzDecodeMessages holds the hand decoder to proto.Unmarshal on any
// input: the same error-ness, the same message.
func FuzzDecodeMessages(f *testing.F) {
	for _, n := range []int{0, 1, 3} {
		wire, err := proto.Marshal(streamingPullResponse(n, 16))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire)
	}
	f.Fuzz(func(t *testing.T, wire []byte) { decodeBoth(t, wire) })
}
