package app

import (
	"bytes"
	"unicode/utf8"
	"unsafe"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The responses that carry messages (StreamingPullResponse, PullResponse)
// decoded without the protobuf runtime's reflection, for pubsubCodec.
//
// proto.Unmarshal decodes a PubsubMessage's attributes through reflection
// (a map field: reflect.Value.SetMapIndex per entry) and allocates every
// string and byte slice of every message on its own: in the bench's profile
// of a drain, decoding the main subscription's and the tracking
// subscription's responses was 8-12% of the CPU, half of it the maps.
// decodeMessages reads the few fields of a message by hand, copies each
// message's encoding once and points every string and byte slice of the
// message into that copy, which nothing ever writes, and makes the
// response's ReceivedMessages, PubsubMessages and publish times in one slab
// of each: no reflection, and of the eight or so allocations a message
// cost, its copy and its attributes' map are left. A message's copy lives
// as long as a value that points into it (its payload, ID, attributes or
// ack ID, held by the client and the pipeline until its ack); one copy of
// the whole response would live until the last of its messages is acked,
// and the Pub/Sub emulator, which ignores flow control, sends responses of
// thousands (the bench measured 6 to 9 MB more peak RSS that way).
//
// Anything the hand decoder does not expect (a field it does not know, a
// wire type that differs, a message field given twice, invalid UTF-8 in a
// string field, which proto.Unmarshal refuses) sends the whole response to
// proto.Unmarshal instead, so the result is always what proto.Unmarshal
// gives (FuzzDecodeMessages holds it to that). The fields the responses
// carry only with exactly-once delivery or subscription properties are
// decoded by proto.Unmarshal, each on its own.

// decodeMessages decodes b, the encoding of a StreamingPullResponse or a
// PullResponse, into m, which it resets first; m keeps nothing of b (b may
// be reused once it returns). It reports false, having changed nothing,
// when m is another type; then the caller decodes.
func decodeMessages(b []byte, m proto.Message) (bool, error) {
	switch r := m.(type) {
	case *pubsubpb.StreamingPullResponse:
		var out pubsubpb.StreamingPullResponse
		if !decodeStreaming(b, &out) {
			return true, proto.Unmarshal(b, r)
		}
		moveStreaming(r, &out)
		return true, nil
	case *pubsubpb.PullResponse:
		msgs, ok := decodeReceived(b, 1, nil)
		if !ok {
			return true, proto.Unmarshal(b, r)
		}
		r.Reset()
		r.ReceivedMessages = msgs
		return true, nil
	}
	return false, nil
}

// moveStreaming sets r to the decoded out; r is reset first, as
// proto.Unmarshal does.
func moveStreaming(r, out *pubsubpb.StreamingPullResponse) {
	r.Reset()
	r.ReceivedMessages = out.ReceivedMessages
	r.AcknowledgeConfirmation = out.AcknowledgeConfirmation
	r.ModifyAckDeadlineConfirmation = out.ModifyAckDeadlineConfirmation
	r.SubscriptionProperties = out.SubscriptionProperties
}

// decodeStreaming decodes a StreamingPullResponse: its messages by hand,
// its other known fields with proto.Unmarshal. False: b holds something
// decodeMessages leaves to proto.Unmarshal.
func decodeStreaming(b []byte, out *pubsubpb.StreamingPullResponse) bool {
	msgs, ok := decodeReceived(b, 1, func(num protowire.Number, v []byte) bool {
		var sub proto.Message
		switch num {
		case 5:
			if out.AcknowledgeConfirmation != nil {
				return false // given twice: proto.Unmarshal merges
			}
			out.AcknowledgeConfirmation = new(pubsubpb.StreamingPullResponse_AcknowledgeConfirmation)
			sub = out.AcknowledgeConfirmation
		case 3:
			if out.ModifyAckDeadlineConfirmation != nil {
				return false
			}
			out.ModifyAckDeadlineConfirmation = new(pubsubpb.StreamingPullResponse_ModifyAckDeadlineConfirmation)
			sub = out.ModifyAckDeadlineConfirmation
		case 4:
			if out.SubscriptionProperties != nil {
				return false
			}
			out.SubscriptionProperties = new(pubsubpb.StreamingPullResponse_SubscriptionProperties)
			sub = out.SubscriptionProperties
		default:
			return false
		}
		return proto.Unmarshal(v, sub) == nil
	})
	out.ReceivedMessages = msgs
	return ok
}

// decodeReceived decodes the repeated ReceivedMessage field number field of
// the message b, each from a copy of its own; every other length-delimited field goes to other (nil:
// none is expected), which reports whether it took it.
func decodeReceived(b []byte, field protowire.Number, other func(protowire.Number, []byte) bool) ([]*pubsubpb.ReceivedMessage, bool) {
	n, ok := countField(b, field)
	if !ok {
		return nil, false
	}
	sl := newSlabs(n)
	buf := b
	msgs := make([]*pubsubpb.ReceivedMessage, 0, n)
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 || typ != protowire.BytesType {
			return nil, false
		}
		buf = buf[n:]
		v, n := protowire.ConsumeBytes(buf)
		if n < 0 {
			return nil, false
		}
		buf = buf[n:]
		if num != field {
			if other == nil || !other(num, v) {
				return nil, false
			}
			continue
		}
		// The message's own copy, which its values point into.
		rm, ok := decodeReceivedMessage(bytes.Clone(v), &sl)
		if !ok {
			return nil, false
		}
		msgs = append(msgs, rm)
	}
	return msgs, true
}

