package config

import (
	"strings"
	"testing"
)

// TestWarningsNameHotspottingRowKeys: a row key led by a value that only
// grows is a warning (with the file's line and the fixes), one led by a
// field that spreads the keys, or a reversed time, is not; warnings never
// make Parse fail.
func TestWarningsNameHotspottingRowKeys(t *testing.T) {
	const tmpl = `
project: p
state: {instance: i}
pipelines:
  - name: a
    mode: at_least_once
    source: {subscription: s-a, timestamp_attribute: event_ts}
    sink:
      table: t
      row_key: %q
`
	for rowKey, want := range map[string]string{
		"{message_id}":                          "the message ID",
		"orders#{publish_time}":                 "a time",
		"{event_time}#{attributes.id}":          "a time",
		"{attributes.event_ts}#{attributes.id}": "source.timestamp_attribute",
		"{data.order.created_at}":               "a time or a sequence",
		"{attributes.seq}":                      "a time or a sequence",
		"{attributes.customer_id}#{event_time}": "",
		"{event_time:reverse}#{message_id}":     "",
		"{data.user}#{attributes.ts}":           "",
		"{attributes.tsunami}":                  "",
		"{attributes.format}":                   "",
	} {
		data := []byte(strings.Replace(tmpl, "%q", `"`+rowKey+`"`, 1))
		cfg, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", rowKey, err)
		}
		ws := Warnings(cfg, data)
		switch {
		case want == "" && len(ws) != 0:
			t.Errorf("%s: warned %v", rowKey, ws)
		case want != "" && (len(ws) != 1 || !strings.Contains(ws[0].Message, want) || ws[0].Line != 10 ||
			ws[0].Path != "pipelines[0].sink.row_key" || !strings.Contains(ws[0].Message, "{event_time:reverse}")):
			t.Errorf("%s: %v; want one warning at line 10 saying %q and the fixes", rowKey, ws, want)
		}
	}
}
