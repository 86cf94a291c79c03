// Package faultproxy is a small TCP proxy for tests that inject network
// faults between a client and a server, modelled on Toxiproxy: it listens
// on a free port of 127.0.0.1, forwards every connection to one target, and
// on command cuts every open connection, refuses new ones for a while, adds
// latency, or cuts each connection in the middle of the stream after a
// number of bytes.
//
// A cut resets both halves of a connection (SO_LINGER 0, so the peers see
// a reset, not an orderly end of stream): a request the client had sent
// may or may not have reached the server, and its reply is lost. That is
// the unknown outcome that the store-level histories of internal/torture
// record.
//
// It imports only the standard library, so every module can use it.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts what a [Proxy] did.
type Stats struct {
	Accepted  int64 // connections accepted and forwarded
	DialFails int64 // accepted connections whose dial of the target failed
	Cut       int64 // connections reset by CutAll
	Truncated int64 // connections reset mid-stream by a CutAfter budget
	Refusals  int64 // Refuse calls (each closes the listener for a while)
	// ReopenFailures counts the times the address could not be bound
	// again after a Refuse (the proxy then refuses for good).
	ReopenFailures int64
}

// Proxy forwards the connections made to Addr to a target address.
type Proxy struct {
	target string
	addr   string

	mu        sync.Mutex
	ln        net.Listener // nil while refusing
	conns     map[*link]struct{}
	latency   time.Duration
	cutAfter  int64 // 0: no budget
	closed    bool
	reopen    *time.Timer
	listening chan struct{} // closed when a listener is serving again; nil while serving

	wg    sync.WaitGroup
	stats struct {
		accepted, dialFails, cut, truncated, refusals, reopenFailures atomic.Int64
	}
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target
// ("host:port").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[*link]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's "127.0.0.1:PORT". It stays the same across [Proxy.Refuse].
func (p *Proxy) Addr() string { return p.addr }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:  p.stats.accepted.Load(),
		DialFails: p.stats.dialFails.Load(),
		Cut:       p.stats.cut.Load(),
		Truncated: p.stats.truncated.Load(),
		Refusals:  p.stats.refusals.Load(),

		ReopenFailures: p.stats.reopenFailures.Load(),
	}
}

// serve starts accepting on ln. p.mu need not be held.
func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // the listener was closed (Refuse, Close)
			}
			p.stats.accepted.Add(1)
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

// CutAll resets every open connection and returns how many it reset. New
// connections are accepted as before.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	n := 0
	for _, l := range ls {
		if l.reset() {
			n++
		}
	}
	p.stats.cut.Add(int64(n))
	return n
}

// Refuse closes the listener, so that connecting fails with "connection
// refused", and every open connection (as [Proxy.CutAll]) for d; then it
// listens on the same address again. A Refuse while refusing extends the
// window to end d from now.
func (p *Proxy) Refuse(d time.Duration) {
	p.stats.refusals.Add(1)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
		p.listening = make(chan struct{})
	}
	if p.reopen != nil {
		p.reopen.Stop()
	}
	p.reopen = time.AfterFunc(d, p.listenAgain)
	p.mu.Unlock()
	p.CutAll()
}

// listenAgain binds the proxy's address again; another socket may hold
// it for a moment, so it retries for up to 30 s, then gives up (the proxy
// then refuses for good, and Stats counts a ReopenFailure).
func (p *Proxy) listenAgain() {
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		if p.closed || p.ln != nil {
			p.mu.Unlock()
			return
		}
		ln, err := net.Listen("tcp", p.addr)
		if err == nil || time.Now().After(deadline) {
			ch := p.listening
			p.listening = nil
			p.mu.Unlock()
			if err == nil {
				p.serve(ln)
			} else {
				p.stats.reopenFailures.Add(1)
			}
			close(ch)
			return
		}
		p.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitListening blocks until the proxy accepts connections again after a
// [Proxy.Refuse] (at once when it is not refusing), or has given up.
func (p *Proxy) WaitListening() {
	p.mu.Lock()
	ch := p.listening
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// SetLatency delays every chunk of data forwarded, in either direction, by
// d, on open and new connections; 0 removes the delay. A request and its
// reply each take at least d longer.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

func (p *Proxy) getLatency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

// CutAfter gives every open connection, and every new one, a budget of n
// bytes (counting both directions) from now: the chunk that exceeds it is
// forwarded only up to the budget, and the connection is then reset, in the
// middle of whatever message it was carrying. 0 removes the budget from new
// connections and from open ones.
func (p *Proxy) CutAfter(n int64) {
	p.mu.Lock()
	p.cutAfter = n
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.setBudget(n)
	}
}

// Close stops listening, resets every open connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.reopen != nil {
		p.reopen.Stop()
	}
	var err error
	if p.ln != nil {
		err = p.ln.Close()
		p.ln = nil
	}
	if p.listening != nil {
		close(p.listening)
		p.listening = nil
	}
	p.mu.Unlock()
	p.CutAll()
	p.wg.Wait()
	return err
}

// link is one proxied connection: client is the accepted one, server the
// one to the target.
type link struct {
	client, server net.Conn
	once           sync.Once
	mu             sync.Mutex
	budget         int64 // bytes left before a cut; <0: no budget
}

// reset closes both halves with SO_LINGER 0: the peers get a reset. It
// reports false when the link was closed already.
func (l *link) reset() bool {
	done := false
	l.once.Do(func() {
		done = true
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
	return done
}

// close closes both halves after both directions ended.
func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

func (l *link) setBudget(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 0 {
		l.budget = -1
	} else {
		l.budget = n
	}
}

// take reserves up to n bytes of the budget and reports how many may be
// forwarded and whether the connection must be cut after them.
func (l *link) take(n int) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budget < 0 {
		return n, false
	}
	if int64(n) < l.budget {
		l.budget -= int64(n)
		return n, false
	}
	k := int(l.budget)
	l.budget = 0
	return k, true
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.stats.dialFails.Add(1)
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server, budget: -1}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.conns[l] = struct{}{}
	if p.cutAfter > 0 {
		l.budget = p.cutAfter
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(l, server, client) })
	wg.Go(func() { p.pipe(l, client, server) })
	wg.Wait()
	l.close()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pipe copies from src to dst. A read or write error, or a spent budget,
// resets the link (one half gone means the whole connection is); an orderly
// end of stream from src is passed on to dst, and the other direction
// carries on.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.getLatency(); d > 0 {
				time.Sleep(d)
			}
			k, cut := l.take(n)
			if k > 0 {
				if _, werr := dst.Write(buf[:k]); werr != nil {
					l.reset()
					return
				}
			}
			if cut {
				if l.reset() {
					p.stats.truncated.Add(1)
				}
				return
			}
		}
		if err != nil {
			tc, ok := dst.(*net.TCPConn)
			if !errors.Is(err, io.EOF) || !ok || tc.CloseWrite() != nil {
				l.reset()
			}
			return
		}
	}
}
