package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAStartThatWaitsForPubSubAnswersProbesAndStopsCleanly: with Pub/Sub
// unreachable, run serves /healthz at once and /readyz names what it waits
// for, retries, and a stop during the wait returns nil (exit 0).
func TestAStartThatWaitsForPubSubAnswersProbesAndStopsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // nothing answers there once closed
	ln.Close()
	t.Setenv("PUBSUB_EMULATOR_HOST", dead)
	httpAddr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`project: p
http: {addr: %q}
pipelines:
  - name: a
    mode: at_least_once
    source: {subscription: subs-a}
    sink: {type: stdout}
`, httpAddr)), 0o644)
	old := startupAttemptTimeout
	startupAttemptTimeout = 300 * time.Millisecond
	defer func() { startupAttemptTimeout = old }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs strings.Builder
	done := make(chan error, 1)
	go func() { done <- RunFile(ctx, path, &syncWriter{w: &logs}) }()

	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + httpAddr + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for Pub/Sub at "+dead) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q; want 503 naming the Pub/Sub endpoint it waits for", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while starting, want 200", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunFile stopped during start-up = %v, want nil (exit 0)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunFile did not return within 5s of the stop")
	}
	if !strings.Contains(logs.String(), "waiting_for") || !strings.Contains(logs.String(), dead) {
		t.Errorf("the log does not say what the start waits for:\n%s", logs.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncWriter serializes the logger's writes into w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