// countField counts the length-delimited fields numbered field at the top
// of the message b; false if b is not a message of such fields.
func countField(b []byte, field protowire.Number) (int, bool) {
	n := 0
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 || typ != protowire.BytesType {
			return 0, false
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(num, typ, b)
		if k < 0 {
			return 0, false
		}
		b = b[k:]
		if num == field {
			n++
		}
	}
	return n, true
}

// slabs hold the messages of one response, n of each kind in one
// allocation rather than one allocation a message each: they live as long
// as the response's copy they point into does, until the last of its
// messages is acked.
type slabs struct {
	received []pubsubpb.ReceivedMessage
	messages []pubsubpb.PubsubMessage
	times    []timestamppb.Timestamp
}

func newSlabs(n int) slabs {
	return slabs{
		received: make([]pubsubpb.ReceivedMessage, 0, n),
		messages: make([]pubsubpb.PubsubMessage, 0, n),
		times:    make([]timestamppb.Timestamp, 0, n),
	}
}

// next returns a zero element of *s (a slab), from its spare capacity: the
// slab was made for the count of messages, so it never grows (which would
// move the elements handed out before); past it, a new one.
func next[T any](s *[]T) *T {
	if len(*s) == cap(*s) {
		return new(T)
	}
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}

// decodeReceivedMessage decodes one ReceivedMessage from b, which it
// aliases, into the slabs sl.
func decodeReceivedMessage(b []byte, sl *slabs) (*pubsubpb.ReceivedMessage, bool) {
	rm := next(&sl.received)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return nil, false
			}
			rm.AckId, b = alias(v), b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || rm.Message != nil {
				return nil, false
			}
			msg, ok := decodePubsubMessage(v, sl)
			if !ok {
				return nil, false
			}
			rm.Message, b = msg, b[n:]
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, false
			}
			rm.DeliveryAttempt, b = int32(v), b[n:]
		default:
			return nil, false
		}
	}
	return rm, true
}

// decodePubsubMessage decodes one PubsubMessage from b, which it aliases,
// into the slabs sl.
func decodePubsubMessage(b []byte, sl *slabs) (*pubsubpb.PubsubMessage, bool) {
	m := next(&sl.messages)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case 1:
			m.Data = v[:len(v):len(v)] // the caller may append: not into the next field
		case 2:
			k, val, ok := decodeAttribute(v)
			if !ok {
				return nil, false
			}
			if m.Attributes == nil {
				m.Attributes = make(map[string]string, 4)
			}
			m.Attributes[k] = val
		case 3:
			if !utf8.Valid(v) {
				return nil, false
			}
			m.MessageId = alias(v)
		case 4:
			if m.PublishTime != nil {
				return nil, false
			}
			ts, ok := decodeTimestamp(v, next(&sl.times))
			if !ok {
				return nil, false
			}
			m.PublishTime = ts
		case 5:
			if !utf8.Valid(v) {
				return nil, false
			}
			m.OrderingKey = alias(v)
		default:
			return nil, false
		}
	}
	return m, true
}

// decodeAttribute decodes one entry of the attributes map: a missing key or
// value is "", the last of repeated ones wins, as proto.Unmarshal does.
func decodeAttribute(b []byte) (k, v string, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || (num != 1 && num != 2) {
			return "", "", false
		}
		b = b[n:]
		s, n := protowire.ConsumeBytes(b)
		if n < 0 || !utf8.Valid(s) {
			return "", "", false
		}
		b = b[n:]
		if num == 1 {
			k = alias(s)
		} else {
			v = alias(s)
		}
	}
	return k, v, true
}

// decodeTimestamp decodes a google.protobuf.Timestamp into ts.
func decodeTimestamp(b []byte, ts *timestamppb.Timestamp) (*timestamppb.Timestamp, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType {
			return nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case 1:
			ts.Seconds = int64(v)
		case 2:
			ts.Nanos = int32(v)
		default:
			return nil, false
		}
	}
	return ts, true
}

// alias is the string of b's bytes without a copy: b points into a
// message's private copy, which nothing writes.
func alias(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
