package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// chunkSize is the most one read takes from a connection; latency is
	// added per chunk.
	chunkSize = 32 << 10
	// queuedChunks is how many chunks per direction may wait for their
	// latency to elapse (or for Resume) before the proxy stops reading, which
	// pushes back on the sender through TCP flow control.
	queuedChunks = 16
	// dialTimeout bounds the connection to the target.
	dialTimeout = 5 * time.Second
)

// Proxy is a TCP proxy on loopback that forwards every connection to one
// target and can stall, delay or reset the traffic. Its methods are safe for
// concurrent use.
type Proxy struct {
	target  string
	ln      net.Listener
	latency atomic.Int64 // time.Duration

	mu     sync.Mutex
	resume chan struct{} // nil while forwarding; while stalled, closed by Resume
	links  map[*link]struct{}
	closed bool

	wg        sync.WaitGroup // every goroutine the proxy started
	closeOnce sync.Once
	closeErr  error
}

// link is one client connection and its connection to the target.
type link struct {
	client net.Conn
	server net.Conn      // nil until dialled; read and written under Proxy.mu
	done   chan struct{} // closed by teardown
	once   sync.Once
	halves atomic.Int32 // directions that ended with EOF
}

// Start listens on 127.0.0.1:0 and forwards each accepted connection to
// target ("host:port"). It does not dial target until a client connects, so
// target need not be up yet. Call Close to stop.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stall stops forwarding in both directions on every connection. Connections
// stay open and data is held, not dropped: the proxy keeps what it has read
// and then stops reading, so senders block once TCP buffers fill. A
// connection accepted while stalled is not dialled to the target until
// Resume. One write that was already in progress when Stall was called may
// still complete; nothing starts after Stall returns. Stalling a stalled
// proxy does nothing.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
}

// Resume undoes Stall: held data is forwarded in order, then traffic flows
// again. Resuming a proxy that is not stalled does nothing.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}

// ResetAll closes every current connection abruptly, on both sides: with
// SO_LINGER 0, so each peer gets a TCP RST (ECONNRESET) rather than an
// orderly EOF, as after a crash or a lost network path. Held data is
// dropped. New connections are accepted as before; ResetAll does not change
// the stalled state.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		p.teardown(l, true)
	}
}

// SetLatency adds d to the delivery of every chunk of data, in both
// directions, from now on (0 removes it). Chunks are delayed, not
// serialised: a connection still carries many chunks per d, so latency does
// not cap throughput the way a per-chunk sleep would.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Close stops accepting, closes every connection (orderly, not reset) and
// waits for the proxy's goroutines to end. It is idempotent; later calls
// return the first call's result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		links := make([]*link, 0, len(p.links))
		for l := range p.links {
			links = append(links, l)
		}
		p.mu.Unlock()
		p.closeErr = p.ln.Close()
		for _, l := range links {
			p.teardown(l, false)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (EMFILE and the like): back off briefly.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve dials the target once the proxy is not stalled, then forwards both
// directions.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	if !p.gate(l) {
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.Dial("tcp", p.target)
	if err != nil {
		// The client sees a reset, as it would from a target that refuses.
		p.teardown(l, true)
		return
	}
	p.mu.Lock()
	select {
	case <-l.done: // torn down while dialling
		p.mu.Unlock()
		server.Close()
		return
	default:
	}
	l.server = server
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(l, l.client, server)
	go p.pipe(l, server, l.client)
}

type chunk struct {
	data []byte
	at   time.Time // when it was read
}

// pipe forwards src to dst. A reader goroutine timestamps chunks; this
// goroutine delivers each one latency after it was read, and not while the
// proxy is stalled. EOF on src half-closes dst; any other error resets the
// link.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	defer p.wg.Done()
	chunks := make(chan chunk, queuedChunks)
	readErr := make(chan error, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(chunks)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: buf[:n], at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()

	for c := range chunks {
		if d := time.Duration(p.latency.Load()); d > 0 {
			if wait := time.Until(c.at.Add(d)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-l.done:
					t.Stop()
					return
				}
			}
		}
		if !p.gate(l) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			p.teardown(l, true)
			return
		}
	}
	var err error
	select {
	case err = <-readErr:
	default: // the reader gave up because the link was torn down
		return
	}
	if !errors.Is(err, net.ErrClosed) && !isEOF(err) {
		p.teardown(l, true)
		return
	}
	if isEOF(err) {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		if l.halves.Add(1) == 2 {
			p.teardown(l, false)
		}
	}
}

// gate blocks while the proxy is stalled. It reports false if the link was
// torn down meanwhile.
func (p *Proxy) gate(l *link) bool {
	for {
		p.mu.Lock()
		ch := p.resume
		p.mu.Unlock()
		if ch == nil {
			select {
			case <-l.done:
				return false
			default:
				return true
			}
		}
		select {
		case <-ch:
		case <-l.done:
			return false
		}
	}
}

// teardown closes both connections of l, with SO_LINGER 0 if abrupt so that
// the peers see a reset. It is idempotent.
func (p *Proxy) teardown(l *link, abrupt bool) {
	l.once.Do(func() {
		p.mu.Lock()
		delete(p.links, l)
		server := l.server
		close(l.done)
		p.mu.Unlock()
		for _, c := range []net.Conn{l.client, server} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && abrupt {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
