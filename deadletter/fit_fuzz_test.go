package deadletter

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/pubsink/pubsink/source"
)

// Pub/Sub's documented limits on a published message (and so on any message
// it delivered): at most 100 attributes, keys up to 256 bytes
// (maxAttrKeyBytes) and not starting with goog, values up to 1024 bytes, and
// the request within MaxPublishRequestBytes.
const maxAttrValueBytes = 1024

// FuzzFitPubSub builds an original within Pub/Sub's limits from a few
// numbers (how many attributes, how long their keys and values, whether
// the keys start with goog as Pub/Sub's own do, how much data, how long the
// error text, which reason) and checks that its dead-letter copy, the live
// pipeline's and a reprocess run's (one more attribute), always fits them: a
// copy that does not fit would fail on every retry, for ever. A copy that
// was not cut reads back with the original's attributes.
// Run: go test -fuzz=FuzzFitPubSub ./deadletter
func FuzzFitPubSub(f *testing.F) {
	const limit = 10_000_000
	f.Add(uint8(2), uint16(3), uint16(5), false, uint32(100), uint16(10), uint8(0))
	f.Add(uint8(94), uint16(3), uint16(1), false, uint32(limit-2000), uint16(1000), uint8(1))          // the review's case
	f.Add(uint8(100), uint16(256), uint16(1024), false, uint32(limit-130_000), uint16(5000), uint8(2)) // every attribute at its limit
	f.Add(uint8(0), uint16(0), uint16(0), false, uint32(limit-10), uint16(0), uint8(3))
	f.Add(uint8(94), uint16(3), uint16(0), false, uint32(limit-1000), uint16(0), uint8(0))            // 94+6 attributes fit until the data's cut adds pubsink_truncated (found by CI)
	f.Add(uint8(3), uint16(25), uint16(40), true, uint32(100), uint16(10), uint8(0))                  // a schema'd topic's googclient_schema*
	f.Add(uint8(100), uint16(256), uint16(1024), true, uint32(limit-130_000), uint16(5000), uint8(2)) // renamed keys over the limit
	f.Add(uint8(94), uint16(248), uint16(0), true, uint32(limit-30_000), uint16(0), uint8(0))         // renamed keys at the limit exactly
	f.Fuzz(func(t *testing.T, attrs uint8, keyLen, valLen uint16, goog bool, dataLen uint32, errLen uint16, reasonIdx uint8) {
		prefix := "k"
		if goog {
			prefix = googPrefix
		}
		orig := fuzzOriginal(int(attrs)%101, prefix, int(keyLen)%(maxAttrKeyBytes+1), int(valLen)%(maxAttrValueBytes+1), int(dataLen)%(limit+1))
		if proto.Size(&pubsubpb.PubsubMessage{Data: orig.Data, Attributes: orig.Attributes}) > limit {
			t.Skip("not a message Pub/Sub could have delivered")
		}
		const topic = "projects/p/topics/orders-dlq"
		for _, run := range []string{"", "orders~r20261203t053012z"} {
			c := newCopy("orders", orig, Reasons[int(reasonIdx)%len(Reasons)], errors.New(strings.Repeat("é", int(errLen))), time.Now())
			c.Reprocess = run
			m := fitPubSub(c, topic)
			if n := len(m.Attributes); n > maxAttributes {
				t.Fatalf("%d attributes, over %d", n, maxAttributes)
			}
			for k, v := range m.Attributes {
				if len(k) > maxAttrKeyBytes || strings.HasPrefix(k, googPrefix) || len(v) > maxAttrValueBytes || !utf8.ValidString(v) {
					t.Fatalf("attribute %q (%d bytes) = %d bytes, valid UTF-8 %v", k[:min(len(k), 20)], len(k), len(v), utf8.ValidString(v))
				}
			}
			if c.Truncated == "" {
				back, err := copyFromAttributes(m.Data, m.Attributes)
				if err != nil || !maps.Equal(back.Attributes, orig.Attributes) {
					t.Fatalf("a whole copy reads back with other attributes (%v)", err)
				}
			}
			if got := proto.Size(&pubsubpb.PubsubMessage{Data: m.Data, Attributes: m.Attributes}); got > maxMessageBytes(topic) {
				t.Fatalf("copy is %d bytes, over %d", got, maxMessageBytes(topic))
			}
			if m.Attributes[AttrReason] == "" || m.Attributes[AttrMessageID] != orig.ID || m.Attributes[AttrReprocess] != run {
				t.Fatalf("the copy lost its reason, message ID or reprocess marker: %q %q", m.Attributes[AttrReason], m.Attributes[AttrReprocess])
			}
			if (c.Truncated != "") != (m.Attributes[AttrTruncated] != "") {
				t.Fatalf("truncated %q but pubsink_truncated %q", c.Truncated, m.Attributes[AttrTruncated])
			}
		}
	})
}

// fuzzOriginal is a delivered message of n attributes whose keys (starting
// with prefix, made distinct) and values are keyLen and valLen bytes, and
// dataLen bytes of data.
func fuzzOriginal(n int, prefix string, keyLen, valLen, dataLen int) *source.Message {
	attrs := make(map[string]string, n)
	for i := range n {
		k := fmt.Sprintf("%s%03d", prefix, i)
		if keyLen > len(k) {
			k += strings.Repeat("x", keyLen-len(k))
		}
		attrs[k] = strings.Repeat("v", valLen)
	}
	return &source.Message{ID: "17000000000001", Data: make([]byte, dataLen), Attributes: attrs,
		PublishTime: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)}
}
