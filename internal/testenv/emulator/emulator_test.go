package emulator

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// start is StartPubSub or StartBigtable with the Require helpers' handling of
// a missing installation.
func start[E any](t *testing.T, startFn func(context.Context, Options) (E, error), opts Options) E {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requireStartTimeout)
	defer cancel()
	e, err := startFn(ctx, opts)
	if err != nil {
		failStart(t, err)
	}
	return e
}

// groupGone reports whether no process of the group led by pgid remains.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

func TestPubSubServesAClientAndStopsCleanly(t *testing.T) {
	p := start(t, StartPubSub, Options{})
	pgid := p.proc.cmd.Process.Pid
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			p.Stop()
		}
	})

	if !strings.HasPrefix(p.Host, "127.0.0.1:") {
		t.Errorf("Host = %q, want 127.0.0.1:PORT", p.Host)
	}
	if got, want := p.Env(), []string{"PUBSUB_EMULATOR_HOST=" + p.Host}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("Env() = %q, want %q", got, want)
	}
	// The client must not depend on the process environment.
	t.Setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")

	ctx := context.Background()
	c, err := p.Client(ctx, "lifecycle")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic, sub := "projects/lifecycle/topics/life-topic", "projects/lifecycle/subscriptions/life-sub"
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic}); err != nil {
		t.Fatal(err)
	}
	publish(t, c, topic, "one", 1)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got *pubsub.Message
	if err := c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		got = m
		cancel()
	}); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Attributes["phase"] != "one" {
		t.Fatalf("received %v, want the published message", got)
	}

	log := p.LogPath()
	if _, err := os.Stat(log); err != nil {
		t.Fatalf("log: %v", err)
	}
	stopped = true
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !groupGone(pgid) {
		t.Errorf("process group %d still has processes after Stop", pgid)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := os.Stat(log); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary log %s still there after Stop (%v)", log, err)
	}
}

func TestBigtableServesClientsAndKeepsItsLog(t *testing.T) {
	dir := t.TempDir()
	b := start(t, StartBigtable, Options{LogDir: filepath.Join(dir, "logs")})
	pgid := b.proc.cmd.Process.Pid
	t.Cleanup(func() { b.Stop() })
	if got, want := b.Env(), "BIGTABLE_EMULATOR_HOST="+b.Host; len(got) != 1 || got[0] != want {
		t.Errorf("Env() = %q, want [%q]", got, want)
	}
	t.Setenv("BIGTABLE_EMULATOR_HOST", "127.0.0.1:1")

	ctx := context.Background()
	client, admin, err := b.Clients(ctx, "lifecycle", "inst")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer admin.Close()
	if err := admin.CreateTable(ctx, "rows"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "rows", "f"); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "c", bigtable.Timestamp(1_700_000_000_000_000), []byte("v"))
	if err := client.Open("rows").Apply(ctx, "r1", m); err != nil {
		t.Fatal(err)
	}
	row, err := client.Open("rows").ReadRow(ctx, "r1")
	if err != nil || len(row["f"]) != 1 || string(row["f"][0].Value) != "v" {
		t.Fatalf("ReadRow = %v, %v", row, err)
	}

	if err := b.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !groupGone(pgid) {
		t.Errorf("process group %d still has processes after Stop", pgid)
	}
	if !strings.HasPrefix(b.LogPath(), filepath.Join(dir, "logs")+string(filepath.Separator)) {
		t.Errorf("LogPath() = %q, want a file in Options.LogDir", b.LogPath())
	}
	log, err := os.ReadFile(b.LogPath())
	if err != nil || !strings.Contains(string(log), "Cloud Bigtable emulator running") {
		t.Errorf("log after Stop = %q, %v", log, err)
	}
}

func TestPubSubRetriesWhenItsPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	real := freePort
	calls := 0
	freePort = func() (string, error) {
		if calls++; calls == 1 {
			return strconv.Itoa(taken.Addr().(*net.TCPAddr).Port), nil
		}
		return real()
	}
	defer func() { freePort = real }()

	p := start(t, StartPubSub, Options{})
	defer p.Stop()
	if calls != 2 {
		t.Errorf("freePort called %d times, want 2", calls)
	}
	if p.Host == taken.Addr().String() {
		t.Errorf("emulator reports the taken port %s", p.Host)
	}
}

func TestStopReportsAnEmulatorThatDiedOnItsOwn(t *testing.T) {
	b := start(t, StartBigtable, Options{})
	if err := b.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.proc.exited
	if err := b.Stop(); err == nil {
		t.Fatal("Stop = nil after the emulator was killed behind its back")
	}
}

func TestHostOnlyValuesStopAsNoOps(t *testing.T) {
	for _, stop := range []func() error{(&PubSub{Host: "127.0.0.1:1"}).Stop, (&Bigtable{Host: "127.0.0.1:1"}).Stop} {
		if err := stop(); err != nil {
			t.Errorf("Stop of a Host-only value: %v", err)
		}
	}
	if got := (&PubSub{Host: "h"}).LogPath(); got != "" {
		t.Errorf("LogPath of a Host-only value = %q", got)
	}
}

func TestWithJavaAgentKeepsExistingJavaOpts(t *testing.T) {
	env, err := withJavaAgent([]string{"A=1", "JAVA_OPTS=-Xmx1g", "B=2"}, "/cache/agent.jar")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "B=2", "JAVA_OPTS=-Xmx1g -javaagent:'/cache/agent.jar'"}
	if strings.Join(env, "\n") != strings.Join(want, "\n") {
		t.Errorf("env = %q, want %q", env, want)
	}
	if _, err := withJavaAgent(nil, "/it's/agent.jar"); err == nil {
		t.Error("a path with a single quote was accepted")
	}
}

// startOrSkip starts an emulator with opts and returns its error, skipping
// (or failing under CI) as the Require helpers do when it is not installed.
func startOrSkip[E any](t *testing.T, startFn func(context.Context, Options) (E, error), opts Options) (E, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requireStartTimeout)
	defer cancel()
	e, err := startFn(ctx, opts)
	if errors.Is(err, ErrNotInstalled) {
		failStart(t, err)
	}
	return e, err
}

func TestAGivenPortThatIsHeldFailsWithErrPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	opts := Options{Port: port}
	checkHeld := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), "port "+strconv.Itoa(port)+" on 127.0.0.1") {
			t.Errorf("%s on a held port: err = %v, want ErrPortInUse naming port %d on 127.0.0.1", name, err, port)
		}
	}
	ps, err := startOrSkip(t, StartPubSub, opts)
	if err == nil {
		ps.Stop()
	}
	checkHeld("Pub/Sub", err)
	bt, err := startOrSkip(t, StartBigtable, opts)
	if err == nil {
		bt.Stop()
	}
	checkHeld("Bigtable", err)
}

func TestAGivenPortOnEveryInterfaceIsDialledOnLoopback(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	p := start(t, StartPubSub, Options{ListenHost: "0.0.0.0", Port: n})
	defer p.Stop()
	if want := "127.0.0.1:" + port; p.Host != want {
		t.Errorf("Pub/Sub Host = %q, want %q", p.Host, want)
	}
	btPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	n, _ = strconv.Atoi(btPort)
	b := start(t, StartBigtable, Options{ListenHost: "0.0.0.0", Port: n})
	defer b.Stop()
	if want := "127.0.0.1:" + btPort; b.Host != want {
		t.Errorf("Bigtable Host = %q, want %q", b.Host, want)
	}
	if p.PID() == 0 || b.PID() == 0 || p.Exited() == nil {
		t.Errorf("PID() = %d, %d; Exited() = %v: want the processes", p.PID(), b.PID(), p.Exited())
	}
}
