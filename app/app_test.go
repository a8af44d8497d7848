package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/pubsink/pubsink/config"
	"github.com/pubsink/pubsink/internal/fake"
	"github.com/pubsink/pubsink/source"
)

const yaml = `
project: p
http: {addr: "127.0.0.1:0"}
shutdown_timeout: 5s
state: {instance: i}
pipelines:
  - name: orders
    mode: at_least_once
    source: {topic: orders, subscription: orders-sub, streams: 1}
    sink: {table: orders, row_key: "{message_id}", batch: {max_delay: 1ms}}
`

type fakes struct {
	psSrv        *pstest.Server
	ps           *pubsub.Client
	opts         Options
	admin        Admin
	bigtableAddr string
}

// newFakes starts the fakes, the Bigtable emulator with opts.
func newFakes(t *testing.T, opts ...grpc.ServerOption) *fakes {
	t.Helper()
	b, err := fake.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := b.PubSubClient(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close(); b.Close() })
	return &fakes{
		psSrv: b.PubSub,
		ps:    ps,
		opts: Options{PubSub: ps, Bigtable: func(ctx context.Context, instance string) (*bigtable.Client, error) {
			return b.BigtableClient(ctx, "p", instance)
		}},
		admin: func(ctx context.Context, instance string) (*bigtable.AdminClient, error) {
			return b.BigtableAdmin(ctx, "p", instance)
		},
		bigtableAddr: b.Bigtable.Addr,
	}
}

// runApp opens an App of cfg and runs it until the test ends, when it
// stops it and fails the test if Run failed.
func runApp(t *testing.T, log *zap.Logger, cfg *config.Config, opts Options) *App {
	t.Helper()
	a, err := Open(context.Background(), log, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a
}

func parse(t *testing.T, s string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestOpenNamesAMissingSubscription(t *testing.T) {
	f := newFakes(t)
	_, err := Open(context.Background(), zap.NewNop(), parse(t, yaml), f.opts)
	if err == nil || !strings.Contains(err.Error(), "pipeline orders") || !strings.Contains(err.Error(), "orders-sub does not exist") {
		t.Fatalf("Open = %v; want the pipeline and the missing subscription named", err)
	}
}

func TestOpenRefusesASubscriptionOfAnotherTopic(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	cfg := parse(t, yaml)
	if err := Setup(ctx, cfg, f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	other := parse(t, strings.Replace(yaml, "topic: orders,", "topic: payments,", 1))
	_, err := Open(ctx, zap.NewNop(), other, f.opts)
	if err == nil || !strings.Contains(err.Error(), "source.topic says projects/p/topics/payments") {
		t.Fatalf("Open = %v; want the topic mismatch explained", err)
	}
}

func TestRunServesProbesAndStopsCleanly(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	cfg := parse(t, yaml)
	if err := Setup(ctx, cfg, f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	a, err := Open(ctx, zap.NewNop(), cfg, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	base := "http://" + a.Addr()

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz never answered 200")
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.psSrv.Publish("projects/p/topics/orders", []byte("hello"), nil)
	var st struct {
		Pipelines []struct {
			Name      string `json:"name"`
			Committed int    `json:"committed"`
			Receiving bool   `json:"receiving"`
		} `json:"pipelines"`
	}
	for st.Pipelines == nil || st.Pipelines[0].Committed < 1 {
		resp, err := http.Get(base + "/status")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("status %+v: the message was not committed", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !st.Pipelines[0].Receiving || st.Pipelines[0].Name != "orders" {
		t.Errorf("status %+v", st)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a stop = %v, want nil", err)
		}
	case <-time.After(cfg.ShutdownTimeout + 5*time.Second):
		t.Fatal("Run did not return after the stop")
	}
	if m := f.psSrv.Messages(); len(m) != 1 || m[0].Acks != 1 {
		t.Fatalf("fake server's messages %+v; want one, acked", m)
	}
}

// TestTheWatermarkWaitsForTheRedeliveryBackoff: a message whose lease ran
// out comes back only after the main subscription's retry policy let it,
// so the tracker's guards wait for the lease plus its maximum backoff
// (setup's: 5 s). The lease is the longer of the lease extension (the main
// subscription's client-side leases) and the tracking subscription's ack
// deadline (the lease of a pulled message whose answer was lost): setup's
// 10 s is the shorter; an existing subscription's 30 s is not.
func TestTheWatermarkWaitsForTheRedeliveryBackoff(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	cfg := parse(t, strings.Replace(yaml, "subscription: orders-sub,", "subscription: orders-sub, tracking_subscription: orders-tracking,", 1))
	if err := Setup(ctx, cfg, f.ps, f.admin, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	lease := func() float64 {
		t.Helper()
		a, err := Open(ctx, zap.NewNop(), cfg, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { a.stopServer(); a.closeClients() }()
		st := a.Pipelines()[0].Status()
		if st.Tracker == nil {
			t.Fatal("no tracker")
		}
		return st.Tracker.MessageLeaseSeconds
	}
	if got, want := lease(), (source.LeaseExtension + 5*time.Second).Seconds(); got != want {
		t.Fatalf("message lease %vs, want %vs (the lease extension, longer than setup's 10 s ack deadline, plus the retry policy's 5 s)", got, want)
	}
	if _, err := f.ps.SubscriptionAdminClient.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: cfg.SubscriptionName("orders-tracking"), AckDeadlineSeconds: 30},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"ack_deadline_seconds"}},
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := lease(), (30*time.Second + 5*time.Second).Seconds(); got != want {
		t.Fatalf("message lease %vs, want %vs (the tracking subscription's 30 s ack deadline plus the retry policy's 5 s)", got, want)
	}
}

func TestTrackingLease(t *testing.T) {
	for _, c := range []struct {
		main, tracking source.Info
		want           time.Duration
	}{
		{source.Info{}, source.Info{AckDeadline: 10 * time.Second}, source.LeaseExtension},
		{source.Info{RedeliveryBackoff: 5 * time.Second}, source.Info{AckDeadline: 10 * time.Second}, source.LeaseExtension + 5*time.Second},
		{source.Info{}, source.Info{AckDeadline: 60 * time.Second, RedeliveryBackoff: 7 * time.Second}, 67 * time.Second},
		{source.Info{RedeliveryBackoff: 600 * time.Second}, source.Info{AckDeadline: 20 * time.Second, RedeliveryBackoff: 5 * time.Second}, 620 * time.Second},
	} {
		if got := trackingLease(c.main, c.tracking); got != c.want {
			t.Errorf("trackingLease(%+v, %+v) = %v, want %v", c.main, c.tracking, got, c.want)
		}
	}
}
