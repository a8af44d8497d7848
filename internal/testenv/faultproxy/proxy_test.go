package faultproxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every connection until EOF, then closes it. It counts
// the connections it accepted.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int32
	wg       sync.WaitGroup
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.wg.Wait()
	})
	return e
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads as many bytes back, failing after timeout.
func roundTrip(t *testing.T, c net.Conn, msg string, timeout time.Duration) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read echo of %q: %v", msg, err)
	}
	if string(got) != msg {
		t.Fatalf("echo = %q, want %q", got, msg)
	}
}

// expectSilence asserts that nothing arrives on c within d.
func expectSilence(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	n, err := c.Read(b[:])
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during stall = %d bytes, %v; want a timeout", n, err)
	}
}

func TestProxyForwardsBothWays(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "hello", 2*time.Second)

	t.Run("a large payload arrives intact", func(t *testing.T) {
		c := dial(t, p.Addr())
		payload := make([]byte, 4<<20)
		rand.Read(payload)
		go func() {
			c.Write(payload)
			c.CloseWrite()
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("got %d bytes back, want the %d sent", len(got), len(payload))
		}
	})

	t.Run("a half-close reaches the target and its EOF comes back", func(t *testing.T) {
		c := dial(t, p.Addr())
		c.Write([]byte("bye"))
		c.CloseWrite()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "bye" {
			t.Fatalf("ReadAll = %q, %v; want \"bye\" and EOF", got, err)
		}
	})
}

func TestStallHoldsDataUntilResume(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "before", 2*time.Second)

	p.Stall()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, c, 300*time.Millisecond)

	t.Run("a connection made during the stall is accepted but not forwarded", func(t *testing.T) {
		before := e.accepted.Load()
		c2 := dial(t, p.Addr())
		if _, err := c2.Write([]byte("new")); err != nil {
			t.Fatal(err)
		}
		expectSilence(t, c2, 200*time.Millisecond)
		if got := e.accepted.Load(); got != before {
			t.Fatalf("target accepted %d connections during the stall", got-before)
		}
		p.Resume()
		c2.SetReadDeadline(time.Now().Add(2 * time.Second))
		got := make([]byte, 3)
		if _, err := io.ReadFull(c2, got); err != nil || string(got) != "new" {
			t.Fatalf("after Resume read %q, %v", got, err)
		}
	})

	// The connection that was open during the stall kept its data.
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after Resume read %q, %v; want \"held\"", got, err)
	}
	roundTrip(t, c, "after", 2*time.Second)
}

func TestStallStopsReplies(t *testing.T) {
	// Stall holds the target's direction too: a request that got through
	// before the stall does not get its reply until Resume.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gotRequest := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		var b [3]byte
		io.ReadFull(c, b[:])
		gotRequest <- c
	}()
	p := startProxy(t, ln.Addr().String())
	c := dial(t, p.Addr())
	c.Write([]byte("req"))
	var server net.Conn
	select {
	case server = <-gotRequest:
	case <-time.After(2 * time.Second):
		t.Fatal("request never reached the target")
	}
	defer server.Close()
	p.Stall()
	server.Write([]byte("rep"))
	expectSilence(t, c, 300*time.Millisecond)
	p.Resume()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, 3)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "rep" {
		t.Fatalf("after Resume read %q, %v", got, err)
	}
}

func TestResetAllSendsRST(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "x", 2*time.Second)

	p.ResetAll()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetAll: %v; want ECONNRESET", err)
	}

	t.Run("new connections work afterwards", func(t *testing.T) {
		roundTrip(t, dial(t, p.Addr()), "again", 2*time.Second)
	})

	t.Run("a stalled connection is reset too", func(t *testing.T) {
		c := dial(t, p.Addr())
		roundTrip(t, c, "y", 2*time.Second)
		p.Stall()
		defer p.Resume()
		c.Write([]byte("held"))
		p.ResetAll()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after ResetAll: %v; want ECONNRESET", err)
		}
	})
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "warm", 2*time.Second)

	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	roundTrip(t, c, "slow", 5*time.Second)
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip took %v with %v latency each way; want at least %v", rtt, d, 2*d)
	}

	t.Run("latency does not cap throughput", func(t *testing.T) {
		// 4 MiB is 128 chunks: serialised, they would take 128 × 2 × 100 ms.
		payload := make([]byte, 4<<20)
		c := dial(t, p.Addr())
		start := time.Now()
		go func() {
			c.Write(payload)
			c.CloseWrite()
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || len(got) != len(payload) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("4 MiB took %v through a %v proxy", took, d)
		}
	})

	p.SetLatency(0)
	start = time.Now()
	roundTrip(t, c, "fast", 2*time.Second)
	if rtt := time.Since(start); rtt > d {
		t.Fatalf("round trip took %v after SetLatency(0)", rtt)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	e := startEcho(t)
	p, err := Start(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	roundTrip(t, c, "x", 2*time.Second)
	p.Stall() // Close must not wait for a stalled link

	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestUnreachableTargetResetsClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := startProxy(t, target)
	c, err := net.Dial("tcp", p.Addr())
	if err == nil {
		// The reset may come before or after connect returns.
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(dialTimeout + 2*time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v; want ECONNRESET", err)
	}
}
