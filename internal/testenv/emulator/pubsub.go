package emulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startTimeout bounds start-up when the caller's context has no earlier
// deadline. The Pub/Sub emulator (a JVM) is ready in 2-4 s on an idle
// machine; a shared CI runner may take several times that.
const startTimeout = 2 * time.Minute

// portAttempts is how often StartPubSub picks a new port when another
// process took the free one first.
const portAttempts = 5

// withoutAgent starts the Pub/Sub emulator without the javaagent fix. Only
// this package's tests set it, to measure the defect the fix removes.
var withoutAgent bool

// Options configure an emulator.
type Options struct {
	// LogDir is where the emulator's stdout and stderr go, as one file named
	// pubsub-emulator-*.log or bigtable-emulator-*.log; it is created if
	// missing, and the file stays after Stop. "" puts the log in a temporary
	// file that Stop removes.
	LogDir string
	// ListenHost is the address the emulator listens on; "" is 127.0.0.1.
	// An unspecified address (0.0.0.0, ::) serves every interface, and the
	// Host of the emulator then names 127.0.0.1, which reaches it.
	ListenHost string
	// Port is the port to listen on; 0 takes a free one. A given port that
	// another process holds fails start-up with ErrPortInUse (no retry).
	Port int
	// AgentJar is a Pub/Sub agent jar built elsewhere, loaded instead of
	// the one built from the embedded sources (deploy's tests start the
	// emulator with the jar that the compose image's script builds); ""
	// builds and caches it.
	AgentJar string
}

// PubSubJar returns the installed Pub/Sub emulator's jar, which the agent
// is compiled against. The error wraps ErrNotInstalled.
func PubSubJar() (string, error) {
	_, jar, err := findPubSub()
	return jar, err
}

// ErrPortInUse is wrapped by the start-up error when Options.Port is held by
// another process.
var ErrPortInUse = errors.New("port in use")

// listenHost is the address to pass to the emulator.
func (o Options) listenHost() string {
	if o.ListenHost == "" {
		return "127.0.0.1"
	}
	return o.ListenHost
}

// Addr is the Host of an emulator started with o that listens on port: what
// a client on this machine dials (127.0.0.1 for an unspecified ListenHost).
func (o Options) Addr(port string) string {
	h := o.listenHost()
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		h = "127.0.0.1"
	}
	return net.JoinHostPort(h, port)
}

// PubSub is a Pub/Sub emulator running on loopback, with the javaagent's
// fixes for its defects applied (see the package documentation).
// Its methods are safe for concurrent use.
//
// Env and Client use only Host, so a value with just Host set points them
// elsewhere, e.g. at a faultproxy in front of a running emulator:
// (&emulator.PubSub{Host: proxy.Addr()}).Client(ctx, project). Stop and
// LogPath of such a value do nothing.
type PubSub struct {
	// Host is "127.0.0.1:PORT", the value for PUBSUB_EMULATOR_HOST.
	Host string

	proc *process
}

// StartPubSub starts a Pub/Sub emulator on a free loopback port in its own
// process group and returns when it answers gRPC calls. The first call on a
// machine also builds the javaagent (a few seconds of javac), then it is
// cached. ctx bounds start-up only, not the emulator's life: call Stop.
// Errors wrap ErrNotInstalled when the emulator or a JDK is missing.
func StartPubSub(ctx context.Context, opts Options) (*PubSub, error) {
	script, jar, err := findPubSub()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	env := os.Environ()
	if !withoutAgent {
		agent := opts.AgentJar
		if agent == "" {
			if agent, err = agentJar(ctx, jar); err != nil {
				return nil, err
			}
		}
		env, err = withJavaAgent(env, agent)
		if err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		port := strconv.Itoa(opts.Port)
		if opts.Port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		proc, err := startProcess("pubsub-emulator", opts.LogDir, env, script, "--host="+opts.listenHost(), "--port="+port)
		if err != nil {
			return nil, err
		}
		p := &PubSub{Host: opts.Addr(port), proc: proc}
		err = p.waitReady(ctx, port)
		if err == nil {
			return p, nil
		}
		_ = proc.stop()
		if errors.Is(err, errPortTaken) {
			if opts.Port != 0 {
				return nil, fmt.Errorf("emulator: pubsub: %w: port %d on %s is held by another process", ErrPortInUse, opts.Port, opts.listenHost())
			}
			if attempt < portAttempts {
				continue
			}
		}
		return nil, err
	}
}

