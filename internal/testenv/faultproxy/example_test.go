package faultproxy_test

import (
	"context"
	"log"
	"time"

	"github.com/pubsink/pubsink/internal/testenv/emulator"
	"github.com/pubsink/pubsink/internal/testenv/faultproxy"
)

// A Bigtable stall: clients talk to the emulator through the proxy, the test
// stalls it for a while and checks what the code under test did meanwhile.
func Example() {
	ctx := context.Background()
	bt, err := emulator.StartBigtable(ctx, emulator.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer bt.Stop()

	proxy, err := faultproxy.Start(bt.Host)
	if err != nil {
		log.Fatal(err)
	}
	defer proxy.Close()
	client, admin, err := (&emulator.Bigtable{Host: proxy.Addr()}).Clients(ctx, "project", "instance")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	defer admin.Close()

	proxy.Stall()
	time.Sleep(20 * time.Second) // the code under test runs against a hung Bigtable
	proxy.Resume()
	proxy.ResetAll() // and then loses its connections
}
