package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Probes are what the server asks of the running process.
type Probes struct {
	// Ready returns nil when every pipeline is receiving and its sink is
	// reachable. It gets a context bounded by ReadyTimeout.
	Ready func(ctx context.Context) error
	// Status returns the JSON-encodable state of every pipeline.
	Status func() any
	// Live, if set, returns nil while the process is healthy, and else why
	// not (a pipeline whose streams hung and could not be reopened): then
	// /healthz answers 503 with the reason, so that the orchestrator
	// restarts the process. nil: /healthz answers 200 while the process
	// runs.
	Live func() error
	// Page, if set, serves the status page at / (exactly: other paths stay
	// 404).
	Page http.Handler
}

// ReadyTimeout bounds one readiness check: a probe that hangs is a probe
// that failed, and Kubernetes' default probe timeout is 1 s. Every check of
// readiness uses it (/readyz here, pubsink_ready at scrape time, the status
// page), so that they agree on what "ready" means.
const ReadyTimeout = 900 * time.Millisecond

// Server serves /metrics, /healthz, /readyz, /status and the status page at /.
type Server struct {
	log *zap.Logger
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (":8080", "127.0.0.1:0") and returns a server ready to
// Serve. Binding first lets the caller fail fast on a taken port and learn
// the port picked for ":0".
func Listen(log *zap.Logger, addr string, reg *prometheus.Registry, probes Probes) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if probes.Live != nil {
			if err := probes.Live(); err != nil {
				http.Error(w, "unhealthy: "+oneLine(err.Error()), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		defer cancel()
		if err := probes.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	if probes.Page != nil {
		mux.Handle("GET /{$}", probes.Page)
	}
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(probes.Status())
	})
	return &Server{
		log: log.Named("http"),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:  ln,
	}, nil
}

// oneLine joins the lines of s with "; ": a probe's reason is one line.
func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve() error {
	s.log.Info("serving", zap.String("addr", s.Addr()))
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops the server as http.Server.Shutdown does.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
