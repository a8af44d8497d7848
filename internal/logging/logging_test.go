package logging

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestJSONHasCloudLoggingFields(t *testing.T) {
	var buf bytes.Buffer
	log, err := New("info", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Warn("disk is slow")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("one JSON line expected, got %q: %v", buf.String(), err)
	}
	if line["severity"] != "WARNING" || line["message"] != "disk is slow" || line["time"] == nil {
		t.Fatalf("fields = %v, want severity WARNING, message, time", line)
	}
}

func TestBadLevelAndFormat(t *testing.T) {
	if _, err := New("loud", "json", nil); err == nil {
		t.Error("want an error for level loud")
	}
	if _, err := New("info", "xml", nil); err == nil {
		t.Error("want an error for format xml")
	}
}
