// Package netproxy is a TCP proxy for tests that puts a path between a
// client and a server under the test's control: Freeze makes the path go
// silent the way a half-open connection does (no bytes, no FIN, no reset,
// every socket kept open), and Reset cuts every connection with a reset.
//
// A database's own tests cannot produce either: stopping the server or
// terminating a backend closes the connection cleanly, and the client and
// the server both learn of it at once.
package netproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards every connection made to Addr to its target.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	thawed chan struct{} // closed while bytes flow; open while frozen
	links  map[*link]struct{}
	closed bool
}

// link is one client connection and its upstream twin.
type link struct {
	client net.Conn
	server net.Conn      // nil until dialled; set under Proxy.mu
	cut    chan struct{} // closed when the link is torn down
	once   sync.Once
}

// New listens on a loopback port and forwards to target (host:port). The
// proxy is closed at t's cleanup.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("netproxy: %v", err)
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &Proxy{target: target, ln: ln, thawed: thawed, links: map[*link]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops the flow of bytes in both directions on every connection,
// and on those made later, while keeping every socket open: what a peer
// sends is accepted and held, never delivered, never dropped. A new
// connection is accepted but not forwarded. Neither side sees an error.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen() {
		return
	}
	p.thawed = make(chan struct{})
}

// Thaw lets the bytes held by Freeze, and all later ones, flow again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen() {
		close(p.thawed)
	}
}

// frozen reports whether the path is frozen. p.mu must be held.
func (p *Proxy) frozen() bool {
	select {
	case <-p.thawed:
		return false
	default:
		return true
	}
}

// Reset cuts every current connection, on both sides, with a TCP reset,
// frozen or not; bytes held by Freeze are dropped with them. Later
// connections are forwarded (or held, while frozen) as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		p.cut(l, true)
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end. It is safe to call more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		l := &link{client: c, cut: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(l) })
	}
}

// serve dials the target once the path flows, then copies both ways.
func (p *Proxy) serve(l *link) {
	if !p.flowing(l) {
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.cut(l, false)
		return
	}
	p.mu.Lock()
	select {
	case <-l.cut:
		p.mu.Unlock()
		_ = s.Close()
		return
	default:
	}
	l.server = s
	p.mu.Unlock()
	p.wg.Go(func() { p.pump(l, s, l.client) })
	p.pump(l, l.client, s)
}

// pump copies src to dst. What it has read while the path is frozen it
// holds until the path flows again; an end of stream (FIN) is held the
// same way, as a frozen path would not carry it either.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.flowing(l) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				p.cut(l, false)
				return
			}
		}
		if err != nil {
			p.cut(l, !errors.Is(err, io.EOF))
			return
		}
	}
}

// flowing waits until the path is not frozen. It reports false when the
// link was cut meanwhile.
func (p *Proxy) flowing(l *link) bool {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	select {
	case <-thawed:
		return true
	case <-l.cut:
		return false
	}
}

// cut closes both sides of l, with a reset when abort is set (else a FIN).
func (p *Proxy) cut(l *link, abort bool) {
	l.once.Do(func() {
		p.mu.Lock()
		close(l.cut)
		delete(p.links, l)
		server := l.server
		p.mu.Unlock()
		for _, c := range []net.Conn{l.client, server} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && abort {
				_ = tc.SetLinger(0) // close sends RST
			}
			_ = c.Close()
		}
	})
}
