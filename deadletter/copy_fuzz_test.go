package deadletter

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/bigtable"

	"github.com/pubsink/pubsink/internal/state"
	"github.com/pubsink/pubsink/source"
)

// The replay input is outside input: a dead-letter file may be edited or
// cut by a crash, a table row or a topic message may come from another tool.
// These targets check that each reader never panics and that whatever it
// accepts is a Copy replay can use: a known reason, a pipeline and message
// ID, UTC times, non-nil data, and original attributes without any
// reserved pubsink_* name. Seeds: testdata/fuzz/Fuzz*.

// checkCopy checks what a reader accepted.
func checkCopy(t *testing.T, c *Copy) {
	t.Helper()
	if _, ok := ParseReason(string(c.Reason)); !ok {
		t.Fatalf("accepted reason %q", c.Reason)
	}
	if c.Pipeline == "" || c.MessageID == "" {
		t.Fatalf("accepted pipeline %q, message ID %q", c.Pipeline, c.MessageID)
	}
	if c.PublishTime.Location() != time.UTC || c.FailedAt.Location() != time.UTC {
		t.Fatalf("times not in UTC: %v %v", c.PublishTime, c.FailedAt)
	}
	if c.Data == nil {
		t.Fatal("nil data: replay would publish a message Pub/Sub refuses")
	}
	for k := range c.Attributes {
		if strings.HasPrefix(k, AttrPrefix) {
			t.Fatalf("original attributes hold reserved %q: %v", k, c.Attributes)
		}
	}
}

