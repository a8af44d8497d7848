package deadletter

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/source"
)

// original is the message these tests dead-letter, new at each call since
// they change it.
func original() *source.Message {
	return &source.Message{ID: "1001", Data: []byte("payload 1 \x00\xff"), Attributes: map[string]string{"id": "r001", "kind": "test"},
		PublishTime: time.Date(2026, 6, 1, 0, 0, 1, 123456789, time.UTC)}
}

func TestErrorTextFitsAnAttribute(t *testing.T) {
	t.Run("a long text is cut at a character boundary and marked", func(t *testing.T) {
		long := strings.Repeat("é", 2000) // 2 bytes each
		got := ErrorText(errors.New(long))
		if len(got) > MaxErrorBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
			t.Fatalf("%d bytes, valid %v, suffix %q", len(got), utf8.ValidString(got), got[len(got)-3:])
		}
	})
	t.Run("invalid UTF-8 is replaced, since attributes are proto strings", func(t *testing.T) {
		if got := ErrorText(errors.New("bad \xff byte")); got != "bad \uFFFD byte" {
			t.Fatalf("%q", got)
		}
	})
	t.Run("a short text is kept as is", func(t *testing.T) {
		if got := ErrorText(errors.New("short")); got != "short" {
			t.Fatalf("%q", got)
		}
	})
	t.Run("a copy without a cause has an empty error", func(t *testing.T) {
		c := newCopy("p", original(), Late, nil, time.Now())
		if c.Error != "" {
			t.Fatalf("%q", c.Error)
		}
	})
}

// TestCopiesThatPubSubCannotHoldAreCutAndMarked covers the only case where
// a copy is not whole: a Topic output and an original at Pub/Sub's limits.
func TestCopiesThatPubSubCannotHoldAreCutAndMarked(t *testing.T) {
	const topic = "projects/p/topics/dlq"
	size := func(m *pubsub.Message) int {
		return proto.Size(&pubsubpb.PubsubMessage{Data: m.Data, Attributes: m.Attributes})
	}
	t.Run("a copy that fits is left whole", func(t *testing.T) {
		c := newCopy("p", original(), TooLarge, errors.New("x"), time.Now())
		m := fitPubSub(c, topic)
		if c.Truncated != "" || m.Attributes[AttrTruncated] != "" || string(m.Data) != string(original().Data) {
			t.Fatalf("cut: %q", c.Truncated)
		}
	})
	t.Run("a payload at the limit loses its error text first, then its tail", func(t *testing.T) {
		orig := original()
		orig.Data = make([]byte, maxMessageBytes(topic)-50) // fits alone, not with the pubsink attributes
		c := newCopy("p", orig, SinkRejected, errors.New(strings.Repeat("e", 900)), time.Now())
		m := fitPubSub(c, topic)
		if got := size(m); got > maxMessageBytes(topic) {
			t.Fatalf("copy is %d bytes, over %d", got, maxMessageBytes(topic))
		}
		if c.Error != "" {
			t.Errorf("error text %d bytes, want it given up first", len(c.Error))
		}
		want := fmt.Sprintf("data: %d of %d bytes kept", len(m.Data), len(orig.Data))
		if m.Attributes[AttrTruncated] != want || len(m.Data) >= len(orig.Data) {
			t.Errorf("pubsink_truncated %q, want %q", m.Attributes[AttrTruncated], want)
		}
		if size(m) < maxMessageBytes(topic)-32 {
			t.Errorf("cut more than needed: %d bytes of %d", size(m), maxMessageBytes(topic))
		}
	})
	t.Run("a payload near the limit keeps all its data when the error text makes room", func(t *testing.T) {
		orig := original()
		orig.Data = make([]byte, maxMessageBytes(topic)-600)
		c := newCopy("p", orig, SinkRejected, errors.New(strings.Repeat("e", 1000)), time.Now())
		m := fitPubSub(c, topic)
		if c.Truncated != "" || len(m.Data) != len(orig.Data) || size(m) > maxMessageBytes(topic) {
			t.Fatalf("truncated %q, %d of %d bytes, size %d", c.Truncated, len(m.Data), len(orig.Data), size(m))
		}
		if c.Error == "" {
			t.Error("the error text was given up though part of it fits")
		}
	})
	t.Run("94 attributes and the six pubsink ones fit exactly", func(t *testing.T) {
		orig := original()
		orig.Attributes = map[string]string{}
		for i := range 94 {
			orig.Attributes[fmt.Sprintf("a%02d", i)] = "v"
		}
		c := newCopy("p", orig, MissingField, nil, time.Now())
		if m := fitPubSub(c, topic); len(m.Attributes) != maxAttributes || c.Truncated != "" {
			t.Fatalf("%d attributes, truncated %q", len(m.Attributes), c.Truncated)
		}
	})
	t.Run("a reprocess copy's marker takes the place of one attribute, and survives the cut", func(t *testing.T) {
		orig := original()
		orig.Attributes = map[string]string{}
		for i := range 94 {
			orig.Attributes[fmt.Sprintf("a%02d", i)] = "v"
		}
		c := newCopy("p", orig, MissingField, nil, time.Now())
		c.Reprocess = "p~r20261203t053012z"
		m := fitPubSub(c, topic)
		if len(m.Attributes) > maxAttributes || m.Attributes[AttrTruncated] != "attributes: 92 of 94 kept" || m.Attributes[AttrReprocess] != c.Reprocess {
			t.Fatalf("%d attributes, pubsink_truncated %q, pubsink_reprocess %q", len(m.Attributes), m.Attributes[AttrTruncated], m.Attributes[AttrReprocess])
		}
	})
	t.Run("too many attributes keeps the first in key order and says so", func(t *testing.T) {
		orig := original()
		orig.Attributes = map[string]string{}
		for i := range 99 {
			orig.Attributes[fmt.Sprintf("a%02d", i)] = "v"
		}
		c := newCopy("p", orig, MissingField, nil, time.Now())
		m := fitPubSub(c, topic)
		if len(m.Attributes) > maxAttributes {
			t.Fatalf("%d attributes", len(m.Attributes))
		}
		if m.Attributes[AttrTruncated] != "attributes: 93 of 99 kept" || m.Attributes["a92"] != "v" || m.Attributes["a93"] != "" {
			t.Fatalf("pubsink_truncated %q; a92 %q a93 %q", m.Attributes[AttrTruncated], m.Attributes["a92"], m.Attributes["a93"])
		}
	})
}

