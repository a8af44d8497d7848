package mapping

import (
	"testing"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/deadletter"
)

// TestFailuresNameTheirFullKey: a message's failure in a mapping starts
// with the key at fault as validate writes it, relative to the pipeline:
// sink.KEY for the single mapping, sink.mappings[i].KEY for a list (not a
// bare columns.temp_c, which does not say which mapping).
func TestFailuresNameTheirFullKey(t *testing.T) {
	plain := config.Mapping{RowKey: "{data.id}", Columns: map[string]string{"temp_c": "{data.value}"}}
	second := config.Mapping{Each: "data.items", RowKey: "{item.id}", Columns: map[string]string{"v": "{item.v}"}, Timestamp: "{item.ts}"}
	for _, c := range []struct {
		name    string
		cfg     config.Pipeline
		payload string
		reason  deadletter.Reason
		want    string
	}{
		{"a column of the single mapping", single(plain), `{"id": "a"}`, deadletter.MissingField,
			`missing_field: sink.columns.temp_c: {data.value}: missing field: no such field`},
		{"a column of a mapping of a list", changeConfig(plain, second), `{"id": "a", "items": []}`, deadletter.MissingField,
			`missing_field: sink.mappings[0].columns.temp_c: {data.value}: missing field: no such field`},
		{"a row key", changeConfig(plain, second), `{"value": 1}`, deadletter.MissingField,
			`missing_field: sink.mappings[0].row_key: {data.id}: missing field: no such field`},
		{"an empty row key", changeConfig(plain, second), `{"id": "", "value": 1}`, deadletter.MissingField,
			`missing_field: sink.mappings[0].row_key rendered empty`},
		{"each", changeConfig(plain, second), `{"id": "a", "value": 1}`, deadletter.ExpressionFailed,
			`expression_failed: sink.mappings[1].each: expression failed: no such key: items`},
		{"a column of an element", changeConfig(plain, second), `{"id": "a", "value": 1, "items": [{"id": "b", "ts": "2026-12-01T10:00:00Z"}]}`, deadletter.MissingField,
			`missing_field: sink.mappings[1].columns.v: {item.v}: missing field: v is absent`},
		{"a timestamp", changeConfig(plain, second), `{"id": "a", "value": 1, "items": [{"id": "b", "v": 2, "ts": "noon"}]}`, deadletter.BadEventTime,
			`bad_event_time: sink.mappings[1].timestamp: `},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := mapJSON(mustNew(t, c.cfg), c.payload, nil)
			if bad := badInput(t, err); bad.Reason != c.reason || len(err.Error()) < len(c.want) || err.Error()[:len(c.want)] != c.want {
				t.Errorf("got  %v\nwant %s…", err, c.want)
			}
		})
	}
}
