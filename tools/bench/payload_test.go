package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pubsink/pubsink/app"
	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/mapping"
	btsink "github.com/pubsink/pubsink/sinks/bigtable"
	"github.com/pubsink/pubsink/source"
)

// Without -payload, -fields, -elements or a suffix, every connector runs
// today's payload and row.
func TestParseOptionsDefaultShapes(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range o.connectors {
		if sh := o.shapes[k]; sh != (shape{format: formatJSON}) {
			t.Errorf("%s: shape %+v, want today's", k, sh)
		}
	}
}

func TestParseOptionsShapes(t *testing.T) {
	o, err := parseOptions([]string{"-connectors", "naive,exactly_once,exactly_once_avro,exactly_once_no_tracking_protobuf,at_least_once_json_each50,naive_each3,exactly_once_baseline",
		"-baseline", "/bin/true", "-reference", "exactly_once_avro"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[kind]struct {
		base kind
		sh   shape
	}{
		"naive":                             {naive, shape{format: "json"}},
		"exactly_once":                      {exactlyOnce, shape{format: "json"}},
		"exactly_once_avro":                 {exactlyOnce, shape{format: "avro", fields: true}},
		"exactly_once_no_tracking_protobuf": {exactlyOnceNoTracking, shape{format: "protobuf", fields: true}},
		"at_least_once_json_each50":         {atLeastOnce, shape{format: "json", fields: true, elements: 50, each: true}},
		"naive_each3":                       {naive, shape{format: "json", fields: true, elements: 3}},
		"exactly_once_baseline":             {exactlyOnceBaseline, shape{format: "json"}},
	}
	if len(o.connectors) != len(want) {
		t.Fatalf("connectors %v", o.connectors)
	}
	for _, k := range o.connectors {
		w := want[k]
		if k.base() != w.base || o.shapes[k] != w.sh {
			t.Errorf("%s: base %s, shape %+v; want %s, %+v", k, k.base(), o.shapes[k], w.base, w.sh)
		}
	}
	if len(o.references) != 1 || o.references[0] != "exactly_once_avro" {
		t.Errorf("references %v", o.references)
	}
	if sh := o.shapes["at_least_once_json_each50"]; sh.rowsPerMessage() != 50 || sh.rowKey("m1") != "m1#49" {
		t.Errorf("each50: %d rows per message, key %q", sh.rowsPerMessage(), sh.rowKey("m1"))
	}
	if sh := o.shapes["naive_each3"]; sh.rowsPerMessage() != 1 || sh.rowKey("m1") != "m1" {
		t.Errorf("naive_each3: %d rows per message, key %q", sh.rowsPerMessage(), sh.rowKey("m1"))
	}
	if !o.shapes["exactly_once_baseline"].rowKeyIsID() {
		t.Error("baseline")
	}

	// -payload and -elements apply to every connector without a suffix,
	// and imply -fields.
	o, err = parseOptions([]string{"-payload", "avro", "-elements", "5", "-connectors", "naive,exactly_once,exactly_once_json_each1"})
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range map[kind]shape{
		"naive":                   {format: "avro", fields: true, elements: 5},
		"exactly_once":            {format: "avro", fields: true, elements: 5, each: true},
		"exactly_once_json_each1": {format: "json", fields: true, elements: 1, each: true},
	} {
		if o.shapes[k] != w {
			t.Errorf("-payload avro -elements 5: %s: %+v, want %+v", k, o.shapes[k], w)
		}
	}
	o, err = parseOptions([]string{"-payload", "json", "-connectors", "exactly_once"})
	if err != nil || !o.shapes["exactly_once"].fields {
		t.Errorf("-payload json: %+v, %v; want the four-field mapping", o.shapes, err)
	}
	// The baseline binary runs a format too (an earlier commit's binary has them).
	if o, err := parseOptions([]string{"-connectors", "exactly_once_baseline_avro", "-baseline", "/bin/true"}); err != nil || o.shapes["exactly_once_baseline_avro"] != (shape{format: "avro", fields: true}) {
		t.Errorf("exactly_once_baseline_avro: %+v, %v", o.shapes, err)
	}
	o, err = parseOptions([]string{"-fields", "-connectors", "exactly_once_baseline", "-baseline", "/bin/true"})
	if err != nil || o.shapes["exactly_once_baseline"] != (shape{format: "json", fields: true}) {
		t.Errorf("-fields with the baseline: %+v, %v", o.shapes, err)
	}
}

// rowKeyIsID is for the test: the row key is the id attribute.
func (s shape) rowKeyIsID() bool { return s.rowKey("x") == "x" }

func TestParseOptionsShapesRejects(t *testing.T) {
	for _, args := range [][]string{
		{"-payload", "xml"},
		{"-payload", "300"}, // the size is -size now
		{"-elements", "-1"},
		{"-elements", "1001"},
		{"-connectors", "exactly_once_xml"},
		{"-connectors", "exactly_once_each0"},
		{"-connectors", "exactly_once_each2000"},
		{"-connectors", "exactly_once_avro_json"},
		{"-connectors", "exactly_once_each5_avro"},
		{"-connectors", "exactly_once_baseline_each5", "-baseline", "/bin/true"},
		{"-connectors", "exactly_once_baseline", "-baseline", "/bin/true", "-elements", "3"},
		{"-connectors", "exactly_once,exactly_once"},
		{"-connectors", "exactly_once", "-reference", "exactly_once_avro"},
		{"-size", "10"},
	} {
		if _, err := parseOptions(args); err == nil {
			t.Errorf("parseOptions(%q) accepted", args)
		}
	}
}

// The record is about -size bytes as JSON, and every format encodes the
// same record.
func TestRecordFormats(t *testing.T) {
	c, err := newCodecs(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, elements := range []int{0, 50} {
		r := newOrder(12345, messageID(12345), 200, elements)
		js, err := c.encode(r, formatJSON)
		if err != nil {
			t.Fatal(err)
		}
		var back order
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatalf("JSON %s: %v", js, err)
		}
		if !reflect.DeepEqual(&back, r) {
			t.Errorf("JSON %s decodes to %+v, want %+v", js, back, *r)
		}
		if elements == 0 && (len(js) < 195 || len(js) > 205) {
			t.Errorf("JSON record of %d bytes, want about 200: %s", len(js), js)
		}
		for _, f := range []string{formatAvro, formatProtobuf} {
			b, err := c.encode(r, f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.decodeOrder(b, f)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("%s decodes to %+v, want %+v", f, *got, *r)
			}
			t.Logf("%d items: json %d bytes, %s %d bytes", elements, len(js), f, len(b))
		}
	}
}

// Each shape's configuration loads and validates (its placeholders are
// checked against the schema files), says what it should, and maps a bench
// message to the rows it should: the same rows in every format.
func TestConfigOfShapes(t *testing.T) {
	dir := t.TempDir()
	c, err := newCodecs(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseOptions([]string{"-streams", "4", "-connectors",
		"exactly_once,exactly_once_json,exactly_once_avro,exactly_once_protobuf,exactly_once_json_each50,exactly_once_avro_each50,exactly_once_protobuf_each50,at_least_once_avro"})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{o: o, dir: dir, codecs: c}
	rows := map[bool]string{} // each → what the first format's message made
	for _, k := range o.connectors {
		y := b.configYAML(k, b.names(k, 1), "127.0.0.1:1")
		cfg, err := config.Parse([]byte(y))
		if err != nil {
			t.Errorf("%s: %v\n%s", k, err, y)
			continue
		}
		sh := o.shapes[k]
		if sh.fields != strings.Contains(y, "row_key: \"{data.id}") {
			t.Errorf("%s: fields %v, config:\n%s", k, sh.fields, y)
		}
		if !sh.fields && strings.Contains(y, "payload:") {
			t.Errorf("%s: a payload section without -fields:\n%s", k, y)
		}
		if sh.each != strings.Contains(y, "each: data.items") {
			t.Errorf("%s: each %v, config:\n%s", k, sh.each, y)
		}
		if sh.fields && sh.format != formatJSON && !strings.Contains(y, "format: "+sh.format) {
			t.Errorf("%s: no payload format:\n%s", k, y)
		}
		if cfg.Pipelines[0].Name != pipelineName {
			t.Errorf("%s: pipeline %q", k, cfg.Pipelines[0].Name)
		}

		// What pubsink makes of message 4321, with the configuration as
		// run loads it (the mapping compiled, its paths checked).
		path := filepath.Join(dir, string(k)+".yaml")
		if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err = app.LoadConfig(path)
		if err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		m, err := mapping.New(cfg.Pipelines[0], nil, btsink.Limits)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		msg, err := b.message(4321, sh)
		if err != nil {
			t.Fatal(err)
		}
		var res mapping.Result
		if err := m.Map(context.Background(), &source.Message{ID: "x", Data: msg.Data, Attributes: msg.Attributes, PublishTime: time.Now()}, &res); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if len(res.Rows) != sh.rowsPerMessage() || res.Rows[len(res.Rows)-1].Key != sh.rowKey(messageID(4321)) {
			t.Errorf("%s: %d rows, the last %q; want %d, %q", k, len(res.Rows), res.Rows[len(res.Rows)-1].Key, sh.rowsPerMessage(), sh.rowKey(messageID(4321)))
		}
		var got strings.Builder
		for _, r := range res.Rows {
			fmt.Fprintf(&got, "%s:", r.Key)
			for _, c := range r.Cells {
				fmt.Fprintf(&got, " %s=%s", c.Column, c.Value)
			}
			got.WriteString("\n")
		}
		if sh.fields {
			first, ok := rows[sh.each]
			if !ok {
				rows[sh.each] = got.String()
				t.Logf("%s:\n%s", k, got.String()[:min(got.Len(), 200)])
			} else if got.String() != first {
				t.Errorf("%s: rows\n%s\nwant the same as in the other formats:\n%s", k, got.String(), first)
			}
		}
	}
}
