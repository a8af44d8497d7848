package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/internal/state"
)

const profileYAML = `
project: p
http: {addr: "127.0.0.1:0"}
state: {instance: i, app_profile: pubsink-state}
pipelines:
  - name: orders
    source: {topic: orders, subscription: orders-sub, tracking_subscription: orders-tracking}
    sink: {table: orders, app_profile: pubsink-sink}
    dead_letter: {bigtable_table: orders_dead}
`

// profiles records the app profile that each data request names, by table.
type profiles struct {
	mu      sync.Mutex
	byTable map[string]map[string]bool
}

func (p *profiles) observe(req any) {
	r, ok := req.(interface {
		GetTableName() string
		GetAppProfileId() string
	})
	if !ok || r.GetTableName() == "" { // admin requests name no profile
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	table := path.Base(r.GetTableName())
	if p.byTable[table] == nil {
		p.byTable[table] = map[string]bool{}
	}
	p.byTable[table][r.GetAppProfileId()] = true
}

func (p *profiles) of(table string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.byTable[table]))
}

func (p *profiles) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p.observe(req)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, observedStream{ss, p})
		}),
	}
}

type observedStream struct {
	grpc.ServerStream
	p *profiles
}

func (s observedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.p.observe(m)
	}
	return err
}

// openWithEmulatorHost opens cfg with the Bigtable clients the App creates
// itself (Options.Bigtable nil), on f's emulator through
// BIGTABLE_EMULATOR_HOST.
func openWithEmulatorHost(t *testing.T, f *fakes, yaml string) (*App, error) {
	t.Helper()
	t.Setenv("BIGTABLE_EMULATOR_HOST", f.bigtableAddr)
	ctx := context.Background()
	cfg := parse(t, yaml)
	if err := Setup(ctx, cfg, f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	a, err := Open(ctx, zap.NewNop(), cfg, Options{PubSub: f.ps, HTTPAddr: "-"})
	if a != nil {
		t.Cleanup(a.closeClients)
	}
	return a, err
}

func TestEveryTableIsUsedThroughItsAppProfile(t *testing.T) {
	seen := &profiles{byTable: map[string]map[string]bool{}}
	f := newFakes(t, append(seen.serverOptions(), fake.RefuseConditionalMutations("pubsink-state"))...)
	if _, err := openWithEmulatorHost(t, f, profileYAML); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]string{"orders": "pubsink-sink", "pubsink_state": "pubsink-state", "orders_dead": "pubsink-state"} {
		if got := seen.of(table); !slices.Equal(got, []string{want}) {
			t.Errorf("requests to table %s named app profiles %q; want only %q", table, got, want)
		}
	}
}

func TestOpenRefusesAStateProfileWithoutConditionalWrites(t *testing.T) {
	f := newFakes(t, fake.RefuseConditionalMutations("pubsink-state"))
	_, err := openWithEmulatorHost(t, f, strings.Replace(profileYAML, "app_profile: pubsink-state", "app_profile: multi", 1))
	if !errors.Is(err, state.ErrConditionalWritesRefused) ||
		!strings.Contains(err.Error(), `state table pubsink_state: state.app_profile: Bigtable refused a conditional mutation through app profile "multi" of instance i`) {
		t.Fatalf("Open = %v; want the refusal of profile multi explained", err)
	}

	// at_least_once needs no conditional mutations: no probe.
	atLeastOnce := strings.Replace(profileYAML, "  - name: orders\n", "  - name: orders\n    mode: at_least_once\n", 1)
	if _, err := openWithEmulatorHost(t, f, strings.Replace(atLeastOnce, "app_profile: pubsink-state", "app_profile: multi", 1)); err != nil {
		t.Fatalf("Open of an at_least_once pipeline = %v; want no conditional-write check", err)
	}
}

func TestReplayReadsADeadLetterTableThroughTheStateProfile(t *testing.T) {
	seen := &profiles{byTable: map[string]map[string]bool{}}
	f := newFakes(t, seen.serverOptions()...)
	t.Setenv("BIGTABLE_EMULATOR_HOST", f.bigtableAddr)
	t.Setenv("PUBSUB_EMULATOR_HOST", f.psSrv.Addr)
	if err := Setup(context.Background(), parse(t, profileYAML), f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(profileYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := ReplayFile(context.Background(), file, ReplayRequest{Pipeline: "orders", DryRun: true}, &out, io.Discard); err != nil {
		t.Fatalf("replay: %v\n%s", err, out.String())
	}
	if got := seen.of("orders_dead"); !slices.Equal(got, []string{"pubsink-state"}) {
		t.Errorf("replay read orders_dead through app profiles %q; want only pubsink-state", got)
	}
}