// FuzzCopyFromLine reads an arbitrary line of a dead-letter file.
// Run: go test -fuzz=FuzzCopyFromLine ./deadletter
func FuzzCopyFromLine(f *testing.F) {
	f.Add([]byte(`{"pubsink_reason":"late","pubsink_error":"e","pubsink_pipeline":"orders","pubsink_message_id":"7","pubsink_publish_time":"2026-06-01T00:00:07.123456789Z","pubsink_failed_at":"2026-06-01T00:00:08Z","attributes":{"id":"r7"},"data":"e30="}`))
	f.Add([]byte(`{"pubsink_reason":"too_large","pubsink_pipeline":"p","pubsink_message_id":"1","pubsink_publish_time":"2026-06-01T02:00:00+02:00","pubsink_failed_at":"2026-06-01T00:00:01Z","attributes":null}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		c, err := copyFromLine(line)
		if err != nil {
			return
		}
		checkCopy(t, c)
	})
}

// FuzzCopyFromAttributes reads an arbitrary message of a dead-letter
// topic: the contract attributes, with one of them replaced (or the
// optional pubsink_reprocess added), and two more. An attribute renamed
// from a goog* one (pubsink_goog…) reads back under its original key.
// Run: go test -fuzz=FuzzCopyFromAttributes ./deadletter
func FuzzCopyFromAttributes(f *testing.F) {
	f.Add([]byte("{}"), uint8(0), "late", "id", "r7", "pubsink_truncated", "data")
	f.Add([]byte(nil), uint8(4), "2026-06-01T00:00:07+01:00", "", "", "pubsink_reason", "typo")
	f.Fuzz(func(t *testing.T, data []byte, which uint8, value, k1, v1, k2, v2 string) {
		attrs := map[string]string{
			AttrReason: "late", AttrError: "e", AttrPipeline: "orders", AttrMessageID: "7",
			AttrPublishTime: "2026-06-01T00:00:07Z", AttrFailedAt: "2026-06-01T00:00:08Z",
		}
		names := []string{AttrReason, AttrError, AttrPipeline, AttrMessageID, AttrPublishTime, AttrFailedAt, AttrReprocess}
		attrs[names[int(which)%len(names)]] = value
		attrs[k1], attrs[k2] = v1, v2
		c, err := copyFromAttributes(data, attrs)
		if err != nil {
			return
		}
		checkCopy(t, c)
		if orig, ok := strings.CutPrefix(k1, AttrPrefix); ok && strings.HasPrefix(orig, googPrefix) && c.Attributes[orig] != attrs[k1] {
			t.Fatalf("%s = %q reads back as %s = %q", k1, attrs[k1], orig, c.Attributes[orig])
		}
	})
}

// FuzzCopyFromRow reads an arbitrary row of a dead-letter table (each
// column's latest value), once as the live pipeline writes it and once
// with a reprocess run's column reprocess, which reads back as written.
// Run: go test -fuzz=FuzzCopyFromRow ./deadletter
func FuzzCopyFromRow(f *testing.F) {
	f.Add(`{"id":"r7"}`, []byte("{}"), "late", "orders", "7", "2026-06-01T00:00:07Z", "2026-06-01T00:00:08Z")
	f.Add(`{"pubsink_reason":"x"}`, []byte(nil), "sink_rejected", "p", "1", "2026-06-01T00:00:07.5-01:00", "2026-06-01T00:00:08Z")
	f.Fuzz(func(t *testing.T, attrs string, data []byte, reason, pipeline, id, published, failed string) {
		for _, run := range []string{"", pipeline + "~r20261203t053012z"} {
			var items []bigtable.ReadItem
			add := func(col string, v []byte) {
				if v != nil { // a missing column reads as absent
					items = append(items, bigtable.ReadItem{Row: "k", Column: state.FamilyDeadLetter + ":" + col, Value: v})
				}
			}
			add(colAttributes, []byte(attrs))
			add(colData, data)
			add(colReason, []byte(reason))
			add(colError, []byte("e"))
			add(colPipeline, []byte(pipeline))
			add(colMessageID, []byte(id))
			add(colPublishTime, []byte(published))
			add(colFailedAt, []byte(failed))
			if run != "" { // the live output writes no such column
				add(colReprocess, []byte(run))
			}
			c, err := copyFromRow(bigtable.Row{state.FamilyDeadLetter: items})
			if err != nil {
				continue
			}
			checkCopy(t, c)
			if c.Reprocess != run {
				t.Fatalf("reprocess %q read back as %q", run, c.Reprocess)
			}
		}
	})
}

// FuzzFileLineRoundTrip writes a copy of an arbitrary message as the File
// output does, for the live pipeline and for a reprocess run, and reads it
// back: replay must see the same copy, and only the run's line has key
// pubsink_reprocess. Message IDs and attributes are valid UTF-8 (protobuf
// strings), and publish times are within RFC 3339's years, so other inputs
// are skipped.
// Run: go test -fuzz=FuzzFileLineRoundTrip ./deadletter
func FuzzFileLineRoundTrip(f *testing.F) {
	f.Add("1007", []byte(`{"n":1}`), "id", "r007", uint8(1), "row_key: attribute \"customer\" is missing", int64(1780272007123456789))
	f.Add("2", []byte{0xff, 0}, "pubsink_reason", "late", uint8(4), strings.Repeat("é", 600), int64(0))
	f.Fuzz(func(t *testing.T, id string, data []byte, k, v string, reason uint8, cause string, publishNanos int64) {
		publish := time.Unix(0, publishNanos)
		if id == "" || !utf8.ValidString(id) || !utf8.ValidString(k) || !utf8.ValidString(v) || publish.UTC().Year() > 9999 || publish.UTC().Year() < 0 {
			return
		}
		m := &source.Message{ID: id, Data: data, Attributes: map[string]string{k: v}, PublishTime: publish}
		for _, run := range []string{"", "orders~r20261203t053012z"} {
			want := newCopy("orders", m, Reasons[int(reason)%len(Reasons)], errString(cause), time.Date(2026, 6, 2, 3, 4, 5, 6000, time.UTC))
			want.Reprocess = run
			line, err := json.Marshal(recordOf(want)) // as File.Send encodes a copy
			if err != nil {
				t.Fatal(err)
			}
			if keyed := strings.Contains(string(line), `"`+AttrReprocess+`":`); keyed != (run != "") {
				t.Fatalf("run %q: the line has key %s: %v\n%s", run, AttrReprocess, keyed, line)
			}
			got, err := copyFromLine(line)
			if err != nil {
				t.Fatalf("a line File writes does not read back: %v\n%s", err, line)
			}
			checkCopy(t, got)
			if got.Reason != want.Reason || got.Error != want.Error || got.Pipeline != want.Pipeline || got.MessageID != want.MessageID ||
				!got.PublishTime.Equal(want.PublishTime) || !got.FailedAt.Equal(want.FailedAt) || got.Reprocess != want.Reprocess ||
				!maps.Equal(got.Attributes, want.Attributes) || string(got.Data) != string(want.Data) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
		}
	})
}

type errString string

func (e errString) Error() string { return string(e) }
