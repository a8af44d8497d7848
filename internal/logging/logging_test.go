package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
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

// TestJSONHasSourceLocationLabelsAndUnits: Cloud Logging's sourceLocation
// (this file and line), the pipeline as a label as well as a field, given
// to With or to the call, and durations with their unit.
func TestJSONHasSourceLocationLabelsAndUnits(t *testing.T) {
	var buf bytes.Buffer
	log, err := New("info", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.With(zap.String("pipeline", "orders")).Info("retrying", zap.Duration("waited", 90*time.Second)) // the line below is the logged one
	_, _, line, _ := runtime.Caller(0)
	log.Info("alone", zap.String("pipeline", "clicks"))
	log.Info("no pipeline")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", buf.String())
	}
	var first struct {
		Source                   struct{ File, Line, Function string } `json:"logging.googleapis.com/sourceLocation"`
		Labels                   map[string]string                     `json:"logging.googleapis.com/labels"`
		Pipeline, Waited, Caller string
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(first.Source.File, "logging/logging_test.go") || first.Source.Line != strconv.Itoa(line-1) ||
		!strings.Contains(first.Source.Function, "TestJSONHasSourceLocationLabelsAndUnits") {
		t.Errorf("sourceLocation %+v, want this test at line %d", first.Source, line-1)
	}
	if first.Labels["pipeline"] != "orders" || first.Pipeline != "orders" {
		t.Errorf("labels %v, pipeline field %q; want orders in both", first.Labels, first.Pipeline)
	}
	if first.Waited != "1m30s" {
		t.Errorf("duration field %q, want 1m30s", first.Waited)
	}
	if first.Caller != "" {
		t.Errorf("a caller field %q besides sourceLocation", first.Caller)
	}
	if !strings.Contains(lines[1], `"logging.googleapis.com/labels":{"pipeline":"clicks"}`) {
		t.Errorf("a pipeline given to the call is not a label: %s", lines[1])
	}
	if strings.Contains(lines[2], "labels") {
		t.Errorf("labels without any label field: %s", lines[2])
	}
}

// TestRecentKeepsTheLastWarningsOfEachPipeline: warnings and errors only,
// by the pipeline given to With or to the call, newest first, at most n.
func TestRecentKeepsTheLastWarningsOfEachPipeline(t *testing.T) {
	r := NewRecent(2)
	log := zap.New(r.Core())
	orders := log.With(zap.String("pipeline", "orders"))
	orders.Info("not kept")
	orders.Warn("first", zap.Error(errors.New("catalog down")))
	orders.Error("second")
	orders.Warn("third")
	log.Warn("of clicks", zap.String("pipeline", "clicks"))
	log.Error("of the process")

	got := r.Last("orders")
	if len(got) != 2 || got[0].Message != "third" || got[1].Message != "second" || got[1].Level != "ERROR" {
		t.Fatalf("orders: %+v; want third, second (ERROR)", got)
	}
	if c := r.Last("clicks"); len(c) != 1 || c[0].Message != "of clicks" || c[0].Level != "WARNING" {
		t.Fatalf("clicks: %+v", c)
	}
	if p := r.Last(""); len(p) != 1 || p[0].Message != "of the process" {
		t.Fatalf("process: %+v", p)
	}
	r2 := NewRecent(5)
	zap.New(r2.Core()).With(zap.String("pipeline", "orders")).Warn("w", zap.Error(errors.New("catalog down")))
	if e := r2.Last("orders"); len(e) != 1 || e[0].Error != "catalog down" {
		t.Fatalf("the error field: %+v", e)
	}
}