func TestCopyFromAttributesRefusesForeignMessages(t *testing.T) {
	c := newCopy("orders", original(), BadEventTime, errors.New("bad ts"), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	back, err := copyFromAttributes(c.Data, c.AllAttributes())
	if err != nil {
		t.Fatal(err)
	}
	if back.MessageID != c.MessageID || back.Reason != c.Reason || !back.PublishTime.Equal(c.PublishTime) || !maps.Equal(back.Attributes, c.Attributes) {
		t.Fatalf("round trip: %+v, want %+v", back, c)
	}
	for name, attrs := range map[string]map[string]string{
		"no pubsink attributes": {"id": "x"},
		"an unknown reason":     with(c.AllAttributes(), AttrReason, "typo"),
		"a bad time":            with(c.AllAttributes(), AttrFailedAt, "yesterday"),
		"no message ID":         with(c.AllAttributes(), AttrMessageID, ""),
	} {
		if _, err := copyFromAttributes(nil, attrs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestReprocessMarkerIsOptional: a live copy has no pubsink_reprocess at
// all, a reprocess run's copy has it, and both read back as written.
func TestReprocessMarkerIsOptional(t *testing.T) {
	for _, run := range []string{"", "orders~r20261203t053012z"} {
		c := newCopy("orders", original(), Late, nil, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		c.Reprocess = run
		attrs := c.AllAttributes()
		if v, ok := attrs[AttrReprocess]; ok != (run != "") || v != run {
			t.Errorf("run %q: pubsink_reprocess %q (present %v)", run, v, ok)
		}
		back, err := copyFromAttributes(c.Data, attrs)
		if err != nil {
			t.Fatalf("run %q: %v", run, err)
		}
		if back.Reprocess != run || !maps.Equal(back.Attributes, c.Attributes) {
			t.Errorf("run %q: read back with Reprocess %q, attributes %v", run, back.Reprocess, back.Attributes)
		}
	}
}

func with(m map[string]string, k, v string) map[string]string {
	m[k] = v
	return m
}

// TestCopiesReadBackCarryNoPubsinkAttributes reads copies whose original
// attributes include reserved pubsink_* names (a file or table row written
// by hand, or by another tool) from every output's format: replay must
// republish the original attributes only, as the package promises, and as
// it already does for Topic copies.
func TestCopiesReadBackCarryNoPubsinkAttributes(t *testing.T) {
	const published, failed = "2026-06-01T00:00:07Z", "2026-06-01T00:00:08Z"
	line := `{"pubsink_reason":"late","pubsink_error":"e","pubsink_pipeline":"orders","pubsink_message_id":"7",` +
		`"pubsink_publish_time":"` + published + `","pubsink_failed_at":"` + failed + `",` +
		`"attributes":{"id":"r7","pubsink_reason":"too_large","pubsink_truncated":"data","pubsink_reprocess":"r"},"data":"e30="}`
	fromLine, err := copyFromLine([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	item := func(col, v string) bigtable.ReadItem {
		return bigtable.ReadItem{Row: "orders#0000#7", Column: state.FamilyDeadLetter + ":" + col, Value: []byte(v)}
	}
	fromRow, err := copyFromRow(bigtable.Row{state.FamilyDeadLetter: {
		item(colAttributes, `{"id":"r7","pubsink_reason":"too_large","pubsink_reprocess":"r"}`), item(colData, "{}"), item(colReason, "late"),
		item(colError, "e"), item(colPipeline, "orders"), item(colMessageID, "7"),
		item(colPublishTime, published), item(colFailedAt, failed),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Copy{"file line": fromLine, "table row": fromRow} {
		if !maps.Equal(c.Attributes, map[string]string{"id": "r7"}) {
			t.Errorf("%s: attributes %v, want only the original id", name, c.Attributes)
		}
		if c.Reason != Late || c.Truncated != "" || c.Reprocess != "" {
			t.Errorf("%s: reason %s, truncated %q, reprocess %q; want the copy's own fields", name, c.Reason, c.Truncated, c.Reprocess)
		}
	}
}

// TestTopicCopyRenamesGoogAttributes: Pub/Sub reserves attribute keys
// starting with goog ("Attribute keys must not start with goog",
// https://cloud.google.com/pubsub/docs/publisher), yet sets such attributes
// itself on a schema'd topic's messages. A Topic copy carries them as
// pubsink_goog… and reads back with the original keys; the emulator would
// not refuse the original keys, so this is checked on what would be
// published.
func TestTopicCopyRenamesGoogAttributes(t *testing.T) {
	const topic = "projects/p/topics/dlq"
	orig := original()
	orig.Attributes = map[string]string{
		"googclient_schemaname":       "projects/p/schemas/orders",
		"googclient_schemaencoding":   "JSON",
		"googclient_schemarevisionid": "8d1e4c2a",
		"goo":                         "not reserved",
		"id":                          "r001",
	}
	want := maps.Clone(orig.Attributes)
	c := newCopy("orders", orig, InvalidPayload, errors.New("bad"), time.Now())
	m := fitPubSub(c, topic)
	for k := range m.Attributes {
		if strings.HasPrefix(k, "goog") {
			t.Errorf("the copy is published with reserved key %s", k)
		}
	}
	if got := m.Attributes["pubsink_googclient_schemaname"]; got != "projects/p/schemas/orders" {
		t.Errorf("pubsink_googclient_schemaname = %q", got)
	}
	if m.Attributes["goo"] != "not reserved" || m.Attributes["id"] != "r001" || c.Truncated != "" {
		t.Errorf("other attributes changed: %v (truncated %q)", m.Attributes, c.Truncated)
	}
	back, err := copyFromAttributes(m.Data, m.Attributes)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(back.Attributes, want) || !maps.Equal(orig.Attributes, want) {
		t.Errorf("read back with %v, want the original's %v (original now %v)", back.Attributes, want, orig.Attributes)
	}

	t.Run("a key too long to rename is cut and marked", func(t *testing.T) {
		long := "goog" + strings.Repeat("x", maxAttrKeyBytes-len("goog")-len(AttrPrefix)+1) // 249 bytes
		fits := long[:len(long)-1]                                                          // 248: renamed, exactly the limit
		orig := original()
		orig.Attributes = map[string]string{long: "v", fits: "w", "id": "r001"}
		c := newCopy("orders", orig, InvalidPayload, nil, time.Now())
		m := fitPubSub(c, topic)
		if c.Truncated != "attributes: 2 of 3 kept" || m.Attributes[AttrTruncated] != c.Truncated {
			t.Errorf("truncated %q, pubsink_truncated %q", c.Truncated, m.Attributes[AttrTruncated])
		}
		if m.Attributes[AttrPrefix+fits] != "w" || len(orig.Attributes) != 3 {
			t.Errorf("the key of %d bytes renamed was not kept (%d attributes), or the original changed (%d)", len(AttrPrefix+fits), len(m.Attributes), len(orig.Attributes))
		}
		for k := range m.Attributes {
			if len(k) > maxAttrKeyBytes {
				t.Errorf("a key of %d bytes is published", len(k))
			}
		}
	})
}

// TestACopyThatFitsOnceAnAttributeMadeRoomKeepsItsData: a copy a little
// over the size limit with exactly 100 attributes loses one original
// attribute to make room for pubsink_truncated before its data is cut; when
// that alone makes it fit, its data is kept whole (FuzzFitPubSub found
// fitPubSub cutting the data to more than its length: a panic).
func TestACopyThatFitsOnceAnAttributeMadeRoomKeepsItsData(t *testing.T) {
	const topic = "projects/p/topics/dlq"
	limit := maxMessageBytes(topic)
	orig := fuzzOriginal(94, "k", 138, 160, 0)
	data := make([]byte, limit)
	bare := proto.Size(&pubsubpb.PubsubMessage{Attributes: newCopy("orders", orig, Late, nil, time.Now()).AllAttributes()})
	for over := 1; over <= 400; over++ {
		n := limit - bare - 5 + over // 5: the data field's tag and length
		orig.Data = data[:n]
		c := newCopy("orders", orig, Late, nil, time.Now())
		m := fitPubSub(c, topic)
		if got := proto.Size(&pubsubpb.PubsubMessage{Data: m.Data, Attributes: m.Attributes}); got > limit || len(m.Attributes) > maxAttributes {
			t.Fatalf("%d bytes of data: the copy is %d bytes with %d attributes", n, got, len(m.Attributes))
		}
		if cutData := strings.Contains(c.Truncated, "data:"); cutData != (len(m.Data) < n) {
			t.Fatalf("%d bytes of data: %d kept, pubsink_truncated %q", n, len(m.Data), c.Truncated)
		}
	}
}
