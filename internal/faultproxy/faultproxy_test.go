package faultproxy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/faultproxy"
)

// echo starts a server that echoes every byte back and sends what each
// connection received, when it ends, on the returned channel.
func echo(t *testing.T) (string, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var all bytes.Buffer
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					all.Write(buf[:n])
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							err = werr
						}
					}
					if err != nil {
						got <- all.Bytes()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != msg {
		t.Fatalf("echo: got %q, want %q", buf, msg)
	}
}

func TestForwards(t *testing.T) {
	t.Parallel()
	target, got := echo(t)
	p := newProxy(t, target)
	if p.Target() != target || !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr %s, Target %s", p.Addr(), p.Target())
	}
	c := dial(t, p.Addr())
	roundTrip(t, c, "hello")
	roundTrip(t, c, strings.Repeat("x", 100<<10))
	// An orderly close reaches the server as one.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n := len(<-got); n != 5+100<<10 {
		t.Fatalf("server received %d bytes", n)
	}
	if s := p.Stats(); s.Accepted != 1 || s.Cut != 0 || s.Truncated != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// isReset reports whether err is what a reset connection gives a reader.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

func TestCutAll(t *testing.T) {
	t.Parallel()
	target, got := echo(t)
	p := newProxy(t, target)
	c1, c2 := dial(t, p.Addr()), dial(t, p.Addr())
	roundTrip(t, c1, "a")
	roundTrip(t, c2, "b")
	if n := p.CutAll(); n != 2 {
		t.Fatalf("CutAll reset %d connections, want 2", n)
	}
	for _, c := range []net.Conn{c1, c2} {
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after a cut: %v, want a reset", err)
		}
	}
	for range 2 {
		<-got // the server side was closed too
	}
	// New connections still work.
	roundTrip(t, dial(t, p.Addr()), "c")
	if s := p.Stats(); s.Cut != 2 || s.Accepted != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	target, _ := echo(t)
	p := newProxy(t, target)
	open := dial(t, p.Addr())
	roundTrip(t, open, "a")
	p.Refuse(300 * time.Millisecond)
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v, want connection refused", err)
	}
	if _, err := open.Read(make([]byte, 1)); !isReset(err) {
		t.Fatalf("open connection while refusing: %v, want it cut", err)
	}
	p.WaitListening()
	roundTrip(t, dial(t, p.Addr()), "after")
	if s := p.Stats(); s.Refusals != 1 || s.Cut != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	target, _ := echo(t)
	p := newProxy(t, target)
	c := dial(t, p.Addr())
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	roundTrip(t, c, "slow")
	// Both directions are delayed: the round trip takes at least 2d.
	if el := time.Since(start); el < 2*d {
		t.Fatalf("round trip with latency %s took %s", d, el)
	}
	p.SetLatency(0)
	roundTrip(t, c, "fast")
}

func TestCutAfter(t *testing.T) {
	t.Parallel()
	target, got := echo(t)
	p := newProxy(t, target)
	c := dial(t, p.Addr())
	roundTrip(t, c, "before") // not counted: the budget starts at CutAfter
	p.CutAfter(10)
	if _, err := io.WriteString(c, strings.Repeat("y", 100)); err != nil {
		t.Fatal(err)
	}
	// The server gets the first 10 bytes (less what its echo used of the
	// budget on the way back), never all 100, and the client a reset.
	all, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read: %q, %v; want a reset", all, err)
	}
	recv := <-got
	if n := len(recv) - len("before"); n <= 0 || n > 10 {
		t.Fatalf("server received %d bytes after the budget of 10 was set", n)
	}
	if len(all) > 10 {
		t.Fatalf("client received %d bytes back, more than the budget", len(all))
	}
	// New connections get the budget too, until it is removed.
	c2 := dial(t, p.Addr())
	if _, err := io.WriteString(c2, strings.Repeat("z", 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c2); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("new connection with a budget: %v, want a reset", err)
	}
	p.CutAfter(0)
	roundTrip(t, dial(t, p.Addr()), strings.Repeat("w", 50))
	if s := p.Stats(); s.Truncated != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDialFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := newProxy(t, dead)
	// The proxy resets the connection, before the client's connect
	// returns or after.
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !isReset(err) {
		t.Fatalf("through a proxy whose target is down: %v", err)
	}
	if s := p.Stats(); s.DialFails != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	target, _ := echo(t)
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	roundTrip(t, c, "a")
	p.Refuse(time.Hour) // Close must not wait for the window
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p.WaitListening() // returns: the proxy is closed
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}
