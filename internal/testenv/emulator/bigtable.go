package emulator

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"cloud.google.com/go/bigtable"
	btapb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Bigtable is a Bigtable emulator (cbtemulator, in memory) running on
// loopback. Its methods are safe for concurrent use.
//
// Env and Clients use only Host, so a value with just Host set points them
// elsewhere, e.g. at a faultproxy in front of a running emulator:
// (&emulator.Bigtable{Host: proxy.Addr()}).Clients(ctx, project, instance).
// Stop and LogPath of such a value do nothing.
type Bigtable struct {
	// Host is "127.0.0.1:PORT", the value for BIGTABLE_EMULATOR_HOST.
	Host string

	proc *process
}

var bigtableStarted = regexp.MustCompile(`Cloud Bigtable emulator running on \S*:(\d+)`)

// bigtablePortInUse is cbtemulator's last words when its port is held.
var bigtablePortInUse = regexp.MustCompile(`failed to start emulator: listen .*address already in use`)

// StartBigtable starts cbtemulator on loopback in its own process group and
// returns when it answers gRPC calls. cbtemulator is given port 0 and reports
// the port it bound, so there is no race for a free port. ctx bounds
// start-up only: call Stop. Errors wrap ErrNotInstalled when cbtemulator is
// missing.
func StartBigtable(ctx context.Context, opts Options) (*Bigtable, error) {
	bin, err := findBigtable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	proc, err := startProcess("bigtable-emulator", opts.LogDir, os.Environ(), bin, "-host", opts.listenHost(), "-port", strconv.Itoa(opts.Port))
	if err != nil {
		return nil, err
	}
	b := &Bigtable{proc: proc}
	if err := b.waitReady(ctx, opts); err != nil {
		log := proc.readLog() // before stop, which may remove it
		_ = proc.stop()
		if bigtablePortInUse.Match(log) {
			return nil, fmt.Errorf("emulator: bigtable: %w: port %d on %s is held by another process", ErrPortInUse, opts.Port, opts.listenHost())
		}
		return nil, err
	}
	return b, nil
}

func (b *Bigtable) waitReady(ctx context.Context, opts Options) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for b.Host == "" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("emulator: bigtable not ready: %w; log %s ends:\n%s", ctx.Err(), b.proc.logPath, b.proc.logTail(20))
		case <-b.proc.exited:
			return fmt.Errorf("emulator: bigtable exited during start-up (%v); log %s ends:\n%s", b.proc.waitErr, b.proc.logPath, b.proc.logTail(20))
		case <-tick.C:
		}
		if m := bigtableStarted.FindSubmatch(b.proc.readLog()); m != nil {
			b.Host = opts.Addr(string(m[1]))
		}
	}
	conn, err := dialBigtable(b.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	admin := btapb.NewBigtableTableAdminClient(conn)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := admin.ListTables(callCtx, &btapb.ListTablesRequest{Parent: "projects/emulator-ready/instances/emulator-ready"})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("emulator: bigtable on %s not answering: %w (last error: %v)", b.Host, ctx.Err(), err)
		case <-b.proc.exited:
			return fmt.Errorf("emulator: bigtable exited during start-up (%v); log %s ends:\n%s", b.proc.waitErr, b.proc.logPath, b.proc.logTail(20))
		case <-tick.C:
		}
	}
}

// Stop kills the emulator's process group (SIGTERM, then SIGKILL after a
// grace period) and waits for it to exit; all its data is gone. It is
// idempotent: later calls return the first call's result. It returns an
// error if the emulator had already died on its own. Unless Options.LogDir
// was set, it removes the log.
func (b *Bigtable) Stop() error {
	if b.proc == nil {
		return nil
	}
	return b.proc.stop()
}

// PID returns the process ID of the emulator, the leader of its process
// group; 0 for a value with just Host.
func (b *Bigtable) PID() int { return b.proc.pid() }

// Exited is closed once the emulator's process has exited, whether Stop
// ended it or not; nil (never closed) for a value with just Host.
func (b *Bigtable) Exited() <-chan struct{} { return b.proc.exitedChan() }

// LogPath returns the file that holds the emulator's stdout and stderr.
func (b *Bigtable) LogPath() string {
	if b.proc == nil {
		return ""
	}
	return b.proc.logPath
}

// Env returns the environment entries that point a child process's Bigtable
// clients at this emulator: BIGTABLE_EMULATOR_HOST.
func (b *Bigtable) Env() []string { return []string{"BIGTABLE_EMULATOR_HOST=" + b.Host} }

// Clients returns a data client and an admin client for project/instance on
// this emulator (cbtemulator accepts any project and instance). Each has its
// own plaintext gRPC connection to Host, dialled here rather than through
// BIGTABLE_EMULATOR_HOST, so this process's environment does not matter, and
// client-side metrics export is off as it is for the emulator variable. The
// caller closes both clients; closing a client closes its connection.
func (b *Bigtable) Clients(ctx context.Context, project, instance string) (*bigtable.Client, *bigtable.AdminClient, error) {
	dataConn, err := dialBigtable(b.Host)
	if err != nil {
		return nil, nil, err
	}
	client, err := bigtable.NewClientWithConfig(ctx, project, instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}},
		option.WithGRPCConn(dataConn))
	if err != nil {
		dataConn.Close()
		return nil, nil, fmt.Errorf("emulator: bigtable client: %w", err)
	}
	adminConn, err := dialBigtable(b.Host)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	admin, err := bigtable.NewAdminClient(ctx, project, instance, option.WithGRPCConn(adminConn))
	if err != nil {
		client.Close()
		adminConn.Close()
		return nil, nil, fmt.Errorf("emulator: bigtable admin client: %w", err)
	}
	return client, admin, nil
}

// dialBigtable makes a plaintext connection with the message size limits the
// Bigtable client sets for itself (its own dial options are ignored when it
// is handed a connection).
func dialBigtable(host string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+host,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<28), grpc.MaxCallRecvMsgSize(1<<28)))
	if err != nil {
		return nil, fmt.Errorf("emulator: bigtable: %w", err)
	}
	return conn, nil
}
