package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "pubsink_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	ready := errors.New("pipeline orders is not receiving")
	var live error
	s, err := Listen(zap.NewNop(), "127.0.0.1:0", reg, Probes{
		Ready:  func(context.Context) error { return ready },
		Status: func() any { return map[string]int{"received": 7} },
		Live:   func() error { return live },
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Shutdown(context.Background())

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d, want 200", code)
	}
	live = errors.Join(errors.New("pipeline orders: subscription projects/p/subscriptions/s has delivered nothing"), errors.New("pipeline clicks: too"))
	if code, body := get("/healthz"); code != 503 || body != "unhealthy: pipeline orders: subscription projects/p/subscriptions/s has delivered nothing; pipeline clicks: too\n" {
		t.Errorf("/healthz = %d %q while a pipeline is stalled, want 503 with the reasons on one line", code, body)
	}
	live = nil
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d once live again, want 200", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not receiving") {
		t.Errorf("/readyz = %d %q, want 503 with the reason", code, body)
	}
	ready = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d once ready, want 200", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "pubsink_test_total 3") {
		t.Errorf("/metrics = %d, body lacks the counter:\n%s", code, body)
	}
	code, body := get("/status")
	var st map[string]int
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || st["received"] != 7 {
		t.Errorf("/status = %d %q (%v), want the status JSON", code, body, err)
	}
}