// withJavaAgent returns env with -javaagent:agent appended to JAVA_OPTS. The
// start script passes JAVA_OPTS through eval, so the path is single-quoted,
// and a path that a single quote cannot protect is refused.
func withJavaAgent(env []string, agent string) ([]string, error) {
	if strings.ContainsAny(agent, "'\n") {
		return nil, fmt.Errorf("emulator: agent path %q cannot be passed through JAVA_OPTS; set XDG_CACHE_HOME to a plainer directory", agent)
	}
	opt := "-javaagent:'" + agent + "'"
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JAVA_OPTS="); ok {
			opt = v + " " + opt
			continue
		}
		out = append(out, kv)
	}
	return append(out, "JAVA_OPTS="+opt), nil
}

var pubsubStarted = regexp.MustCompile(`Server started, listening on (\d+)`)

// waitReady polls the log and then the gRPC API. The log decides whether
// this process owns the port: a gRPC answer alone could come from another
// emulator that won the race for it.
func (p *PubSub) waitReady(ctx context.Context, port string) error {
	conn, err := grpc.NewClient("passthrough:///"+p.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("emulator: pubsub: %w", err)
	}
	defer conn.Close()
	publisher := pubsubpb.NewPublisherClient(conn)

	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("emulator: pubsub on %s not ready: %w; log %s ends:\n%s", p.Host, ctx.Err(), p.proc.logPath, p.proc.logTail(20))
		case <-p.proc.exited:
			return fmt.Errorf("emulator: pubsub exited during start-up (%v); log %s ends:\n%s", p.proc.waitErr, p.proc.logPath, p.proc.logTail(20))
		case <-tick.C:
		}
		log := p.proc.readLog()
		if strings.Contains(string(log), "Address already in use") {
			return fmt.Errorf("emulator: pubsub on %s: %w", p.Host, errPortTaken)
		}
		m := pubsubStarted.FindSubmatch(log)
		if m == nil {
			continue
		}
		if string(m[1]) != port {
			return fmt.Errorf("emulator: pubsub says it listens on %s, not %s; log %s", m[1], port, p.proc.logPath)
		}
		if !withoutAgent && !strings.Contains(string(log), "pubsink-agent: installed") {
			return fmt.Errorf("emulator: pubsub started without the javaagent (JAVA_OPTS not honoured?); log %s ends:\n%s", p.proc.logPath, p.proc.logTail(20))
		}
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := publisher.ListTopics(callCtx, &pubsubpb.ListTopicsRequest{Project: "projects/emulator-ready"})
		cancel()
		if err == nil {
			return nil
		}
	}
}

// Stop kills the emulator's process group (SIGTERM, then SIGKILL after a
// grace period) and waits for it to exit. It is idempotent: later calls
// return the first call's result. It returns an error if the emulator had
// already died on its own. Unless Options.LogDir was set, it removes the log.
func (p *PubSub) Stop() error {
	if p.proc == nil {
		return nil
	}
	return p.proc.stop()
}

// PID returns the process ID of the emulator, the leader of its process
// group; 0 for a value with just Host.
func (p *PubSub) PID() int { return p.proc.pid() }

// Exited is closed once the emulator's process has exited, whether Stop
// ended it or not; nil (never closed) for a value with just Host.
func (p *PubSub) Exited() <-chan struct{} { return p.proc.exitedChan() }

// LogPath returns the file that holds the emulator's stdout and stderr.
func (p *PubSub) LogPath() string {
	if p.proc == nil {
		return ""
	}
	return p.proc.logPath
}

// Env returns the environment entries that point a child process's Pub/Sub
// client at this emulator: PUBSUB_EMULATOR_HOST.
func (p *PubSub) Env() []string { return []string{"PUBSUB_EMULATOR_HOST=" + p.Host} }

// Client returns a Pub/Sub client for project on this emulator. It sets the
// endpoint and plaintext transport explicitly, as the library does for
// PUBSUB_EMULATOR_HOST, so it works whatever this process's environment
// says. It uses a single gRPC connection. The caller closes the client.
func (p *PubSub) Client(ctx context.Context, project string) (*pubsub.Client, error) {
	c, err := pubsub.NewClient(ctx, project,
		option.WithEndpoint(p.Host),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCConnectionPool(1),
	)
	if err != nil {
		return nil, fmt.Errorf("emulator: pubsub client: %w", err)
	}
	return c, nil
}
